//! What becomes a tool, and which tool a name calls.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use parley_anp::{ProtocolDoc, ProtocolHash};
use parley_capabilities::{AgentInfo, Capability};
use rmcp::ErrorData;
use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use crate::access::Action;
use crate::agent::Agent;
use crate::error::ApiError;
use crate::peer::Caller;

/// How a tool's value relates to the schema it was declared with (see the module docs of
/// `mcp_server`): as it is, or wrapped in an object's one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Object,
    /// In the field of this name.
    Wrapped(&'static str),
}

/// The field a wrapped output travels in.
pub(super) const RESULT: &str = "result";
/// The field a wrapped protocol request travels in.
pub(super) const REQUEST: &str = "request";

impl Shape {
    fn of(schema: &Value, field: &'static str) -> Shape {
        if schema.get("type").and_then(Value::as_str) == Some("object") {
            Shape::Object
        } else {
            Shape::Wrapped(field)
        }
    }

    /// The schema as the tool declares it: itself, or an object with the one field.
    fn declare(self, schema: &Value) -> Value {
        match self {
            Shape::Object => schema.clone(),
            Shape::Wrapped(field) => wrap_schema(schema, field),
        }
    }
}

/// An object schema whose one, required `field` has `schema`. The dialect and the definitions
/// move to the new root, where `$ref`s such as `#/$defs/x` look for them.
fn wrap_schema(schema: &Value, field: &str) -> Value {
    let mut inner = schema.clone();
    let mut root = Map::new();
    if let Some(inner) = inner.as_object_mut() {
        for key in ["$schema", "$defs", "definitions"] {
            if let Some(moved) = inner.remove(key) {
                root.insert(key.to_owned(), moved);
            }
        }
    }
    root.insert("type".into(), json!("object"));
    root.insert("properties".into(), json!({ field: inner }));
    root.insert("required".into(), json!([field]));
    root.insert("additionalProperties".into(), json!(false));
    Value::Object(root)
}

/// A negotiated protocol as a tool, built once per protocol: a protocol's text never changes
/// under its hash.
#[derive(Debug)]
pub(super) struct ProtocolTool {
    pub(super) hash: ProtocolHash,
    pub(super) tool: Tool,
    pub(super) input: Shape,
    pub(super) output: Shape,
}

/// What a tool name calls.
#[derive(Debug)]
pub(super) enum Target {
    Capability { name: String, output: Shape },
    Protocol(Arc<ProtocolTool>),
}

/// The tools on offer, derived from the agent's capabilities and its store's active protocols.
#[derive(Debug)]
pub(super) struct Tools {
    pub(super) agent: Arc<Agent>,
    max_protocols: u32,
    /// The protocols' tools by name, as the last listing found them.
    protocols: RwLock<HashMap<String, Arc<ProtocolTool>>>,
}

impl Tools {
    pub(super) fn new(agent: Arc<Agent>, max_protocols: u32) -> Tools {
        Tools {
            agent,
            max_protocols,
            protocols: RwLock::default(),
        }
    }

    pub(super) fn agent_info(&self) -> &AgentInfo {
        self.agent.capabilities().agent()
    }

    /// Every tool `caller` may call, as the set is now: the capabilities in name order, then
    /// the protocols.
    pub(super) async fn list(&self, caller: &Caller) -> Result<Vec<Tool>, ErrorData> {
        let grants = &caller.principal.grants;
        let mut tools: Vec<Tool> = self
            .agent
            .capabilities()
            .iter()
            .filter(|c| grants.allows(Action::Capability(c.name())))
            .map(|c| capability_tool(&c))
            .collect();
        let access = self.agent.access();
        for protocol in self.refresh().await? {
            let hash = protocol.hash.to_string();
            match access.may_call_protocol(caller, &hash).await {
                Ok(()) => tools.push(protocol.tool.clone()),
                Err(ApiError::Forbidden(_)) => {}
                Err(e) => return Err(internal(&e)),
            }
        }
        Ok(tools)
    }

    /// What `name` calls; a name that is no tool is MCP's error for an unknown tool.
    pub(super) async fn resolve(&self, name: &str) -> Result<Target, ErrorData> {
        if let Some(capability) = self.agent.capabilities().get(name) {
            return Ok(Target::Capability {
                name: name.to_owned(),
                output: Shape::of(capability.output_schema(), RESULT),
            });
        }
        if name.starts_with(PROTOCOL_PREFIX) {
            if let Some(found) = self.known_protocol(name) {
                return Ok(Target::Protocol(found));
            }
            // Activated since the last listing, or by another instance on the same database.
            self.refresh().await?;
            if let Some(found) = self.known_protocol(name) {
                return Ok(Target::Protocol(found));
            }
        }
        Err(ErrorData::invalid_params(
            format!("unknown tool: {name}"),
            None,
        ))
    }

    fn known_protocol(&self, name: &str) -> Option<Arc<ProtocolTool>> {
        let known = self.protocols.read().unwrap_or_else(|e| e.into_inner());
        known.get(name).cloned()
    }

