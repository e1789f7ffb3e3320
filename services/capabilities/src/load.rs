//! Parse + validate a capabilities file into [`Capabilities`].
//!
//! Everything that can be checked before the first call is checked here, so that a bad file
//! stops the server at start-up with a message naming the capability, the field and the problem,
//! instead of failing later in front of a peer.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::dataset::{self, DatasetBinding};
use crate::file::{BindingSpec, CapabilitySpec, DatasetSpec, FileSpec, HttpSpec, NotFoundSpec};
use crate::http::{self, HttpBinding, Segment};
use crate::{
    AgentInfo, Binding, Capabilities, Capability, FileFormat, LoadError, NotFoundPolicy,
    schema_errors,
};

/// Longest timeout an http binding may declare; a capability call sits inside a peer's request.
const MAX_TIMEOUT_MS: u64 = 300_000;

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Where an error is: the file and the capability being checked.
struct Ctx<'a> {
    source_name: &'a str,
    capability: String,
}

impl Ctx<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> LoadError {
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
    let spec: FileSpec = match format {
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

    let mut capabilities = BTreeMap::new();
    let mut first_index: HashMap<String, usize> = HashMap::new();
    for (index, cap) in spec.capabilities.into_iter().enumerate() {
        let ctx = Ctx {
            source_name,
            capability: format!("capability #{index}"),
        };
        check_name(&ctx, &cap.name)?;
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
        let capability = build_capability(&ctx, cap, base_dir, env)?;
        capabilities.insert(capability.name.clone(), capability);
    }

    let http = reqwest::Client::builder()
        .build()
        .map_err(LoadError::HttpClient)?;
    Ok(Capabilities {
        agent: AgentInfo {
            name: spec.agent.name,
            description: spec.agent.description,
        },
        capabilities,
        http,
    })
}

/// Names become tool names for LLM backends, whose rule is `^[A-Za-z0-9_-]{1,64}$`; we also
/// require a leading letter or underscore so names read as identifiers in generated handlers.
fn check_name(ctx: &Ctx<'_>, name: &str) -> Result<(), LoadError> {
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
        Err(ctx.err(
            "name",
            format!(
                "`{name}` is not a valid capability name (1-64 characters: letters, digits, `_`, `-`, starting with a letter or `_`)"
            ),
        ))
    }
}

fn build_capability(
    ctx: &Ctx<'_>,
    cap: CapabilitySpec,
    base_dir: &Path,
    env: Env<'_>,
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
        BindingSpec::Http(spec) => Binding::Http(build_http(ctx, spec, &schemas, env)?),
        BindingSpec::Dataset(spec) => {
            Binding::Dataset(build_dataset(ctx, spec, &schemas, base_dir)?)
        }
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

struct Schemas<'a> {
    input: &'a Value,
    output: &'a Value,
    output_validator: &'a jsonschema::Validator,
}

impl Schemas<'_> {
    fn input_property(&self, name: &str) -> bool {
        self.input
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.contains_key(name))
    }
    fn input_required(&self, name: &str) -> bool {
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

fn not_found_policy(
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

fn build_dataset(
    ctx: &Ctx<'_>,
    spec: DatasetSpec,
    schemas: &Schemas<'_>,
    base_dir: &Path,
) -> Result<DatasetBinding, LoadError> {
    let input_field = spec.input.unwrap_or_else(|| spec.key.clone());
    let input_key = "binding.input";
    if !schemas.input_property(&input_field) {
        return Err(ctx.err(
            input_key,
            format!("input field `{input_field}` is not a property of input_schema"),
        ));
    }
    if !schemas.input_required(&input_field) {
        return Err(ctx.err(
            input_key,
            format!("input field `{input_field}` must be listed in input_schema.required"),
        ));
    }
    let projection = if spec.project {
        let props = schemas
            .output
            .get("properties")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ctx.err(
                    "binding.project",
                    "projection needs top-level `properties` in output_schema",
                )
            })?;
        Some(props.keys().cloned().collect::<Vec<_>>())
    } else {
        None
    };
    let not_found = not_found_policy(ctx, spec.not_found, schemas)?;

    let path = base_dir.join(&spec.file);
    let shown = path.display();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        ctx.err(
            "binding.file",
            format!("cannot read dataset file {shown}: {e}"),
        )
    })?;
    let data: Value = serde_json::from_str(&text).map_err(|e| {
        ctx.err(
            "binding.file",
            format!("dataset file {shown} is not valid JSON: {e}"),
        )
    })?;
    let Value::Array(items) = data else {
        return Err(ctx.err(
            "binding.file",
            format!("dataset file {shown} must hold a JSON array of records"),
        ));
    };
    let mut records = HashMap::with_capacity(items.len());
    let mut first_at: HashMap<String, usize> = HashMap::new();
    for (i, record) in items.into_iter().enumerate() {
        let key = record
            .get(&spec.key)
            .and_then(dataset::key_of)
            .ok_or_else(|| {
                ctx.err(
                    "binding.key",
                    format!(
                        "record #{i} of {shown} has no string, number or boolean field `{}`",
                        spec.key
                    ),
                )
            })?;
        if let Some(first) = first_at.get(&key) {
            return Err(ctx.err(
                "binding.key",
                format!("record #{i} of {shown} repeats key {key} (first at record #{first})"),
            ));
        }
        // Kept as a lookup returns it, checked now: a lookup can never fail output validation
        // later, and does nothing but find and copy.
        let returned = match &projection {
            Some(props) => dataset::project(&record, props),
            None => record,
        };
        if let Some(message) = schema_errors(schemas.output_validator, &returned) {
            return Err(ctx.err(
                "binding.file",
                format!(
                    "record #{i} of {shown} (key {key}) does not match output_schema: {message}"
                ),
            ));
        }
        first_at.insert(key.clone(), i);
        records.insert(key, returned);
    }
    Ok(DatasetBinding {
        input_field,
        records,
        not_found,
    })
}

