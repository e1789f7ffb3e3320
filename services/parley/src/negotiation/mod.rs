//! The ANP meta-protocol: the provider's side ([`provider`]), the requester's side
//! ([`requester`]), the sandbox-backed handler runner ([`runner`]), and how it all rides in
//! NLIP ([`nlip`]).
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
//! [`nlip`] is the one framing today: it sorts inbound NLIP messages into meta-protocol,
//! application and plain traffic, turns a `MetaTurn` into an NLIP control message, and is the
//! requester's channel over NLIP. A second framing (the seed's raw WebSocket with its 1-byte
//! protocol-type header, or a JSON-RPC binding) is a new file beside `nlip.rs` that does the
//! same for its frames (decode to meta-protocol values or an application request, encode the
//! `MetaTurn` and the answer, implement `MetaChannel`), plus its route in `server`; the
//! provider and requester stay as they are.

pub mod anp;
pub mod nlip;
pub mod provider;
pub mod requester;
pub mod runner;
