//! The provider's turn: the meta-protocol messages of one inbound message, answered with the
//! [`ProviderSession`] state machine of the conversation's negotiation.

use parley_anp::messages::NlMessageType;
use parley_anp::{
    FixVerdict, MetaMessage, NegotiationError, ProtocolHash, ProviderSession, Step, Verdict,
};
use parley_reasoner::{Mapping, UsageMeter};
use parley_store::{Direction, NewNegotiation, Role};
use serde_json::Value;
use tracing::Instrument as _;

use super::build::{Built, Source};
use super::inquiry::Assessed;
use super::state::{self, Negotiation, NegotiationState};
use super::{Provider, reasoner_error};
use crate::audit::Actor;
use crate::error::ApiError;
use crate::metrics;

/// What one turn of the provider answers, whatever framing carries it.
#[derive(Debug)]
pub struct MetaTurn {
    /// The meta-protocol messages to send to the peer, in order.
    pub messages: Vec<MetaMessage>,
    /// What happened, in a sentence or a few, for people reading the exchange.
    pub summary: String,
    /// A rule the peer broke: the negotiation ended over it (`messages` says so to the peer),
    /// and the framing answers with an error.
    pub violation: Option<NegotiationError>,
    /// The protocol this turn made active for the peer: the negotiation ended agreed and both
    /// sides generated code, or a hello selected a protocol served here (0-RTT). A framing
    /// whose application messages name no protocol (seed 002's) serves this one from then on.
    pub agreed: Option<ProtocolHash>,
}

/// Per-turn working state of [`Provider::handle_meta`].
#[derive(Default)]
pub(super) struct Turn {
    /// The negotiation's messages to the peer, in order.
    pub outbox: Vec<MetaMessage>,
    /// Answers to hellos, sent ahead of the outbox.
    pub hello_replies: Vec<MetaMessage>,
    /// What happened, for the human-readable part of the answer.
    pub summary: Vec<String>,
    /// The mapping the reasoner accepted the protocol with, for the handler's generation.
    mapping: Option<Mapping>,
    /// A rule break by the peer: answered as an error.
    pub violation: Option<NegotiationError>,
    /// Whether the peer takes `fixErrorNegotiation` (its hello announced it, or it sent none).
    peer_fixes_errors: bool,
    /// Whether the peer's hello announced `testCasesNegotiation` (see `cases`).
    pub peer_takes_cases: bool,
    /// Whether the peer takes `naturalLanguageNegotiation` requests (as above): questions.
    pub peer_answers: bool,
    /// The protocol made active in this turn (see [`MetaTurn::agreed`]).
    pub agreed: Option<ProtocolHash>,
}

impl Provider {
    /// Answers the meta-protocol messages `values` that `peer` sent in one message of the
    /// negotiation kept in conversation `cid` (the session key: the framing that carries the
    /// negotiation chooses it and creates the conversation).
    pub async fn handle_meta(
        &self,
        cid: &str,
        peer: &str,
        values: Vec<Value>,
    ) -> Result<MetaTurn, ApiError> {
        let state::Loaded { mut state, version } = state::load(&self.store, cid).await?;
        let mut turn = Turn::default();
        let mut hello_seen = false;
        for value in values {
            metrics::negotiation_messages("inbound", 1);
            let parsed = MetaMessage::from_value(value.clone());
            let action = parsed.as_ref().map_or("invalid", MetaMessage::kind);
            let span = tracing::info_span!("negotiation.round", peer, conversation = cid, action);
            let round = async {
                match parsed {
                    Ok(MetaMessage::SourceHello(hello)) => {
                        hello_seen = true;
                        self.answer_hello(hello, value, &mut state, &mut turn).await
                    }
                    Ok(MetaMessage::DestinationHello(_)) => {
                        state.hello_transcript.push((Direction::Inbound, value));
                        Ok(())
                    }
                    _ => {
                        let well_formed = parsed.is_ok();
                        self.receive(cid, peer, value, well_formed, &mut state, &mut turn)
                            .await
                    }
                }
            };
            round.instrument(span).await?;
        }
        // A hello after this turn's first negotiation message belongs to that negotiation; one
        // after a negotiation ended waits for the next.
        if let Some(id) = state.open().map(|n| n.negotiation_id) {
            self.transcribe(id, state.hello_transcript.drain(..))
                .await?;
        }
        metrics::negotiation_messages("outbound", turn.hello_replies.len() + turn.outbox.len());
        if let Some(negotiation) = &state.negotiation {
            let sent = turn
                .outbox
                .iter()
                .map(|m| (Direction::Outbound, m.to_value()));
            // Collected first: a borrowing iterator held across the awaits would make the
            // future `!Send`.
            let sent: Vec<_> = sent.collect();
            self.transcribe(negotiation.negotiation_id, sent).await?;
        }
        if state.negotiation.is_some() || hello_seen {
            state::save(&self.store, cid, version, &state).await?;
        }
        Ok(turn.finish())
    }

