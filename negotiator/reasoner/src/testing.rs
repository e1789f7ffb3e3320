//! Test support (feature `testing`): a scripted OpenAI-compatible chat-completions server.
//!
//! [`ScriptedOpenAi`] listens on `127.0.0.1:0`, answers `POST /v1/chat/completions` with the next
//! [`ScriptedReply`] of its queue (then with the fallback reply, by default a 500 saying the
//! script ran out), and records every request body it received, so tests can assert both what
//! the reasoner sent (tools offered, tool results returned) and how it handled each answer.
//!
//! ```no_run
//! # async fn demo() {
//! use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
//! let server = ScriptedOpenAi::start().await;
//! server.push(ScriptedReply::tool_call("getProductInfo", serde_json::json!({"productId": "P12345"})));
//! server.push(ScriptedReply::text("The laptop costs 1299.99 USD."));
//! // OpenAiConfig::new(server.base_url(), "scripted-model") ...
//! # }
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum ScriptedReply {
    /// Any status with a JSON body.
    Json { status: u16, body: Value },
    /// Any status with a raw body (for garbage).
    Raw { status: u16, body: String },
    /// The inner reply, after a delay (for timeouts).
    Delayed(Duration, Box<ScriptedReply>),
}

fn completion(message: Value, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
}

impl ScriptedReply {
    /// A completion whose assistant message is `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Json {
            status: 200,
            body: completion(json!({"role": "assistant", "content": text.into()}), "stop"),
        }
    }

    /// A completion asking for one function tool call (id `call_0`).
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls(&[(name, arguments)])
    }

    /// A completion asking for several tool calls (ids `call_0`, `call_1`, ...). Arguments are
    /// sent as JSON text, as the OpenAI API does; pass a `Value::String` to send raw text.
    pub fn tool_calls(calls: &[(&str, Value)]) -> Self {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, arguments))| {
                let arguments = match arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                json!({
                    "id": format!("call_{i}"),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments}
                })
            })
            .collect();
        Self::Json {
            status: 200,
            body: completion(
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                "tool_calls",
            ),
        }
    }

    /// A well-formed completion with an empty `choices` array.
    pub fn no_choices() -> Self {
        let mut body = completion(json!({}), "stop");
        body["choices"] = json!([]);
        Self::Json { status: 200, body }
    }

    /// An HTTP error with an OpenAI-style error body.
    pub fn error(status: u16, message: &str) -> Self {
        Self::Json {
            status,
            body: json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
        }
    }

    /// A 200 response whose body is `body`, verbatim.
    pub fn raw(body: impl Into<String>) -> Self {
        Self::Raw {
            status: 200,
            body: body.into(),
        }
    }

    /// This reply after `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        Self::Delayed(delay, Box::new(self))
    }

    /// This completion reporting `usage` as `(prompt_tokens, completion_tokens)`, or with no
    /// `usage` at all (`None`), as some OpenAI-compatible servers answer. Every completion
    /// reports one prompt and one completion token unless told otherwise; replies that are not a
    /// completion stay as they are.
    pub fn with_usage(self, usage: Option<(u32, u32)>) -> Self {
        match self {
            Self::Json { status, mut body } if body.get("usage").is_some() => {
                match usage {
                    Some((prompt, completion)) => {
                        body["usage"] = json!({
                            "prompt_tokens": prompt,
                            "completion_tokens": completion,
                            "total_tokens": prompt + completion,
                        });
                    }
                    None => {
                        if let Some(object) = body.as_object_mut() {
                            object.remove("usage");
                        }
                    }
                }
                Self::Json { status, body }
            }
            Self::Delayed(delay, inner) => Self::Delayed(delay, Box::new(inner.with_usage(usage))),
            other => other,
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The JSON body (`Value::String` with the raw text when it was not JSON).
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

#[derive(Debug)]
struct Script {
    queue: VecDeque<ScriptedReply>,
    fallback: ScriptedReply,
    requests: Vec<RecordedRequest>,
}

/// The scripted server. Dropping it stops the server.
#[derive(Debug)]
pub struct ScriptedOpenAi {
    base_url: String,
    script: Arc<Mutex<Script>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedOpenAi {
    /// Starts the server on `127.0.0.1:0` with an empty script.
    ///
    /// # Panics
    /// When no loopback port can be bound (a broken test environment).
    pub async fn start() -> Self {
        let script = Arc::new(Mutex::new(Script {
            queue: VecDeque::new(),
            fallback: ScriptedReply::error(500, "scripted server: script exhausted"),
            requests: Vec::new(),
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(serve))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("tests need a loopback port");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let task = tokio::spawn(async move {
            // Ends when the test drops the server (abort) or the runtime shuts down.
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            script,
            task,
        }
    }

    /// `http://127.0.0.1:PORT/v1`, the `base_url` for `OpenAiConfig`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// Appends a reply to the queue.
    pub fn push(&self, reply: ScriptedReply) {
        self.lock().queue.push_back(reply);
    }

    /// The reply served whenever the queue is empty (default: a 500 "script exhausted").
    pub fn set_fallback(&self, reply: ScriptedReply) {
        self.lock().fallback = reply;
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script
            .lock()
            .expect("no code panics while holding the script lock")
    }
}

impl Drop for ScriptedOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    State(script): State<Arc<Mutex<Script>>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let reply = {
        let mut script = script
            .lock()
            .expect("no code panics while holding the script lock");
        script.requests.push(RecordedRequest {
            body: serde_json::from_str(&body).unwrap_or(Value::String(body)),
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
        let fallback = script.fallback.clone();
        script.queue.pop_front().unwrap_or(fallback)
    };
    respond(reply).await
}

async fn respond(mut reply: ScriptedReply) -> Response {
    loop {
        match reply {
            ScriptedReply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            ScriptedReply::Json { status, body } => {
                return (status_code(status), axum::Json(body)).into_response();
            }
            ScriptedReply::Raw { status, body } => {
                return (
                    status_code(status),
                    [("content-type", "application/json")],
                    body,
                )
                    .into_response();
            }
        }
    }
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
