//! [`ProtocolReasoner`]: the reasoning the meta-protocol needs, behind one trait.
//!
//! The session state machines ([`parley_anp::session`]) decide *when* to evaluate, generate or fix;
//! a `ProtocolReasoner` decides *what*: whether a protocol text can be served with the
//! operator's capabilities, what to counter-propose, the handler source, the requester's
//! first draft. Inputs and outputs are text and JSON so a language-model backend can implement
//! the same trait; [`BuiltinProtocolReasoner`] implements it deterministically with
//! [`crate::mapping`], [`crate::handler_gen`] and [`crate::draft`].
//!
//! # Invariants (built-in backend)
//! - `evaluate` accepts only when [`planner::plan`] finds no blocking gap, and every
//!   counter-proposal it returns is a text it would itself accept (checked by re-evaluating
//!   it before returning; otherwise it rejects).
//! - `generate_handler` only grants the one capability the mapping calls.
//! - A backend failure is an `Err`, never an empty proposal or handler.

use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::draft::{self, DEFAULT_ERROR_HANDLING, DocParts};
use crate::handler_gen;
use parley_mapping::Mapping;

use crate::planner::{self, CaseStyle, DeclaredCapability, Gap, key, properties};
use crate::reasoner::ReasonerError;
use parley_anp::protocol::{ProtocolDoc, ProtocolError, TestCase, parse_test_cases};
use parley_anp::session::Verdict;

/// The outcome of evaluating a protocol against the capabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "camelCase")]
pub enum Evaluation {
    /// The protocol can be served as written, with this mapping.
    Accept {
        mapping: Mapping,
    },
    /// A protocol we can serve: the full text and what changed.
    Counter {
        text: String,
        summary: String,
    },
    Reject {
        reason: String,
    },
}

impl Evaluation {
    /// The session verdict for this evaluation.
    pub fn verdict(&self) -> Verdict {
        match self {
            Evaluation::Accept { .. } => Verdict::Accept,
            Evaluation::Counter { text, summary } => Verdict::Counter {
                text: text.clone(),
                summary: summary.clone(),
            },
            Evaluation::Reject { reason } => Verdict::Reject {
                reason: reason.clone(),
            },
        }
    }
}

/// A generated handler: JavaScript defining `handle(request)`, and the capabilities it may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratedHandler {
    pub source: String,
    pub grants: Vec<String>,
    /// The handler's compiled form, when the backend has one: the built-in backend's [`Mapping`]
    /// (as JSON) that `source` was generated from, which the sandbox's mapping runtime serves
    /// without a JavaScript engine. The provider serves it only once it gave the JavaScript's
    /// answers on every test case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled: Option<Value>,
}

/// Why a protocol reasoner could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolReasonerError {
    /// The protocol text is not a usable document.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// No capability can serve the protocol, so there is nothing to generate.
    #[error("no capability can serve this protocol: {reason}")]
    NoMapping { reason: String },
    /// The backend could not produce a different handler for the failure.
    #[error("cannot fix the handler: {failure}")]
    CannotFix { failure: String },
    /// Bad input to `draft` (schemas that are not object schemas, ...).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The backend (e.g. a language model endpoint) failed.
    #[error(transparent)]
    Backend(#[from] ReasonerError),
    /// A language model answered, but not something usable (not JSON, a missing field, an
    /// invalid counter-proposal or handler, ...). Its code says which.
    #[error(transparent)]
    ModelAnswer(#[from] crate::reasoner::ModelAnswerError),
}

impl ProtocolReasonerError {
    /// The backend failed (the model endpoint, or a model answer that cannot be used), as
    /// opposed to the protocol or the input being the problem: report it to the caller as an
    /// error, never turn it into a negotiation outcome.
    pub fn is_backend_failure(&self) -> bool {
        matches!(
            self,
            ProtocolReasonerError::Backend(_) | ProtocolReasonerError::ModelAnswer(_)
        )
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ProtocolReasonerError::Protocol(e) => e.code(),
            ProtocolReasonerError::NoMapping { .. } => "no_mapping",
            ProtocolReasonerError::CannotFix { .. } => "cannot_fix",
            ProtocolReasonerError::InvalidInput(_) => "invalid_input",
            ProtocolReasonerError::Backend(_) => "reasoner_unavailable",
            ProtocolReasonerError::ModelAnswer(e) => e.code(),
        }
    }
}