    /// One negotiation message (`well_formed` when it parsed as one): it goes to the open
    /// negotiation, or starts a new one.
    async fn receive(
        &self,
        cid: &str,
        peer: &str,
        value: Value,
        well_formed: bool,
        state: &mut NegotiationState,
        turn: &mut Turn,
    ) -> Result<(), ApiError> {
        super::inquiry::check_response(state, &value)?;
        let fresh = match &state.negotiation {
            // A peer's `rejected` after the end echoes it: it goes to the negotiation it ends.
            Some(n) => n.session.is_closed() && well_formed && !ends_negotiation(&value),
            None => true,
        };
        if fresh {
            let record = self
                .store
                .start_negotiation(NewNegotiation {
                    conversation_id: cid.to_owned(),
                    role: Role::Provider,
                    peer: peer.to_owned(),
                })
                .await?;
            tracing::info!(negotiation = %record.id, peer, "negotiation started");
            let actor = Actor::current_or(peer);
            self.audit.negotiation_started(&actor, record.id, cid).await;
            state.negotiation = Some(Negotiation::begun(record.id, self.limits.max_rounds));
        }
        turn.peer_fixes_errors =
            state.peer_supports(parley_anp::messages::capability::FIX_ERROR_NEGOTIATION);
        turn.peer_takes_cases = state.peer_takes_cases();
        turn.peer_answers =
            state.peer_supports(parley_anp::messages::capability::NATURAL_LANGUAGE_NEGOTIATION);
        let negotiation = state
            .negotiation
            .as_mut()
            .expect("a negotiation exists from here on");
        self.transcribe(negotiation.negotiation_id, state.hello_transcript.drain(..))
            .await?;
        self.store
            .append_transcript(negotiation.negotiation_id, Direction::Inbound, &value)
            .await?;
        let step = negotiation.session.receive_value(value);
        let driven = self.drive(negotiation, step, turn, peer).await;
        // Settled even when the turn failed: the model calls were made either way.
        self.settle_usage(negotiation).await;
        driven
    }

    /// Runs session steps until the session waits for the peer or ends.
    async fn drive(
        &self,
        negotiation: &mut Negotiation,
        mut step: Step,
        turn: &mut Turn,
        peer: &str,
    ) -> Result<(), ApiError> {
        loop {
            step = match step {
                Step::Send(m) => {
                    turn.outbox.push(m);
                    return Ok(());
                }
                Step::Wait | Step::TestCasesRejected { .. } => return Ok(()),
                Step::FixDeclined { .. } if negotiation.handler_id.is_some() => return Ok(()),
                Step::FixDeclined { reason } => fix_declined(negotiation, &reason, turn),
                Step::Evaluate { text, hash } => {
                    match self.consider(negotiation, &text, hash, turn).await? {
                        Some(step) => step,
                        None => return Ok(()),
                    }
                }
                Step::Accepted { text, send, .. } => {
                    turn.outbox.extend(send);
                    self.accepted(negotiation, &text, turn).await?
                }
                Step::Ready { hash, send } => {
                    turn.outbox.extend(send);
                    self.activate(negotiation, &hash, peer).await?;
                    turn.agreed = Some(hash);
                    turn.summary.push(format!(
                        "Protocol {hash} is active: send application messages with a `protocol` token."
                    ));
                    return Ok(());
                }
                Step::Rejected { reason, send } => {
                    turn.outbox.extend(send);
                    self.close(negotiation, &reason).await?;
                    turn.ended(reason);
                    return Ok(());
                }
                Step::EvaluateTestCases { test_cases } => {
                    let verdict = self.evaluate_test_cases(negotiation, &test_cases).await?;
                    negotiation.session.test_cases_evaluated(verdict)
                }
                Step::TestCasesAgreed { send, .. } => {
                    turn.outbox.extend(send);
                    turn.summary
                        .push("Test cases agreed; the handler passes them.".into());
                    return Ok(());
                }
                Step::FixError { description } => {
                    self.peer_reported_error(negotiation, &description).await?
                }
                // An error report of ours on the peer's messages: nothing waits on it.
                Step::FixAccepted { .. } if negotiation.disputed.is_none() => return Ok(()),
                Step::FixAccepted { .. } => {
                    let result = self.accept_disputed(negotiation).await?;
                    turn.summary.push(FIX_ACCEPTED.to_owned());
                    negotiation.session.code_generated(result)
                }
                Step::Regenerate { description, send } => {
                    turn.outbox.extend(send);
                    let result = self.regenerate(negotiation, &description).await?;
                    turn.summary
                        .push("Handler regenerated from the error report.".to_owned());
                    negotiation.session.code_generated(result)
                }
                Step::Converse(nl) if nl.message_type == NlMessageType::Request => {
                    turn.outbox
                        .push(self.converse(&nl, &negotiation.meter).await?);
                    return Ok(());
                }
                Step::Converse(nl) => match self.answered(negotiation, nl, turn).await? {
                    Some(step) => step,
                    None => return Ok(()),
                },
            };
        }
    }

