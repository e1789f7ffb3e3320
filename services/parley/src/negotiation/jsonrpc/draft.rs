//! `natural_language_protocol_drafting`: the caller's draft negotiated with the provider's
//! driver in one request.
//!
//! The draft is the first candidate that carries a document; without one, a capability the
//! intent names (`intent.name`, or a `requiredCapabilities` entry, with or without a `cap.`
//! prefix) is drafted into a protocol from its input and output schemas by the built-in
//! drafter, as `parley negotiate --requirement` drafts one. A draft already served here is
//! selected at once.
//!
//! Otherwise a conversation is opened for the request and the provider's driver
//! (`Provider::handle_meta`, the one every framing drives) negotiates it, the caller's side
//! played by a [`RequesterSession`]: a hello announcing none of the optional exchanges (the
//! caller is not there to answer test cases or error reports), the proposal, and the caller's
//! `codeGeneration` once the provider accepted and verified its handler. The provider's
//! counter-proposal ends the request with `needs_more_information`, its document an alternative
//! (the caller's session closes the negotiation, so nothing stays open); a rejection, a handler
//! that could not be generated or verified, or a rule broken is 1600. Whatever happened, a
//! negotiation the request left open is ended with it.

use parley_anp::rpc::envelope::AnpCode;
use parley_anp::rpc::{Artifact, NegotiateParams, NegotiationResult, RpcError};
use parley_anp::{
    FixVerdict, MetaMessage, MetaProtocolInfo, ProtocolHash, RequesterSession, SessionConfig, Step,
    Verdict,
};
use parley_reasoner::ProtocolReasoner as _;
use serde_json::{Value, json};

use super::{Endpoint, server_error};
use crate::error::ApiError;

/// Turns of the provider's driver one request may take: the proposal, the caller's
/// `codeGeneration`, and room for the exchanges the driver may add.
const MAX_TURNS: usize = 6;

/// How the caller's side of one drafting negotiation ended.
enum Ended {
    Agreed(ProtocolHash),
    Countered {
        hash: ProtocolHash,
        text: String,
        summary: Option<String>,
    },
    Failed(String),
}

impl Endpoint {
    pub(super) async fn draft(
        &self,
        params: &NegotiateParams,
    ) -> Result<NegotiationResult, RpcError> {
        let text = self.draft_text(params).await?;
        let hash = ProtocolHash::of(&text);
        let provider = self.agent.provider();
        let served = provider.select_served(&[hash]).await;
        if served.map_err(|e| server_error(&e))?.is_some() {
            let reason = "The draft is a protocol served here: call it at once (0-RTT).";
            return Ok(self.accepted(params, &hash, reason.to_owned()));
        }
        let cid = self
            .agent
            .open_conversation(&self.caller)
            .await
            .map_err(|e| server_error(&e))?;
        let ended = self.negotiate_for_caller(&cid, &text).await;
        if let Err(e) = provider.abandon(&cid).await {
            tracing::warn!(conversation = %cid, error = %e, "could not end a drafting negotiation");
        }
        match ended.map_err(|e| server_error(&e))? {
            Ended::Agreed(agreed) => {
                let reason = "Agreed: the handler is generated, verified and active.";
                Ok(self.accepted(params, &agreed, reason.to_owned()))
            }
            Ended::Countered { text, summary, .. } => Ok(NegotiationResult {
                negotiation_id: super::negotiation_id(params),
                status: NegotiationResult::NEEDS_MORE_INFORMATION.into(),
                selected: None,
                execution: None,
                valid_until: None,
                negotiation_digest: None,
                alternatives: vec![Artifact::of(&text, summary)],
                reason: Some(
                    "The draft cannot be served as written; the alternative can. Draft it in a \
                     new anp.negotiate to agree it."
                        .into(),
                ),
            }),
            Ended::Failed(reason) => Err(RpcError::anp(
                AnpCode::NegotiationRejected,
                format!("the draft was not agreed: {reason}"),
                Some(json!({"protocolArtifact": hash.prefixed(), "reason": reason})),
            )),
        }
    }

    /// The document to negotiate: the caller's, or one drafted from the capability it names.
    async fn draft_text(&self, params: &NegotiateParams) -> Result<String, RpcError> {
        if let Some(document) = params.draft().and_then(|c| c.document.clone()) {
            return Ok(document);
        }
        let capabilities = self.agent.capabilities();
        let named = params
            .intent_name
            .iter()
            .chain(&params.required_capabilities)
            .map(|n| n.strip_prefix("cap.").unwrap_or(n))
            .find_map(|n| capabilities.get(n));
        let Some(capability) = named else {
            return Err(RpcError::anp(
                AnpCode::MoreInformationRequired,
                "send a draft protocol document (a candidateProtocols entry with `document`), \
                 or name one of this agent's capabilities in intent.name",
                Some(json!({"capabilities": capabilities.names()})),
            ));
        };
        let requirement = params
            .intent_description
            .clone()
            .unwrap_or_else(|| capability.description().to_owned());
        parley_reasoner::BuiltinProtocolReasoner
            .draft(
                &requirement,
                capability.input_schema(),
                capability.output_schema(),
            )
            .await
            .map_err(|e| {
                RpcError::anp(
                    AnpCode::MoreInformationRequired,
                    format!(
                        "no protocol could be drafted from capability {}: {e}; send a draft document",
                        capability.name()
                    ),
                    None,
                )
            })
    }

