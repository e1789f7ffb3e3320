//! The meta-protocol's NLIP framing: how negotiation and application messages ride in NLIP
//! messages, for both roles.
//!
//! - Meta-protocol messages travel in NLIP **control** messages: a text first part with a
//!   human-readable summary, then one `structured`/`json` submessage labelled `anp` per
//!   meta-protocol message, in order. A peer may also put a single meta-protocol object in
//!   the first part itself; both are read.
//! - Application messages are data messages whose first part is `structured`/`json` (the
//!   protocol request or response) with a `token` submessage of subformat `protocol`
//!   naming the protocol hash (bare hex; `sha256:` accepted). Tokens are echoed by every
//!   NLIP peer, so the reply names the protocol too.
//! - A negotiation is one NLIP conversation: the provider keeps its state in the
//!   conversation, so it works over stateless HTTP as over one WebSocket.
//!
//! The provider's side is [`classify`] (what an inbound message is) and [`meta_reply`] (a
//! [`MetaTurn`] as an NLIP answer); the requester's side is [`NlipLink`], its
//! [`MetaChannel`].

use async_trait::async_trait;
use axum::http::StatusCode;
use parley_anp::{MetaMessage, ProtocolHash};
use parley_nlip::{Content, ErrorInfo, Format, Message, Submessage, TokenKind};
use serde_json::Value;

use super::fix_report::FixReport;
use super::provider::MetaTurn;
use super::requester::{MetaChannel, RequesterError};
use crate::client::NlipClient;
use crate::error::ApiError;

/// Label of the submessages that carry meta-protocol messages.
pub const ANP_LABEL: &str = "anp";
/// Token subformat naming the protocol of an application message.
pub const PROTOCOL_TOKEN: &str = "protocol";

/// What an inbound NLIP message carries.
#[derive(Debug)]
pub enum Inbound<'a> {
    /// Meta-protocol messages (a control message), in order.
    Meta(Vec<Value>),
    /// A requester's run-time `fixErrorNegotiation` about an active protocol (a control
    /// message naming it with a `protocol` token), or why it is not a usable one.
    Fix(Result<FixReport, ApiError>),
    /// An application message: its protocol and its payload, or why it is not a usable one.
    Application(Result<(ProtocolHash, &'a Value), ApiError>),
    /// Any other control message: NLIP's own (§6.3).
    Control,
    /// Natural language, or any other data message.
    Other,
}

/// Sorts an inbound message into meta-protocol, application or plain NLIP traffic.
pub fn classify(message: &Message) -> Inbound<'_> {
    if message.is_control() {
        let meta = meta_values(message);
        if let Some(report) = FixReport::read(message, &meta) {
            return Inbound::Fix(report);
        }
        return if meta.is_empty() {
            Inbound::Control
        } else {
            Inbound::Meta(meta)
        };
    }
    let Some(hash) = protocol_of(message) else {
        return Inbound::Other;
    };
    Inbound::Application(hash.map_err(ApiError::BadProtocolToken).and_then(|hash| {
        match (&message.format, &message.content) {
            (Format::Structured, Content::Json(payload)) => Ok((hash, payload)),
            _ => Err(ApiError::InvalidProtocolMessage(
                "an application message's first part is structured/json".into(),
            )),
        }
    }))
}

/// The meta-protocol objects of a control message, in order; empty when it carries none.
pub fn meta_values(message: &Message) -> Vec<Value> {
    if !message.is_control() {
        return Vec::new();
    }
    let is_meta = |v: &Value| {
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
    wrap_values(summary, messages.iter().map(MetaMessage::to_value))
}

/// [`wrap`] for meta-protocol objects already in JSON (carrying fields of Parley's own).
pub fn wrap_values(summary: impl Into<String>, values: impl IntoIterator<Item = Value>) -> Message {
    let mut m = Message::text(parley_nlip::DEFAULT_LANGUAGE, summary).into_control();
    for value in values {
        m.submessages.push(
            Submessage::new(Format::Structured, "json", Content::Json(value)).with_label(ANP_LABEL),
        );
    }
    m
}

/// The provider's answer to a meta-protocol message: its turn as a control message; when the
/// peer broke a rule, an NLIP error (in `request`'s language) that still carries the
/// meta-protocol answer.
pub fn meta_reply(turn: MetaTurn, request: &Message) -> (Message, StatusCode) {
    let reply = wrap(turn.summary, &turn.messages);
    match turn.violation {
        None => (reply, StatusCode::OK),
        Some(violation) => {
            let error = ApiError::negotiation(&violation);
            let mut message = error.to_info().to_message(request.reply_language());
            message.submessages.extend(reply.submessages);
            (message, error.status())
        }
    }
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
pub fn application_message(hash: &ProtocolHash, payload: Value) -> Message {
    Message::json(payload).with_submessage(protocol_token(hash))
}

/// The `protocol` token that names protocol `hash` on a message.
pub fn protocol_token(hash: &ProtocolHash) -> Submessage {
    Submessage::new(Format::Token, PROTOCOL_TOKEN, hash.to_string())
}

/// The requester's meta-protocol channel over NLIP: one NLIP conversation with the provider,
/// over HTTP or a WebSocket.
#[derive(Debug)]
pub struct NlipLink {
    client: NlipClient,
    /// The conversation token the provider answered the first message with.
    conversation: Option<Submessage>,
}

impl NlipLink {
    /// Connects to the provider's NLIP end-point at `url`, over TLS as `tls` says, presenting
    /// `token` when there is one.
    pub async fn connect(
        url: &str,
        tls: &crate::tls::ClientTls,
        token: Option<&crate::client::Credential>,
    ) -> Result<NlipLink, RequesterError> {
        Ok(NlipLink {
            client: NlipClient::connect_as(url, false, tls, token).await?,
            conversation: None,
        })
    }
}

#[async_trait]
impl MetaChannel for NlipLink {
    async fn exchange(
        &mut self,
        summary: &str,
        messages: &[MetaMessage],
    ) -> Result<Vec<Value>, RequesterError> {
        let mut message = wrap(summary, messages);
        if let Some(token) = &self.conversation {
            message.submessages.push(token.clone());
        }
        let reply = self.client.send(&message).await?.message;
        if self.conversation.is_none() {
            self.conversation = reply
                .tokens()
                .find(|t| t.token_kind() == Some(TokenKind::Conversation))
                .cloned();
        }
        let metas = meta_values(&reply);
        if metas.is_empty() {
            if let Some(err) = ErrorInfo::from_message(&reply) {
                return Err(RequesterError::Peer {
                    code: err.code,
                    message: err.message,
                });
            }
            if !reply.is_control() {
                return Err(RequesterError::NotSupported);
            }
        }
        Ok(metas)
    }
}
