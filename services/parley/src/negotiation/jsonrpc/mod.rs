//! ANP 1.2's JSON-RPC binding of the meta-protocol (ANP-06 v1.2, a draft): the third framing of
//! the negotiation core, beside NLIP's ([`super::nlip`]) and seed 002's ([`super::anp`]).
//!
//! The draft replaces the seed's conversation of meta-protocol messages with one request and
//! one answer: `anp.negotiate` names what the caller wants and gets a `NegotiationResult`. So
//! each request is a whole negotiation here, and nothing is kept between requests but what
//! every framing keeps (protocols, handlers, agreements):
//! - `structured_selection` ([`select`]): the caller offers protocols by hash; the first one
//!   with an active handler here is selected at once (0-RTT), or the answer is 1601.
//! - `natural_language_protocol_drafting` ([`draft`]): the caller sends a protocol document (or
//!   names a capability, whose schemas this side drafts one from). The provider's driver
//!   negotiates it in a conversation opened for the request, with a
//!   [`RequesterSession`](parley_anp::RequesterSession) speaking for the caller: hello, the
//!   proposal, and — when the provider accepted and verified its handler — both sides'
//!   `codeGeneration`. A counter-proposal ends the request with `needs_more_information` and
//!   the counter-proposal as an alternative; the caller agrees it by drafting it in a new
//!   request.
//!
//! Agreed protocols are then called where every framing calls them: NLIP application messages
//! on `/nlip` with a `protocol` token (`selected.url`), or `/anp` frames. The draft defines no
//! business method of its own.
//!
//! # Layout
//! - [`Endpoint`] (here): one request's bytes in, the response out.
//! - [`describe`]: `anp.get_capabilities`, the agent description and the discovery page.
//! - [`select`], [`draft`]: the two modes.
//! - [`client`]: the caller's side, [`RpcLink`].

pub mod client;
pub mod describe;
mod draft;
mod select;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use parley_anp::ProtocolHash;
use parley_anp::rpc::envelope::AnpCode;
use parley_anp::rpc::{
    DigestInput, Envelope, Mode, NegotiateParams, NegotiationResult, RpcError, Selected,
    error_response, method, negotiation_digest, success_response,
};
use serde_json::{Value, json};

pub use client::{RpcLink, discovery_url};
pub use describe::Urls;

use crate::agent::Agent;
use crate::error::ApiError;
use crate::peer::Caller;

/// The JSON-RPC end-point as one request from `peer` sees it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub agent: Arc<Agent>,
    /// Who sent the request: what it may do is checked as on every framing.
    pub caller: Caller,
    /// Where this agent's end-points are, as the peer reached it.
    pub urls: Urls,
    /// What `validUntil` adds to the time of an answer (`negotiation.agreement_valid_for_s`).
    pub valid_for: Duration,
    /// `limits.max_message_bytes`, which bounds a request's body (announced in
    /// `anp.get_capabilities`).
    pub max_request_bytes: usize,
}

impl Endpoint {
    /// The response to one request's `bytes`; `None` for a notification (JSON-RPC answers
    /// none).
    pub async fn answer(&self, bytes: &[u8]) -> Option<Value> {
        let envelope = match Envelope::parse(bytes) {
            Ok(envelope) => envelope,
            Err(refused) => return Some(error_response(&refused.id, &refused.error)),
        };
        let id = envelope.id.clone()?;
        let outcome = match envelope.method.as_str() {
            method::GET_CAPABILITIES => describe::capabilities(self).await,
            method::NEGOTIATE => self.negotiate(&envelope).await,
            other => Err(RpcError::method_not_found(other)),
        };
        Some(match outcome {
            Ok(result) => success_response(&id, result),
            Err(error) => error_response(&id, &error),
        })
    }

