//! The run-time `fixErrorNegotiation`: a requester reports that an answer of an active protocol
//! breaks the protocol, and the provider answers whether it fixed its handler. The values both
//! roles use, and their NLIP form.
//!
//! Inside a negotiation `fixErrorNegotiation` belongs to the negotiation's conversation; after
//! one, it names the protocol it is about the way an application message does: a **control**
//! message carrying the `fixErrorNegotiation` (status `negotiating`, labelled `anp`) and a
//! `token` submessage of subformat `protocol` naming the hash. The message also carries, as
//! the field `request` of the meta-protocol object (a field the seed does not define, ignored by
//! peers that do not read it), the request whose answer was wrong: the provider runs it again,
//! so it is data, not prose to parse. The `errorDescription` names the protocol, the request
//! and the violation in words, for people and for the model that fixes the handler.
//!
//! The provider answers with a control message carrying a `fixErrorNegotiation` of status
//! `accepted` (a new handler version of the same protocol serves; call again) or `rejected`
//! (its `errorDescription` says why), the protocol token echoed.
//!
//! On seed 002's framing (`/anp`) the same meta-protocol object travels in a meta frame on a
//! connection that agreed the protocol (its messages name no protocol); the `request` field
//! tells it from a negotiation's `fixErrorNegotiation` ([`FixReport::is_report`]), and the
//! answer is a meta frame.

use parley_anp::messages::MetaStatus;
use parley_anp::{MetaMessage, ProtocolHash};
use parley_nlip::Message;
use serde_json::Value;

use super::nlip::{meta_values, protocol_of, protocol_token, wrap, wrap_values};
use crate::error::ApiError;

/// The field of a run-time `fixErrorNegotiation` that holds the reported request.
pub const REQUEST_FIELD: &str = "request";

/// A requester's report that the answer to `request` of protocol `hash` is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FixReport {
    pub hash: ProtocolHash,
    /// The request whose answer was wrong, as it was sent.
    pub request: Value,
    /// What was wrong, in words (`errorDescription`).
    pub description: String,
}

/// The provider's answer to a [`FixReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FixAnswer {
    /// The handler was at fault and a fixed version of it serves the protocol now.
    Fixed { description: String },
    /// No new handler: the answer was right, or the handler could not be fixed.
    Refused { reason: String },
}

impl FixReport {
    /// The report for an answer (`answer`, when there was one) to `request` that broke
    /// protocol `hash` as `violation` says.
    pub fn new(
        hash: ProtocolHash,
        request: Value,
        answer: Option<&Value>,
        violation: &str,
    ) -> FixReport {
        let answered = match answer {
            Some(answer) => format!("The answer received:\n\n```json\n{answer}\n```\n"),
            None => "No answer was received.\n".to_owned(),
        };
        let description = format!(
            "# Error Description\n\nAn answer of protocol {hash} does not follow the protocol: \
             {violation}\n\nThe request:\n\n```json\n{request}\n```\n\n{answered}"
        );
        FixReport {
            hash,
            request,
            description,
        }
    }

    /// The meta-protocol object: `fixErrorNegotiation`, `negotiating`, with the request.
    pub fn to_value(&self) -> Value {
        let mut value =
            MetaMessage::fix_error_negotiation(&self.description, MetaStatus::Negotiating)
                .to_value();
        value[REQUEST_FIELD] = self.request.clone();
        value
    }

    /// The report as an NLIP control message naming its protocol.
    pub fn to_message(&self) -> Message {
        let summary = format!(
            "An answer of protocol {} does not follow the protocol; please check the handler.",
            self.hash
        );
        wrap_values(summary, [self.to_value()]).with_submessage(protocol_token(&self.hash))
    }

    /// The report `message` carries, when it is one: a control message with a `protocol` token
    /// whose only meta-protocol message (`meta`) is a `fixErrorNegotiation`. `Err` when it is
    /// one but unusable (a bad token, a status other than `negotiating`, no request).
    pub fn read(message: &Message, meta: &[Value]) -> Option<Result<FixReport, ApiError>> {
        let [value] = meta else { return None };
        if !message.is_control()
            || value.get("action").and_then(Value::as_str) != Some("fixErrorNegotiation")
        {
            return None;
        }
        let hash = protocol_of(message)?;
        Some(
            hash.map_err(ApiError::BadProtocolToken)
                .and_then(|hash| FixReport::from_value(hash, value)),
        )
    }

    /// Whether meta-protocol object `value` is a run-time report: a `fixErrorNegotiation`
    /// carrying a request. On a framing whose messages name no protocol (seed 002's) this, on a
    /// connection that agreed one, tells it from the `fixErrorNegotiation` of a negotiation.
    pub fn is_report(value: &Value) -> bool {
        value.get("action").and_then(Value::as_str) == Some("fixErrorNegotiation")
            && value.get(REQUEST_FIELD).is_some()
    }

