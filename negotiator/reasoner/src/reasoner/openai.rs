//! The OpenAI-compatible reasoner: chat completions with capabilities offered as tools.
//!
//! One answer is a bounded loop: send the conversation, and while the model asks for tools, run
//! them through [`Capabilities::invoke`] and send the results back, at most `max_tool_rounds`
//! times. The final assistant text is the answer. Every failure is a typed [`ReasonerError`]:
//! an empty or missing answer is an error, never an empty reply to the peer.
//!
//! Prompts, tool arguments and bodies are never logged above `debug`.

use std::sync::Arc;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::middleware::retry::OpenAIRetryLayer;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionTool, ChatCompletionTools,
    CreateChatCompletionRequest, CreateChatCompletionResponse, FunctionObject,
};

use async_trait::async_trait;
use parley_capabilities::{Capabilities, CapabilityError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower::Layer;
use tracing::Instrument;

use super::{CapabilityCall, NlAnswer, NlRequest, Reasoner, ReasonerError, Speaker};

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
/// configuration, retries and the per-request deadline. Shared by [`OpenAiReasoner`] and the
/// protocol backend ([`super::OpenAiProtocolReasoner`]) so both talk to the endpoint the same way.
pub(super) struct ChatClient {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
}

impl ChatClient {
    pub(super) fn new(config: OpenAiConfig) -> Result<Self, ReasonerError> {
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

    pub(super) fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// One chat-completions request under the configured deadline (retries included).
    pub(super) async fn complete(
        &self,
        request: CreateChatCompletionRequest,
    ) -> Result<CreateChatCompletionResponse, ReasonerError> {
        let after = Duration::from_millis(self.config.timeout_ms);
        let span = tracing::debug_span!("llm.complete", model = %self.config.model);
        match tokio::time::timeout(after, self.client.chat().create(request).instrument(span)).await
        {
            Err(_) => Err(ReasonerError::Timeout { after }),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(map_error(e, after)),
        }
    }
}

pub struct OpenAiReasoner {
    chat: ChatClient,
    capabilities: Arc<Capabilities>,
    tools: Vec<ChatCompletionTools>,
}

impl std::fmt::Debug for OpenAiReasoner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiReasoner")
            .field("config", self.chat.config())
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl OpenAiReasoner {
    pub fn new(
        config: OpenAiConfig,
        capabilities: Arc<Capabilities>,
    ) -> Result<Self, ReasonerError> {
        let chat = ChatClient::new(config)?;
        let tools = capabilities
            .describe()
            .into_iter()
            .map(|d| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: d.name,
                        description: Some(d.description),
                        parameters: Some(d.input_schema),
                        strict: None,
                    },
                })
            })
            .collect();
        Ok(Self {
            chat,
            capabilities,
            tools,
        })
    }

    fn system_prompt(&self, language: &str) -> String {
        let agent = self.capabilities.agent();
        format!(
            "You are {name}, an agent answering other agents and people over NLIP. {description}\n\
             Answer in {language}, concisely. Use the tools to obtain facts and never invent data \
             a tool could provide; if a tool returns an error or null, say so. If no tool fits \
             the request, say plainly that you cannot do it.\n\nYour capabilities:\n{summary}",
            name = agent.name,
            description = agent.description,
            summary = self.capabilities.summary(),
        )
    }

    /// One chat-completions request under the configured deadline.
    async fn complete(
        &self,
        messages: &[ChatCompletionRequestMessage],
    ) -> Result<CreateChatCompletionResponse, ReasonerError> {
        let config = self.chat.config();
        let request = CreateChatCompletionRequest {
            model: config.model.clone(),
            messages: messages.to_vec(),
            tools: (!self.tools.is_empty()).then(|| self.tools.clone()),
            temperature: config.temperature,
            ..Default::default()
        };
        self.chat.complete(request).await
    }

    /// Runs one tool call and returns the tool message content sent back to the model.
    async fn run_tool(
        &self,
        call: &ChatCompletionMessageToolCall,
        calls: &mut Vec<CapabilityCall>,
    ) -> String {
        let name = &call.function.name;
        let (arguments, result) = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(arguments) => {
                let result = self.capabilities.invoke(name, arguments.clone()).await;
                (arguments, result)
            }
            // Models sometimes emit broken JSON; tell the model, it usually corrects itself.
            Err(e) => (
                Value::String(call.function.arguments.clone()),
                Err(CapabilityError::InvalidArguments {
                    capability: name.clone(),
                    message: format!("arguments are not valid JSON: {e}"),
                }),
            ),
        };
        tracing::debug!(
            capability = %name,
            ok = result.is_ok(),
            code = result.as_ref().err().map(CapabilityError::code),
            "tool call"
        );
        let content = match &result {
            Ok(value) => value.to_string(),
            Err(e) => json!({"error": {"code": e.code(), "message": e.to_string()}}).to_string(),
        };
        calls.push(CapabilityCall {
            capability: name.clone(),
            arguments,
            result,
        });
        content
    }
}