    /// Reads the active protocols from the store, reusing the tools already built, and keeps
    /// the set for [`Tools::resolve`]. A name a capability has already is left to the
    /// capability.
    async fn refresh(&self) -> Result<Vec<Arc<ProtocolTool>>, ErrorData> {
        let served = self
            .agent
            .provider()
            .served_protocols(self.max_protocols)
            .await
            .map_err(|e| internal(&e))?;
        let capabilities = self.agent.capabilities();
        let mut fresh = HashMap::new();
        let mut listed = Vec::new();
        for protocol in served {
            let name = protocol_tool_name(&protocol.hash);
            if capabilities.get(&name).is_some() || fresh.contains_key(&name) {
                tracing::warn!(
                    tool = %name,
                    "a negotiated protocol is not offered over MCP: another tool has its name"
                );
                continue;
            }
            let tool = match self.known_protocol(&name) {
                Some(known) if known.hash.to_string() == protocol.hash => known,
                _ => match protocol_tool(&name, protocol.text) {
                    Ok(tool) => Arc::new(tool),
                    Err(e) => {
                        tracing::warn!(protocol = %protocol.hash, error = %e, "a stored protocol does not parse; not offered over MCP");
                        continue;
                    }
                },
            };
            fresh.insert(name, Arc::clone(&tool));
            listed.push(tool);
        }
        *self.protocols.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(listed)
    }
}

/// An error of ours as MCP's internal error, with its code.
fn internal(e: &ApiError) -> ErrorData {
    let info = e.to_info();
    ErrorData::internal_error(format!("{}: {}", info.code, info.message), None)
}

const PROTOCOL_PREFIX: &str = "protocol_";

/// `protocol_` and the first 12 hex digits of the protocol's hash: stable for the protocol,
/// and a valid tool name for every MCP revision.
fn protocol_tool_name(hex: &str) -> String {
    format!("{PROTOCOL_PREFIX}{}", hex.get(..12).unwrap_or(hex))
}

fn capability_tool(capability: &Capability) -> Tool {
    let output = Shape::of(capability.output_schema(), RESULT);
    tool(json!({
        "name": capability.name(),
        "description": capability.description(),
        "inputSchema": capability.input_schema(),
        "outputSchema": output.declare(capability.output_schema()),
        "annotations": { "readOnlyHint": capability.read_only() },
    }))
}

fn protocol_tool(name: &str, text: String) -> Result<ProtocolTool, parley_anp::ProtocolError> {
    let doc = ProtocolDoc::parse(text)?;
    let input = Shape::of(doc.request_schema(), REQUEST);
    let output = Shape::of(doc.response_schema(), RESULT);
    let mut declared = json!({
        "name": name,
        "description": describe(&doc),
        "inputSchema": input.declare(doc.request_schema()),
        "outputSchema": output.declare(doc.response_schema()),
    });
    if let Some(title) = doc.request_schema().get("title").and_then(Value::as_str) {
        declared["title"] = json!(title);
    }
    Ok(ProtocolTool {
        hash: doc.hash(),
        tool: tool(declared),
        input,
        output,
    })
}

/// A protocol's description: the first paragraph of its requirements, and its full hash.
fn describe(doc: &ProtocolDoc) -> String {
    let summary = doc
        .sections()
        .requirements
        .as_deref()
        .and_then(|r| r.split("\n\n").map(str::trim).find(|p| !p.is_empty()))
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "A protocol negotiated with this agent.".to_owned());
    format!("{summary} (negotiated protocol {})", doc.hash())
}

/// A tool from its JSON form (the wire names), which is all MCP defines of it.
fn tool(declared: Value) -> Tool {
    serde_json::from_value(declared).unwrap_or_else(|e| {
        // Every field above is one the SDK's tool has, of its type: a bug if this happens.
        tracing::error!(error = %e, "a tool could not be built");
        Tool::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_schemas_stay_and_others_are_wrapped_with_their_definitions_at_the_root() {
        let object = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(Shape::of(&object, RESULT), Shape::Object);
        assert_eq!(Shape::Object.declare(&object), object);

        let nullable = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": ["object", "null"],
            "properties": {"p": {"$ref": "#/$defs/p"}},
            "$defs": {"p": {"type": "string"}}
        });
        let shape = Shape::of(&nullable, RESULT);
        assert_eq!(shape, Shape::Wrapped("result"));
        let wrapped = shape.declare(&nullable);
        assert_eq!(wrapped["type"], "object");
        assert_eq!(wrapped["required"], json!(["result"]));
        assert_eq!(wrapped["$defs"]["p"]["type"], "string");
        assert_eq!(wrapped["$schema"], nullable["$schema"]);
        assert_eq!(
            wrapped["properties"]["result"]["type"],
            json!(["object", "null"])
        );
        assert!(wrapped["properties"]["result"].get("$defs").is_none());

        // The wrapped schema still checks what it wrapped, `$ref`s included.
        let validator = jsonschema::validator_for(&wrapped).expect("a schema");
        assert!(validator.is_valid(&json!({"result": null})));
        assert!(validator.is_valid(&json!({"result": {"p": "x"}})));
        assert!(!validator.is_valid(&json!({"result": {"p": 5}})));
        assert!(!validator.is_valid(&json!({})));
    }

    #[test]
    fn a_protocol_tool_is_named_by_its_hash_and_described_by_its_requirements() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/protocols/product-info.md"
        ))
        .expect("the example protocol");
        let hash = ProtocolHash::of(&text).to_string();
        let name = protocol_tool_name(&hash);
        assert_eq!(name, format!("protocol_{}", &hash[..12]));
        let built = protocol_tool(&name, text).expect("parses");
        let tool = serde_json::to_value(&built.tool).expect("JSON");
        assert_eq!(tool["name"], name);
        let description = tool["description"].as_str().expect("a description");
        assert!(
            description.starts_with("Look up one product"),
            "{description}"
        );
        assert!(description.contains(&hash), "{description}");
        assert_eq!(tool["inputSchema"]["required"][0], "messageId");
        assert_eq!(tool["outputSchema"]["type"], "object");
        assert_eq!(tool["title"], "ProductInfoRequest");
        assert_eq!((built.input, built.output), (Shape::Object, Shape::Object));
    }
}