    /// Negotiates `text` with the provider's driver in conversation `cid`, the caller's side
    /// played by a requester session.
    async fn negotiate_for_caller(&self, cid: &str, text: &str) -> Result<Ended, ApiError> {
        let mut hello = MetaProtocolInfo::parley([]);
        hello.supported_capabilities.clear();
        let mut session = RequesterSession::new(SessionConfig::default());
        let mut outbox = vec![MetaMessage::source_hello(hello)];
        let peer = self.caller.party();
        let first = session.start(text);
        if let Some(ended) = act(&mut session, first, &mut outbox) {
            return Ok(ended);
        }
        for _ in 0..MAX_TURNS {
            let turn = self.send(cid, &peer, std::mem::take(&mut outbox)).await?;
            if let Some(agreed) = turn.agreed {
                return Ok(Ended::Agreed(agreed));
            }
            if let Some(violation) = turn.violation {
                return Ok(Ended::Failed(violation.to_string()));
            }
            for message in turn.messages {
                if matches!(message, MetaMessage::DestinationHello(_)) {
                    continue;
                }
                let value = message.to_value();
                let summary = value
                    .get("modificationSummary")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let step = session.receive_value(value);
                match act(&mut session, step, &mut outbox) {
                    None => {}
                    Some(Ended::Countered { hash, text, .. }) => {
                        self.close_countered(cid, &peer, &mut session, &hash)
                            .await?;
                        return Ok(Ended::Countered {
                            hash,
                            text,
                            summary,
                        });
                    }
                    Some(ended) => {
                        if !outbox.is_empty() {
                            self.send(cid, &peer, std::mem::take(&mut outbox)).await?;
                        }
                        return Ok(ended);
                    }
                }
            }
            if outbox.is_empty() {
                return Ok(Ended::Failed("the negotiation stalled".into()));
            }
        }
        Ok(Ended::Failed(format!(
            "no agreement within {MAX_TURNS} turns"
        )))
    }

    /// The caller answers a counter-proposal in a request of its own: the negotiation of this
    /// one ends, the caller's session declining the counter-proposal `hash`.
    async fn close_countered(
        &self,
        cid: &str,
        peer: &str,
        session: &mut RequesterSession,
        hash: &ProtocolHash,
    ) -> Result<(), ApiError> {
        let reason = "the caller answers the counter-proposal in a new request".to_owned();
        let step = session.evaluated(hash, Verdict::Reject { reason });
        let mut closing = Vec::new();
        act(session, step, &mut closing);
        if !closing.is_empty() {
            self.send(cid, peer, closing).await?;
        }
        Ok(())
    }

    /// One turn of the provider's driver on the caller's `messages` (none: nothing is sent).
    async fn send(
        &self,
        cid: &str,
        peer: &str,
        messages: Vec<MetaMessage>,
    ) -> Result<crate::negotiation::provider::MetaTurn, ApiError> {
        let values: Vec<Value> = messages.iter().map(MetaMessage::to_value).collect();
        let provider = self.agent.provider();
        Box::pin(provider.handle_meta(cid, peer, values)).await
    }
}

/// The caller's decision on one step of its session: messages for the provider go to
/// `outbox`; `Some` when the caller's side is done. Its decisions are a caller's that is not
/// there to consult: the draft stands as written (a counter-proposal goes back to the caller),
/// the provider's test cases are taken, its error reports declined.
fn act(
    session: &mut RequesterSession,
    mut step: Step,
    outbox: &mut Vec<MetaMessage>,
) -> Option<Ended> {
    loop {
        step = match step {
            Step::Send(m) => {
                outbox.push(m);
                return None;
            }
            Step::Wait
            | Step::TestCasesRejected { .. }
            | Step::FixDeclined { .. }
            | Step::FixAccepted { .. }
            | Step::Converse(_)
            | Step::TestCasesAgreed { send: None, .. } => return None,
            Step::TestCasesAgreed { send: Some(m), .. } => {
                outbox.push(m);
                return None;
            }
            Step::Evaluate { text, hash } => {
                return Some(Ended::Countered {
                    hash,
                    text,
                    summary: None,
                });
            }
            Step::Accepted { send, .. } => {
                outbox.extend(send);
                session.code_generated(Ok(()))
            }
            Step::Ready { send, .. } => {
                outbox.extend(send);
                return None;
            }
            Step::Rejected { reason, send } => {
                outbox.extend(send);
                return Some(Ended::Failed(reason.to_string()));
            }
            Step::EvaluateTestCases { .. } => session.test_cases_evaluated(Verdict::Accept),
            Step::FixError { .. } => session.fix_evaluated(FixVerdict::Decline {
                reason: "the caller keeps the protocol's expectations".into(),
            }),
            Step::Regenerate { send, .. } => {
                outbox.extend(send);
                session.code_generated(Ok(()))
            }
        };
    }
}
