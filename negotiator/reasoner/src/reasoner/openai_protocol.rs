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
//! of the HTTP layer (429/5xx, `max_retries`) are part of one call.
//!
//! # Answers (what the model must return)
//! | operation | JSON object |
//! | --- | --- |
//! | evaluate | `{"decision": "accept"\|"counter"\|"reject", "reason", "capability"?, "counterProtocol"?, "modificationSummary"?}` |
//! | generate / fix | `{"source": "<JavaScript>", "grants": ["capName", ...]}` |
//! | draft | `{"protocol": "<markdown>"}` |
//! | test cases | `{"decision": ..., "reason", "testCases"?: [...], "modificationSummary"?}` |
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
//! # Logging
//! Prompts, answers and protocol texts are never logged; at `debug` only the operation, the
//! model, the duration and the outcome's code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_openai::types::chat::{CreateChatCompletionRequest, ResponseFormat};
use async_trait::async_trait;
use serde_json::{Map, Value};

use super::openai::{ChatClient, system, user};
use super::{OpenAiConfig, ReasonerError};
use parley_mapping::{Mapping, StatusCodes};

use crate::planner::DeclaredCapability;
use crate::protocol_reasoner::{
    Evaluation, GeneratedHandler, ProtocolReasoner, ProtocolReasonerError,
};
use parley_anp::protocol::{ProtocolDoc, parse_test_cases};
use parley_anp::session::Verdict;

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

/// The `openai` protocol backend. See the module docs for its prompts, validation and budget.
pub struct OpenAiProtocolReasoner {
    chat: ChatClient,
    calls: AtomicU64,
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
    /// Validates the config (as [`super::OpenAiReasoner::new`] does) and builds the client.
    pub fn new(config: OpenAiConfig) -> Result<Self, ReasonerError> {
        Ok(Self {
            chat: ChatClient::new(config)?,
            calls: AtomicU64::new(0),
        })
    }

    /// Chat-completions requests sent so far (see [`ProtocolReasoner::model_calls`]).
    pub fn model_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// One JSON-mode request; the answer's top-level object.
    async fn ask_json(
        &self,
        operation: &'static str,
        system_prompt: &str,
        user_prompt: String,
    ) -> Result<Map<String, Value>, ProtocolReasonerError> {
        let config = self.chat.config();
        let request = CreateChatCompletionRequest {
            model: config.model.clone(),
            messages: vec![system(system_prompt.to_owned()), user(user_prompt)],
            response_format: Some(ResponseFormat::JsonObject),
            temperature: config.temperature,
            ..Default::default()
        };
        // Counted before sending: a failed request costs as much as a good one.
        self.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = self.answer_object(request).await;
        tracing::debug!(
            operation,
            model = %config.model,
            ms = started.elapsed().as_millis() as u64,
            code = result.as_ref().err().map(ProtocolReasonerError::code),
            "protocol reasoner model call"
        );
        result
    }

