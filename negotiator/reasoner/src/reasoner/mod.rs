//! Reasoners: the part of a Parley provider that understands natural language.
//!
//! A [`Reasoner`] answers natural-language NLIP messages ([`NlRequest`] → [`NlAnswer`]), using
//! the operator's [`Capabilities`] where its backend can. Two backends exist:
//!
//! | backend | network | what it does |
//! | --- | --- | --- |
//! | [`BuiltinReasoner`] (`builtin`) | none | deterministic: describes the capabilities, runs explicit `<capability> <JSON arguments>` invocations, and says plainly what it cannot do without a model |
//! | [`OpenAiReasoner`] (`openai`) | an OpenAI-compatible chat-completions endpoint | answers with the model, offering capabilities as tools and really calling them |
//!
//! The server picks one with [`ReasonerConfig`] and [`build`], and holds it as
//! `Arc<dyn Reasoner>`.
//!
//! The same config picks the meta-protocol's [`crate::ProtocolReasoner`] through
//! [`build_protocol_reasoner`]: `builtin` → [`crate::BuiltinProtocolReasoner`], `openai` →
//! [`HybridProtocolReasoner`] (built-in first, [`OpenAiProtocolReasoner`] when the built-in
//! backend cannot decide).
//!
//! # Extending the trait
//! The trait will grow protocol evaluation and handler generation. Add new operations as methods
//! with a *default* body returning [`ReasonerError::Unsupported`] when a backend may reasonably
//! lack them, so each backend opts in explicitly; keep every method `&self` (backends are shared
//! between connections, with no lock around them) and make failures typed
//! [`ReasonerError`]s — a backend failure must reach the caller as an error, never as an empty
//! or made-up result.

mod builtin;
mod hybrid_protocol;
mod openai;
mod openai_protocol;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parley_capabilities::{Capabilities, CapabilityError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use builtin::BuiltinReasoner;
pub use hybrid_protocol::{HybridProtocolReasoner, build_protocol_reasoner};
pub use openai::{ApiKey, OpenAiConfig, OpenAiReasoner};
pub use openai_protocol::{ModelAnswerError, OpenAiProtocolReasoner};

/// Who said a [`DialogueTurn`] of the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// The remote agent or user talking to us.
    Peer,
    /// This agent.
    Agent,
}

/// One earlier message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DialogueTurn {
    pub speaker: Speaker,
    pub text: String,
}

impl DialogueTurn {
    pub fn peer(text: impl Into<String>) -> Self {
        Self {
            speaker: Speaker::Peer,
            text: text.into(),
        }
    }
    pub fn agent(text: impl Into<String>) -> Self {
        Self {
            speaker: Speaker::Agent,
            text: text.into(),
        }
    }
}

/// A natural-language message to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlRequest {
    /// The message text (markdown is fine).
    pub text: String,
    /// The language of the NLIP text format, e.g. `"english"`; the answer should use it.
    pub language: String,
    /// Prior turns of the same conversation, oldest first, without the current message.
    pub history: Vec<DialogueTurn>,
}

impl NlRequest {
    /// An English request with no history.
    pub fn english(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            language: "english".to_owned(),
            history: Vec::new(),
        }
    }
}

/// One capability invocation made while answering, for audit logs and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityCall {
    pub capability: String,
    /// The arguments as requested (the raw text, as a JSON string, when they were not JSON).
    pub arguments: Value,
    pub result: Result<Value, CapabilityError>,
}

/// The answer to an [`NlRequest`]. `text` is never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct NlAnswer {
    pub text: String,
    /// Capabilities invoked while answering, in order.
    pub capability_calls: Vec<CapabilityCall>,
    /// Language-model requests made (0 for the built-in backend).
    pub model_calls: u32,
}

/// Why a reasoner could not answer. [`code`](Self::code) is stable.
#[derive(Debug, thiserror::Error)]
pub enum ReasonerError {
    /// The backend configuration is unusable (empty model name, bad URL, ...).
    #[error("invalid reasoner configuration: {0}")]
    InvalidConfig(String),
    /// The model endpoint could not be reached or answered with an HTTP error.
    #[error("language model request failed{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Http {
        status: Option<u16>,
        message: String,
    },
    /// The model endpoint did not answer in time.
    #[error("language model request timed out after {} ms", after.as_millis())]
    Timeout { after: Duration },
    /// The endpoint answered something that is not a usable chat completion (not JSON, no
    /// choices, an unknown kind of tool call, ...).
    #[error("malformed language model response: {0}")]
    MalformedResponse(String),
    /// The model answered with neither text nor tool calls.
    #[error("the language model returned an empty answer")]
    EmptyAnswer,
    /// The model kept asking for tools beyond the configured number of rounds.
    #[error("the language model still requested tools after {limit} tool rounds")]
    TooManyToolRounds { limit: u32 },
    /// The backend does not implement this operation.
    #[error("the {backend} reasoner does not support {operation}")]
    Unsupported {
        backend: &'static str,
        operation: &'static str,
    },
}

impl ReasonerError {
    /// Stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidConfig(_) => "invalid_config",
            Self::Http { .. } => "model_http_error",
            Self::Timeout { .. } => "model_timeout",
            Self::MalformedResponse(_) => "model_malformed_response",
            Self::EmptyAnswer => "model_empty_answer",
            Self::TooManyToolRounds { .. } => "too_many_tool_rounds",
            Self::Unsupported { .. } => "unsupported",
        }
    }
}

/// A reasoning backend. Implementations are shared (`Arc<dyn Reasoner>`) across connections.
#[async_trait]
pub trait Reasoner: Send + Sync + Debug {
    /// Short stable backend name: `"builtin"`, `"openai"`.
    fn backend(&self) -> &'static str;

    /// Answers a natural-language message, invoking capabilities as needed. An `Ok` answer
    /// always has non-empty text; anything the backend cannot produce is an `Err`.
    async fn answer(&self, req: NlRequest) -> Result<NlAnswer, ReasonerError>;
}

/// Which backend to run, as written in the server configuration:
/// `{ backend = "builtin" }` or `{ backend = "openai", base_url = ..., model = ..., ... }`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum ReasonerConfig {
    #[default]
    Builtin,
    #[serde(rename = "openai")]
    OpenAi(OpenAiConfig),
}

/// Builds the configured backend over the given capabilities.
pub fn build(
    config: ReasonerConfig,
    capabilities: Arc<Capabilities>,
) -> Result<Arc<dyn Reasoner>, ReasonerError> {
    Ok(match config {
        ReasonerConfig::Builtin => Arc::new(BuiltinReasoner::new(capabilities)),
        ReasonerConfig::OpenAi(config) => Arc::new(OpenAiReasoner::new(config, capabilities)?),
    })
}
