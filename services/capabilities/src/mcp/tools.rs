//! What a server's tools become, and what a tool's answer becomes.
//!
//! A listed tool becomes a capability named `prefix + tool name`, with the tool's description
//! (its title, or a sentence naming the tool and server, when it has none), its `inputSchema`,
//! its `outputSchema` (`{}`, anything, when it has none) and `read_only` from its `readOnlyHint`.
//!
//! A tool's answer becomes the capability's result by one rule, for discovered tools and
//! explicit bindings alike:
//! 1. `isError: true` is a [`CapabilityError::ToolError`] carrying the answer's text, never data;
//! 2. `structuredContent`, when the answer has it, is the result;
//! 3. otherwise, when every content block is text: the texts joined by newlines, parsed as JSON
//!    when they are JSON text, else kept as one string;
//! 4. otherwise (images, audio, resources): the content blocks themselves, as the JSON array MCP
//!    sends.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::load::check_name;
use crate::mcp::{McpBinding, Server};
use crate::{Binding, Capability, CapabilityError};

/// A tool as a server lists it, reduced to what a capability needs.
#[derive(Debug, Clone)]
pub(crate) struct ListedTool {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) input_schema: Value,
    pub(crate) output_schema: Option<Value>,
    pub(crate) read_only: bool,
}

impl ListedTool {
    /// Reads a tool of `tools/list` from its JSON form (the wire names), so nothing here
    /// depends on how the SDK models optional fields.
    pub(crate) fn from_wire(server: &str, tool: &Value) -> Option<ListedTool> {
        let name = tool.get("name")?.as_str()?.to_owned();
        let text = |key: &str| {
            tool.get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        };
        let description = text("description")
            .or_else(|| text("title"))
            .unwrap_or_else(|| format!("The tool `{name}` of the MCP server `{server}`."));
        let input_schema = tool
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"}));
        let output_schema = tool.get("outputSchema").filter(|s| s.is_object()).cloned();
        let read_only = tool
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Some(ListedTool {
            name,
            description,
            input_schema,
            output_schema,
            read_only,
        })
    }
}

/// The capabilities a server's listed tools become: those `tools` selects (all by default),
/// named with the prefix; and the tools the file names (in `tools` or in an explicit binding)
/// that the server does not list. A tool whose name or schemas cannot be a capability is left
/// out with a warning.
pub(crate) fn capabilities(
    server: &Arc<Server>,
    listed: &[ListedTool],
) -> (Vec<Arc<Capability>>, Vec<String>) {
    let config = &server.config;
    let named = config.tools.iter().flatten().chain(&config.bound_tools);
    let mut missing: Vec<String> = named
        .filter(|w| !listed.iter().any(|t| &t.name == *w))
        .cloned()
        .collect();
    missing.sort();
    missing.dedup();
    let mut out = Vec::new();
    for tool in listed {
        if config
            .tools
            .as_ref()
            .is_some_and(|wanted| !wanted.contains(&tool.name))
        {
            continue;
        }
        match capability(server, tool) {
            Ok(c) => out.push(Arc::new(c)),
            Err(why) => tracing::warn!(
                server = %config.name,
                tool = %tool.name,
                "the tool is not offered as a capability: {why}"
            ),
        }
    }
    (out, missing)
}

fn capability(server: &Arc<Server>, tool: &ListedTool) -> Result<Capability, String> {
    let name = format!("{}{}", server.config.prefix, tool.name);
    check_name(&name)?;
    if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("its inputSchema does not declare `\"type\": \"object\"`".to_owned());
    }
    let input_validator = compile(&tool.input_schema)
        .map_err(|e| format!("its inputSchema is not a usable JSON Schema: {e}"))?;
    let output_schema = tool
        .output_schema
        .clone()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let output_validator = compile(&output_schema)
        .map_err(|e| format!("its outputSchema is not a usable JSON Schema: {e}"))?;
    Ok(Capability {
        name,
        description: tool.description.clone(),
        input_schema: tool.input_schema.clone(),
        output_schema,
        read_only: tool.read_only,
        binding: Binding::Mcp(McpBinding {
            server: Arc::clone(server),
            tool: tool.name.clone(),
            timeout: server.config.call_timeout,
        }),
        input_validator,
        output_validator,
    })
}

/// Tools' schemas name their own dialect (`$schema`, often draft-07); 2020-12 when they don't.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// A `tools/call` answer (its JSON form) as the capability's result, by the rule in the
/// module docs.
pub(crate) fn result(capability: &str, answer: &Value) -> Result<Value, CapabilityError> {
    let blocks = answer
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if answer.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = texts(blocks).unwrap_or_else(|| Value::Array(blocks.to_vec()).to_string());
        return Err(CapabilityError::ToolError {
            capability: capability.to_owned(),
            message: if text.trim().is_empty() {
                "the tool reported an error without a message".to_owned()
            } else {
                text
            },
        });
    }
    if let Some(structured) = answer.get("structuredContent").filter(|v| !v.is_null()) {
        return Ok(structured.clone());
    }
    match texts(blocks) {
        Some(text) => Ok(serde_json::from_str(&text).unwrap_or(Value::String(text))),
        None => Ok(Value::Array(blocks.to_vec())),
    }
}

/// The text blocks joined by newlines, when every block is text (none at all: empty text).
fn texts(blocks: &[Value]) -> Option<String> {
    let mut parts = Vec::with_capacity(blocks.len());
    for block in blocks {
        if block.get("type").and_then(Value::as_str) != Some("text") {
            return None;
        }
        parts.push(
            block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        );
    }
    Some(parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(t: &str) -> Value {
        json!({"type": "text", "text": t})
    }

    #[test]
    fn structured_content_wins_over_text() {
        let answer = json!({"content": [text("{\"a\":2}")], "structuredContent": {"a": 1}});
        assert_eq!(result("c", &answer), Ok(json!({"a": 1})));
    }

    #[test]
    fn json_text_is_parsed_and_other_text_kept() {
        assert_eq!(
            result("c", &json!({"content": [text("{\"a\": [1, 2]}")]})),
            Ok(json!({"a": [1, 2]}))
        );
        assert_eq!(
            result("c", &json!({"content": [text("Echo: hi")]})),
            Ok(json!("Echo: hi"))
        );
        assert_eq!(
            result("c", &json!({"content": [text("one"), text("two")]})),
            Ok(json!("one\ntwo"))
        );
        assert_eq!(
            result("c", &json!({"content": [text("null")]})),
            Ok(json!(null))
        );
    }

    #[test]
    fn other_content_is_the_blocks_themselves() {
        let image = json!({"type": "image", "data": "AAAA", "mimeType": "image/png"});
        assert_eq!(
            result("c", &json!({"content": [text("x"), image.clone()]})),
            Ok(json!([text("x"), image]))
        );
    }

    #[test]
    fn is_error_is_an_error_with_the_text() {
        let error = result(
            "c",
            &json!({"content": [text("no such city")], "isError": true}),
        )
        .expect_err("an error");
        assert_eq!(error.code(), "tool_error");
        assert!(error.to_string().contains("no such city"), "{error}");
    }

    #[test]
    fn tools_read_from_the_wire() {
        let tool = ListedTool::from_wire(
            "s",
            &json!({"name": "t", "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": true}}),
        )
        .expect("a tool");
        assert!(tool.read_only);
        assert_eq!(tool.description, "The tool `t` of the MCP server `s`.");
        assert_eq!(tool.output_schema, None);
    }
}
