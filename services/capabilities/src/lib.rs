//! Operator-declared capabilities: file format, validation and bindings (http, dataset, agent, mcp).
//!
//! A Parley provider can only do what its operator declares. The declaration is a file (TOML or
//! JSON, chosen by extension) naming the agent and listing capabilities, each with a name, a
//! description, JSON Schemas (2020-12) for its input and output, a `read_only` flag and a binding
//! that performs it:
//!
//! ```toml
//! [agent]
//! name = "Acme product desk"
//! description = "Answers questions about Acme products."
//!
//! [[capabilities]]
//! name = "getProductInfo"
//! description = "Product details by product id."
//! read_only = true
//! input_schema = { type = "object", properties = { productId = { type = "string" } }, required = ["productId"] }
//! output_schema = { type = ["object", "null"] }
//! binding = { type = "dataset", file = "data/products.json", key = "productId", not_found = "null" }
//! ```
//!
//! Bindings:
//! - `http`: `method`, `url` (with `{field}` placeholders filled from the input, percent-encoded,
//!   and `${VAR}` environment references), `query` and `body` (input fields sent in the query
//!   string / a JSON object body), `headers` (values may use `${VAR}`), `timeout_ms`,
//!   `result_pointer` (JSON pointer into the response; empty = whole body) and `not_found`.
//! - `dataset`: `file` (JSON array of records, relative to the capabilities file), `key` (record
//!   field), `input` (input field, defaults to `key`), `project` (keep only the output schema's
//!   properties) and `not_found`.
//! - `agent`: another agent performs it. `url` (the peer's NLIP URL, `${VAR}` allowed),
//!   `protocol` (a protocol document, relative to the capabilities file), `request` (constant
//!   fields of every request), `input` (JSON pointer of the object the input's fields go into;
//!   empty = the request), `message_id` and `timestamp` (JSON pointers that get a fresh id and
//!   the time), `result_pointer`, `fallback` (natural language when no protocol can be agreed;
//!   default true) and `timeout_ms` (default 30000). Its calls go through the [`AgentCaller`] the
//!   server installs ([`Capabilities::connect_agents`]); see the `agent` module for the result.
//!
//! - `mcp`: `server` (an `[[mcp_servers]]` entry's name), `tool`, `timeout_ms` (default: the
//!   server's): one tool of an MCP server, with the capability's own schemas.
//!
//! `not_found` is `"error"` (the default: a typed [`CapabilityError::NotFound`]), `"null"`, or
//! `{ result = <value> }`. Schemas may be written inline or, in TOML, as a string of JSON text.
//!
//! MCP servers are declared in `[[mcp_servers]]` tables: `name`, `command` (program and
//! arguments of a stdio server, run in the file's directory, `env` added to its environment) or
//! `url` (Streamable HTTP, with `headers`), `tools` (default: all), `prefix`, `optional`,
//! `timeout_ms`, `start_timeout_ms`, `restart_backoff_ms`, `restart_backoff_max_ms`. Each listed
//! tool becomes a capability once [`Capabilities::start`] has started the servers; the `mcp`
//! module says what a tool and its answers become, and how servers are kept running.
//!
//! # Layout
//! - `file` (private): the serde shape of the file, nothing validated.
//! - `load`: parse + validate everything into [`Capabilities`]; every refusal is a [`LoadError`]
//!   naming the capability, the field and the problem.
//! - `http`, `dataset`, `agent`, `mcp`: the bindings.
//! - `catalogue`: the set on offer now (declared capabilities and MCP tools), swapped whole
//!   when a server's tools change.
//! - [`Capabilities::invoke`]: the caller's check ([`CallGuard`]) → input validation → binding
//!   → output validation, each call reported to the [`InvokeObserver`] the server installed
//!   ([`Capabilities::observe`]).
//!
//! # Invariants
//! - A loaded [`Capabilities`] is fully checked: schemas are compiled once, URL templates only
//!   reference required input properties, environment references are resolved, datasets are in
//!   memory and their records (and every configured not-found result) match the output schema.
//! - The library never reads the environment itself: [`Capabilities::load`] takes an
//!   env-lookup closure, so the binary decides where secrets come from (a stdio MCP server's
//!   process inherits the environment, as child processes do).
//! - [`Capabilities::invoke`] never returns a value that does not match the output schema.
//! - This crate knows nothing about reasoners, NLIP or negotiation (negotiator → capabilities,
//!   never the reverse).

mod agent;
mod catalogue;
mod dataset;
mod error;
mod file;
mod http;
mod load;
mod mcp;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

