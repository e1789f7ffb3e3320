//! [`BuiltinProtocolReasoner`]: the deterministic, offline protocol reasoner.
//!
//! It decides with the [`planner`]:
//! - accept when the plan has no blocking gap and the reader left nothing of the document
//!   unclear ([`ProtocolDoc::unclear`]);
//! - counter-propose the same protocol in Parley's normalised form (JSON Schemas, test cases as
//!   JSON with machine-checkable expectations) when it is servable but something stayed unclear;
//! - counter-propose the document rewritten so that the best capability serves it
//!   ([`super::counter`]: a near-miss field renamed after the capability's input, then the gaps
//!   closed) when it is not servable as written;
//! - reject only when no rewrite serves, saying what the provider can do instead (each
//!   capability and its inputs).
//!
//! A counter-proposal without test cases gets cases written from the capability
//! ([`super::cases`]); [`BuiltinProtocolReasoner::generate_test_cases`] gives them on their own.
//! Handlers are generated from the plan's [`Mapping`] by [`handler_gen`], drafts written by
//! [`draft`].
//!
//! # Invariants
//! - `evaluate` accepts only when [`planner::plan`] finds no blocking gap, and every
//!   counter-proposal it returns is a text it would itself accept (checked by planning it
//!   again before returning; otherwise it rejects).
//! - `generate_handler` only grants the one capability the mapping calls.

use async_trait::async_trait;
use parley_anp::protocol::{ProtocolDoc, TestCase, parse_test_cases};
use parley_anp::session::Verdict;
use parley_mapping::Mapping;
use serde_json::Value;

