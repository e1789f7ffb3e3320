//! The ANP meta-protocol: the provider's side ([`provider`]), the requester's side
//! ([`requester`]), the sandbox-backed handler runner ([`runner`]), and how it all rides in
//! NLIP ([`nlip`]), in seed 002's frames ([`anp`]) and in ANP 1.2's JSON-RPC ([`jsonrpc`]).
//!
//! # The framing seam
//! The negotiation core does not know which framing carries it:
//! - The provider's driver, [`provider::Provider::handle_meta`], takes the inbound
//!   meta-protocol messages as JSON values, the peer's identity and a session key (the store
//!   conversation that holds the negotiation's state), and returns a
//!   [`provider::MetaTurn`]: the meta-protocol messages to send, a summary, and the rule the
//!   peer broke, if any. Application messages are served by
//!   [`provider::Provider::application`]: protocol hash and JSON request in, JSON answer out.
//! - The requester's loop, [`requester::Requester::negotiate_over`], drives its session over
//!   any [`requester::MetaChannel`]: "send these meta messages, give me the peer's answer".
//!
//! After a negotiation, a requester whose answer broke the agreed protocol reports it with a
//! run-time `fixErrorNegotiation` ([`fix_report`]), which the provider answers by fixing its
//! handler or refusing ([`provider::Provider::fix_reported`]).
//!
//! Three framings carry it. [`nlip`] sorts inbound NLIP messages into meta-protocol,
//! application and plain traffic, turns a `MetaTurn` into an NLIP control message, and is the
//! requester's channel over NLIP. [`anp`] does the same for seed 002's frames on a WebSocket
//! (`/anp`): one frame per message, the connection as the session, application frames served
//! by the protocol the connection agreed ([`provider::MetaTurn::agreed`]). [`jsonrpc`] serves
//! ANP 1.2's `anp.negotiate` (`POST /anp/rpc`): one request is one negotiation, the provider's
//! driver negotiating the caller's draft with a requester session speaking for the caller. Another
//! framing is a new module beside them that does the same for its messages, plus its route in
//! `server`; the provider and requester stay as they are.

pub mod anp;
pub mod fix_report;
pub mod jsonrpc;
pub mod nlip;
pub mod provider;
pub mod requester;
pub mod runner;
