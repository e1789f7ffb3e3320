//! [`OpenAiProtocolReasoner`]: the meta-protocol's reasoning through an OpenAI-compatible
//! chat-completions endpoint.
//!
//! # Call budget
//! The public implementation of the meta-protocol spends 14 model calls on a three-message
//! negotiation. Here every operation is **one** request in JSON mode
//! (`response_format: {"type": "json_object"}`), carrying everything the model needs in that
//! one prompt (the protocol text and every capability with its schemas), so a successful
//! negotiation costs:
//!
//! | step | calls |
//! | --- | --- |
//! | [`evaluate`](ProtocolReasoner::evaluate) (accept, counter or reject in one answer) | 1 |
//! | [`generate_handler`](ProtocolReasoner::generate_handler) | 1 |
//! | [`fix_handler`](ProtocolReasoner::fix_handler), only after a failed verification | 1 each |
//!
//! i.e. 2 when nothing fails, 3 with one fix. [`OpenAiProtocolReasoner::model_calls`] (also
//! [`ProtocolReasoner::model_calls`]) counts every request sent, failed ones included; retries
//! of the HTTP layer (429/5xx, `max_retries`) are part of one call. What one negotiation spent,
//! calls and tokens by purpose, is counted by a metered view
//! ([`ProtocolReasoner::metered`]).
//!
//! # Answers (what the model must return)
//! | operation | JSON object |
//! | --- | --- |
//! | evaluate | `{"decision": "accept"\|"counter"\|"reject", "reason", "capability"?, "counterProtocol"?, "modificationSummary"?}` |
//! | generate / fix | `{"source": "<JavaScript>", "grants": ["capName", ...]}` |
//! | draft | `{"protocol": "<markdown>"}` |
//! | test cases | `{"decision": ..., "reason", "testCases"?: [...], "modificationSummary"?}` |
//! | review a fix (as requester) | `{"decision": "accept"\|"reject", "reason"}` |
//! | assess (evaluate, questions allowed) | evaluate's object, or `{"decision": "ask", "reason", "question"}` |
//! | answer a provider's question (as requester) | `{"answer": "<text>"}` |
//!
//! Every answer is validated before it is used, and anything unusable is a typed error
//! ([`ModelAnswerError`], wrapped in [`ProtocolReasonerError::ModelAnswer`]; transport
//! failures are [`ProtocolReasonerError::Backend`]): an accept must name a declared capability;
//! a counter-proposal must parse as a [`ProtocolDoc`] and differ from the proposal; a handler
//! must be non-empty, define `function handle`, and grant only declared capabilities; a fixed
//! handler must differ from the one that failed (else [`ProtocolReasonerError::CannotFix`]).
//! An `Ok` is therefore never an empty proposal or handler.
//!
//! A fenced answer (```` ```json … ``` ````) is unwrapped before parsing: some
//! OpenAI-compatible servers ignore `response_format`, and the fence is the usual way models
//! then format JSON. Nothing else is repaired.
//!
//! # Tracing
//! Every request is a `model.call` span (its purpose, the model, the error's code when it
//! fails), and [`evaluate`](ProtocolReasoner::evaluate) a `reasoner.evaluate` span around it.
//! Prompts, answers and protocol texts are never logged; at `debug` one event per request
//! gives the operation, the model, the duration and the outcome's code.

mod answers;
mod prompts;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_openai::types::chat::{CreateChatCompletionRequest, ResponseFormat};
use async_trait::async_trait;
use parley_anp::fix::Correction;
use parley_anp::protocol::{ProtocolDoc, parse_test_cases};
use parley_anp::session::{FixVerdict, Verdict};
use parley_mapping::Mapping;
use serde_json::{Map, Value};

pub use answers::ModelAnswerError;

use self::answers::{
    json_object, validate_answer, validate_assessment, validate_draft, validate_evaluation,
    validate_fix_review, validate_handler, validate_test_cases_verdict,
};
use self::prompts::Prompt;
use super::{
    Assessment, Evaluation, GeneratedHandler, Inquiry, ProtocolReasoner, ProtocolReasonerError,
    traced_assessment, traced_evaluation,
};
use crate::ReasonerError;
use crate::chat::{ChatClient, OpenAiConfig, system, user};
use crate::planner::DeclaredCapability;
use crate::usage::{ModelPurpose, UsageMeter};

