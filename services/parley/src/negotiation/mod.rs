//! The ANP meta-protocol carried over NLIP: the wire mapping shared by both roles, the
//! provider's driver ([`provider`]), the requester's driver ([`requester`]), and the
//! sandbox-backed handler runner ([`runner`]).
//!
//! # Wire mapping (documented in ARCHITECTURE.md)
//! - Meta-protocol messages travel in NLIP **control** messages: a text first part with a
//!   human-readable summary, then one `structured`/`json` submessage labelled `anp` per
//!   meta-protocol message, in order. A peer may also put a single meta-protocol object in
//!   the first part itself; both are read.
//! - Application messages are data messages whose first part is `structured`/`json` (the
//!   protocol request or response) with a `token` submessage of subformat `protocol`
//!   naming the protocol hash (bare hex; `sha256:` accepted). Tokens are echoed by every
//!   NLIP peer, so the reply names the protocol too.
//! - A negotiation is one NLIP conversation: the provider keeps its session in the
//!   conversation's state, so it works over stateless HTTP as over one WebSocket.

pub mod provider;
pub mod requester;
pub mod runner;

use parley_anp::{MetaMessage, ProtocolHash};
use parley_nlip::{Content, Format, Message, Submessage};

/// Label of the submessages that carry meta-protocol messages.
pub const ANP_LABEL: &str = "anp";
/// Token subformat naming the protocol of an application message.
pub const PROTOCOL_TOKEN: &str = "protocol";

/// The meta-protocol objects of a control message, in order; empty when it carries none.
pub fn meta_values(message: &Message) -> Vec<serde_json::Value> {
    if !message.is_control() {
        return Vec::new();
    }
    let is_meta = |v: &serde_json::Value| {
        v.get("action").and_then(|a| a.as_str()).is_some()
            || v.get("type")
                .and_then(|a| a.as_str())
                .is_some_and(|t| t.ends_with("Hello"))
    };
    let mut out = Vec::new();
    if message.format == Format::Structured
        && let Content::Json(v) = &message.content
        && is_meta(v)
    {
        out.push(v.clone());
    }
    for sub in message.payload_submessages() {
        if sub.format != Format::Structured {
            continue;
        }
        if let Content::Json(v) = &sub.content {
            let labelled = sub
                .label
                .as_deref()
                .is_some_and(|l| l.eq_ignore_ascii_case(ANP_LABEL));
            if labelled || is_meta(v) {
                out.push(v.clone());
            }
        }
    }
    out
}

/// A control message carrying meta-protocol messages.
pub fn wrap(summary: impl Into<String>, messages: &[MetaMessage]) -> Message {
    let mut m = Message::text(parley_nlip::DEFAULT_LANGUAGE, summary).into_control();
    for meta in messages {
        m.submessages.push(
            Submessage::new(Format::Structured, "json", Content::Json(meta.to_value()))
                .with_label(ANP_LABEL),
        );
    }
    m
}

/// The protocol an application message names, if any. `Err` carries the bad token text.
pub fn protocol_of(message: &Message) -> Option<Result<ProtocolHash, String>> {
    let token = message
        .tokens()
        .find(|t| t.subformat.eq_ignore_ascii_case(PROTOCOL_TOKEN))?;
    let text = token.content.as_str().unwrap_or_default();
    Some(text.parse::<ProtocolHash>().map_err(|_| text.to_owned()))
}

/// An application message for protocol `hash`.
pub fn application_message(hash: &ProtocolHash, payload: serde_json::Value) -> Message {
    Message::json(payload).with_submessage(Submessage::new(
        Format::Token,
        PROTOCOL_TOKEN,
        hash.to_string(),
    ))
}
