//! Parse + validate a capabilities file into [`Capabilities`]: the file-level and
//! capability-level checks. Each binding checks its own section in its own module
//! (`http::load`, `dataset::load`), beside the code that calls it.
//!
//! Everything that can be checked before the first call is checked here, so that a bad file
//! stops the server at start-up with a message naming the capability, the field and the problem,
//! instead of failing later in front of a peer.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use crate::agent;
use crate::catalogue::Catalogue;
use crate::dataset;
use crate::file::{BindingSpec, CapabilitySpec, FileSpec, NotFoundSpec};
use crate::http;
use crate::mcp::{self, Mcp, Server};
use crate::{
    AgentInfo, Binding, Capabilities, Capability, FileFormat, LoadError, NotFoundPolicy,
    schema_errors,
};

/// Longest timeout an http binding may declare; a capability call sits inside a peer's request.
pub(crate) const MAX_TIMEOUT_MS: u64 = 300_000;

pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Where an error is: the file and the capability being checked.
pub(crate) struct Ctx<'a> {
    source_name: &'a str,
    capability: String,
}

impl<'a> Ctx<'a> {
    /// `context` names what is checked: `capability `x``, `MCP server `y``.
    pub(crate) fn new(source_name: &'a str, context: String) -> Self {
        Ctx {
            source_name,
            capability: context,
        }
    }

    pub(crate) fn err(&self, field: &str, message: impl Into<String>) -> LoadError {
        LoadError::Invalid {
            source_name: self.source_name.to_owned(),
            context: format!("{}, field `{field}`", self.capability),
            message: message.into(),
        }
    }
}

pub(crate) fn parse(
    text: &str,
    format: FileFormat,
    base_dir: &Path,
    source_name: &str,
    env: Env<'_>,
) -> Result<Capabilities, LoadError> {
    let syntax = |message: String| LoadError::Syntax {
        source_name: source_name.to_owned(),
        message,
    };
    let mut spec: FileSpec = match format {
        FileFormat::Toml => {
            toml::from_str(text).map_err(|e| syntax(e.to_string().trim().to_owned()))?
        }
        FileFormat::Json => serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?,
    };

    let agent_ctx = Ctx {
        source_name,
        capability: "agent".to_owned(),
    };
    if spec.agent.name.trim().is_empty() {
        return Err(agent_ctx.err("agent.name", "must not be empty"));
    }
    if spec.agent.description.trim().is_empty() {
        return Err(agent_ctx.err("agent.description", "must not be empty"));
    }

    let servers = mcp_servers(&mut spec, source_name, base_dir, env)?;

    let mut capabilities = BTreeMap::new();
    let mut first_index: HashMap<String, usize> = HashMap::new();
    for (index, cap) in spec.capabilities.into_iter().enumerate() {
        let ctx = Ctx {
            source_name,
            capability: format!("capability #{index}"),
        };
        check_name_at(&ctx, &cap.name)?;
        if let Some(first) = first_index.get(&cap.name) {
            return Err(ctx.err(
                "name",
                format!(
                    "duplicate capability name `{}` (already declared by capability #{first})",
                    cap.name
                ),
            ));
        }
        first_index.insert(cap.name.clone(), index);
        let ctx = Ctx {
            source_name,
            capability: format!("capability `{}`", cap.name),
        };
        let capability = build_capability(&ctx, cap, base_dir, env, &servers)?;
        capabilities.insert(capability.name.clone(), Arc::new(capability));
    }

    let http = reqwest::Client::builder()
        .build()
        .map_err(LoadError::HttpClient)?;
    Ok(Capabilities {
        agent: AgentInfo {
            name: spec.agent.name,
            description: spec.agent.description,
        },
        catalogue: Arc::new(Catalogue::new(capabilities)),
        http,
        agents: Default::default(),
        guard: Default::default(),
        observer: Default::default(),
        mcp: Mcp::new(servers),
    })
}

/// The file's MCP servers, each also told the tools that capabilities bind explicitly (so it
/// lists them even when its `tools` does not).
fn mcp_servers(
    spec: &mut FileSpec,
    source_name: &str,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<Vec<Arc<Server>>, LoadError> {
    let declared = std::mem::take(&mut spec.mcp_servers);
    let mut servers = mcp::load_servers(source_name, declared, base_dir, env)?;
    for cap in &spec.capabilities {
        if let BindingSpec::Mcp(binding) = &cap.binding
            && let Some(server) = servers.iter_mut().find(|s| s.name == binding.server)
            && !server.bound_tools.contains(&binding.tool)
        {
            server.bound_tools.push(binding.tool.clone());
        }
    }
    Ok(servers
        .into_iter()
        .enumerate()
        .map(|(index, config)| Arc::new(Server::new(config, index)))
        .collect())
}

/// Names become tool names for LLM backends, whose rule is `^[A-Za-z0-9_-]{1,64}$`; we also
/// require a leading letter or underscore so names read as identifiers in generated handlers.
fn check_name_at(ctx: &Ctx<'_>, name: &str) -> Result<(), LoadError> {
    check_name(name).map_err(|message| ctx.err("name", message))
}

/// The rule of [`check_name_at`], for names made at run time (an MCP tool's, with its prefix)
/// and for names that grants refer to.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a valid capability name (1-64 characters: letters, digits, `_`, `-`, starting with a letter or `_`)"
        ))
    }
}

