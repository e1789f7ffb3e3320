//! [`HybridProtocolReasoner`]: the built-in protocol reasoner first, a language model only when
//! the built-in one cannot decide. [`crate::build_protocol_reasoner`] builds it for an `openai`
//! [`crate::ReasonerConfig`].
//!
//! # Why hybrid is what an `openai` config gets
//! The built-in reasoner is deterministic, free and instant, and for protocols whose fields
//! name what the capabilities take and return (seed 002's product protocol, and any protocol a
//! Parley requester drafts) it decides as well as a model would — and its handlers are
//! generated from a checked mapping instead of being written by a model. A model is worth its
//! latency and cost only where the built-in reasoner gives up: fields it cannot match by name
//! or type (`cost` for `price`; a near miss such as `sku` for `productId` it counter-proposes
//! renamed itself), or a rewording it cannot do. So a
//! configured key makes negotiation *able* to go further, and never makes the common case
//! slower or more expensive: the product protocol negotiates with **zero** model calls.
//!
//! # When the model is consulted (falls through)
//! | operation | built-in answer | hybrid does |
//! | --- | --- | --- |
//! | `evaluate` | accept / counter | returns it (0 calls): a built-in counter is a text the built-in reasoner itself accepts |
//! | `evaluate` | reject (nothing maps, or no servable counter exists) | asks the model (1 call) and returns *its* decision |
//! | `generate_handler` | the built-in reasoner accepts the protocol on its own | generates from its own mapping (0 calls; the caller's mapping hint is ignored, since a model's accept carries only a capability name) |
//! | `generate_handler` | it does not | asks the model (1 call) |
//! | `fix_handler` | a different handler (the failing one was the model's and the built-in reasoner can serve the protocol) | returns it (0 calls) |
//! | `fix_handler` | `CannotFix` / `NoMapping` | asks the model with the failure (1 call) |
//! | `assess` | as `evaluate` | as `evaluate`: the model (which may ask the peer a question) only after a built-in reject |
//! | `answer_question` | — | asks the model (1 call) |
//! | `draft`, `evaluate_test_cases` | anything | returns it: the built-in draft is a schema-faithful document, and test-case review checks what verification needs (they parse, and send only allowed fields) |
//!
//! A model failure after a built-in reject is returned as the error, not replaced by the
//! built-in reject: the peer must be able to tell "cannot serve" from "could not ask" (and
//! retry later), and the operator sees the outage in the error codes.

use std::sync::Arc;

use async_trait::async_trait;
use parley_anp::protocol::ProtocolDoc;
use parley_anp::session::Verdict;
use parley_mapping::Mapping;
use serde_json::Value;

use super::{
    Assessment, BuiltinProtocolReasoner, Evaluation, GeneratedHandler, Inquiry, ProtocolReasoner,
    ProtocolReasonerError, traced_assessment, traced_evaluation,
};
use crate::planner::DeclaredCapability;
use crate::usage::UsageMeter;

/// Built-in first, `model` when the built-in backend cannot decide. See the module docs.
#[derive(Debug, Clone)]
pub struct HybridProtocolReasoner {
    builtin: BuiltinProtocolReasoner,
    model: Arc<dyn ProtocolReasoner>,
}

impl HybridProtocolReasoner {
    /// `model` is usually an [`OpenAiProtocolReasoner`](super::OpenAiProtocolReasoner); any
    /// backend works (tests use fakes).
    pub fn new(model: Arc<dyn ProtocolReasoner>) -> Self {
        Self {
            builtin: BuiltinProtocolReasoner,
            model,
        }
    }

    /// The backend consulted when the built-in one cannot decide.
    pub fn model(&self) -> &Arc<dyn ProtocolReasoner> {
        &self.model
    }
}

#[async_trait]
impl ProtocolReasoner for HybridProtocolReasoner {
    fn backend(&self) -> &'static str {
        "hybrid"
    }

    /// The model's calls (the built-in backend makes none).
    fn model_calls(&self) -> u64 {
        self.model.model_calls()
    }

    /// The model's view, metered (the built-in backend spends nothing).
    fn metered(&self, meter: &UsageMeter) -> Option<Arc<dyn ProtocolReasoner>> {
        let model = self.model.metered(meter)?;
        Some(Arc::new(HybridProtocolReasoner {
            builtin: self.builtin,
            model,
        }))
    }

    async fn evaluate(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Result<Evaluation, ProtocolReasonerError> {
        traced_evaluation(self.backend(), doc, async {
            match self.builtin.evaluate_sync(doc, capabilities) {
                Evaluation::Reject { .. } => {
                    tracing::debug!(
                        model = self.model.backend(),
                        "built-in reasoner rejects the protocol; asking the model"
                    );
                    self.model.evaluate(doc, capabilities).await
                }
                decided => Ok(decided),
            }
        })
        .await
    }

    /// As [`evaluate`](ProtocolReasoner::evaluate): the model, and so a question for the peer,
    /// only where the built-in backend rejects.
    async fn assess(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        inquiry: Inquiry<'_>,
    ) -> Result<Assessment, ProtocolReasonerError> {
        traced_assessment(self.backend(), doc, inquiry, async {
            match self.builtin.evaluate_sync(doc, capabilities) {
                Evaluation::Reject { .. } => self.model.assess(doc, capabilities, inquiry).await,
                decided => Ok(Assessment::Decided(decided)),
            }
        })
        .await
    }

    /// The model answers a provider's question for the requester.
    async fn answer_question(
        &self,
        doc: &ProtocolDoc,
        question: &str,
    ) -> Result<String, ProtocolReasonerError> {
        self.model.answer_question(doc, question).await
    }

    async fn generate_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        mapping: Option<&Mapping>,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        // Re-plan rather than trust the hint: after a model's accept the hint only names the
        // capability, and compiling it with the built-in generator would produce a handler
        // that ignores the protocol's fields.
        match self.builtin.evaluate_sync(doc, capabilities) {
            Evaluation::Accept { mapping: own } => {
                self.builtin.generate_sync(doc, capabilities, Some(&own))
            }
            _ => {
                self.model
                    .generate_handler(doc, capabilities, mapping)
                    .await
            }
        }
    }

    async fn fix_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        previous: &GeneratedHandler,
        failure: &str,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        match self
            .builtin
            .fix_handler(doc, capabilities, previous, failure)
            .await
        {
            Err(
                ProtocolReasonerError::CannotFix { .. } | ProtocolReasonerError::NoMapping { .. },
            ) => {
                tracing::debug!(
                    model = self.model.backend(),
                    "built-in reasoner cannot fix the handler; asking the model"
                );
                self.model
                    .fix_handler(doc, capabilities, previous, failure)
                    .await
            }
            other => other,
        }
    }

    async fn draft(
        &self,
        requirement: &str,
        input_schema: &Value,
        output_schema: &Value,
    ) -> Result<String, ProtocolReasonerError> {
        self.builtin
            .draft(requirement, input_schema, output_schema)
            .await
    }

    async fn evaluate_test_cases(
        &self,
        doc: &ProtocolDoc,
        test_cases: &str,
    ) -> Result<Verdict, ProtocolReasonerError> {
        self.builtin.evaluate_test_cases(doc, test_cases).await
    }
}
