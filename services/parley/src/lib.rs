//! The Parley agent: the composition root that turns the library crates into a service.
//!
//! # Layout
//! - [`config`]: settings from defaults, file, environment and flags; validated up front.
//! - [`startup`]: picks the concrete store, reasoner and capabilities, binds the sockets,
//!   then warms the sandbox up and probes the model end-point; [`startup::StartupError`] says
//!   why a server could not start.
//! - [`model_endpoint`]: which model end-points may be called without an API key, and the
//!   start-up probe of one.
//! - [`server`]: the transports. `listener` (the accept loop of both listeners and its
//!   per-connection service, which answers `POST /nlip` itself), `admission` (per-address
//!   limits), `http` (that one `POST /nlip` path, metrics), `health` (liveness, readiness),
//!   `websocket` (ECMA-432), `anp` (seed 002's framing on `/anp`), `upload` (the upload
//!   port), `mcp` (`/mcp`, when configured, behind the same admission).
//! - [`mcp_server`]: Parley as an MCP server: its capabilities and served protocols as MCP
//!   tools, called through the same paths as a handler's `host.call` and an NLIP application
//!   message.
//! - [`agent`]: what the agent does with one decoded NLIP message, whichever transport brought
//!   it: conversations, control messages, tool calls, natural language, and the hand-off to
//!   negotiation; [`router`] decides which of those paths a message takes.
//! - [`negotiation`]: the ANP meta-protocol. `provider` (the driver of a negotiation's turn,
//!   handler build and verification, application serving, usage counts), `requester` (the
//!   requester's loop over a `MetaChannel`), `runner` (handlers in the sandbox), and the two
//!   framings: `nlip`, how the meta-protocol rides in NLIP messages, and `anp`, seed 002's
//!   frames with their protocol-type header.
//! - [`expiry`]: the background sweep that deletes idle conversations and their state.
//! - [`peer`]: who a peer is: its address (IPv6 by /64), the unit of the per-address limits,
//!   and the [`peer::Caller`] (address and principal) conversations and agreements belong to.
//! - [`access`]: who a request comes from (an API key, a client certificate, or anonymous) and
//!   what it may do; the task-local caller every capability call is checked against.
//! - [`throttle`]: how often one address or authenticated peer may send messages, negotiate,
//!   have the reasoner answer, and upload; checked by the transports and the agent.
//! - [`host`]: the bridge from a sandboxed handler's `host.call` to the capabilities.
//! - [`audit`]: the audit log's writer (decisions written at once, capability calls in
//!   batches) and the [`audit::Actor`] a request's work runs for.
//! - [`client`]: an NLIP client over HTTP and WebSocket.
//! - [`error`]: `ApiError`, every failure with a stable code, a status and an NLIP form.
//! - [`metrics`], [`telemetry`]: Prometheus counters; the tracing subscriber.
//! - `model_usage`: what the language model cost, settled into the metrics and the store
//!   (per conversation, per negotiation) once the work that spent it is done.
//! - [`cli`]: the `parley` command line ([`cli::CliError`]); the binary only calls
//!   [`cli::main`].
//!
//! # Invariants
//! - This is the only crate that knows axum, reads the environment, or chooses backends.
//! - Every reply a peer receives is a message of the framing it spoke (NLIP, a seed-002 frame
//!   on `/anp`, or MCP on `/mcp`), errors included.
//! - A message without a conversation token touches no database.
//! - The meta-protocol drivers (the provider's turn, application serving, the requester's
//!   session loop) take and return JSON values and meta-protocol messages, never NLIP
//!   messages; `negotiation::nlip` and `negotiation::anp` are the framings.
//!
//! # Tracing
//! Spans are named `component.operation`: `nlip.request` (transport, peer, conversation),
//! `negotiation.round` (peer, conversation, action), `handler.call` (protocol),
//! `capability.call` (name). The per-message ones are at debug level, so the default filter
//! leaves them disabled. Message bodies, arguments and secrets are never recorded.

pub mod access;
pub mod agent;
pub mod audit;
pub mod cli;
pub mod client;
pub mod config;
pub mod did_documents;
pub mod error;
pub mod expiry;
pub mod host;
pub mod issuers;
pub mod mcp_server;
pub mod metrics;
pub mod model_endpoint;
mod model_usage;
pub mod negotiation;
pub mod peer;
mod periodic;
pub mod router;
pub mod server;
pub mod startup;
pub mod telemetry;
pub mod throttle;
pub mod tls;