/// The `openai` protocol backend. See the module docs for its prompts, validation and budget.
pub struct OpenAiProtocolReasoner {
    chat: Arc<ChatClient>,
    /// Shared with every metered view, so [`Self::model_calls`] counts them all.
    calls: Arc<AtomicU64>,
    /// Where this view counts its model calls ([`ProtocolReasoner::metered`]); `None` for the
    /// backend itself.
    meter: Option<UsageMeter>,
}

impl std::fmt::Debug for OpenAiProtocolReasoner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProtocolReasoner")
            .field("config", self.chat.config())
            .field("model_calls", &self.model_calls())
            .finish_non_exhaustive()
    }
}

impl OpenAiProtocolReasoner {
    /// Validates the config (as [`crate::OpenAiReasoner::new`] does) and builds the client.
    pub fn new(config: OpenAiConfig) -> Result<Self, ReasonerError> {
        Ok(Self {
            chat: Arc::new(ChatClient::new(config)?),
            calls: Arc::new(AtomicU64::new(0)),
            meter: None,
        })
    }

    /// Chat-completions requests sent so far (see [`ProtocolReasoner::model_calls`]).
    pub fn model_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// One JSON-mode request; the answer's top-level object.
    async fn ask_json(
        &self,
        purpose: ModelPurpose,
        prompt: Prompt,
    ) -> Result<Map<String, Value>, ProtocolReasonerError> {
        let config = self.chat.config();
        let request = CreateChatCompletionRequest {
            model: config.model.clone(),
            messages: vec![system(prompt.system), user(prompt.user)],
            response_format: Some(ResponseFormat::JsonObject),
            temperature: config.temperature,
            ..Default::default()
        };
        // Counted before sending: a failed request costs as much as a good one.
        self.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = self.answer_object(purpose, request).await;
        tracing::debug!(
            operation = purpose.as_str(),
            model = %config.model,
            ms = started.elapsed().as_millis() as u64,
            code = result.as_ref().err().map(ProtocolReasonerError::code),
            "protocol reasoner model call"
        );
        result
    }

    async fn answer_object(
        &self,
        purpose: ModelPurpose,
        request: CreateChatCompletionRequest,
    ) -> Result<Map<String, Value>, ProtocolReasonerError> {
        let response = self
            .chat
            .complete(purpose, request, self.meter.as_ref())
            .await?;
        let message = response
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| {
                ReasonerError::MalformedResponse("the completion has no choices".into())
            })?
            .message;
        match message.content.filter(|c| !c.trim().is_empty()) {
            Some(content) => Ok(json_object(&content)?),
            None => match message.refusal.filter(|r| !r.trim().is_empty()) {
                Some(refusal) => Err(ModelAnswerError::Refused { message: refusal }.into()),
                None => Err(ReasonerError::EmptyAnswer.into()),
            },
        }
    }

    /// Generation and fixing share the system prompt, the answer and its validation.
    async fn handler(
        &self,
        purpose: ModelPurpose,
        prompt: Prompt,
        capabilities: &[DeclaredCapability],
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        let answer = self.ask_json(purpose, prompt).await?;
        Ok(validate_handler(&answer, capabilities)?)
    }
}

