//! The provider's side of one seed-002 connection: each inbound frame answered with the frames
//! to send back, in order.
//!
//! - **Meta** frames go to [`Provider::handle_meta`](crate::negotiation::provider::Provider::handle_meta),
//!   one frame per turn, in a conversation the connection opens on its first meta frame (the
//!   seed's framing has no conversations; the connection is one). Each meta-protocol message of
//!   the turn leaves as a frame of its own. A rule the peer broke is answered with the turn's
//!   messages (a `rejected` one among them) and then an error frame. A run-time
//!   `fixErrorNegotiation` about the connection's agreed protocol (one carrying a `request`,
//!   `negotiation::fix_report`) goes to `Provider::fix_reported` instead.
//! - **Application** frames name no protocol: they are served by the protocol agreed on this
//!   connection, by a negotiation that ended agreed or by a hello that selected a protocol served
//!   here (0-RTT). Answered in kind: bare JSON for bare JSON, a headed frame for a headed one.
//! - **Natural-language** frames are answered by the agent's reasoner, as a plain NLIP text
//!   message without a conversation would be.
//! - **Verification** frames are refused: Parley does not implement that protocol, and its
//!   hello does not announce it.
//!
//! Each frame is checked for what it does, as NLIP messages are (`crate::access`): meta frames
//! need `negotiate`, application frames the agreed protocol, natural language `talk`; a
//! refusal is an error frame with code `forbidden`.
//!
//! Every failure is an **error frame**: the header of the frame it answers (meta for one that
//! has none) and `{"error": {"code", "message"}}` (and `retry_after_ms` when a throttle refused
//! it), with the stable codes of NLIP's errors plus
//! `malformed_frame`, `no_protocol` and `unsupported_protocol_type`.

use std::sync::Arc;

use parley_anp::ProtocolHash;
use parley_nlip::{ErrorInfo, Message};
use serde_json::{Value, json};

use crate::access::Action;
use crate::agent::Agent;
use crate::error::ApiError;
use crate::negotiation::fix_report::FixReport;
use crate::peer::Caller;
use parley_anp::frame::{Frame, ProtocolType, encode, encode_application, encode_json};

/// One connection's state on the provider's side.
#[derive(Debug)]
pub struct Connection {
    agent: Arc<Agent>,
    /// Who opened the connection (resolved from the upgrade request).
    caller: Caller,
    /// Where the connection's negotiation lives, once a meta frame arrived.
    conversation: Option<String>,
    /// The protocol application frames are served by.
    protocol: Option<ProtocolHash>,
}

impl Connection {
    pub fn new(agent: Arc<Agent>, caller: Caller) -> Connection {
        Connection {
            agent,
            caller,
            conversation: None,
            protocol: None,
        }
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Answers one inbound frame with the frames to send, in order; none when the frame needs
    /// no answer (the peer's `codeGeneration`).
    pub async fn answer(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let frame = match Frame::decode(bytes) {
            Ok(frame) => frame,
            Err(e) => return vec![error_frame(ProtocolType::Meta, "malformed_frame", e)],
        };
        match frame.kind {
            ProtocolType::Meta => self.meta(&frame).await,
            ProtocolType::Application => vec![self.application(&frame).await],
            ProtocolType::NaturalLanguage => vec![self.natural_language(&frame).await],
            ProtocolType::Verification => vec![error_frame(
                ProtocolType::Verification,
                "unsupported_protocol_type",
                "this agent does not implement the verification protocol (protocol type 11)",
            )],
        }
    }

    /// The peer went away: a negotiation it left open ends.
    pub async fn close(self) {
        if let Some(cid) = &self.conversation
            && let Err(e) = self.agent.provider().abandon(cid).await
        {
            tracing::warn!(conversation = %cid, error = %e, "could not end an abandoned negotiation");
        }
    }

    async fn meta(&mut self, frame: &Frame<'_>) -> Vec<Vec<u8>> {
        let value = match frame.json() {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) => {
                let why = "a meta-protocol message is a JSON object";
                return vec![error_frame(ProtocolType::Meta, "invalid_message", why)];
            }
            Err(e) => return vec![error_frame(ProtocolType::Meta, "malformed_json", e)],
        };
        if let Some(hash) = self.protocol
            && FixReport::is_report(&value)
        {
            return vec![self.fix(hash, &value).await];
        }
        if let Err(e) = self.caller.check(Action::Negotiate) {
            return vec![api_error_frame(ProtocolType::Meta, &e)];
        }
        let cid = match &self.conversation {
            Some(cid) => cid.clone(),
            None => match self.agent.open_conversation(&self.caller).await {
                Ok(cid) => self.conversation.insert(cid).clone(),
                Err(e) => return vec![api_error_frame(ProtocolType::Meta, &e)],
            },
        };
        let provider = self.agent.provider();
        let turn =
            match Box::pin(provider.handle_meta(&cid, &self.caller.party(), vec![value])).await {
                Ok(turn) => turn,
                Err(e) => return vec![api_error_frame(ProtocolType::Meta, &e)],
            };
        if let Some(hash) = turn.agreed {
            self.protocol = Some(hash);
        }
        let mut out: Vec<Vec<u8>> = turn
            .messages
            .iter()
            .map(|m| encode_json(ProtocolType::Meta, &m.to_value()))
            .collect();
        if let Some(violation) = &turn.violation {
            out.push(api_error_frame(
                ProtocolType::Meta,
                &ApiError::negotiation(violation),
            ));
        }
        if out.is_empty() {
            // Nothing to say (the peer's codeGeneration, an echo): the seed's framing has no
            // empty acknowledgement, and none is sent.
            tracing::debug!(peer = %self.caller.addr, "meta frame needs no answer");
        }
        out
    }

