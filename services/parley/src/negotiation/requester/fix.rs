//! The requester's run-time `fixErrorNegotiation`: an answer that breaks the agreed protocol is
//! reported to the provider (`negotiation::fix_report`), which fixes its handler or refuses.
//!
//! An answer breaks the protocol when it is not valid against the response schema, or when the
//! provider itself says its handler answered outside the schema (Parley's `invalid_response`
//! error: a Parley provider checks its handler's answers and does not send them). A call makes
//! at most one report: when the provider fixed its handler the request goes once more and that
//! answer is checked like the first, but a second bad answer is only an error.

use parley_anp::{ProtocolDoc, ProtocolHash};
use parley_nlip::{Content, ErrorInfo, Format, Message};
use serde_json::Value;

use super::{Requester, RequesterError};
use crate::client::NlipClient;
use crate::negotiation::fix_report::{FixAnswer, FixReport};

/// An answer of an agreed protocol, checked.
pub(super) enum Checked {
    /// It follows the protocol.
    Answer(Value),
    /// It breaks the protocol: the provider may be asked to fix its handler.
    Wrong(Wrong),
    /// Any other failure (the provider answered with another error, or not in JSON).
    Failed(RequesterError),
}

/// An answer that breaks the protocol.
#[derive(Debug)]
pub(super) struct Wrong {
    /// What is wrong, in a line.
    pub violation: String,
    /// The answer, when there was one.
    pub answer: Option<Value>,
}

/// How the provider fixed its handler after an answer broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    /// What was wrong with the first answer.
    pub violation: String,
    /// The provider's account of the fix.
    pub provider: String,
}

/// Checks the provider's `reply` to a request of `doc`'s protocol.
pub(super) fn check(doc: &ProtocolDoc, reply: &Message) -> Checked {
    if let Some(err) = ErrorInfo::from_message(reply) {
        if err.code == "invalid_response" {
            return Checked::Wrong(Wrong {
                violation: format!(
                    "the provider's handler answered outside the response schema: {}",
                    err.message
                ),
                answer: None,
            });
        }
        return Checked::Failed(RequesterError::Peer {
            code: err.code,
            message: err.message,
        });
    }
    let answer = match (&reply.format, &reply.content) {
        (Format::Structured, Content::Json(v)) => v.clone(),
        _ => {
            return Checked::Failed(RequesterError::InvalidAnswer("not structured JSON".into()));
        }
    };
    match doc.validate_response(&answer) {
        Ok(()) => Checked::Answer(answer),
        Err(v) => Checked::Wrong(Wrong {
            violation: v.to_string(),
            answer: Some(answer),
        }),
    }
}

impl Requester {
    /// Reports to the provider behind `client` that its answer to `request` of protocol `hash`
    /// broke the protocol as `violation` says (`answer`: what it answered, if anything), and
    /// returns what the provider said: [`FixAnswer::Fixed`] when a fixed handler serves now,
    /// [`FixAnswer::Refused`] with its reasons. A provider that does not take the report (an
    /// error, or no `fixErrorNegotiation` in its answer) is [`RequesterError::Peer`] or
    /// [`RequesterError::NotSupported`].
    pub async fn report_error(
        &self,
        client: &mut NlipClient,
        hash: &ProtocolHash,
        request: &Value,
        answer: Option<&Value>,
        violation: &str,
    ) -> Result<FixAnswer, RequesterError> {
        let report = FixReport::new(*hash, request.clone(), answer, violation);
        let reply = client.send(&report.to_message()).await?.message;
        if let Some(answer) = FixAnswer::from_reply(&reply) {
            return Ok(answer);
        }
        Err(match ErrorInfo::from_message(&reply) {
            Some(err) => RequesterError::Peer {
                code: err.code,
                message: err.message,
            },
            None => RequesterError::NotSupported,
        })
    }

    /// The first answer broke the protocol (`wrong`): reports it, and when the provider fixed
    /// its handler sends `message` (the request) once more and checks that answer. The answer and
    /// how it was fixed, or why there is none.
    pub(super) async fn after_wrong_answer(
        &self,
        client: &mut NlipClient,
        doc: &ProtocolDoc,
        (message, request): (&Message, &Value),
        wrong: Wrong,
    ) -> Result<(Value, Message, Fixed), RequesterError> {
        let hash = doc.hash();
        let reported = self
            .report_error(
                client,
                &hash,
                request,
                wrong.answer.as_ref(),
                &wrong.violation,
            )
            .await;
        let provider = match reported {
            Ok(FixAnswer::Fixed { description }) => description,
            Ok(FixAnswer::Refused { reason }) => {
                return Err(RequesterError::FixRefused {
                    hash: hash.to_string(),
                    violation: wrong.violation,
                    reason,
                });
            }
            Err(e) => {
                return Err(RequesterError::InvalidAnswer(format!(
                    "{} (the provider did not take the error report: {e})",
                    wrong.violation
                )));
            }
        };
        let reply = client.send(message).await?.message;
        match check(doc, &reply) {
            Checked::Answer(answer) => Ok((
                answer,
                reply,
                Fixed {
                    violation: wrong.violation,
                    provider,
                },
            )),
            Checked::Wrong(again) => Err(RequesterError::InvalidAnswer(format!(
                "{} (after the provider fixed its handler for: {})",
                again.violation, wrong.violation
            ))),
            Checked::Failed(e) => Err(e),
        }
    }
}