/// Protocol-level reasoning for negotiation. See the module docs.
#[async_trait]
pub trait ProtocolReasoner: Send + Sync + Debug {
    /// Short stable backend name.
    fn backend(&self) -> &'static str;

    /// Language-model requests this backend has made since it was built, failed ones included
    /// (0 for backends without a model). Monotonic: export it as a counter metric, or read it
    /// before and after a negotiation for the calls that negotiation cost.
    fn model_calls(&self) -> u64 {
        0
    }

    /// Accept, counter-propose or reject `doc` given the capabilities.
    async fn evaluate(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Result<Evaluation, ProtocolReasonerError>;

    /// Handler source for an agreed protocol. `mapping` is the one `evaluate` returned when it
    /// accepted (a hint; backends may recompute it).
    async fn generate_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        mapping: Option<&Mapping>,
    ) -> Result<GeneratedHandler, ProtocolReasonerError>;

    /// A new handler after `previous` failed verification or a peer's error report;
    /// `failure` is the [`parley_anp::verify::VerificationReport::failure_description`] or the
    /// peer's `errorDescription`.
    async fn fix_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        previous: &GeneratedHandler,
        failure: &str,
    ) -> Result<GeneratedHandler, ProtocolReasonerError>;

    /// The requester's first protocol text for a requirement and the schemas of what it will
    /// send and wants back.
    async fn draft(
        &self,
        requirement: &str,
        input_schema: &Value,
        output_schema: &Value,
    ) -> Result<String, ProtocolReasonerError>;

    /// Accept, counter or reject test cases proposed through `testCasesNegotiation` (the text
    /// holds test cases in the format of a protocol's `# Test Cases` section).
    async fn evaluate_test_cases(
        &self,
        doc: &ProtocolDoc,
        test_cases: &str,
    ) -> Result<Verdict, ProtocolReasonerError>;
}

/// The deterministic, offline backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinProtocolReasoner;

impl BuiltinProtocolReasoner {
    /// [`ProtocolReasoner::evaluate`], synchronously.
    pub fn evaluate_sync(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Evaluation {
        let Some(plan) = planner::plan(doc, capabilities) else {
            return Evaluation::Reject {
                reason: "none of this provider's capabilities matches any field of the protocol's request or response".into(),
            };
        };
        if plan.accepts() {
            return Evaluation::Accept {
                mapping: plan.mapping,
            };
        }
        let problems: Vec<String> = plan
            .gaps
            .iter()
            .filter(|g| g.blocking())
            .map(Gap::describe)
            .collect();
        let reason = format!(
            "with capability `{}`: {}",
            plan.mapping.capability,
            problems.join("; ")
        );
        let Some(cap) = capabilities
            .iter()
            .find(|c| c.name == plan.mapping.capability)
        else {
            return Evaluation::Reject { reason };
        };
        let Some((text, summary)) = counter_proposal(doc, cap, &plan.gaps) else {
            return Evaluation::Reject { reason };
        };
        // Only propose what we would accept ourselves.
        let serves = ProtocolDoc::parse(text.clone())
            .ok()
            .and_then(|d| planner::plan(&d, capabilities))
            .is_some_and(|p| p.accepts());
        if serves && text != doc.text() {
            Evaluation::Counter { text, summary }
        } else {
            Evaluation::Reject { reason }
        }
    }

    /// [`ProtocolReasoner::generate_handler`], synchronously.
    pub fn generate_sync(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        mapping: Option<&Mapping>,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        let mapping = match mapping {
            Some(m) if capabilities.iter().any(|c| c.name == m.capability) => m.clone(),
            _ => match self.evaluate_sync(doc, capabilities) {
                Evaluation::Accept { mapping } => mapping,
                Evaluation::Counter { summary, .. } => {
                    return Err(ProtocolReasonerError::NoMapping { reason: summary });
                }
                Evaluation::Reject { reason } => {
                    return Err(ProtocolReasonerError::NoMapping { reason });
                }
            },
        };
        Ok(GeneratedHandler {
            source: handler_gen::generate(&mapping, &doc.hash().to_hex()),
            grants: vec![mapping.capability.clone()],
            compiled: serde_json::to_value(&mapping).ok(),
        })
    }
}

#[async_trait]
impl ProtocolReasoner for BuiltinProtocolReasoner {
    fn backend(&self) -> &'static str {
        "builtin"
    }

