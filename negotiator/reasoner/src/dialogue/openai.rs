//! The OpenAI-compatible reasoner: chat completions with capabilities offered as tools.
//!
//! One answer is a bounded loop: send the conversation, and while the model asks for tools, run
//! them through [`Capabilities::invoke`] and send the results back, at most `max_tool_rounds`
//! times. The final assistant text is the answer. Every failure is a typed [`ReasonerError`]:
//! an empty or missing answer is an error, never an empty reply to the peer.
//!
//! What the peer wrote, the conversation's earlier messages and every tool result reach the
//! model as data in JSON envelopes under a system prompt that depends on the operator's
//! configuration alone (`crate::untrusted`): a peer's text never becomes an instruction.
//!
//! Prompts, tool arguments and bodies are never logged above `debug`.

use std::sync::Arc;

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionTool, ChatCompletionTools,
    CreateChatCompletionRequest, CreateChatCompletionResponse, FunctionObject,
};
use async_trait::async_trait;
use parley_capabilities::{Capabilities, CapabilityError};
use serde_json::{Value, json};

use super::{CapabilityCall, NlAnswer, NlRequest, Reasoner, Speaker};
use crate::ReasonerError;
use crate::chat::{ChatClient, OpenAiConfig, system, user};
use crate::untrusted;
use crate::usage::{ModelPurpose, UsageMeter};

/// The `openai` dialogue backend. See the module docs.
pub struct OpenAiReasoner {
    chat: Arc<ChatClient>,
    capabilities: Arc<Capabilities>,
    tools: Arc<Vec<ChatCompletionTools>>,
    /// Where this view counts its model calls ([`Reasoner::metered`]); `None` for the backend
    /// itself.
    meter: Option<UsageMeter>,
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
        let chat = Arc::new(ChatClient::new(config)?);
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
            tools: Arc::new(tools),
            meter: None,
        })
    }

    /// The system prompt: the operator's words only (the agent, its capabilities) and the
    /// rules on the data that follows; nothing a peer sent, not even the language it asked for.
    fn system_prompt(&self) -> String {
        let agent = self.capabilities.agent();
        format!(
            "You are {name}, an agent answering other agents and people over NLIP. {description}\n\
             Answer concisely. Use the tools to obtain facts and never invent data a tool could \
             provide; if a tool returns an error or null, say so. If no tool fits the request, \
             say plainly that you cannot do it.\n\n{rules}\n\nYour capabilities:\n{summary}",
            name = agent.name,
            description = agent.description,
            rules = untrusted::JSON_DATA_RULES,
            summary = self.capabilities.summary(),
        )
    }

    /// One chat-completions request under the configured deadline.
    async fn complete(
        &self,
        messages: &[ChatCompletionRequestMessage],
    ) -> Result<CreateChatCompletionResponse, ReasonerError> {
        let config = self.chat.config();
        // Only the tools the peer being answered may have called (`Capabilities::permits`).
        let tools: Vec<ChatCompletionTools> = self
            .tools
            .iter()
            .filter(|tool| match tool {
                ChatCompletionTools::Function(f) => self.capabilities.permits(&f.function.name),
                _ => true,
            })
            .cloned()
            .collect();
        let request = CreateChatCompletionRequest {
            model: config.model.clone(),
            messages: messages.to_vec(),
            tools: (!tools.is_empty()).then_some(tools),
            temperature: config.temperature,
            ..Default::default()
        };
        self.chat
            .complete(ModelPurpose::Answer, request, self.meter.as_ref())
            .await
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
            Ok(value) => untrusted::capability_output(name, Ok(value)),
            Err(e) => untrusted::capability_output(
                name,
                Err(json!({"code": e.code(), "message": e.to_string()})),
            ),
        };
        calls.push(CapabilityCall {
            capability: name.clone(),
            arguments,
            result,
        });
        content
    }
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

    fn metered(&self, meter: &UsageMeter) -> Option<Arc<dyn Reasoner>> {
        Some(Arc::new(OpenAiReasoner {
            chat: self.chat.clone(),
            capabilities: self.capabilities.clone(),
            tools: self.tools.clone(),
            meter: Some(meter.clone()),
        }))
    }

    async fn answer(&self, req: NlRequest) -> Result<NlAnswer, ReasonerError> {
        let mut messages = vec![system(self.system_prompt())];
        for turn in req.history {
            messages.push(match turn.speaker {
                Speaker::Peer => user(untrusted::peer_turn(&turn.text)),
                // What this agent answered before: the model's own words.
                Speaker::Agent => assistant(Some(turn.text), None),
            });
        }
        messages.push(user(untrusted::peer_message(&req.text, &req.language)));

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
                    failure: None,
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
