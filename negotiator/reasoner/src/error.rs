//! [`ReasonerError`]: why a reasoner, or the model endpoint behind one, could not answer.

use std::time::Duration;

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
