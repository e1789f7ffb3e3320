//! What the model must answer, and its validation: every answer becomes a typed value or a
//! [`ModelAnswerError`] saying why it cannot be used (see the parent module's table).

use parley_anp::protocol::{ProtocolDoc, parse_test_cases};
use parley_anp::session::{FixVerdict, Verdict};
use parley_mapping::{Mapping, StatusCodes};
use serde_json::{Map, Value};

use crate::planner::DeclaredCapability;
use crate::protocol_reasoner::{Assessment, Evaluation, GeneratedHandler};

/// A language model's answer that cannot be used. [`code`](Self::code) is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelAnswerError {
    /// The answer is not a JSON object (prose, broken JSON, an array, ...).
    #[error("the model's answer is not a JSON object: {message}")]
    InvalidJson { message: String },
    /// A required field is absent, `null` or empty.
    #[error("the model's answer has no `{field}`")]
    MissingField { field: &'static str },
    /// A field has the wrong type or an unknown value.
    #[error("the model's answer has an invalid `{field}`: {message}")]
    InvalidField {
        field: &'static str,
        message: String,
    },
    /// The model refused (the `refusal` of the chat completion).
    #[error("the model refused: {message}")]
    Refused { message: String },
    /// An accept or counter naming a capability the provider does not declare.
    #[error("the model named the undeclared capability `{name}`")]
    UnknownCapability { name: String },
    /// The counter-proposal is not a usable protocol document (or is the proposal itself).
    #[error("the model's counter-proposal is not a valid protocol document: {message}")]
    InvalidCounter { message: String },
    /// The drafted protocol is not a usable protocol document.
    #[error("the model's draft is not a valid protocol document: {message}")]
    InvalidDraft { message: String },
    /// Counter test cases that do not parse, or none.
    #[error("the model's test cases are not valid: {message}")]
    InvalidTestCases { message: String },
    /// Handler source that is empty or does not define `function handle`.
    #[error("the model's handler is not usable: {message}")]
    InvalidHandler { message: String },
    /// Grants naming capabilities the provider does not declare.
    #[error("the model's handler is granted undeclared capabilities: {}", names.join(", "))]
    UndeclaredGrant { names: Vec<String> },
}

impl ModelAnswerError {
    /// Stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidJson { .. } => "model_invalid_json",
            Self::MissingField { .. } => "model_missing_field",
            Self::InvalidField { .. } => "model_invalid_field",
            Self::Refused { .. } => "model_refused",
            Self::UnknownCapability { .. } => "model_unknown_capability",
            Self::InvalidCounter { .. } => "model_invalid_counter",
            Self::InvalidDraft { .. } => "model_invalid_draft",
            Self::InvalidTestCases { .. } => "model_invalid_test_cases",
            Self::InvalidHandler { .. } => "model_invalid_handler",
            Self::UndeclaredGrant { .. } => "model_undeclared_grant",
        }
    }
}

/// Parses the model's content as a JSON object, unwrapping one markdown fence if present.
pub(super) fn json_object(content: &str) -> Result<Map<String, Value>, ModelAnswerError> {
    let mut text = content.trim();
    if let Some(rest) = text.strip_prefix("```") {
        // Drop the info string (`json`) line and the closing fence.
        let body = rest.split_once('\n').map_or("", |(_, body)| body);
        text = body.trim_end().strip_suffix("```").unwrap_or(body).trim();
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(ModelAnswerError::InvalidJson {
            message: format!("expected an object, got {}", json_kind(&other)),
        }),
        Err(e) => Err(ModelAnswerError::InvalidJson {
            message: e.to_string(),
        }),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A string field: `None` when absent, `null` or blank; an error when it is not a string.
fn opt_str<'a>(
    object: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>, ModelAnswerError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ModelAnswerError::InvalidField {
            field,
            message: format!("expected a string, got {}", json_kind(other)),
        }),
    }
}

fn req_str<'a>(
    object: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, ModelAnswerError> {
    opt_str(object, field)?.ok_or(ModelAnswerError::MissingField { field })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Accept,
    Counter,
    Reject,
}

fn decision(object: &Map<String, Value>) -> Result<Decision, ModelAnswerError> {
    let raw = req_str(object, "decision")?;
    match raw.trim().to_ascii_lowercase().as_str() {
        "accept" | "accepted" => Ok(Decision::Accept),
        "counter" | "counterpropose" | "counter-propose" | "counter_propose" => {
            Ok(Decision::Counter)
        }
        "reject" | "rejected" => Ok(Decision::Reject),
        _ => Err(ModelAnswerError::InvalidField {
            field: "decision",
            message: format!("{raw:?} is none of accept, counter, reject"),
        }),
    }
}

