//! Questions the provider asks the requester about a proposal before deciding on it.
//!
//! The protocol reasoner may answer an evaluation with a question ([`Assessment::Ask`]): the
//! provider sends it as a `naturalLanguageNegotiation` `REQUEST` under a fresh `messageId`, keeps
//! it in the negotiation's state ([`Questions`]), and waits; the session stays where it was, the
//! proposal awaiting its verdict. The requester's `RESPONSE` with the same `messageId` evaluates
//! the proposal again, every question and answer so far given to the reasoner as context. A
//! `RESPONSE` naming any other `messageId` is an error (`unknown_message_id`) refused before it
//! is recorded: the negotiation stays as it was.
//!
//! Only a peer that takes `naturalLanguageNegotiation` (its hello announced it, or it sent none)
//! is asked. Questions are bounded: at most `negotiation.max_questions` per negotiation, and each one is a
//! round of `negotiation.max_rounds` ([`parley_anp::ProviderSession::question_asked`]); once
//! neither allows another, the reasoner is told it may not ask and must decide.
//!
//! [`Assessment::Ask`]: parley_reasoner::Assessment::Ask

use parley_anp::messages::{NaturalLanguageNegotiation, NlMessageType};
use parley_anp::{MetaMessage, ProtocolHash, Step};
use parley_reasoner::{Exchange, Inquiry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Provider;
use super::driver::{Turn, evaluated};
use super::state::{Negotiation, NegotiationState};
use crate::error::ApiError;

/// What the protocol reasoner made of a proposal.
pub(super) enum Assessed {
    Verdict(parley_anp::Verdict),
    /// A question for the requester first.
    Question(String),
}

/// The questions of one negotiation: those answered, and the one waiting for its answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Questions {
    /// Asked and answered, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered: Vec<Exchange>,
    /// The question sent and not yet answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
}

impl Questions {
    pub fn is_empty(&self) -> bool {
        self.answered.is_empty() && self.pending.is_none()
    }

    /// Questions asked so far, answered or not.
    fn asked(&self) -> usize {
        self.answered.len() + usize::from(self.pending.is_some())
    }
}

/// A question waiting for the requester's answer, with the proposal it is about.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Pending {
    pub message_id: String,
    pub question: String,
    /// The proposal awaiting its verdict: what the answer has it evaluated again.
    pub text: String,
    pub hash: ProtocolHash,
}

impl Provider {
    /// Evaluates the proposal `text` (`hash`) with what the requester answered so far: the
    /// session's next step, or `None` when a question went to the requester instead.
    pub(super) async fn consider(
        &self,
        negotiation: &mut Negotiation,
        text: &str,
        hash: ProtocolHash,
        turn: &mut Turn,
    ) -> Result<Option<Step>, ApiError> {
        negotiation.proposed = Some(hash);
        let may_ask = turn.peer_answers
            && negotiation.questions.asked() < self.limits.max_questions as usize
            && negotiation.session.rounds() < negotiation.session.config().max_rounds;
        let inquiry = Inquiry {
            exchanges: &negotiation.questions.answered,
            may_ask,
        };
        let question = match self
            .evaluate(text, &negotiation.meter, turn, inquiry)
            .await?
        {
            Assessed::Verdict(verdict) => {
                turn.summary.push(evaluated(&hash, &verdict));
                return Ok(Some(negotiation.session.evaluated(&hash, verdict)));
            }
            Assessed::Question(question) => question,
        };
        if let Err(limit) = negotiation.session.question_asked() {
            // `may_ask` saw a round left, so this is the session refusing out of order.
            return Ok(Some(negotiation.session.evaluated(
                &hash,
                parley_anp::Verdict::Reject {
                    reason: limit.to_string(),
                },
            )));
        }
        let message_id = uuid::Uuid::new_v4().to_string();
        turn.summary.push(format!(
            "Before deciding on protocol {hash}, a question (messageId {message_id}): {question}"
        ));
        turn.outbox.push(MetaMessage::natural_language(
            NlMessageType::Request,
            message_id.clone(),
            question.clone(),
        ));
        negotiation.questions.pending = Some(Pending {
            message_id,
            question,
            text: text.to_owned(),
            hash,
        });
        Ok(None)
    }

    /// The requester's `RESPONSE` `nl`: the answer to the pending question evaluates its
    /// proposal again; any other `messageId` is an error and changes nothing.
    pub(super) async fn answered(
        &self,
        negotiation: &mut Negotiation,
        nl: NaturalLanguageNegotiation,
        turn: &mut Turn,
    ) -> Result<Option<Step>, ApiError> {
        let pending = match negotiation.questions.pending.take() {
            Some(p) if p.message_id == nl.message_id => p,
            other => {
                let err = unknown_message_id(&nl.message_id, other.as_ref());
                negotiation.questions.pending = other;
                return Err(err);
            }
        };
        turn.summary.push(format!(
            "The peer answered question {}.",
            pending.message_id
        ));
        negotiation.questions.answered.push(Exchange {
            question: pending.question,
            answer: nl.message,
        });
        self.consider(negotiation, &pending.text, pending.hash, turn)
            .await
    }
}

/// Refuses `value` when it is a `RESPONSE` that answers no open question of the conversation's
/// negotiation, before anything is recorded for it or a negotiation started over it: the
/// negotiation stays as it was, waiting for the answer (or the peer's next proposal).
pub(super) fn check_response(state: &NegotiationState, value: &Value) -> Result<(), ApiError> {
    let Ok(MetaMessage::NaturalLanguageNegotiation(nl)) = MetaMessage::from_value(value.clone())
    else {
        return Ok(());
    };
    if nl.message_type != NlMessageType::Response {
        return Ok(());
    }
    let pending = state.open().and_then(|n| n.questions.pending.as_ref());
    match pending {
        Some(p) if p.message_id == nl.message_id => Ok(()),
        other => Err(unknown_message_id(&nl.message_id, other)),
    }
}

/// A `RESPONSE` that answers no question of the negotiation.
fn unknown_message_id(got: &str, pending: Option<&Pending>) -> ApiError {
    let open = match pending {
        Some(p) => format!("the open question is messageId {:?}", p.message_id),
        None => "no question of this provider is waiting for an answer".to_owned(),
    };
    ApiError::Negotiation {
        code: "unknown_message_id".to_owned(),
        message: format!(
            "naturalLanguageNegotiation RESPONSE with messageId {got:?} answers no question: {open}"
        ),
    }
}