    async fn evaluate(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Result<Evaluation, ProtocolReasonerError> {
        Ok(self.evaluate_sync(doc, capabilities))
    }

    async fn generate_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        mapping: Option<&Mapping>,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        self.generate_sync(doc, capabilities, mapping)
    }

    /// The built-in backend cannot learn from a failure: it regenerates from the protocol, and
    /// when that reproduces `previous` it reports [`ProtocolReasonerError::CannotFix`] so the
    /// driver can go to `fixErrorNegotiation` or give up.
    async fn fix_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        previous: &GeneratedHandler,
        failure: &str,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        let fresh = self.generate_sync(doc, capabilities, None)?;
        if fresh == *previous {
            return Err(ProtocolReasonerError::CannotFix {
                failure: failure.to_owned(),
            });
        }
        Ok(fresh)
    }

    async fn draft(
        &self,
        requirement: &str,
        input_schema: &Value,
        output_schema: &Value,
    ) -> Result<String, ProtocolReasonerError> {
        draft::draft(requirement, input_schema, output_schema)
            .map_err(ProtocolReasonerError::InvalidInput)
    }

    /// Accepts test cases that parse and whose requests and fixtures mention only fields and
    /// capabilities the protocol knows; rejects others with the reason.
    async fn evaluate_test_cases(
        &self,
        doc: &ProtocolDoc,
        test_cases: &str,
    ) -> Result<Verdict, ProtocolReasonerError> {
        let cases = match parse_test_cases(test_cases) {
            Ok(cases) if cases.is_empty() => {
                return Ok(Verdict::Reject {
                    reason: "no test cases found".into(),
                });
            }
            Ok(cases) => cases,
            Err(e) => {
                return Ok(Verdict::Reject {
                    reason: e.to_string(),
                });
            }
        };
        let known: Vec<String> = properties(doc.request_schema())
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for case in &cases {
            if let Some(obj) = case.request.as_object()
                && let Some(unknown) = obj.keys().find(|k| !known.contains(k))
                && doc.request_schema().get("additionalProperties") == Some(&Value::Bool(false))
            {
                return Ok(Verdict::Reject {
                    reason: format!(
                        "test case `{}` sends `{unknown}`, which the protocol's request does not allow",
                        case.name
                    ),
                });
            }
        }
        Ok(Verdict::Accept)
    }
}

