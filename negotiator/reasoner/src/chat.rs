//! The OpenAI-compatible chat-completions endpoint, as both model backends use it: its settings
//! ([`OpenAiConfig`], with the [`ApiKey`] that never shows in logs) and [`ChatClient`], one
//! request under the configured deadline and retries, its failures mapped to [`ReasonerError`]s,
//! its cost (the response's `usage`) counted in the caller's [`UsageMeter`].
//!
//! Bodies are never logged: a response body the client cannot read may echo the prompt, so a
//! deserialisation failure keeps only the parser's message.

use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::middleware::retry::OpenAIRetryLayer;
use async_openai::types::chat::{
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, CreateChatCompletionRequest,
    CreateChatCompletionResponse,
};
use serde::{Deserialize, Serialize};
use tower::Layer;
use tracing::Instrument;

use crate::ReasonerError;
use crate::usage::{ModelPurpose, TokenCount, UsageMeter};

/// An API key. Its `Debug` never shows the value, so configs can be logged.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
    /// The secret itself; only for the Authorization header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Settings of the `openai` backend. Any OpenAI-compatible endpoint works (OpenAI, Azure OpenAI
/// through a compatible gateway, vLLM, llama.cpp, Ollama, LiteLLM, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// Base URL up to and including the version, e.g. `https://api.openai.com/v1`; the
    /// client appends `/chat/completions`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer ...`; local servers often need none.
    #[serde(default)]
    pub api_key: Option<ApiKey>,
    /// Deadline of one model request, retries included.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How many times the model may ask for tools within one answer.
    #[serde(default = "default_max_tool_rounds")]
    pub max_tool_rounds: u32,
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Retries of a request answered 429/5xx or refused at connect, with exponential backoff.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
}

fn default_timeout_ms() -> u64 {
    60_000
}
fn default_max_tool_rounds() -> u32 {
    4
}
fn default_max_retries() -> u32 {
    2
}

impl OpenAiConfig {
    /// A config with defaults for everything but the endpoint and model.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout_ms: default_timeout_ms(),
            max_tool_rounds: default_max_tool_rounds(),
            temperature: None,
            max_retries: default_max_retries(),
        }
    }
}

/// The async-openai client for one [`OpenAiConfig`]: validation, explicit (environment-free)
/// configuration, retries and the per-request deadline. Shared by the dialogue backend
/// ([`crate::OpenAiReasoner`]) and the protocol backend ([`crate::OpenAiProtocolReasoner`]) so
/// both talk to the endpoint the same way.
pub(crate) struct ChatClient {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
}

impl ChatClient {
    pub(crate) fn new(config: OpenAiConfig) -> Result<Self, ReasonerError> {
        if config.model.trim().is_empty() {
            return Err(ReasonerError::InvalidConfig(
                "`model` must not be empty".into(),
            ));
        }
        match reqwest::Url::parse(&config.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => {
                return Err(ReasonerError::InvalidConfig(format!(
                    "`base_url` {:?} is not an http(s) URL",
                    config.base_url
                )));
            }
        }
        if config.timeout_ms == 0 {
            return Err(ReasonerError::InvalidConfig(
                "`timeout_ms` must be > 0".into(),
            ));
        }
        if let Some(t) = config.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ReasonerError::InvalidConfig(format!(
                "`temperature` {t} is outside 0..=2"
            )));
        }
        let timeout = Duration::from_millis(config.timeout_ms);
        let http = reqwest::Client::builder()
            // Backstop only: `complete` applies the real deadline around retries too.
            .timeout(timeout)
            .build()
            .map_err(|e| ReasonerError::InvalidConfig(format!("HTTP client: {e}")))?;
        // Everything set explicitly: OpenAIConfig::default() reads OPENAI_* environment
        // variables, and libraries must not take configuration from the environment.
        let openai = OpenAIConfig::new()
            .with_api_base(config.base_url.trim_end_matches('/'))
            .with_api_key(config.api_key.as_ref().map_or("", ApiKey::expose))
            .with_org_id("")
            .with_project_id("");
        let retrying = OpenAIRetryLayer::new(config.max_retries as usize)
            .layer(ReqwestService::new(http.clone()));
        let client = Client::with_config(openai)
            .with_http_client(http)
            .with_http_service(retrying);
        Ok(Self { client, config })
    }

    pub(crate) fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// One chat-completions request under the configured deadline (retries included), in a
    /// `model.call` span naming its purpose and the model, with the tokens the response reported
    /// (or the error's code) recorded when it ends. The call is counted in `meter`, when there
    /// is one, whatever its outcome: a response without `usage`, or no response, counts as a call
    /// with unknown tokens. The request's messages are never recorded.
    pub(crate) async fn complete(
        &self,
        purpose: ModelPurpose,
        request: CreateChatCompletionRequest,
        meter: Option<&UsageMeter>,
    ) -> Result<CreateChatCompletionResponse, ReasonerError> {
        let span = tracing::info_span!(
            "model.call",
            purpose = purpose.as_str(),
            model = %self.config.model,
            code = tracing::field::Empty,
            prompt_tokens = tracing::field::Empty,
            completion_tokens = tracing::field::Empty,
        );
        let after = Duration::from_millis(self.config.timeout_ms);
        let chat = self.client.chat();
        let call = tokio::time::timeout(after, chat.create(request));
        let result = match call.instrument(span.clone()).await {
            Err(_) => Err(ReasonerError::Timeout { after }),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(map_error(e, after)),
        };
        let tokens = match &result {
            Ok(response) => response.usage.as_ref().map(|u| TokenCount {
                prompt: u64::from(u.prompt_tokens),
                completion: u64::from(u.completion_tokens),
            }),
            Err(e) => {
                span.record("code", e.code());
                None
            }
        };
        if let Some(t) = tokens {
            span.record("prompt_tokens", t.prompt);
            span.record("completion_tokens", t.completion);
        }
        if let Some(meter) = meter {
            meter.record(purpose, tokens);
        }
        result
    }
}

fn map_error(error: OpenAIError, after: Duration) -> ReasonerError {
    match error {
        OpenAIError::Reqwest(e) if e.is_timeout() => ReasonerError::Timeout { after },
        OpenAIError::Reqwest(e) => ReasonerError::Http {
            status: e.status().map(|s| s.as_u16()),
            message: parley_capabilities::error_chain(&e),
        },
        OpenAIError::ApiError(e) => ReasonerError::Http {
            status: Some(e.status_code.as_u16()),
            message: e.api_error.message,
        },
        // The body is deliberately left out: it may echo the prompt.
        OpenAIError::JSONDeserialize(e, _body) => {
            ReasonerError::MalformedResponse(format!("not a chat completion: {e}"))
        }
        other => ReasonerError::Http {
            status: None,
            message: other.to_string(),
        },
    }
}

pub(crate) fn system(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
        content: ChatCompletionRequestSystemMessageContent::Text(text),
        name: None,
    })
}

pub(crate) fn user(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
        content: ChatCompletionRequestUserMessageContent::Text(text),
        name: None,
    })
}