    /// A run-time `fixErrorNegotiation` about the connection's protocol `hash`: checked as an
    /// NLIP report is (the caller negotiates and may call the protocol), answered with the
    /// provider's `fixErrorNegotiation` in a meta frame.
    async fn fix(&self, hash: ProtocolHash, value: &Value) -> Vec<u8> {
        let fail = |e: &ApiError| api_error_frame(ProtocolType::Meta, e);
        let report = match FixReport::from_value(hash, value) {
            Ok(report) => report,
            Err(e) => return fail(&e),
        };
        if let Err(e) = self.caller.check(Action::Negotiate) {
            return fail(&e);
        }
        let access = self.agent.access();
        if let Err(e) = access
            .may_call_protocol(&self.caller, &hash.to_string())
            .await
        {
            return fail(&e);
        }
        let provider = self.agent.provider();
        match Box::pin(provider.fix_reported(&report, &self.caller.party())).await {
            Ok(answer) => encode_json(ProtocolType::Meta, &answer.to_meta().to_value()),
            Err(e) => fail(&e),
        }
    }

    async fn application(&mut self, frame: &Frame<'_>) -> Vec<u8> {
        let fail = |code: &str, message: &dyn std::fmt::Display| {
            encode_application(&error_value(code, message), frame.bare)
        };
        let request = match frame.json() {
            Ok(request) => request,
            Err(e) => return fail("malformed_json", &e),
        };
        let Some(hash) = self.protocol else {
            return fail(
                "no_protocol",
                &"no protocol is agreed on this connection: negotiate one with meta-protocol \
                  frames first, or offer an agreed one's hash in sourceHello (protocolHash)",
            );
        };
        let access = self.agent.access();
        if let Err(e) = access
            .may_call_protocol(&self.caller, &hash.to_string())
            .await
        {
            return encode_application(&api_error_value(&e), frame.bare);
        }
        let answer = Box::pin(self.agent.provider().application(
            &hash,
            &request,
            &self.caller.party(),
            tokio::runtime::Handle::current(),
        ))
        .await;
        match answer {
            Ok(answer) => encode_application(&answer, frame.bare),
            Err(e) => encode_application(&api_error_value(&e), frame.bare),
        }
    }

    async fn natural_language(&mut self, frame: &Frame<'_>) -> Vec<u8> {
        let kind = ProtocolType::NaturalLanguage;
        let Ok(text) = std::str::from_utf8(frame.data) else {
            return error_frame(kind, "malformed_frame", "natural language is UTF-8 text");
        };
        let request = Message::text(parley_nlip::DEFAULT_LANGUAGE, text);
        let reply = Box::pin(self.agent.handle(&request, &self.caller))
            .await
            .message;
        if let Some(error) = ErrorInfo::from_message(&reply) {
            return encode_json(kind, &info_value(&error));
        }
        encode(kind, reply.text_content().unwrap_or_default().as_bytes())
    }
}

/// `{"error": {"code", "message"}}`.
pub fn error_value(code: &str, message: impl std::fmt::Display) -> Value {
    json!({"error": {"code": code, "message": message.to_string()}})
}

/// `{"error": {"code", "message", "retry_after_ms"?}}`: an NLIP error's fields in a frame.
fn info_value(info: &ErrorInfo) -> Value {
    let mut value = error_value(&info.code, &info.message);
    if let Some(ms) = info.retry_after_ms {
        value["error"]["retry_after_ms"] = Value::from(ms);
    }
    value
}

fn api_error_value(error: &ApiError) -> Value {
    info_value(&error.to_info())
}

/// An error frame of `kind`.
pub fn error_frame(kind: ProtocolType, code: &str, message: impl std::fmt::Display) -> Vec<u8> {
    encode_json(kind, &error_value(code, message))
}

fn api_error_frame(kind: ProtocolType, error: &ApiError) -> Vec<u8> {
    encode_json(kind, &api_error_value(error))
}

/// The error answering `bytes` in kind, for failures outside the frame's own handling (rate
/// limit, time limit).
pub fn error_for(bytes: &[u8], error: &ApiError) -> Vec<u8> {
    match Frame::decode(bytes) {
        Ok(frame) if frame.kind == ProtocolType::Application => {
            encode_application(&api_error_value(error), frame.bare)
        }
        Ok(frame) => api_error_frame(frame.kind, error),
        Err(_) => api_error_frame(ProtocolType::Meta, error),
    }
}