    /// The peer's `fixErrorNegotiation`: rebuild the handler from its error report, and fix
    /// (a verified rebuild) or decline with the reason.
    async fn peer_reported_error(
        &self,
        negotiation: &mut Negotiation,
        description: &str,
    ) -> Result<Step, ApiError> {
        let verdict = match self.rebuild(negotiation, description).await? {
            Built::Verified => FixVerdict::Fix,
            Built::Failed(reason) | Built::PeerExpectation(reason) => {
                FixVerdict::Decline { reason }
            }
        };
        Ok(negotiation.session.fix_evaluated(verdict))
    }

    /// The protocol `text` is agreed: keep it, build its handler, tell the session how that went.
    async fn accepted(
        &self,
        negotiation: &mut Negotiation,
        text: &str,
        turn: &mut Turn,
    ) -> Result<Step, ApiError> {
        self.store.put_protocol(text).await?;
        let source = Source::Generate(turn.mapping.take());
        let built = self.build_handler(text, source, negotiation).await?;
        let verified = matches!(built, Built::Verified);
        let next = turn.code_generated(&mut negotiation.session, built);
        Ok(if verified {
            self.propose_generated(negotiation, turn, next)
        } else {
            next
        })
    }

    /// The handler regenerated from the peer's error report. A fix the peer asked for was built
    /// and verified already when the report was evaluated.
    async fn regenerate(
        &self,
        negotiation: &mut Negotiation,
        description: &str,
    ) -> Result<Result<(), String>, ApiError> {
        if negotiation.handler_id.is_some() {
            return Ok(Ok(()));
        }
        Ok(self.rebuild(negotiation, description).await?.into_result())
    }

    /// The reasoner's verdict on a proposal, or its question for the peer (`inquiry`: what
    /// was asked and answered, and whether it may ask); a backend failure is an error for the
    /// caller, never an empty or default verdict.
    pub(super) async fn evaluate(
        &self,
        text: &str,
        meter: &UsageMeter,
        turn: &mut Turn,
        inquiry: parley_reasoner::Inquiry<'_>,
    ) -> Result<Assessed, ApiError> {
        let doc = match read_proposal(text, self.limits.doc_limits()).await {
            Ok(doc) => doc,
            Err(e) => {
                return Ok(Assessed::Verdict(Verdict::Reject {
                    reason: format!("the protocol document is not usable: {e}"),
                }));
            }
        };
        metrics::reasoner_call(self.reasoner.backend(), "evaluate");
        let assessment = self
            .protocol_reasoner(meter)
            .assess(&doc, &self.specs, inquiry)
            .await
            .map_err(reasoner_error)?;
        let evaluation = match assessment {
            parley_reasoner::Assessment::Decided(evaluation) => evaluation,
            parley_reasoner::Assessment::Ask { question } => {
                return Ok(Assessed::Question(question));
            }
        };
        let verdict = evaluation.verdict();
        if let parley_reasoner::Evaluation::Accept { mapping } = evaluation {
            turn.mapping = Some(mapping);
        }
        if !doc.inferred().is_empty() {
            // The document left these open; the peer sees how they were read.
            turn.summary.push(format!(
                "Read from the document's examples: {}.",
                doc.inferred().join("; ")
            ));
        }
        Ok(Assessed::Verdict(verdict))
    }

    /// The natural-language reasoner's answer to a `naturalLanguageNegotiation` request.
    async fn converse(
        &self,
        nl: &parley_anp::messages::NaturalLanguageNegotiation,
        meter: &UsageMeter,
    ) -> Result<MetaMessage, ApiError> {
        let answer = parley_reasoner::metered(&self.nl, meter)
            .answer(parley_reasoner::NlRequest {
                text: nl.message.clone(),
                language: parley_nlip::DEFAULT_LANGUAGE.into(),
                history: Vec::new(),
            })
            .await
            .map_err(|e| {
                tracing::warn!(
                    backend = self.nl.backend(),
                    code = e.code(),
                    error = %crate::error::chain(&e),
                    "the reasoner could not answer a naturalLanguageNegotiation request"
                );
                ApiError::Reasoner {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                }
            })?;
        metrics::reasoner_call(self.nl.backend(), "answer");
        Ok(MetaMessage::natural_language(
            NlMessageType::Response,
            nl.message_id.clone(),
            answer.text,
        ))
    }
}