#[async_trait]
impl ProtocolReasoner for OpenAiProtocolReasoner {
    fn backend(&self) -> &'static str {
        "openai"
    }

    fn model_calls(&self) -> u64 {
        OpenAiProtocolReasoner::model_calls(self)
    }

    fn metered(&self, meter: &UsageMeter) -> Option<Arc<dyn ProtocolReasoner>> {
        Some(Arc::new(OpenAiProtocolReasoner {
            chat: self.chat.clone(),
            calls: self.calls.clone(),
            meter: Some(meter.clone()),
        }))
    }

    async fn evaluate(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Result<Evaluation, ProtocolReasonerError> {
        traced_evaluation(self.backend(), doc, async {
            if capabilities.is_empty() {
                // Nothing to serve with: no need to ask.
                return Ok(Evaluation::Reject {
                    reason: "this provider declares no capabilities".into(),
                });
            }
            let answer = self
                .ask_json(
                    ModelPurpose::Evaluate,
                    prompts::evaluate(doc, capabilities, Inquiry::default()),
                )
                .await?;
            Ok(validate_evaluation(&answer, doc, capabilities)?)
        })
        .await
    }

    /// One call, as [`evaluate`](ProtocolReasoner::evaluate), its prompt carrying the questions
    /// and answers so far and, while `inquiry.may_ask`, the `ask` decision.
    async fn assess(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        inquiry: Inquiry<'_>,
    ) -> Result<Assessment, ProtocolReasonerError> {
        if capabilities.is_empty() {
            return self
                .evaluate(doc, capabilities)
                .await
                .map(Assessment::Decided);
        }
        traced_assessment(self.backend(), doc, inquiry, async {
            let prompt = prompts::evaluate(doc, capabilities, inquiry);
            let answer = self.ask_json(ModelPurpose::Evaluate, prompt).await?;
            Ok(validate_assessment(
                &answer,
                doc,
                capabilities,
                inquiry.may_ask,
            )?)
        })
        .await
    }

    /// One call; the question reaches the model as data, beside the requester's document.
    async fn answer_question(
        &self,
        doc: &ProtocolDoc,
        question: &str,
    ) -> Result<String, ProtocolReasonerError> {
        let prompt = prompts::answer_question(doc, question);
        let answer = self.ask_json(ModelPurpose::AnswerQuestion, prompt).await?;
        Ok(validate_answer(&answer)?)
    }

    async fn generate_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        mapping: Option<&Mapping>,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        let prompt = prompts::generate(doc, capabilities, mapping);
        self.handler(ModelPurpose::GenerateHandler, prompt, capabilities)
            .await
    }

    /// Sends the failure description and the failing source back to the model (one call). An
    /// answer identical to `previous` is [`ProtocolReasonerError::CannotFix`], so the driver
    /// moves on to `fixErrorNegotiation` or gives up instead of re-verifying the same code.
    async fn fix_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        previous: &GeneratedHandler,
        failure: &str,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        let prompt = prompts::fix(doc, capabilities, previous, failure);
        let fixed = self
            .handler(ModelPurpose::FixHandler, prompt, capabilities)
            .await?;
        if fixed.source.trim() == previous.source.trim() {
            return Err(ProtocolReasonerError::CannotFix {
                failure: failure.to_owned(),
            });
        }
        Ok(fixed)
    }

    async fn draft(
        &self,
        requirement: &str,
        input_schema: &Value,
        output_schema: &Value,
    ) -> Result<String, ProtocolReasonerError> {
        if requirement.trim().is_empty() {
            return Err(ProtocolReasonerError::InvalidInput(
                "the requirement is empty".into(),
            ));
        }
        let prompt = prompts::draft(requirement, input_schema, output_schema);
        let answer = self.ask_json(ModelPurpose::Draft, prompt).await?;
        Ok(validate_draft(&answer)?)
    }

    /// Test cases that do not even parse are rejected without asking the model.
    async fn evaluate_test_cases(
        &self,
        doc: &ProtocolDoc,
        test_cases: &str,
    ) -> Result<Verdict, ProtocolReasonerError> {
        match parse_test_cases(test_cases) {
            Ok(cases) if cases.is_empty() => {
                return Ok(Verdict::Reject {
                    reason: "no test cases found".into(),
                });
            }
            Ok(_) => {}
            Err(e) => {
                return Ok(Verdict::Reject {
                    reason: e.to_string(),
                });
            }
        }
        let prompt = prompts::test_cases(doc, test_cases);
        let answer = self
            .ask_json(ModelPurpose::EvaluateTestCases, prompt)
            .await?;
        Ok(validate_test_cases_verdict(&answer)?)
    }

    /// One call; only the corrections the guard rails allowed reach the model, and its answer
    /// can only decline them.
    async fn review_fix(
        &self,
        doc: &ProtocolDoc,
        description: &str,
        corrections: &[Correction],
    ) -> Result<FixVerdict, ProtocolReasonerError> {
        let prompt = prompts::review_fix(doc, description, corrections);
        let answer = self.ask_json(ModelPurpose::ReviewFix, prompt).await?;
        Ok(validate_fix_review(&answer)?)
    }
}