pub use agent::{
    AgentAnswer, AgentCallError, AgentCaller, AgentFuture, AgentRequest, PeerToken, fallback_result,
};
pub use error::{CapabilityError, LoadError, ServerFailure, StartError, error_chain};
pub use load::check_name as check_capability_name;

/// Told of every [`Capabilities::invoke`] once it returned: what the server records of a call
/// (its audit) without this crate knowing who asked. Installed once, at start
/// ([`Capabilities::observe`]), as the `AgentCaller` is; called on the caller's task, so an
/// implementation can read what that task knows (the peer it works for) and must return quickly:
/// a handler's `host.call` costs tens of microseconds in all.
pub trait InvokeObserver: Send + Sync + std::fmt::Debug {
    fn invoked(&self, call: &Invocation<'_>);
}

/// One finished call of a capability, as an [`InvokeObserver`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invocation<'a> {
    /// The name asked for (which may name no capability: `unknown_capability`).
    pub capability: &'a str,
    /// `"ok"`, or the failure's [`CapabilityError::code`].
    pub outcome: &'static str,
    /// From the call to its answer, input and output validation included.
    pub elapsed: Duration,
}

/// Syntax of a capabilities file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Toml,
    Json,
}

/// Decides whether a capability may be called now, on behalf of whoever the call is for. The
/// server installs one at start ([`Capabilities::guard_calls`]); this crate knows nothing of
/// peers. Every call passes it, whoever proposed it (a peer's tool call, a handler's
/// `host.call`, a reasoner), before anything else.
pub trait CallGuard: Send + Sync + std::fmt::Debug {
    /// `Err(CapabilityError::Forbidden)` when `capability` may not be called now.
    fn check(&self, capability: &str) -> Result<(), CapabilityError>;
}

/// Who this agent is, from the `[agent]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentInfo {
    pub name: String,
    pub description: String,
}

/// What a missing entity turns into.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NotFoundPolicy {
    Error,
    Result(Value),
}

#[derive(Debug)]
pub(crate) enum Binding {
    Http(http::HttpBinding),
    Dataset(dataset::DatasetBinding),
    Agent(agent::AgentBinding),
    Mcp(mcp::McpBinding),
}

/// One declared capability, validated and ready to invoke.
pub struct Capability {
    name: String,
    description: String,
    input_schema: Value,
    output_schema: Value,
    read_only: bool,
    binding: Binding,
    input_validator: jsonschema::Validator,
    output_validator: jsonschema::Validator,
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Compiled validators are large and say nothing the schemas do not.
        f.debug_struct("Capability")
            .field("name", &self.name)
            .field("read_only", &self.read_only)
            .field("binding", &self.binding)
            .finish_non_exhaustive()
    }
}

