//! The requester over ANP 1.2's JSON-RPC binding ([`Wire::Anp12`](super::Wire::Anp12)).
//!
//! One negotiation is a few `anp.negotiate` requests to the end-point discovery finds: a
//! structured selection offering the protocol's hash (0-RTT when the provider serves it), and
//! when the answer is 1601, the document in drafting mode. A counter-proposal
//! (`needs_more_information` with an alternative) that this requester accepts
//! ([`judge_counter`](super::judge_counter)) is drafted in turn, within `max_rounds` drafts.
//!
//! The binding has no business method: agreed protocols are called where the result's
//! `selected.url` says, NLIP's `/nlip`, with a `protocol` token ([`Requester::call`] over NLIP).
//! Every call first confirms the selection (one structured selection), as the draft asks of a
//! caller whose cached result may be stale.

use parley_anp::rpc::envelope::AnpCode;
use parley_anp::rpc::{Artifact, Mode, NegotiationResult, RpcError};
use parley_anp::{ProtocolDoc, ProtocolHash, Verdict};
use serde_json::{Value, json};

use super::request::fallback_reason;
use super::{
    Called, FallbackReason, Negotiated, Outcome, Progress, ProtocolRef, Requested, Requester,
    RequesterError, Wire, judge_counter,
};
use crate::negotiation::jsonrpc::RpcLink;

/// A negotiation over the binding, and where its protocol is called.
pub(super) struct Agreed {
    pub negotiated: Negotiated,
    /// `selected.url` of the accepted result.
    pub call_url: Option<String>,
}

impl Requester {
    /// [`Requester::negotiate`] over the binding.
    pub(super) async fn negotiate_anp12(
        &self,
        url: &str,
        text: &str,
        progress: impl FnMut(Progress),
    ) -> Result<Negotiated, RequesterError> {
        Ok(self.agree_anp12(url, text, progress).await?.negotiated)
    }

    /// Selection, then drafting when the provider does not serve `text` yet; the outcome is
    /// recorded locally.
    pub(super) async fn agree_anp12(
        &self,
        url: &str,
        text: &str,
        mut progress: impl FnMut(Progress),
    ) -> Result<Agreed, RequesterError> {
        let doc = ProtocolDoc::parse(text)?;
        let hash = doc.hash();
        self.store.put_protocol(text).await?;
        let mut link = RpcLink::connect(url, &self.tls, self.token.as_ref()).await?;
        let peer = link.endpoint.to_string();
        let negotiation_id = format!("neg-{}", uuid::Uuid::new_v4());
        progress(Progress {
            stage: "structured selection",
            round: 0,
        });
        let selection = link
            .negotiate(json!({
                "negotiation_id": negotiation_id,
                "mode": Mode::STRUCTURED_SELECTION,
                "intent": intent(&doc),
                "candidateProtocols": [hash.prefixed()],
            }))
            .await?;
        let (outcome, result, rounds) = match selection {
            Ok(result) if result.agreed() == Some(hash) => (Outcome::ZeroRtt, Some(result), 0),
            Ok(result) => return Err(unexpected(&result)),
            Err(e) if e.anp_code() == Some(AnpCode::NoMatchingInterface) => {
                self.draft_rounds(&mut link, &doc, &negotiation_id, progress)
                    .await?
            }
            Err(e) => return Err(peer_error(&e)),
        };
        let hash = result
            .as_ref()
            .and_then(NegotiationResult::agreed)
            .unwrap_or(hash);
        if matches!(outcome, Outcome::Agreed | Outcome::ZeroRtt) {
            self.agree(&peer, &hash).await?;
        }
        // A selection is no negotiation (every call makes one): only drafts are on record.
        if outcome != Outcome::ZeroRtt {
            self.record(&peer, &link.transcript, rounds, &(hash, outcome.clone()))
                .await?;
        }
        Ok(Agreed {
            call_url: result.and_then(|r| r.selected).map(|s| s.url),
            negotiated: Negotiated {
                hash,
                outcome,
                rounds,
                messages: u32::try_from(link.transcript.len() / 2).unwrap_or(u32::MAX),
                transcript: link.transcript,
                // The binding has no testCasesNegotiation.
                test_cases: None,
            },
        })
    }

    /// Drafts `doc`, then each counter-proposal this requester accepts, until one is agreed,
    /// one is refused, or `max_rounds` drafts were sent.
    async fn draft_rounds(
        &self,
        link: &mut RpcLink,
        doc: &ProtocolDoc,
        negotiation_id: &str,
        mut progress: impl FnMut(Progress),
    ) -> Result<(Outcome, Option<NegotiationResult>, u32), RequesterError> {
        let mut draft = doc.text().to_owned();
        for round in 1..=self.max_rounds {
            progress(Progress {
                stage: "drafting",
                round,
            });
            let answer = link
                .negotiate(json!({
                    "negotiation_id": negotiation_id,
                    "mode": Mode::DRAFTING,
                    "intent": intent(doc),
                    "candidateProtocols": [Artifact::of(&draft, None)],
                    "constraints": {"allowNaturalLanguageFallback": true},
                }))
                .await?;
            let result = match answer {
                Ok(result) => result,
                Err(e) if e.anp_code() == Some(AnpCode::NegotiationRejected) => {
                    return Ok((rejected("rejected", &e.message), None, round));
                }
                Err(e) => return Err(peer_error(&e)),
            };
            match result.status.as_str() {
                NegotiationResult::ACCEPTED
                    if result.agreed() == Some(ProtocolHash::of(&draft)) =>
                {
                    self.store.put_protocol(&draft).await?;
                    return Ok((Outcome::Agreed, Some(result), round));
                }
                NegotiationResult::NEEDS_MORE_INFORMATION => {
                    let Some(counter) = result.alternatives.first() else {
                        return Err(unexpected(&result));
                    };
                    progress(Progress {
                        stage: "evaluating counter-proposal",
                        round,
                    });
                    match judge_counter(doc, &counter.document) {
                        Verdict::Accept => draft = counter.document.clone(),
                        Verdict::Reject { reason }
                        | Verdict::Counter {
                            summary: reason, ..
                        } => {
                            return Ok((rejected("declined", &reason), None, round));
                        }
                    }
                }
                NegotiationResult::REJECTED => {
                    let reason = result.reason.as_deref().unwrap_or("no reason given");
                    return Ok((rejected("rejected", reason), None, round));
                }
                _ => return Err(unexpected(&result)),
            }
        }
        let reason = format!("no agreement within {} drafts", self.max_rounds);
        Ok((rejected("round_limit", &reason), None, self.max_rounds))
    }