/// Rewrites `doc` so that `cap` can serve it. Returns the text and the modification summary, or
/// `None` when nothing would change.
fn counter_proposal(
    doc: &ProtocolDoc,
    cap: &DeclaredCapability,
    gaps: &[Gap],
) -> Option<(String, String)> {
    let mut request = doc.request_schema().clone();
    let mut response = doc.response_schema().clone();
    let style = CaseStyle::detect(
        properties(&request)
            .iter()
            .chain(properties(&response).iter())
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
    );
    let mut summary = Vec::new();
    let mut new_required_request = Vec::new();
    let mut removed_response = Vec::new();

    for gap in gaps {
        match gap {
            Gap::MissingInput { input } => {
                let Some(input_schema) = cap
                    .input_schema
                    .get("properties")
                    .and_then(|p| p.get(input))
                else {
                    continue;
                };
                // Replace a same-named field of the wrong type, or add a new one.
                let existing = properties(&request)
                    .into_iter()
                    .find(|(n, _)| key(n) == key(input))
                    .map(|(n, _)| n);
                let name = existing.unwrap_or_else(|| style.apply(input));
                set_property(&mut request, &name, input_schema.clone());
                add_required(&mut request, &name);
                new_required_request.push(name.clone());
                summary.push(format!(
                    "- Request: added required field `{name}` (input `{input}` of `{}`).",
                    cap.name
                ));
            }
            Gap::OptionalInput { request: field, .. } => {
                add_required(&mut request, field);
                new_required_request.push(field.clone());
                summary.push(format!(
                    "- Request: `{field}` is now required (the lookup needs it)."
                ));
            }
            Gap::UnservedResponse { field } | Gap::UnservedOptional { field } => {
                remove_property(&mut response, field);
                removed_response.push(field.clone());
                summary.push(format!(
                    "- Response: removed `{field}`; this provider has no data for it."
                ));
            }
            Gap::NoData => {
                let name = style.apply("result");
                let mut schema = cap.output_schema.clone();
                if let Some(obj) = schema.as_object_mut() {
                    obj.remove("$schema");
                }
                set_property(&mut response, &name, schema);
                summary.push(format!(
                    "- Response: added `{name}`, the result of `{}` ({}).",
                    cap.name,
                    cap.description.trim()
                ));
            }
        }
    }
    if summary.is_empty() {
        return None;
    }

    // Keep the test cases that still make sense: drop removed fields from expectations, and
    // cases whose request lacks a field that became required.
    let mut test_cases: Vec<TestCase> = Vec::new();
    for case in doc.test_cases() {
        let lacks = new_required_request
            .iter()
            .find(|f| case.request.get(f.as_str()).is_none());
        if let Some(field) = lacks {
            summary.push(format!(
                "- Test cases: dropped `{}` (its request has no `{field}`).",
                case.name
            ));
            continue;
        }
        let mut case = case.clone();
        if let Some(obj) = case.expected_response.as_object_mut() {
            for f in &removed_response {
                obj.remove(f);
            }
        }
        test_cases.push(case);
    }

    let sections = doc.sections();
    let text = draft::render(&DocParts {
        requirements: sections
            .requirements
            .clone()
            .unwrap_or_else(|| "Serve the requests described below.".into()),
        process: sections.process.clone().unwrap_or_else(|| {
            "The requester sends one request message; the provider answers with one response message.".into()
        }),
        request_schema: request,
        response_schema: response,
        error_handling: sections
            .error_handling
            .clone()
            .unwrap_or_else(|| DEFAULT_ERROR_HANDLING.into()),
        test_cases,
    });
    Some((text, summary.join("\n")))
}

fn set_property(schema: &mut Value, name: &str, property: Value) {
    if let Some(obj) = schema.as_object_mut() {
        let props = obj
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(p) = props.as_object_mut() {
            p.insert(name.to_owned(), property);
        }
    }
}

fn add_required(schema: &mut Value, name: &str) {
    if let Some(obj) = schema.as_object_mut() {
        let req = obj
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(r) = req.as_array_mut()
            && !r.iter().any(|x| x == name)
        {
            r.push(Value::String(name.to_owned()));
        }
    }
}

fn remove_property(schema: &mut Value, name: &str) {
    if let Some(p) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        p.shift_remove(name);
    }
    if let Some(r) = schema.get_mut("required").and_then(Value::as_array_mut) {
        r.retain(|x| x != name);
    }
}
