//! The meta-protocol's seed-002 framing: a WebSocket (`GET /anp`) on which each binary frame is
//! one seed-002 message, a 1-byte header naming the protocol type (00 meta, 01 application,
//! 10 natural language, 11 verification) and then its data, UTF-8 JSON or text.
//!
//! This is the framing other ANP implementations speak (AgentConnect's `MetaProtocol` hands
//! its transport exactly these frames). Unlike NLIP's, it has no conversations and no
//! request/response pairing: the connection is the negotiation's session, either side may send
//! any number of frames at any time, and application messages name no protocol (the one agreed
//! on the connection applies).
//!
//! - The frame itself (the header byte, and bare JSON, `{` first, read as an application frame)
//!   is `parley_anp::frame`: pure, so it is fuzzed without this crate's runtime.
//! - [`serve`]: the provider's side of one connection ([`Connection`]); its route is
//!   `server::anp`.
//! - [`link`]: the requester's side ([`AnpLink`], a [`MetaChannel`](super::requester::MetaChannel)).

pub mod link;
pub mod serve;

pub use link::{AnpLink, AnpOptions, endpoint};
pub use parley_anp::frame::{Frame, FrameError, ProtocolType};
pub use serve::Connection;