    async fn answer_object(
        &self,
        request: CreateChatCompletionRequest,
    ) -> Result<Map<String, Value>, ProtocolReasonerError> {
        let response = self.chat.complete(request).await?;
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

    /// Generation and fixing share the prompt, the answer and its validation.
    async fn handler(
        &self,
        operation: &'static str,
        user_prompt: String,
        capabilities: &[DeclaredCapability],
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        let answer = self
            .ask_json(operation, HANDLER_SYSTEM, user_prompt)
            .await?;
        Ok(validate_handler(&answer, capabilities)?)
    }
}

// --- prompts ---------------------------------------------------------------------------------
// One system prompt per operation, fixed text (cache-friendly on endpoints with prompt caching);
// the per-call material goes in the user message, peer text between tags so the model can tell
// the document from our instructions.

const DOC_FORMAT: &str = "A protocol document is markdown with the sections `# Requirements`, \
`# Process`, `# Data Format` (holding exactly two JSON Schemas in ```json fences: the request \
schema under a line or heading saying \"Request\", then the response schema under one saying \
\"Response\"), `# Error Handling`, and `# Test Cases` (a ```json array of objects \
{\"name\", \"description\", \"request\", \"expectedResponse\", \"fixtures\"}, where fixtures maps a \
capability name to a list of {\"args\", \"result\"} or {\"args\", \"error\"} answering the \
handler's calls during tests).";

const EVALUATE_SYSTEM: &str = "You evaluate application protocols that another agent proposes \
to this provider agent (ANP meta-protocol). The provider serves a protocol with a handler that \
validates each request, calls exactly one of the provider's capabilities (listed with their \
input and output JSON Schemas), and builds the response from the capability's result, the \
request, constants and the outcome (status codes, error messages).\n\
Decide one of:\n\
- \"accept\": one capability serves the protocol as written: every required capability input \
comes from a required request field, and every required response field can be filled.\n\
- \"counter\": a capability serves part of it: return the complete protocol document changed \
as little as possible so that the capability serves it (keep the proposer's names, sections, \
wording and test cases where they still hold) and a short modification summary.\n\
- \"reject\": no capability can serve it.\n\
Never accept what needs data no capability provides.\n\
Answer with one JSON object and nothing else: {\"decision\": \"accept\" | \"counter\" | \
\"reject\", \"reason\": \"one or two sentences\", \"capability\": \"<capability name; for accept \
and counter>\", \"counterProtocol\": \"<the complete markdown document; counter only>\", \
\"modificationSummary\": \"<what changed, as a markdown list; counter only>\"}.\n";

const HANDLER_SYSTEM: &str = "You write protocol handlers for a provider agent. A handler is \
JavaScript (ES2020) that runs in a sandbox (QuickJS in WebAssembly) under this contract:\n\
- It defines a global `function handle(request)` that receives the parsed request object and \
returns the response object.\n\
- Top-level code runs once, at publish time: it may define constants and helpers and must not \
call capabilities.\n\
- `host.call(name, args)` is the only way to reach the provider's capabilities: synchronous, \
it returns the capability's JSON result (possibly null) or throws an error whose `name` is \
\"CapabilityError\". Only capabilities listed in `grants` may be called; calling any other ends \
the handler.\n\
- There is no require, import, fetch, process, setTimeout or file system; console.log works.\n\
The handler validates the request against the protocol's request schema, answers invalid \
requests, missing data and capability failures as the protocol's Error Handling section says, \
and returns responses that match the response schema and satisfy every test case (the test \
cases' fixtures are the capability results it will receive).\n\
Answer with one JSON object and nothing else: {\"source\": \"<the JavaScript source>\", \
\"grants\": [\"<capability name>\", ...]}, where grants lists exactly the capabilities the \
source calls, by their declared names.";

const DRAFT_SYSTEM: &str = "You write application protocol documents that one agent proposes \
to another (ANP meta-protocol), for a requirement and the JSON Schemas of what the requester \
will send and wants back. Use those schemas (adding a `messageId` echoed in the response, a \
`status` object {\"code\", \"message\"} with HTTP-style codes, and nothing else), describe the \
process and error handling, and give test cases for success, not found and a malformed \
request.\n";

const TEST_CASES_SYSTEM: &str = "You review test cases another agent proposes for an agreed \
protocol (ANP meta-protocol). Accept them when every request and expected response is \
consistent with the protocol's schemas and error handling; counter-propose corrected test \
cases when some are wrong but fixable; reject them otherwise.\n\
Answer with one JSON object and nothing else: {\"decision\": \"accept\" | \"counter\" | \
\"reject\", \"reason\": \"one or two sentences\", \"testCases\": [<the complete corrected test \
cases; counter only>], \"modificationSummary\": \"<what changed; counter only>\"}. Test cases \
are objects {\"name\", \"description\", \"request\", \"expectedResponse\", \"fixtures\"}.";

fn capabilities_json(capabilities: &[DeclaredCapability]) -> String {
    serde_json::to_string_pretty(capabilities).unwrap_or_else(|_| "[]".into())
}

fn evaluate_prompt(doc: &ProtocolDoc, capabilities: &[DeclaredCapability]) -> String {
    format!(
        "The provider's capabilities (JSON):\n{}\n\nThe proposed protocol:\n<protocol>\n{}\n</protocol>",
        capabilities_json(capabilities),
        doc.text()
    )
}

fn generate_prompt(
    doc: &ProtocolDoc,
    capabilities: &[DeclaredCapability],
    mapping: Option<&Mapping>,
) -> String {
    let hint = match mapping {
        Some(m) => format!(
            "\n\nThe protocol was accepted for the capability `{}`.",
            m.capability
        ),
        None => String::new(),
    };
    format!(
        "The provider's capabilities (JSON):\n{}{hint}\n\nThe agreed protocol:\n<protocol>\n{}\n</protocol>\n\nWrite its handler.",
        capabilities_json(capabilities),
        doc.text()
    )
}

fn fix_prompt(
    doc: &ProtocolDoc,
    capabilities: &[DeclaredCapability],
    previous: &GeneratedHandler,
    failure: &str,
) -> String {
    format!(
        "The provider's capabilities (JSON):\n{}\n\nThe agreed protocol:\n<protocol>\n{}\n</protocol>\n\n\
         The current handler (grants: {}):\n<handler>\n{}\n</handler>\n\n\
         It failed:\n<failure>\n{}\n</failure>\n\n\
         Fix the handler so that it no longer fails and still follows the protocol. Return the \
         complete corrected handler.",
        capabilities_json(capabilities),
        doc.text(),
        serde_json::to_string(&previous.grants).unwrap_or_else(|_| "[]".into()),
        previous.source,
        failure
    )
}

// --- answer parsing and validation -------------------------------------------------------------

/// Parses the model's content as a JSON object, unwrapping one markdown fence if present.
fn json_object(content: &str) -> Result<Map<String, Value>, ModelAnswerError> {
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
fn validate_evaluation(
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

fn validate_handler(
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

fn validate_test_cases_verdict(object: &Map<String, Value>) -> Result<Verdict, ModelAnswerError> {
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

#[async_trait]
impl ProtocolReasoner for OpenAiProtocolReasoner {
    fn backend(&self) -> &'static str {
        "openai"
    }

    fn model_calls(&self) -> u64 {
        OpenAiProtocolReasoner::model_calls(self)
    }

    async fn evaluate(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
    ) -> Result<Evaluation, ProtocolReasonerError> {
        if capabilities.is_empty() {
            // Nothing to serve with: no need to ask.
            return Ok(Evaluation::Reject {
                reason: "this provider declares no capabilities".into(),
            });
        }
        let answer = self
            .ask_json(
                "evaluate",
                &format!("{EVALUATE_SYSTEM}{DOC_FORMAT}"),
                evaluate_prompt(doc, capabilities),
            )
            .await?;
        Ok(validate_evaluation(&answer, doc, capabilities)?)
    }

    async fn generate_handler(
        &self,
        doc: &ProtocolDoc,
        capabilities: &[DeclaredCapability],
        mapping: Option<&Mapping>,
    ) -> Result<GeneratedHandler, ProtocolReasonerError> {
        self.handler(
            "generate_handler",
            generate_prompt(doc, capabilities, mapping),
            capabilities,
        )
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
        let fixed = self
            .handler(
                "fix_handler",
                fix_prompt(doc, capabilities, previous, failure),
                capabilities,
            )
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
        let answer = self
            .ask_json(
                "draft",
                &format!(
                    "{DRAFT_SYSTEM}{DOC_FORMAT}\nAnswer with one JSON object and nothing else: \
                     {{\"protocol\": \"<the complete markdown document>\"}}."
                ),
                format!(
                    "Requirement:\n<requirement>\n{requirement}\n</requirement>\n\n\
                     What the requester sends (JSON Schema):\n{input_schema:#}\n\n\
                     What it wants back (JSON Schema):\n{output_schema:#}"
                ),
            )
            .await?;
        let text = req_str(&answer, "protocol")?;
        ProtocolDoc::parse(text).map_err(|e| ModelAnswerError::InvalidDraft {
            message: format!("{} ({})", e, e.code()),
        })?;
        Ok(text.to_owned())
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
        let answer = self
            .ask_json(
                "evaluate_test_cases",
                TEST_CASES_SYSTEM,
                format!(
                    "The agreed protocol:\n<protocol>\n{}\n</protocol>\n\nThe proposed test cases:\n<test-cases>\n{test_cases}\n</test-cases>",
                    doc.text()
                ),
            )
            .await?;
        Ok(validate_test_cases_verdict(&answer)?)
    }
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
}