    async fn negotiate(&self, envelope: &Envelope) -> Result<Value, RpcError> {
        // An agreement is no authorization: a peer that may not negotiate is told so (1607),
        // and one that may is still checked on every call of what it agreed.
        if let Err(ApiError::Forbidden(reason)) =
            self.caller.principal.check(parley_auth::Action::Negotiate)
        {
            return Err(RpcError::anp(AnpCode::AuthorizationRequired, reason, None));
        }
        let provider = self.agent.provider();
        let params = NegotiateParams::read(&envelope.params, provider.max_offered())?;
        self.check_expiry(&params)?;
        let result = match params.mode {
            Mode::StructuredSelection => self.select(&params).await?,
            Mode::NaturalLanguageProtocolDrafting => Box::pin(self.draft(&params)).await?,
        };
        Ok(serde_json::to_value(result).expect("a negotiation result serializes"))
    }

    /// A candidate that carries an earlier result's `validUntil` in the past is refused with
    /// 1608: the caller renegotiates (one structured selection) instead of relying on it.
    fn check_expiry(&self, params: &NegotiateParams) -> Result<(), RpcError> {
        let now = Utc::now();
        for candidate in &params.candidates {
            let Some(given) = &candidate.valid_until else {
                continue;
            };
            let until = DateTime::parse_from_rfc3339(given).map_err(|e| {
                RpcError::invalid_params(format!(
                    "validUntil {given:?} is not an RFC 3339 time: {e}"
                ))
            })?;
            if until < now {
                return Err(RpcError::anp(
                    AnpCode::NegotiationExpired,
                    format!(
                        "the result for protocol {} expired at {given}: negotiate again",
                        candidate.hash.prefixed()
                    ),
                    Some(
                        json!({"protocolArtifact": candidate.hash.prefixed(), "validUntil": given}),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The `accepted` result for protocol `hash`.
    fn accepted(
        &self,
        params: &NegotiateParams,
        hash: &ProtocolHash,
        reason: String,
    ) -> NegotiationResult {
        let negotiation_id = negotiation_id(params);
        let valid_until = (Utc::now()
            + chrono::Duration::from_std(self.valid_for).unwrap_or(chrono::TimeDelta::MAX))
        .to_rfc3339_opts(SecondsFormat::Secs, true);
        let digest = negotiation_digest(&DigestInput {
            negotiation_id: &negotiation_id,
            protocol: hash,
            caller: params.sender.as_deref(),
            target: &self.urls.rpc,
            endpoint: &self.urls.nlip,
            valid_until: &valid_until,
        });
        NegotiationResult {
            negotiation_id,
            status: NegotiationResult::ACCEPTED.into(),
            selected: Some(Selected {
                interface: describe::NLIP_INTERFACE.into(),
                protocol: "NLIP".into(),
                profile: describe::NLIP_PROFILE.into(),
                security_profile: parley_anp::rpc::SECURITY_PROFILE.into(),
                content_type: parley_anp::rpc::CONTENT_TYPE.into(),
                url: self.urls.nlip.clone(),
                protocol_artifact: hash.prefixed(),
                capability: None,
            }),
            execution: Some(json!({
                "mode": parley_anp::rpc::EXECUTION_MODE,
                "requiresHumanAuthorization": false,
            })),
            valid_until: Some(valid_until),
            negotiation_digest: Some(digest),
            alternatives: Vec::new(),
            reason: Some(reason),
        }
    }
}

/// The caller's `negotiation_id`, or a fresh one.
fn negotiation_id(params: &NegotiateParams) -> String {
    params
        .negotiation_id
        .clone()
        .unwrap_or_else(|| format!("neg-{}", uuid::Uuid::new_v4()))
}

/// A failure of the server's own, as a JSON-RPC error: `-32000` with its stable code.
fn server_error(error: &ApiError) -> RpcError {
    let info = error.to_info();
    RpcError::server(&info.code, info.message)
}

/// The response to a request that could not be answered by the method (rate limit, body too
/// large or too slow, the request's time limit): `-32000` with the error's stable code.
pub fn refusal(id: &Value, error: &ApiError) -> Value {
    error_response(id, &server_error(error))
}

/// The id of the request in `bytes`, when it has a readable one (for a refusal).
pub fn request_id(bytes: &[u8]) -> Value {
    Envelope::parse(bytes)
        .ok()
        .and_then(|e| e.id)
        .unwrap_or(Value::Null)
}