impl Capability {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn description(&self) -> &str {
        &self.description
    }
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }
    pub fn output_schema(&self) -> &Value {
        &self.output_schema
    }
    /// True when calling it changes nothing, so handler verification may call it for real.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
    /// `"http"`, `"dataset"`, `"agent"` or `"mcp"`.
    pub fn binding_kind(&self) -> &'static str {
        match self.binding {
            Binding::Http(_) => "http",
            Binding::Dataset(_) => "dataset",
            Binding::Mcp(_) => "mcp",
            Binding::Agent(_) => "agent",
        }
    }
    /// The peer agent that performs this capability, for an `agent` binding.
    pub fn peer_agent(&self) -> Option<PeerAgent<'_>> {
        match &self.binding {
            Binding::Agent(a) => Some(PeerAgent {
                url: a.url(),
                protocol: a.protocol(),
                protocol_path: a.protocol_path(),
            }),
            _ => None,
        }
    }
    /// What a reasoner needs to offer this capability as a tool.
    pub fn describe(&self) -> CapabilityDescription {
        CapabilityDescription {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// What an `agent` binding names: the peer and the protocol document it is asked through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAgent<'a> {
    pub url: &'a str,
    /// The protocol document's text.
    pub protocol: &'a str,
    /// Where the protocol document was read from.
    pub protocol_path: &'a str,
}

/// The reasoner-facing view of a capability (e.g. an OpenAI function tool).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapabilityDescription {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The operator's declared capabilities, loaded and validated, and the capabilities its MCP
/// servers' tools become once [started](Self::start). Cheap to share behind an `Arc`; every
/// method takes `&self`. The set can change while it is shared (an MCP server lists other
/// tools): each read sees one consistent set, and [`generation`](Self::generation) tells a
/// reader that caches something derived from it when to derive it again.
#[derive(Debug)]
pub struct Capabilities {
    agent: AgentInfo,
    /// Sorted by name so descriptions and summaries are deterministic.
    catalogue: Arc<catalogue::Catalogue>,
    http: reqwest::Client,
    /// Performs the `agent` bindings' calls, once the server installed it.
    agents: OnceLock<Arc<dyn AgentCaller>>,
    /// Checks each call before it is made, once the server installed it.
    guard: OnceLock<Arc<dyn CallGuard>>,
    /// Told of every call, once the server installed it.
    observer: OnceLock<Arc<dyn InvokeObserver>>,
    mcp: mcp::Mcp,
}

impl Capabilities {
    /// Loads a `.toml` or `.json` capabilities file. `env` resolves `${VAR}` references in http
    /// bindings (pass `|k| std::env::var(k).ok()` in a binary, a map in tests).
    pub fn load(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Self, LoadError> {
        let format = match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("toml") => FileFormat::Toml,
            Some(e) if e.eq_ignore_ascii_case("json") => FileFormat::Json,
            _ => {
                return Err(LoadError::UnsupportedFormat {
                    path: path.display().to_string(),
                });
            }
        };
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            source_name: source_name.clone(),
            path: source_name.clone(),
            source,
        })?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        load::parse(&text, format, base, &source_name, &env)
    }

    /// Parses capabilities from text. Dataset paths are resolved against `base_dir`;
    /// `source_name` prefixes error messages.
    pub fn parse(
        text: &str,
        format: FileFormat,
        base_dir: &Path,
        source_name: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        load::parse(text, format, base_dir, source_name, &env)
    }

    pub fn agent(&self) -> &AgentInfo {
        &self.agent
    }

    /// Installs what performs the `agent` bindings' calls (until then they fail). Returns false,
    /// and changes nothing, when one is installed already.
    pub fn connect_agents(&self, caller: Arc<dyn AgentCaller>) -> bool {
        self.agents.set(caller).is_ok()
    }

    /// Installs the check every call passes first (until then every call is allowed). Returns
    /// false, and changes nothing, when one is installed already.
    pub fn guard_calls(&self, guard: Arc<dyn CallGuard>) -> bool {
        self.guard.set(guard).is_ok()
    }

    /// Installs what is told of every call ([`InvokeObserver`]). Returns false, and changes
    /// nothing, when one is installed already.
    pub fn observe(&self, observer: Arc<dyn InvokeObserver>) -> bool {
        self.observer.set(observer).is_ok()
    }

    /// Starts the MCP servers the file declares and waits until each has listed its tools
    /// (their capabilities are then in the set) or failed. A required server that failed is an
    /// error, with what it wrote to stderr; an optional one is logged and retried in the
    /// background. Servers are started once: later calls do nothing. Without MCP servers this
    /// returns at once.
    pub async fn start(&self) -> Result<(), StartError> {
        if self.mcp.is_empty() {
            return Ok(());
        }
        self.mcp.start(&self.catalogue).await
    }

    /// Stops the MCP servers (a stdio server's process gets its input closed, and is killed if
    /// it does not exit) and waits until they are stopped. Dropping the capabilities stops them
    /// too, without waiting.
    pub async fn shutdown(&self) {
        self.mcp.shutdown().await;
    }

    /// Whether `name` may be called now, as the installed [`CallGuard`] decides (every name
    /// when none is installed): what a reasoner offers is what it may call.
    pub fn permits(&self, name: &str) -> bool {
        self.guard
            .get()
            .is_none_or(|guard| guard.check(name).is_ok())
    }

    /// Counts the changes of the set since it was loaded.
    pub fn generation(&self) -> u64 {
        self.catalogue.generation()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Capability>> {
        self.catalogue.get(name)
    }

    /// Capabilities in name order, as the set is now.
    pub fn iter(&self) -> impl Iterator<Item = Arc<Capability>> + use<> {
        let snapshot = self.catalogue.snapshot();
        snapshot.values().cloned().collect::<Vec<_>>().into_iter()
    }

    pub fn names(&self) -> Vec<String> {
        self.catalogue.snapshot().keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.catalogue.snapshot().len()
    }

    pub fn is_empty(&self) -> bool {
        self.catalogue.snapshot().is_empty()
    }

    /// Name, description and input schema of every capability, in name order.
    pub fn describe(&self) -> Vec<CapabilityDescription> {
        self.iter().map(|c| c.describe()).collect()
    }

    /// A human-readable summary: the agent, then one line per capability that may be called now
    /// ([`permits`](Self::permits)) with its input fields.
    pub fn summary(&self) -> String {
        let mut out = format!("{}: {}\n", self.agent.name, self.agent.description);
        let permitted: Vec<_> = self.iter().filter(|c| self.permits(&c.name)).collect();
        if self.is_empty() {
            out.push_str("No capabilities are declared.\n");
        } else if permitted.is_empty() {
            out.push_str("No capabilities may be used on this peer's behalf.\n");
        }
        for c in permitted {
            let fields = input_fields(&c.input_schema);
            out.push_str(&format!(
                "- {}({}): {}",
                c.name,
                fields.join(", "),
                c.description
            ));
            if c.read_only {
                out.push_str(" [read-only]");
            }
            out.push('\n');
        }
        out
    }

    /// Checks the call with the installed [`CallGuard`] (a refusal is reported too), validates
    /// `args` against the input schema, performs the binding and validates the
    /// result against the output schema (a dataset's results were all validated at load). The
    /// installed [`InvokeObserver`] is told how it went; a call dropped before it returns (its
    /// caller timed out) is not reported.
    pub async fn invoke(&self, name: &str, args: Value) -> Result<Value, CapabilityError> {
        let started = Instant::now();
        let result = self.perform(name, args).await;
        if let Some(observer) = self.observer.get() {
            observer.invoked(&Invocation {
                capability: name,
                outcome: result.as_ref().map_or_else(CapabilityError::code, |_| "ok"),
                elapsed: started.elapsed(),
            });
        }
        result
    }

    /// [`Capabilities::invoke`]'s work: the caller's check first.
    async fn perform(&self, name: &str, args: Value) -> Result<Value, CapabilityError> {
        if let Some(guard) = self.guard.get() {
            guard.check(name)?;
        }
        let capability =
            self.catalogue
                .get(name)
                .ok_or_else(|| CapabilityError::UnknownCapability {
                    name: name.to_owned(),
                })?;
        let span = tracing::debug_span!("capabilities.invoke", capability = name);
        async {
            if let Some(message) = schema_errors(&capability.input_validator, &args) {
                return Err(CapabilityError::InvalidArguments {
                    capability: name.to_owned(),
                    message,
                });
            }
            let result = match &capability.binding {
                Binding::Dataset(d) => d.lookup(name, &args),
                Binding::Http(h) => h.call(&self.http, name, &args).await,
                Binding::Agent(a) => {
                    let output = &capability.output_validator;
                    a.call(self.agents.get(), name, &args, output).await
                }
                Binding::Mcp(m) => m.call(name, &args).await,
            };
            let result = match result {
                Ok(value) => value,
                Err(e) => {
                    tracing::debug!(code = e.code(), "capability failed");
                    return Err(e);
                }
            };
            // Every result a dataset can give (each record as projected, the not-found value)
            // was checked against the output schema when its file was loaded.
            let checked_at_load = matches!(capability.binding, Binding::Dataset(_));
            if !checked_at_load
                && let Some(message) = schema_errors(&capability.output_validator, &result)
            {
                tracing::debug!("capability result does not match its output schema");
                return Err(CapabilityError::InvalidResult {
                    capability: name.to_owned(),
                    message,
                });
            }
            Ok(result)
        }
        .instrument(span)
        .await
    }
}

/// Top-level property names of an object schema, optional ones marked (`currency?`).
fn input_fields(schema: &Value) -> Vec<String> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .keys()
                .map(|k| {
                    if required.contains(&k.as_str()) {
                        k.clone()
                    } else {
                        format!("{k}?")
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// All validation errors as one line (`at /productId: 5 is not of type "string"; ...`), or
/// `None` when the instance is valid. Capped so a huge bad payload does not make a huge error.
pub(crate) fn schema_errors(validator: &jsonschema::Validator, instance: &Value) -> Option<String> {
    const MAX_ERRORS: usize = 5;
    // On every invocation, twice: the yes/no check allocates nothing; errors are collected
    // only when there are some.
    if validator.is_valid(instance) {
        return None;
    }
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .take(MAX_ERRORS + 1)
        .map(|e| {
            let path = e.instance_path().to_string();
            let at = if path.is_empty() { "/" } else { &path };
            format!("at {at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    let mut text = errors
        .iter()
        .take(MAX_ERRORS)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if errors.len() > MAX_ERRORS {
        text.push_str("; ...");
    }
    Some(text)
}
