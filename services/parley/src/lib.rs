//! The Parley agent: the composition root that turns the library crates into a service.
//!
//! # Layout
//! - [`config`]: settings from defaults, file, environment and flags; validated up front.
//! - [`startup`]: picks the concrete store, reasoner and capabilities, binds the sockets.
//! - [`server`]: HTTP (ECMA-431) and WebSocket (ECMA-432) transports and the upload port.
//! - [`agent`]: what the agent does with one message, independent of the transport.
//! - [`client`]: an NLIP client over HTTP and WebSocket.
//! - [`error`]: `ApiError`, every failure with a stable code, a status and an NLIP form.
//! - [`cli`]: the `parley` command line.
//!
//! # Invariants
//! - This is the only crate that knows axum, reads the environment, or chooses backends.
//! - Every reply a peer receives is an NLIP message, errors included.
//! - A message without a conversation token touches no database.

pub mod agent;
pub mod cli;
pub mod client;
pub mod config;
pub mod error;
pub mod host;
pub mod metrics;
pub mod negotiation;
pub mod server;
pub mod startup;
pub mod telemetry;