use super::cases;
use super::counter::{counter_proposal, parts_of, renamed};
use super::{
    Evaluation, GeneratedHandler, ProtocolReasoner, ProtocolReasonerError, traced_evaluation,
};
use crate::draft::DocParts;
use crate::planner::{self, DeclaredCapability, Gap};
use crate::schema::{json_types, properties, required};
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
                reason: format!(
                    "none of this provider's capabilities matches any field of the protocol's request or response. {}",
                    offer(capabilities)
                ),
            };
        };
        let unclear: Vec<String> = doc
            .unclear()
            .iter()
            .map(|u| format!("- Unclear in the proposal, written out here: {u}."))
            .collect();
        if plan.accepts() {
            if unclear.is_empty() {
                return Evaluation::Accept {
                    mapping: plan.mapping,
                };
            }
            // Servable, but not everything is pinned down: the same protocol, normalised.
            return match normalised(doc, parts_of(doc), unclear, capabilities) {
                Some((text, summary)) => Evaluation::Counter { text, summary },
                None => Evaluation::Accept {
                    mapping: plan.mapping,
                },
            };
        }
        let problems: Vec<String> = plan
            .gaps
            .iter()
            .filter(|g| g.blocking())
            .map(Gap::describe)
            .collect();
        let reason = format!(
            "with capability `{}`: {}. {}",
            plan.mapping.capability,
            problems.join("; "),
            offer(capabilities)
        );
        let Some(cap) = capabilities
            .iter()
            .find(|c| c.name == plan.mapping.capability)
        else {
            return Evaluation::Reject { reason };
        };
        let mut summary = unclear;
        // A near miss (`sku` for `productId`) is renamed first, then what is still missing
        // is closed.
        let renamed_doc =
            renamed(doc, cap, &plan.mapping, &plan.gaps).and_then(|(parts, lines)| {
                let text = draft::render(&parts);
                let renamed_doc = ProtocolDoc::parse(text).ok()?;
                summary.extend(lines);
                Some(renamed_doc)
            });
        let base = renamed_doc.as_ref().unwrap_or(doc);
        let parts = match planner::plan(base, std::slice::from_ref(cap)) {
            Some(p) if p.accepts() => Some(parts_of(base)),
            Some(p) => counter_proposal(base, cap, &p.gaps).map(|(parts, lines)| {
                summary.extend(lines);
                parts
            }),
            None => None,
        };
        parts
            .and_then(|parts| normalised(doc, parts, summary, capabilities))
            .map_or(Evaluation::Reject { reason }, |(text, summary)| {
                Evaluation::Counter { text, summary }
            })
    }

    /// Test cases for `doc` written from the capability that serves it (see `cases`): for a
    /// protocol without test cases, what the provider proposes in a `testCasesNegotiation`
    /// message ([`crate::draft::render_test_cases`] writes its body). Empty when no capability
    /// serves `doc` as written.
    pub fn generate_test_cases(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Vec<TestCase> {
        let Some(plan) = planner::plan(doc, capabilities).filter(|p| p.accepts()) else {
            return Vec::new();
        };
        capabilities
            .iter()
            .find(|c| c.name == plan.mapping.capability)
            .map(|cap| cases::generate(doc, cap, &plan.mapping))
            .unwrap_or_default()
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

/// The counter-proposal written from `parts`: its text and summary, when it is a text this
/// reasoner accepts as it is and differs from `doc`. A protocol still without test cases gets
/// generated ones (see `cases`).
fn normalised(
    doc: &ProtocolDoc,
    mut parts: DocParts,
    mut summary: Vec<String>,
    capabilities: &[DeclaredCapability],
) -> Option<(String, String)> {
    let text = draft::render(&parts);
    let proposed = ProtocolDoc::parse(text.clone()).ok()?;
    let plan = planner::plan(&proposed, capabilities).filter(|p| p.accepts())?;
    let mut text = text;
    if parts.test_cases.is_empty()
        && let Some(cap) = capabilities
            .iter()
            .find(|c| c.name == plan.mapping.capability)
    {
        let generated = cases::generate(&proposed, cap, &plan.mapping);
        if !generated.is_empty() {
            let names: Vec<String> = generated.iter().map(|c| format!("`{}`", c.name)).collect();
            summary.push(format!(
                "- Test cases: the proposal had none; added {} written from `{}`: {}.",
                generated.len(),
                cap.name,
                names.join(", ")
            ));
            parts.test_cases = generated;
            text = draft::render(&parts);
        }
    }
    (text != doc.text() && !summary.is_empty()).then(|| (text, summary.join("\n")))
}

/// What this provider can do, said to a requester whose proposal it cannot serve: each
/// capability, the first sentence of its description and the inputs it takes.
fn offer(capabilities: &[DeclaredCapability]) -> String {
    if capabilities.is_empty() {
        return "This provider has no capabilities to offer.".into();
    }
    let each: Vec<String> = capabilities
        .iter()
        .map(|cap| {
            let required = required(&cap.input_schema);
            let inputs: Vec<String> = properties(&cap.input_schema)
                .into_iter()
                .map(|(name, schema)| {
                    let mut said = vec![
                        json_types(schema)
                            .map(|t| t.into_iter().collect::<Vec<_>>().join(" or "))
                            .unwrap_or_else(|| "any".into()),
                    ];
                    if required.contains(name.as_str()) {
                        said.push("required".into());
                    }
                    if let Some(example) = draft::example_value(schema) {
                        said.push(format!("e.g. {example}"));
                    }
                    format!("`{name}` ({})", said.join(", "))
                })
                .collect();
            let description = first_sentence(&cap.description);
            format!(
                "`{}` ({description}) taking {}",
                cap.name,
                if inputs.is_empty() {
                    "no input".to_owned()
                } else {
                    inputs.join(", ")
                }
            )
        })
        .collect();
    format!(
        "This provider can serve instead: {}. Propose a protocol over one of these.",
        each.join("; ")
    )
}

/// The first sentence of `text`, without its full stop (an abbreviation such as "e.g." does not
/// end it).
fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    let mut from = 0;
    while let Some(at) = text[from..].find(". ").map(|i| from + i) {
        let before = &text[..at];
        if !(before.ends_with("e.g") || before.ends_with("i.e") || before.ends_with("etc")) {
            return before;
        }
        from = at + 2;
    }
    text.trim_end_matches('.')
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