    /// [`Requester::call`] over the binding: the selection confirmed (negotiated again when the
    /// provider no longer serves it), then the request over NLIP at `selected.url`.
    pub(super) async fn call_anp12(
        &self,
        url: &str,
        hash: &ProtocolHash,
        request: Value,
    ) -> Result<Called, RequesterError> {
        let (text, hash, _) = self
            .protocol_for(ProtocolRef::Hash(*hash), &request)
            .await?;
        let agreed = self
            .agree_anp12(url, &text, |_| {})
            .await
            .map_err(|e| RequesterError::Renegotiation(Box::new(e)))?;
        if let Outcome::Rejected { code, reason } = &agreed.negotiated.outcome {
            return Err(RequesterError::Rejected {
                hash: hash.to_string(),
                code: code.clone(),
                reason: reason.clone(),
            });
        }
        let fresh = agreed.negotiated.outcome == Outcome::Agreed;
        let mut called = self.call_at(&agreed, request).await?;
        if fresh {
            called.renegotiated = Some(agreed.negotiated);
        }
        Ok(called)
    }

    /// [`Requester::request`] over the binding: agreed (selected or drafted), called over NLIP,
    /// or asked in natural language at the peer's `/nlip` when no protocol can be agreed.
    pub(super) async fn request_anp12(
        &self,
        url: &str,
        protocol: ProtocolRef,
        request: Value,
        allow_fallback: bool,
        progress: impl FnMut(Progress),
    ) -> Result<Requested, RequesterError> {
        let (text, _, doc) = self.protocol_for(protocol, &request).await?;
        let reason = match self.agree_anp12(url, &text, progress).await {
            Ok(agreed) => match &agreed.negotiated.outcome {
                Outcome::Rejected { code, reason } => FallbackReason::Rejected {
                    code: code.clone(),
                    reason: reason.clone(),
                },
                Outcome::Agreed | Outcome::ZeroRtt => {
                    let called = self.call_at(&agreed, request).await?;
                    let fresh = agreed.negotiated.outcome == Outcome::Agreed;
                    return Ok(Requested::Protocol {
                        hash: agreed.negotiated.hash,
                        negotiated: fresh.then(|| Box::new(agreed.negotiated)),
                        called: Box::new(called),
                    });
                }
            },
            Err(e) => fallback_reason(e)?,
        };
        let nlip = crate::client::endpoint(&base_of(url))?.to_string();
        self.fall_back(&nlip, &doc, &request, reason, allow_fallback)
            .await
    }

    /// The agreed protocol called over NLIP where the result said.
    async fn call_at(&self, agreed: &Agreed, request: Value) -> Result<Called, RequesterError> {
        let url = agreed.call_url.clone().ok_or_else(|| {
            RequesterError::InvalidAnswer(
                "the accepted result names no end-point (selected.url)".into(),
            )
        })?;
        let nlip = Requester {
            wire: Wire::Nlip,
            ..self.clone()
        };
        nlip.call(&url, &agreed.negotiated.hash, request).await
    }
}

/// `url` without its path: the agent's base, whose `/nlip` takes natural language.
fn base_of(url: &str) -> String {
    let given = if crate::client::names_a_host(url) {
        format!("http://{url}")
    } else {
        url.to_owned()
    };
    match url::Url::parse(&given) {
        Ok(mut parsed) => {
            parsed.set_path("");
            parsed.set_query(None);
            parsed.to_string()
        }
        Err(_) => given,
    }
}

/// What this requester wants, in the draft's `intent` shape.
fn intent(doc: &ProtocolDoc) -> Value {
    let description = doc
        .sections()
        .requirements
        .as_deref()
        .map(str::trim)
        .unwrap_or("Agree the protocol offered in candidateProtocols.");
    json!({
        "name": "protocol_agreement",
        "description": description.chars().take(500).collect::<String>(),
        "intentTags": ["protocol.agreement"],
    })
}

fn rejected(code: &str, reason: &str) -> Outcome {
    Outcome::Rejected {
        code: code.to_owned(),
        reason: reason.to_owned(),
    }
}

fn peer_error(e: &RpcError) -> RequesterError {
    RequesterError::Peer {
        code: e
            .anp_code()
            .map_or_else(|| e.code.to_string(), |c| c.name().to_owned()),
        message: e.message.clone(),
    }
}

fn unexpected(result: &NegotiationResult) -> RequesterError {
    RequesterError::InvalidAnswer(format!(
        "anp.negotiate answered status {:?} without what that status carries",
        result.status
    ))
}
