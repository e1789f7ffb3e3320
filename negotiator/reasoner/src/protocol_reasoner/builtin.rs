//! [`BuiltinProtocolReasoner`]: the deterministic, offline protocol reasoner.
//!
//! It decides with the [`planner`]: accept when the plan has no blocking gap, else
//! counter-propose the document rewritten so that the best capability serves it
//! ([`super::counter`]), else reject. Handlers are generated from the plan's [`Mapping`] by
//! [`handler_gen`], drafts written by [`draft`].
//!
//! # Invariants
//! - `evaluate` accepts only when [`planner::plan`] finds no blocking gap, and every
//!   counter-proposal it returns is a text it would itself accept (checked by re-evaluating
//!   it before returning; otherwise it rejects).
//! - `generate_handler` only grants the one capability the mapping calls.

use async_trait::async_trait;
use parley_anp::protocol::{ProtocolDoc, parse_test_cases};
use parley_anp::session::Verdict;
use parley_mapping::Mapping;
use serde_json::Value;

use super::counter::counter_proposal;
use super::{
    Evaluation, GeneratedHandler, ProtocolReasoner, ProtocolReasonerError, traced_evaluation,
};
use crate::planner::{self, DeclaredCapability, Gap};
use crate::schema::properties;
use crate::{draft, handler_gen};

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
        // The mapping runtime reads top-level fields only: a mapping that names fields inside
        // objects has the JavaScript handler and no compiled form.
        let nested = mapping.checks.iter().any(|c| c.field.starts_with('/'))
            || mapping.response.iter().any(|r| r.field.starts_with('/'));
        Ok(GeneratedHandler {
            source: handler_gen::generate(&mapping, &doc.hash().to_hex()),
            grants: vec![mapping.capability.clone()],
            compiled: if nested {
                None
            } else {
                serde_json::to_value(&mapping).ok()
            },
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
        traced_evaluation(self.backend(), doc, async {
            Ok(self.evaluate_sync(doc, capabilities))
        })
        .await
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