fn map_error(error: OpenAIError, after: Duration) -> ReasonerError {
    match error {
        OpenAIError::Reqwest(e) if e.is_timeout() => ReasonerError::Timeout { after },
        OpenAIError::Reqwest(e) => ReasonerError::Http {
            status: e.status().map(|s| s.as_u16()),
            message: error_chain(&e),
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

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(super) fn system(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
        content: ChatCompletionRequestSystemMessageContent::Text(text),
        name: None,
    })
}

pub(super) fn user(text: String) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
        content: ChatCompletionRequestUserMessageContent::Text(text),
        name: None,
    })
}

fn assistant(
    text: Option<String>,
    tool_calls: Option<Vec<ChatCompletionMessageToolCalls>>,
) -> ChatCompletionRequestMessage {
    ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
        content: text.map(ChatCompletionRequestAssistantMessageContent::Text),
        tool_calls,
        ..Default::default()
    })
}

#[async_trait]
impl Reasoner for OpenAiReasoner {
    fn backend(&self) -> &'static str {
        "openai"
    }

    async fn answer(&self, req: NlRequest) -> Result<NlAnswer, ReasonerError> {
        let mut messages = vec![system(self.system_prompt(&req.language))];
        for turn in req.history {
            messages.push(match turn.speaker {
                Speaker::Peer => user(turn.text),
                Speaker::Agent => assistant(Some(turn.text), None),
            });
        }
        messages.push(user(req.text));

        let mut capability_calls = Vec::new();
        let mut model_calls = 0;
        let mut tool_rounds = 0;
        loop {
            let response = self.complete(&messages).await?;
            model_calls += 1;
            let choice = response.choices.into_iter().next().ok_or_else(|| {
                ReasonerError::MalformedResponse("the completion has no choices".into())
            })?;
            let message = choice.message;
            let tool_calls = message.tool_calls.unwrap_or_default();
            if tool_calls.is_empty() {
                // A refusal is a genuine answer from the model: pass it on as text.
                let text = message
                    .content
                    .filter(|t| !t.trim().is_empty())
                    .or(message.refusal.filter(|t| !t.trim().is_empty()))
                    .ok_or(ReasonerError::EmptyAnswer)?;
                return Ok(NlAnswer {
                    text,
                    capability_calls,
                    model_calls,
                });
            }
            let limit = self.chat.config().max_tool_rounds;
            if tool_rounds == limit {
                return Err(ReasonerError::TooManyToolRounds { limit });
            }
            tool_rounds += 1;

            let mut results = Vec::with_capacity(tool_calls.len());
            for call in &tool_calls {
                let ChatCompletionMessageToolCalls::Function(call) = call else {
                    // Only function tools are offered; anything else is a broken response.
                    return Err(ReasonerError::MalformedResponse(
                        "the model called a custom tool, but only function tools were offered"
                            .into(),
                    ));
                };
                let content = self.run_tool(call, &mut capability_calls).await;
                results.push(ChatCompletionRequestMessage::Tool(
                    ChatCompletionRequestToolMessage {
                        content: ChatCompletionRequestToolMessageContent::Text(content),
                        tool_call_id: call.id.clone(),
                    },
                ));
            }
            messages.push(assistant(message.content, Some(tool_calls)));
            messages.extend(results);
        }
    }
}
