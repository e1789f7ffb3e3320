//! The requester's run-time `fixErrorNegotiation`: an answer that breaks the agreed protocol is
//! reported to the provider (`negotiation::fix_report`), which fixes its handler or refuses.
//!
//! An answer breaks the protocol when it is not valid against the response schema, or when the
//! provider itself says its handler answered outside the schema (Parley's `invalid_response`
//! error: a Parley provider checks its handler's answers and does not send them). A call makes
//! at most one report: when the provider fixed its handler the request goes once more and that
//! answer is checked like the first, but a second bad answer is only an error. Over NLIP the
//! report is a control message naming the protocol; over seed 002's framing a meta frame on the
//! connection that agreed it.

use parley_anp::{ProtocolDoc, ProtocolHash};
use parley_nlip::{Content, ErrorInfo, Format, Message};
use serde_json::Value;

use super::{Requester, RequesterError};
use crate::client::NlipClient;
use crate::negotiation::anp::AnpLink;
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

/// Checks the provider's NLIP `reply` to a request of `doc`'s protocol.
pub(super) fn check(doc: &ProtocolDoc, reply: &Message) -> Checked {
    let answered = match (
        ErrorInfo::from_message(reply),
        &reply.format,
        &reply.content,
    ) {
        (Some(err), _, _) => Err(RequesterError::Peer {
            code: err.code,
            message: err.message,
        }),
        (None, Format::Structured, Content::Json(v)) => Ok(v.clone()),
        (None, _, _) => Err(RequesterError::InvalidAnswer("not structured JSON".into())),
    };
    check_answer(doc, answered)
}

/// Checks what the provider answered a request of `doc`'s protocol with.
fn check_answer(doc: &ProtocolDoc, answered: Result<Value, RequesterError>) -> Checked {
    match answered {
        Ok(answer) => match doc.validate_response(&answer) {
            Ok(()) => Checked::Answer(answer),
            Err(v) => Checked::Wrong(Wrong {
                violation: v.to_string(),
                answer: Some(answer),
            }),
        },
        Err(RequesterError::Peer { code, message }) if code == "invalid_response" => {
            Checked::Wrong(Wrong {
                violation: format!(
                    "the provider's handler answered outside the response schema: {message}"
                ),
                answer: None,
            })
        }
        Err(e) => Checked::Failed(e),
    }
}

/// What the provider said to the report of `wrong` about protocol `hash`: its account of the
/// fix, or the error the call ends with.
fn provider_fixed(
    hash: &ProtocolHash,
    wrong: &Wrong,
    reported: Result<FixAnswer, RequesterError>,
) -> Result<String, RequesterError> {
    match reported {
        Ok(FixAnswer::Fixed { description }) => Ok(description),
        Ok(FixAnswer::Refused { reason }) => Err(RequesterError::FixRefused {
            hash: hash.to_string(),
            violation: wrong.violation.clone(),
            reason,
        }),
        Err(e) => Err(RequesterError::InvalidAnswer(format!(
            "{} (the provider did not take the error report: {e})",
            wrong.violation
        ))),
    }
}

/// The answer to the request sent again after the provider fixed its handler (`provider`, its
/// account), checked: it must follow the protocol this time.
fn after_fix(
    again: Checked,
    wrong: Wrong,
    provider: String,
) -> Result<(Value, Fixed), RequesterError> {
    match again {
        Checked::Answer(answer) => Ok((
            answer,
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
    /// its handler sends `message` (the request) once more and checks that answer. The answer
    /// and how it was fixed, or why there is none.
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
        let provider = provider_fixed(&hash, &wrong, reported)?;
        let reply = client.send(message).await?.message;
        let (answer, fixed) = after_fix(check(doc, &reply), wrong, provider)?;
        Ok((answer, reply, fixed))
    }
}

/// The provider's answer to `request` on `link` (seed 002's framing), checked against the
/// protocol; one that breaks it is reported on the same connection (to a peer that answered the
/// hello: one that did not, such as AgentConnect, takes no meta-protocol after the negotiation),
/// and when the provider fixed its handler the request goes once more.
pub(super) async fn answer_over_anp(
    link: &mut AnpLink,
    doc: &ProtocolDoc,
    request: &Value,
) -> Result<(Value, Option<Fixed>), RequesterError> {
    let wrong = match check_answer(doc, link.application(request).await) {
        Checked::Answer(answer) => return Ok((answer, None)),
        Checked::Failed(e) => return Err(e),
        // A peer that did not answer the hello (AgentConnect) has no run-time error reports.
        Checked::Wrong(wrong) if !link.answered_hello() => {
            return Err(RequesterError::InvalidAnswer(wrong.violation));
        }
        Checked::Wrong(wrong) => wrong,
    };
    let hash = doc.hash();
    let report = FixReport::new(
        hash,
        request.clone(),
        wrong.answer.as_ref(),
        &wrong.violation,
    );
    let reported = match link.meta_exchange(&report.to_value()).await {
        Ok(answer) => answer
            .as_ref()
            .and_then(FixAnswer::from_value)
            .ok_or(RequesterError::NotSupported),
        Err(e) => Err(e),
    };
    let provider = provider_fixed(&hash, &wrong, reported)?;
    let again = check_answer(doc, link.application(request).await);
    let (answer, fixed) = after_fix(again, wrong, provider)?;
    Ok((answer, Some(fixed)))
}