fn build_capability(
    ctx: &Ctx<'_>,
    cap: CapabilitySpec,
    base_dir: &Path,
    env: Env<'_>,
    servers: &[Arc<Server>],
) -> Result<Capability, LoadError> {
    if cap.description.trim().is_empty() {
        return Err(ctx.err("description", "must not be empty"));
    }
    let input_schema = schema_value(ctx, "input_schema", cap.input_schema)?;
    let input_validator = compile(ctx, "input_schema", &input_schema)?;
    if input_schema.get("type").and_then(Value::as_str) != Some("object") {
        // Arguments are always a JSON object (tool calls, `name {json}` invocations).
        return Err(ctx.err("input_schema", "must declare `\"type\": \"object\"`"));
    }
    let output_schema = schema_value(ctx, "output_schema", cap.output_schema)?;
    let output_validator = compile(ctx, "output_schema", &output_schema)?;

    let schemas = Schemas {
        input: &input_schema,
        output: &output_schema,
        output_validator: &output_validator,
    };
    let binding = match cap.binding {
        BindingSpec::Http(spec) => Binding::Http(http::load(ctx, spec, &schemas, env)?),
        BindingSpec::Dataset(spec) => {
            Binding::Dataset(dataset::load(ctx, spec, &schemas, base_dir)?)
        }
        BindingSpec::Agent(spec) => Binding::Agent(agent::load(ctx, spec, base_dir, env)?),
        BindingSpec::Mcp(spec) => Binding::Mcp(mcp::load_binding(ctx, spec, servers)?),
    };
    Ok(Capability {
        name: cap.name,
        description: cap.description,
        input_schema,
        output_schema,
        read_only: cap.read_only,
        binding,
        input_validator,
        output_validator,
    })
}

pub(crate) struct Schemas<'a> {
    pub(crate) input: &'a Value,
    pub(crate) output: &'a Value,
    pub(crate) output_validator: &'a jsonschema::Validator,
}

impl Schemas<'_> {
    pub(crate) fn input_property(&self, name: &str) -> bool {
        self.input
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.contains_key(name))
    }
    pub(crate) fn input_required(&self, name: &str) -> bool {
        self.input
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|v| v.as_str() == Some(name)))
    }
}

/// A schema written as a string (handy in TOML) is JSON text; anything else is the schema itself.
fn schema_value(ctx: &Ctx<'_>, field: &str, value: Value) -> Result<Value, LoadError> {
    match value {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| ctx.err(field, format!("is a string but not valid JSON text: {e}"))),
        other => Ok(other),
    }
}

fn compile(ctx: &Ctx<'_>, field: &str, schema: &Value) -> Result<jsonschema::Validator, LoadError> {
    jsonschema::draft202012::new(schema)
        .map_err(|e| ctx.err(field, format!("invalid JSON Schema: {e}")))
}

pub(crate) fn not_found_policy(
    ctx: &Ctx<'_>,
    spec: Option<NotFoundSpec>,
    schemas: &Schemas<'_>,
) -> Result<NotFoundPolicy, LoadError> {
    let policy = match spec {
        None => NotFoundPolicy::Error,
        Some(NotFoundSpec::Keyword(k)) if k == "error" => NotFoundPolicy::Error,
        Some(NotFoundSpec::Keyword(k)) if k == "null" => NotFoundPolicy::Result(Value::Null),
        Some(NotFoundSpec::Keyword(k)) => {
            return Err(ctx.err(
                "binding.not_found",
                format!("unknown value `{k}` (expected \"error\", \"null\" or {{ result = ... }})"),
            ));
        }
        Some(NotFoundSpec::Result(r)) => NotFoundPolicy::Result(r.result),
    };
    if let NotFoundPolicy::Result(value) = &policy
        && let Some(message) = schema_errors(schemas.output_validator, value)
    {
        return Err(ctx.err(
            "binding.not_found",
            format!("the not-found result {value} does not match output_schema: {message}"),
        ));
    }
    Ok(policy)
}