/// Turns the model's evaluation into an [`Evaluation`], or says why it cannot be used.
pub(super) fn validate_evaluation(
    object: &Map<String, Value>,
    doc: &ProtocolDoc,
    capabilities: &[DeclaredCapability],
) -> Result<Evaluation, ModelAnswerError> {
    match decision(object)? {
        Decision::Accept => {
            let name = req_str(object, "capability")?;
            let cap = capabilities
                .iter()
                .find(|c| c.name == name)
                .ok_or_else(|| ModelAnswerError::UnknownCapability {
                    name: name.to_owned(),
                })?;
            Ok(Evaluation::Accept {
                mapping: named_mapping(cap),
            })
        }
        Decision::Counter => {
            let text = req_str(object, "counterProtocol")?;
            if let Some(name) = opt_str(object, "capability")?
                && !capabilities.iter().any(|c| c.name == name)
            {
                return Err(ModelAnswerError::UnknownCapability {
                    name: name.to_owned(),
                });
            }
            let summary = req_str(object, "modificationSummary")?;
            let counter =
                ProtocolDoc::parse(text).map_err(|e| ModelAnswerError::InvalidCounter {
                    message: format!("{} ({})", e, e.code()),
                })?;
            if counter.hash() == doc.hash() {
                return Err(ModelAnswerError::InvalidCounter {
                    message: "it is the proposal itself".into(),
                });
            }
            Ok(Evaluation::Counter {
                text: text.to_owned(),
                summary: summary.to_owned(),
            })
        }
        Decision::Reject => Ok(Evaluation::Reject {
            reason: req_str(object, "reason")?.to_owned(),
        }),
    }
}

/// Longest question for the peer a model may ask, in characters.
const MAX_QUESTION_CHARS: usize = 2_000;

/// Turns the model's evaluation into an [`Assessment`]: its evaluation, or (`"decision":
/// "ask"`) its question for the peer. A question when none `may_ask` is the model failing to
/// decide within the questions it had: the proposal is rejected, with the question as the reason.
pub(super) fn validate_assessment(
    object: &Map<String, Value>,
    doc: &ProtocolDoc,
    capabilities: &[DeclaredCapability],
    may_ask: bool,
) -> Result<Assessment, ModelAnswerError> {
    let asks = req_str(object, "decision")?
        .trim()
        .eq_ignore_ascii_case("ask");
    if !asks {
        return validate_evaluation(object, doc, capabilities).map(Assessment::Decided);
    }
    let question = req_str(object, "question")?.trim();
    if question.chars().count() > MAX_QUESTION_CHARS {
        return Err(ModelAnswerError::InvalidField {
            field: "question",
            message: format!("longer than {MAX_QUESTION_CHARS} characters"),
        });
    }
    Ok(if may_ask {
        Assessment::Ask {
            question: question.to_owned(),
        }
    } else {
        Assessment::Decided(Evaluation::Reject {
            reason: format!(
                "the proposal is still unclear after the questions this provider may ask: \
                 {question}"
            ),
        })
    })
}

/// The model's answer, as the requester, to a provider's question.
pub(super) fn validate_answer(object: &Map<String, Value>) -> Result<String, ModelAnswerError> {
    Ok(req_str(object, "answer")?.trim().to_owned())
}

/// The [`Mapping`] of a model's accept. The model maps fields in its head, so this mapping only
/// *names* the capability (no checks, arguments or response fields): it is the hint
/// `generate_handler` passes on to the handler prompt, not something the built-in generator can
/// compile.
fn named_mapping(cap: &DeclaredCapability) -> Mapping {
    let output_nullable = match cap.output_schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => false,
    };
    Mapping {
        capability: cap.name.clone(),
        checks: Vec::new(),
        arguments: Vec::new(),
        response: Vec::new(),
        codes: StatusCodes::default(),
        entity: "Item".into(),
        output_nullable,
    }
}

/// Does `source` define `handle` the way the sandbox looks it up (a global function)?
/// Accepts `function handle(`, with any spacing, not as part of a longer name.
fn defines_handle(source: &str) -> bool {
    source.match_indices("function").any(|(at, _)| {
        let before_ok = source[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$'));
        let after = &source[at + "function".len()..];
        let rest = after.trim_start();
        let spaced = rest.len() < after.len();
        let named = rest
            .strip_prefix("handle")
            .is_some_and(|after| after.trim_start().starts_with('('));
        before_ok && spaced && named
    })
}

pub(super) fn validate_handler(
    object: &Map<String, Value>,
    capabilities: &[DeclaredCapability],
) -> Result<GeneratedHandler, ModelAnswerError> {
    let source = req_str(object, "source")?;
    if !defines_handle(source) {
        return Err(ModelAnswerError::InvalidHandler {
            message: "the source does not define `function handle(request)`".into(),
        });
    }
    let grants = match object.get("grants") {
        None | Some(Value::Null) => return Err(ModelAnswerError::MissingField { field: "grants" }),
        Some(Value::Array(items)) => {
            let mut grants: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(name) = item else {
                    return Err(ModelAnswerError::InvalidField {
                        field: "grants",
                        message: format!("expected capability names, got {}", json_kind(item)),
                    });
                };
                if !grants.contains(name) {
                    grants.push(name.clone());
                }
            }
            grants
        }
        Some(other) => {
            return Err(ModelAnswerError::InvalidField {
                field: "grants",
                message: format!("expected an array, got {}", json_kind(other)),
            });
        }
    };
    let undeclared: Vec<String> = grants
        .iter()
        .filter(|g| !capabilities.iter().any(|c| &c.name == *g))
        .cloned()
        .collect();
    if !undeclared.is_empty() {
        return Err(ModelAnswerError::UndeclaredGrant { names: undeclared });
    }
    Ok(GeneratedHandler {
        source: source.to_owned(),
        grants,
        // A model's JavaScript has no compiled form.
        compiled: None,
    })
}

