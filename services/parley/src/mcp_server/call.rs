//! Performing a tool call, and what its result or error becomes.

use std::time::Duration;

use parley_nlip::ErrorInfo;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};

use super::tools::{ProtocolTool, Shape, Target, Tools};
use crate::error::ApiError;
use crate::peer::Caller;

/// Calls `target` with `arguments` for `caller`, within `timeout`. Every failure is a result
/// with `isError: true` (see the module docs of `mcp_server`), a target the caller may not use
/// among them (`forbidden`).
pub(super) async fn perform(
    tools: &Tools,
    target: Target,
    arguments: JsonObject,
    caller: &Caller,
    timeout: Duration,
) -> CallToolResult {
    let (kind, output, answer) = match target {
        Target::Capability { name, output } => {
            let capabilities = tools.agent.capabilities();
            let answer = within(timeout, async {
                capabilities
                    .invoke(&name, Value::Object(arguments))
                    .await
                    .map_err(|e| ApiError::capability(&e).to_info())
            });
            ("capability", output, answer.await)
        }
        Target::Protocol(protocol) => {
            let answer = within(timeout, serve(tools, &protocol, arguments, caller));
            ("protocol", protocol.output, answer.await)
        }
    };
    crate::metrics::mcp_tool_call(kind, if answer.is_ok() { "ok" } else { "error" });
    match answer {
        Ok(value) => CallToolResult::structured(shaped(output, value)),
        // As text only: a result's `structuredContent` must match the tool's output schema,
        // which an error does not, and clients check that even when `isError` is set.
        Err(error) => CallToolResult::error(vec![ContentBlock::text(
            json!({"error": { "code": error.code, "message": error.message }}).to_string(),
        )]),
    }
}

/// One application message of the protocol, answered by its active handler as an NLIP one is.
async fn serve(
    tools: &Tools,
    protocol: &ProtocolTool,
    mut arguments: JsonObject,
    caller: &Caller,
) -> Result<Value, ErrorInfo> {
    let access = tools.agent.access();
    let hash = protocol.hash.to_string();
    access
        .may_call_protocol(caller, &hash)
        .await
        .map_err(|e| e.to_info())?;
    let request = match protocol.input {
        Shape::Object => Value::Object(arguments),
        Shape::Wrapped(field) => arguments.remove(field).ok_or_else(|| {
            ErrorInfo::new(
                "invalid_arguments",
                format!("this tool takes the protocol's request in the field `{field}`"),
            )
            .with_field(field)
        })?,
    };
    let peer = caller.party();
    let answer = tools.agent.provider().application(
        &protocol.hash,
        &request,
        &peer,
        tokio::runtime::Handle::current(),
    );
    Box::pin(answer).await.map_err(|e| e.to_info())
}

/// `call` under the request timeout: one still running then is dropped, and is `timeout`.
async fn within(
    timeout: Duration,
    call: impl Future<Output = Result<Value, ErrorInfo>>,
) -> Result<Value, ErrorInfo> {
    match tokio::time::timeout(timeout, call).await {
        Ok(answer) => answer,
        Err(_) => {
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            Err(ApiError::Timeout(ms).to_info())
        }
    }
}

/// The tool's structured content: the value, or the value in its wrapper's field.
fn shaped(shape: Shape, value: Value) -> Value {
    match shape {
        Shape::Object => value,
        Shape::Wrapped(field) => json!({ field: value }),
    }
}