impl Turn {
    /// The negotiation ended without agreement: a rule break by the peer is answered as an
    /// error.
    fn ended(&mut self, reason: NegotiationError) {
        self.summary.push(format!("Negotiation ended: {reason}"));
        if is_violation(&reason) {
            self.violation = Some(reason);
        }
    }

    /// Tells the session how building the agreed protocol's handler went.
    fn code_generated(&mut self, session: &mut ProviderSession, built: Built) -> Step {
        match built {
            Built::Verified => {
                self.summary
                    .push("Handler generated and verified against the test cases.".to_owned());
                session.code_generated(Ok(()))
            }
            Built::Failed(why) => {
                self.summary
                    .push(format!("Handler generation failed: {why}"));
                session.code_generated(Err(why))
            }
            Built::PeerExpectation(why) if !self.peer_fixes_errors => {
                self.summary
                    .push(format!("Handler verification failed: {why}"));
                session.code_generated(Err(why))
            }
            Built::PeerExpectation(why) => {
                self.summary.push("The handler's answers follow the protocol but not the test expectations; please check them.".to_owned());
                session.report_error(why)
            }
        }
    }

    /// What the turn answers: hello answers first, then the negotiation's messages.
    fn finish(mut self) -> MetaTurn {
        let summary = if self.summary.is_empty() {
            "Meta-protocol message processed.".to_owned()
        } else {
            self.summary.join(" ")
        };
        self.hello_replies.append(&mut self.outbox);
        MetaTurn {
            messages: self.hello_replies,
            summary,
            violation: self.violation,
            agreed: self.agreed,
        }
    }
}

/// Reads a peer's proposal within `limits`, on a blocking thread: compiling its schemas is the
/// CPU-heavy part of a negotiation turn, and there the request's deadline, a timer on the
/// request's task, still answers the peer when it passes.
async fn read_proposal(
    text: &str,
    limits: parley_anp::DocLimits,
) -> Result<parley_anp::ProtocolDoc, parley_anp::ProtocolError> {
    let text = text.to_owned();
    let read =
        tokio::task::spawn_blocking(move || parley_anp::ProtocolDoc::parse_within(text, &limits));
    match read.await {
        Ok(result) => result,
        // The blocking task only fails when it panicked: let the panic continue.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// What the summary says of a verdict on protocol `hash`.
pub(super) fn evaluated(hash: &parley_anp::ProtocolHash, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Accept => format!("Protocol {hash} accepted."),
        Verdict::Counter { .. } => {
            format!("Protocol {hash} cannot be served as written; counter-proposal attached.")
        }
        Verdict::Reject { reason } => format!("Protocol {hash} rejected: {reason}"),
    }
}

/// Whether `value` is a `protocolNegotiation` that ends a negotiation (`rejected`, `timeout`).
fn ends_negotiation(value: &Value) -> bool {
    value.get("action").and_then(Value::as_str) == Some("protocolNegotiation")
        && matches!(
            value.get("status").and_then(Value::as_str),
            Some("rejected" | "timeout")
        )
}

/// Rule breaks by the peer are answered as errors; other endings are normal replies.
fn is_violation(e: &NegotiationError) -> bool {
    matches!(
        e,
        NegotiationError::Sequence { .. }
            | NegotiationError::RoundLimit { .. }
            | NegotiationError::UnevaluatedAcceptance { .. }
            | NegotiationError::InvalidMessage { .. }
            | NegotiationError::OutOfTurn { .. }
            | NegotiationError::SessionClosed
            | NegotiationError::UnsupportedVersion { .. }
    )
}

const FIX_ACCEPTED: &str =
    "The peer accepted the handler's answers in place of its test expectations.";

/// The peer keeps expectations the verified answers do not meet: no handler can be activated for
/// this protocol.
fn fix_declined(negotiation: &mut Negotiation, reason: &str, turn: &mut Turn) -> Step {
    negotiation.disputed = None;
    turn.summary
        .push(format!("The peer keeps its test expectations: {reason}"));
    let why = format!("test expectations not met: {reason}");
    negotiation.session.code_generated(Err(why))
}