fn build_http(
    ctx: &Ctx<'_>,
    spec: HttpSpec,
    schemas: &Schemas<'_>,
    env: Env<'_>,
) -> Result<HttpBinding, LoadError> {
    let method = match spec.method.to_ascii_uppercase().as_str() {
        "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "PATCH" => Method::PATCH,
        "DELETE" => Method::DELETE,
        other => {
            return Err(ctx.err(
                "binding.method",
                format!("unsupported method `{other}` (expected GET, POST, PUT, PATCH or DELETE)"),
            ));
        }
    };

    let url = http::parse_template(&spec.url).map_err(|m| ctx.err("binding.url", m))?;
    let url = http::resolve_env(url, env).map_err(|m| ctx.err("binding.url", m))?;
    let mut probe = String::new();
    for segment in &url {
        match segment {
            Segment::Field(f) => {
                if !schemas.input_property(f) {
                    return Err(ctx.err(
                        "binding.url",
                        format!("placeholder `{{{f}}}` is not a property of input_schema"),
                    ));
                }
                if !schemas.input_required(f) {
                    return Err(ctx.err(
                        "binding.url",
                        format!("placeholder `{{{f}}}` must be listed in input_schema.required"),
                    ));
                }
                probe.push('x');
            }
            Segment::Literal(l) => probe.push_str(l),
            Segment::Env(_) => {}
        }
    }
    match reqwest::Url::parse(&probe) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        Ok(u) => {
            return Err(ctx.err(
                "binding.url",
                format!(
                    "must be an http:// or https:// URL with a host, not `{}:`",
                    u.scheme()
                ),
            ));
        }
        Err(e) => return Err(ctx.err("binding.url", format!("not a valid URL: {e}"))),
    }

    for (field, names) in [("binding.query", &spec.query), ("binding.body", &spec.body)] {
        for name in names {
            if !schemas.input_property(name) {
                return Err(ctx.err(field, format!("`{name}` is not a property of input_schema")));
            }
        }
    }
    if !spec.body.is_empty() && method == Method::GET {
        return Err(ctx.err("binding.body", "a GET request cannot carry a body"));
    }

    let mut headers = HeaderMap::new();
    for (name, value) in &spec.headers {
        let field = format!("binding.headers.{name}");
        let value = http::expand_env(value, env).map_err(|m| ctx.err(&field, m))?;
        let (name, value) = http::header(name, &value).map_err(|m| ctx.err(&field, m))?;
        headers.insert(name, value);
    }

    if spec.timeout_ms == 0 || spec.timeout_ms > MAX_TIMEOUT_MS {
        return Err(ctx.err(
            "binding.timeout_ms",
            format!("{} is out of range (1..={MAX_TIMEOUT_MS})", spec.timeout_ms),
        ));
    }
    if !spec.result_pointer.is_empty() && !spec.result_pointer.starts_with('/') {
        return Err(ctx.err(
            "binding.result_pointer",
            format!(
                "`{}` is not a JSON pointer (it must be empty or start with `/`)",
                spec.result_pointer
            ),
        ));
    }
    let not_found = not_found_policy(ctx, spec.not_found, schemas)?;
    Ok(HttpBinding {
        method,
        url,
        query: spec.query,
        body: spec.body,
        headers,
        timeout: Duration::from_millis(spec.timeout_ms),
        result_pointer: spec.result_pointer,
        not_found,
    })
}
