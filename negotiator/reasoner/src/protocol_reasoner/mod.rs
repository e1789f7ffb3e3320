//! [`ProtocolReasoner`]: the reasoning the meta-protocol needs, behind one trait.
//!
//! The session state machines ([`parley_anp::session`]) decide *when* to evaluate, generate or
//! fix; a `ProtocolReasoner` decides *what*: whether a protocol text can be served with the
//! operator's capabilities, what to counter-propose, the handler source, the requester's first
//! draft. Inputs and outputs are text and JSON so a language-model backend can implement the
//! same trait.
//!
//! | backend | module | decides with |
//! | --- | --- | --- |
//! | [`BuiltinProtocolReasoner`] | `builtin` (+ `counter`, `cases`) | the [`crate::planner`], [`crate::handler_gen`] and [`crate::draft`]: deterministic, offline |
//! | [`OpenAiProtocolReasoner`] | `openai` | one JSON-mode model request per operation |
//! | [`HybridProtocolReasoner`] | `hybrid` | the built-in backend first, the model only where it cannot decide |
//!
//! As a requester, [`ProtocolReasoner::review_fix`] decides on a provider's error report within
//! the guard rails of [`parley_anp::fix`].
//!
//! # Invariants
//! - A backend failure is an `Err`, never an empty proposal or handler.
//! - Every accept carries a [`Mapping`] naming a declared capability, and every handler grants
//!   only declared capabilities.

mod builtin;
mod cases;
mod counter;
mod hybrid;
mod inquiry;
mod openai;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use parley_anp::fix::Correction;
use parley_anp::protocol::{ProtocolDoc, ProtocolError};
use parley_anp::session::{FixVerdict, Verdict};
use parley_mapping::Mapping;

pub use builtin::BuiltinProtocolReasoner;
pub use hybrid::HybridProtocolReasoner;
pub use inquiry::{Assessment, Exchange, Inquiry, requester_answer};
pub use openai::{ModelAnswerError, OpenAiProtocolReasoner};

use crate::ReasonerError;
use crate::planner::DeclaredCapability;
use crate::usage::UsageMeter;

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
    /// `accept`, `counter` or `reject` (the serde tag).
    pub fn decision(&self) -> &'static str {
        match self {
            Evaluation::Accept { .. } => "accept",
            Evaluation::Counter { .. } => "counter",
            Evaluation::Reject { .. } => "reject",
        }
    }

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
    ModelAnswer(#[from] ModelAnswerError),
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

    /// A view of this backend that also counts every model call it makes in `meter` (see
    /// [`crate::usage`]): what one negotiation spends, even while others share the backend. It
    /// shares the backend's client and [`model_calls`](Self::model_calls), so making one per
    /// negotiation turn is cheap. `None` for a backend that never calls a model: use it as it is
    /// ([`crate::usage::metered_protocol`] does both).
    fn metered(&self, meter: &UsageMeter) -> Option<Arc<dyn ProtocolReasoner>> {
        let _ = meter;
        None
    }

    /// Accept, counter-propose or reject `doc` given the capabilities.
    async fn evaluate(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Result<Evaluation, ProtocolReasonerError>;

    /// [`evaluate`](Self::evaluate), with the questions asked of the peer about `doc` so far
    /// and their answers (`inquiry`); may return a question for the peer instead of a verdict
    /// when `inquiry.may_ask` ([`Assessment::Ask`]). A backend that never asks (the built-in
    /// one) evaluates as [`evaluate`](Self::evaluate) does.
    async fn assess(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        inquiry: Inquiry<'_>,
    ) -> Result<Assessment, ProtocolReasonerError> {
        let _ = inquiry;
        self.evaluate(doc, capabilities)
            .await
            .map(Assessment::Decided)
    }

    /// As a requester: the answer to a provider's question about `doc`, the requester's own
    /// protocol document. Without a model, [`requester_answer`]: the document's requirement and
    /// that the requester knows nothing else.
    async fn answer_question(
        &self,
        doc: &ProtocolDoc,
        question: &str,
    ) -> Result<String, ProtocolReasonerError> {
        Ok(requester_answer(doc, question))
    }

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

    /// As a requester: whether to accept a provider's `fixErrorNegotiation` report
    /// (`description`), which says the expectations `corrections` of `doc`'s test cases are wrong.
    /// Asked only once the guard rails ([`parley_anp::review_fix`]) found every correction
    /// acceptable, so a backend can narrow what they allow and never widen it. The built-in
    /// backend (and the hybrid, where the built-in backend decides) accepts what they allow.
    async fn review_fix(
        &self,
        doc: &ProtocolDoc,
        description: &str,
        corrections: &[Correction],
    ) -> Result<FixVerdict, ProtocolReasonerError> {
        let _ = (doc, description, corrections);
        Ok(FixVerdict::Fix)
    }
}

/// Runs one backend's evaluation of `doc` in a `reasoner.evaluate` span: the backend, the
/// protocol's hash, and once it is known the decision (or the error's code). A hybrid's
/// evaluation holds the span of the backend it asks.
pub(crate) async fn traced_evaluation(
    backend: &'static str,
    doc: &ProtocolDoc,
    evaluation: impl Future<Output = Result<Evaluation, ProtocolReasonerError>>,
) -> Result<Evaluation, ProtocolReasonerError> {
    let span = tracing::info_span!(
        "reasoner.evaluate",
        backend,
        protocol = %doc.hash(),
        decision = tracing::field::Empty,
        code = tracing::field::Empty,
    );
    let result = evaluation.instrument(span.clone()).await;
    match &result {
        Ok(evaluation) => span.record("decision", evaluation.decision()),
        Err(e) => span.record("code", e.code()),
    };
    result
}

/// [`traced_evaluation`] for an [`assess`](ProtocolReasoner::assess): the same span, with the
/// questions answered so far, and `ask` as the decision of a question.
pub(crate) async fn traced_assessment(
    backend: &'static str,
    doc: &ProtocolDoc,
    inquiry: Inquiry<'_>,
    assessment: impl Future<Output = Result<Assessment, ProtocolReasonerError>>,
) -> Result<Assessment, ProtocolReasonerError> {
    let span = tracing::info_span!(
        "reasoner.evaluate",
        backend,
        protocol = %doc.hash(),
        questions = inquiry.exchanges.len(),
        decision = tracing::field::Empty,
        code = tracing::field::Empty,
    );
    let result = assessment.instrument(span.clone()).await;
    match &result {
        Ok(Assessment::Decided(evaluation)) => span.record("decision", evaluation.decision()),
        Ok(Assessment::Ask { .. }) => span.record("decision", "ask"),
        Err(e) => span.record("code", e.code()),
    };
    result
}
