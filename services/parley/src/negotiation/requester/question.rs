//! A provider's question about the requester's proposal (`naturalLanguageNegotiation`
//! `REQUEST`), answered with a `RESPONSE` under the same `messageId`: by the requester's model
//! ([`Requester::answerer`]) from its protocol document, or without one by
//! [`parley_reasoner::requester_answer`], the document's requirement and that the requester
//! knows nothing else. Whatever the framing, the answer goes with the loop's next exchange.
//!
//! A provider gets at most [`Requester::max_rounds`] answers in one negotiation: one that keeps
//! asking is sent `rejected`, and the negotiation ends (`too_many_questions`).

use parley_anp::MetaMessage;
use parley_anp::messages::{MetaStatus, NaturalLanguageNegotiation, NlMessageType};
use parley_store::Direction;

use super::{MetaChannel, Next, Outcome, Progress, RequesterError, Run};

impl<C: MetaChannel, P: FnMut(Progress)> Run<'_, C, P> {
    /// Answers the provider's question `nl` (a `REQUEST`); a `RESPONSE` asks nothing.
    pub(super) async fn answer_question(
        &mut self,
        nl: NaturalLanguageNegotiation,
    ) -> Result<Next, RequesterError> {
        if nl.message_type != NlMessageType::Request {
            return Ok(Next::Peer);
        }
        if self.answers_given() >= self.requester.max_rounds as usize {
            let reason = format!(
                "the provider asked more than {} questions",
                self.requester.max_rounds
            );
            // The provider is told, so that its negotiation ends too; its answer does not
            // matter any more.
            let seq = self
                .session
                .last_sequence_id()
                .map_or(0, |s| s.saturating_add(1));
            let end = MetaMessage::protocol_negotiation(
                seq,
                "",
                Some(reason.clone()),
                MetaStatus::Rejected,
            );
            let _ = self.channel.notify("Negotiation ended.", &[end]).await;
            let outcome = Outcome::Rejected {
                code: "too_many_questions".to_owned(),
                reason,
            };
            return Ok(Next::Done(self.doc.hash(), outcome));
        }
        self.report("answering the provider's question");
        let answer = match &self.requester.answerer {
            Some(model) => model
                .answer_question(self.doc, &nl.message)
                .await
                .map_err(RequesterError::Reasoner)?,
            None => parley_reasoner::requester_answer(self.doc, &nl.message),
        };
        self.outbox.push(MetaMessage::natural_language(
            NlMessageType::Response,
            nl.message_id,
            answer,
        ));
        Ok(Next::Peer)
    }

    /// The `RESPONSE`s this side sent in the negotiation so far (each left with an exchange).
    fn answers_given(&self) -> usize {
        self.channel
            .transcript
            .iter()
            .filter(|(direction, m)| {
                *direction == Direction::Outbound
                    && m["action"] == "naturalLanguageNegotiation"
                    && m["type"] == "RESPONSE"
            })
            .count()
    }
}