    /// The report `value` (a `fixErrorNegotiation`) makes about protocol `hash`; `Err` when it
    /// is unusable (a status other than `negotiating`, no request).
    pub fn from_value(hash: ProtocolHash, value: &Value) -> Result<FixReport, ApiError> {
        let invalid = |why: &str| {
            ApiError::InvalidProtocolMessage(format!(
                "a fixErrorNegotiation about protocol {hash} {why}"
            ))
        };
        let description = match MetaMessage::from_value(value.clone()) {
            Ok(MetaMessage::FixErrorNegotiation(fix)) if fix.status == MetaStatus::Negotiating => {
                fix.error_description
            }
            Ok(_) => return Err(invalid("reports an error with status `negotiating`")),
            Err(e) => return Err(invalid(&format!("is malformed: {e}"))),
        };
        let request = value
            .get(REQUEST_FIELD)
            .filter(|r| r.is_object())
            .cloned()
            .ok_or_else(|| {
                invalid("carries the request whose answer was wrong in `request` (an object)")
            })?;
        Ok(FixReport {
            hash,
            request,
            description,
        })
    }
}

impl FixAnswer {
    /// The meta-protocol object: `fixErrorNegotiation`, `accepted` or `rejected`.
    pub fn to_meta(&self) -> MetaMessage {
        match self {
            FixAnswer::Fixed { description } => {
                MetaMessage::fix_error_negotiation(description, MetaStatus::Accepted)
            }
            FixAnswer::Refused { reason } => {
                MetaMessage::fix_error_negotiation(reason, MetaStatus::Rejected)
            }
        }
    }

    /// The answer as an NLIP control message about protocol `hash` (the report's tokens, its
    /// `protocol` token among them, are echoed on it as on every reply).
    pub fn to_message(&self, hash: &ProtocolHash) -> Message {
        let summary = match self {
            FixAnswer::Fixed { .. } => {
                format!("The handler of protocol {hash} was fixed; please send the request again.")
            }
            FixAnswer::Refused { reason } => {
                format!("The handler of protocol {hash} was not changed: {reason}")
            }
        };
        wrap(summary, &[self.to_meta()])
    }

    /// The answer a provider's `reply` carries: its `fixErrorNegotiation` of status `accepted`
    /// or `rejected`; `None` when it carries none.
    pub fn from_reply(reply: &Message) -> Option<FixAnswer> {
        meta_values(reply).iter().find_map(FixAnswer::from_value)
    }

    /// The answer meta-protocol object `value` is, if it is one.
    pub fn from_value(value: &Value) -> Option<FixAnswer> {
        let Ok(MetaMessage::FixErrorNegotiation(fix)) = MetaMessage::from_value(value.clone())
        else {
            return None;
        };
        match fix.status {
            MetaStatus::Accepted => Some(FixAnswer::Fixed {
                description: fix.error_description,
            }),
            MetaStatus::Rejected => Some(FixAnswer::Refused {
                reason: fix.error_description,
            }),
            MetaStatus::Negotiating | MetaStatus::Timeout => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hash() -> ProtocolHash {
        ProtocolHash::of("a protocol")
    }

    #[test]
    fn a_report_reads_back_from_its_message() {
        let report = FixReport::new(
            hash(),
            json!({"productId": "P1"}),
            Some(&json!({"status": "ok"})),
            "/status: \"ok\" is not of type \"object\"",
        );
        assert!(report.description.contains(&hash().to_string()));
        assert!(report.description.contains("P1"));
        let message = report.to_message();
        let read = FixReport::read(&message, &meta_values(&message));
        assert_eq!(read.expect("a report").expect("usable"), report);
    }

    #[test]
    fn other_control_messages_are_no_reports_and_unusable_reports_are_errors() {
        let fix = MetaMessage::fix_error_negotiation("wrong", MetaStatus::Negotiating);
        // In a negotiation (no protocol token): not a run-time report.
        let in_negotiation = wrap("fix", std::slice::from_ref(&fix));
        assert!(FixReport::read(&in_negotiation, &meta_values(&in_negotiation)).is_none());
        // Naming a protocol but without the request: unusable.
        let mut no_request = in_negotiation.clone();
        no_request.submessages.push(protocol_token(&hash()));
        let read = FixReport::read(&no_request, &meta_values(&no_request));
        assert!(matches!(
            read,
            Some(Err(ApiError::InvalidProtocolMessage(_)))
        ));
        // An answer's status is no report.
        let mut answer = FixAnswer::Refused {
            reason: "conforms".into(),
        }
        .to_message(&hash());
        answer.submessages.push(protocol_token(&hash()));
        let read = FixReport::read(&answer, &meta_values(&answer));
        assert!(matches!(
            read,
            Some(Err(ApiError::InvalidProtocolMessage(_)))
        ));
        assert_eq!(
            FixAnswer::from_reply(&answer),
            Some(FixAnswer::Refused {
                reason: "conforms".into()
            })
        );
    }
}
