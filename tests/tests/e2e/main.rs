//! Parley's end-to-end tests, in one test binary: real servers on loopback (started by this
//! crate's library, `parley_tests`) spoken to over HTTP (`http`, `store_errors`), WebSocket
//! (`websocket`), what one address may hold and send (`per_address`), the seed-002 framing
//! (`anp`, and Parley as its requester in `anp_requester`), the meta-protocol between two agents
//! (`negotiation`; test cases the provider proposes in `provider_cases`, its questions about a
//! proposal and their answers in `questions`), a requester's run-time error report fixing the
//! provider's handler (`fix_error`), the bounded cost of a proposal (`bounded_work`), whose state
//! is whose and how much of it there may be (`state_limits`), idle conversations expiring
//! (`expiry`), tool calls
//! routed to capabilities (`router`), storage faults under a running server
//! (`storage_faults`), a database, model or capability endpoint failing and coming back
//! (`faults`), the requester's choice of protocol or natural
//! language (`requester`), an agent whose capabilities another agent performs (`agent_binding`),
//! seed 003's station protocol (`seed003`), a scripted model (`openai_backend`) and the Python
//! reference SDK (`interop_python`); AgentConnect, the ANP reference implementation
//! (`agentconnect`); MCP servers behind Parley (`mcp`); Parley as an MCP server to real MCP
//! clients (`mcp_server`); the agent as a user and an operator meet
//! it (`agent`); what model calls cost (`tokens`); TLS on the listeners and in the client
//! (`tls`); who may do what (`access`), the NLIP authentication exchange (`authentication`) and
//! ANP peers authenticated by DID-WBA signatures (`did_wba`); with what they share in `support`.
//!
//! The modules share one process, and with it one metrics recorder: a counter read from
//! `/metrics` includes what other tests' servers did, so a test whose servers call a model holds
//! `support::MODEL`, and one that checks model counters compares them before and after under it.
//! No test sets a global tracing subscriber; one that reads the log captures its own thread's
//! (`agent`).

mod access;
mod agent;
mod agent_binding;
mod agentconnect;
mod anp;
mod anp12;
mod anp_requester;
mod authentication;
mod bounded_work;
mod did_wba;
mod expiry;
mod faults;
mod fix_error;
mod http;
mod interop_python;
mod mcp;
mod mcp_server;
mod negotiation;
mod openai_backend;
mod per_address;
mod provider_cases;
mod questions;
mod requester;
mod router;
mod seed003;
mod state_limits;
mod storage_faults;
mod store_errors;
mod support;
mod throttle;
mod tls;
mod tokens;
mod websocket;