pub(super) fn validate_test_cases_verdict(
    object: &Map<String, Value>,
) -> Result<Verdict, ModelAnswerError> {
    match decision(object)? {
        Decision::Accept => Ok(Verdict::Accept),
        Decision::Reject => Ok(Verdict::Reject {
            reason: req_str(object, "reason")?.to_owned(),
        }),
        Decision::Counter => {
            let cases = match object.get("testCases") {
                None | Some(Value::Null) => {
                    return Err(ModelAnswerError::MissingField { field: "testCases" });
                }
                // Some models put the JSON text in a string; accept both.
                Some(Value::String(text)) => text.clone(),
                Some(value @ Value::Array(_)) => {
                    let pretty = serde_json::to_string_pretty(value).map_err(|e| {
                        ModelAnswerError::InvalidTestCases {
                            message: e.to_string(),
                        }
                    })?;
                    format!("```json\n{pretty}\n```\n")
                }
                Some(other) => {
                    return Err(ModelAnswerError::InvalidField {
                        field: "testCases",
                        message: format!("expected an array, got {}", json_kind(other)),
                    });
                }
            };
            match parse_test_cases(&cases) {
                Ok(parsed) if parsed.is_empty() => Err(ModelAnswerError::InvalidTestCases {
                    message: "no test cases".into(),
                }),
                Ok(_) => Ok(Verdict::Counter {
                    text: cases,
                    summary: req_str(object, "modificationSummary")?.to_owned(),
                }),
                Err(e) => Err(ModelAnswerError::InvalidTestCases {
                    message: e.to_string(),
                }),
            }
        }
    }
}

/// The model's review of a provider's corrections: accept or decline (with its reason).
pub(super) fn validate_fix_review(
    object: &Map<String, Value>,
) -> Result<FixVerdict, ModelAnswerError> {
    match decision(object)? {
        Decision::Accept => Ok(FixVerdict::Fix),
        Decision::Reject => Ok(FixVerdict::Decline {
            reason: req_str(object, "reason")?.to_owned(),
        }),
        Decision::Counter => Err(ModelAnswerError::InvalidField {
            field: "decision",
            message: "a correction is accepted or rejected, not countered".into(),
        }),
    }
}

/// The drafted protocol text, once it parses as a protocol document.
pub(super) fn validate_draft(object: &Map<String, Value>) -> Result<String, ModelAnswerError> {
    let text = req_str(object, "protocol")?;
    ProtocolDoc::parse(text).map_err(|e| ModelAnswerError::InvalidDraft {
        message: format!("{} ({})", e, e.code()),
    })?;
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_json_is_unwrapped() {
        let object = json_object("```json\n{\"a\": 1}\n```").expect("fenced object");
        assert_eq!(object.get("a"), Some(&Value::from(1)));
        assert!(json_object("{\"a\": 1}").is_ok());
        assert_eq!(
            json_object("[1]").map_err(|e| e.code()),
            Err("model_invalid_json")
        );
        assert_eq!(
            json_object("Sure! Here you go").map_err(|e| e.code()),
            Err("model_invalid_json")
        );
    }

    #[test]
    fn handle_definitions() {
        assert!(defines_handle("function handle(request) { return 1; }"));
        assert!(defines_handle("\"use strict\";\nfunction  handle (r) {}"));
        assert!(!defines_handle("function handler(request) {}"));
        assert!(!defines_handle("myfunction handle(request) {}"));
        assert!(!defines_handle("const handle = (r) => r;"));
        assert!(!defines_handle("functionhandle(r) {}"));
        assert!(!defines_handle(""));
    }

    #[test]
    fn a_fix_review_accepts_or_declines_with_a_reason() {
        let review = |text: &str| {
            validate_fix_review(&json_object(text).expect("an object")).map_err(|e| e.code())
        };
        assert_eq!(
            review(r#"{"decision": "accept", "reason": "real data"}"#),
            Ok(FixVerdict::Fix)
        );
        assert_eq!(
            review(r#"{"decision": "reject", "reason": "we need EUR"}"#),
            Ok(FixVerdict::Decline {
                reason: "we need EUR".into()
            })
        );
        assert!(review(r#"{"decision": "reject"}"#).is_err());
        assert!(review(r#"{"decision": "counter", "reason": "x"}"#).is_err());
    }
}
