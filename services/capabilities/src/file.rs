//! The on-disk shape of a capabilities file, exactly as serde reads it. Nothing here is checked
//! beyond types: [`crate::load`] turns these structs into validated, ready-to-run capabilities.
//!
//! Unknown keys are refused everywhere (`deny_unknown_fields`) so that a typo such as `timout_ms`
//! fails loudly at start-up instead of silently falling back to a default.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSpec {
    pub agent: AgentSpec,
    #[serde(default)]
    pub capabilities: Vec<CapabilitySpec>,
    #[serde(default)]
    pub mcp_servers: Vec<McpServerSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentSpec {
    pub name: String,
    pub description: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapabilitySpec {
    pub name: String,
    pub description: String,
    /// Either an inline table/object, or (convenient in TOML) a string holding JSON text.
    pub input_schema: Value,
    pub output_schema: Value,
    #[serde(default)]
    pub read_only: bool,
    pub binding: BindingSpec,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum BindingSpec {
    Http(HttpSpec),
    Dataset(DatasetSpec),
    Agent(AgentBindingSpec),
    Mcp(McpSpec),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpSpec {
    #[serde(default = "default_method")]
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub query: Vec<String>,
    #[serde(default)]
    pub body: Vec<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// JSON pointer into the response body; absent or empty = the whole body.
    #[serde(default)]
    pub result_pointer: String,
    #[serde(default)]
    pub not_found: Option<NotFoundSpec>,
}

fn default_method() -> String {
    "GET".to_owned()
}

fn default_timeout_ms() -> u64 {
    10_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DatasetSpec {
    /// Path of the JSON file, relative to the capabilities file.
    pub file: String,
    /// Record field matched against the input.
    pub key: String,
    /// Input field holding the looked-up value; defaults to `key`.
    #[serde(default)]
    pub input: Option<String>,
    /// Keep only the output schema's top-level properties of a found record.
    #[serde(default)]
    pub project: bool,
    #[serde(default)]
    pub not_found: Option<NotFoundSpec>,
}

/// `binding = { type = "mcp", server = "weather", tool = "forecast" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpSpec {
    /// The `name` of an `[[mcp_servers]]` entry.
    pub server: String,
    pub tool: String,
    /// Defaults to the server's `timeout_ms`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One `[[mcp_servers]]` entry: exactly one of `command` and `url`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServerSpec {
    pub name: String,
    /// Program and arguments of a stdio server, run in the capabilities file's directory.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Environment variables added for a stdio server (values may use `${VAR}`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A Streamable HTTP server's end-point.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers of every request to an HTTP server (values may use `${VAR}`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The tools offered as capabilities; absent: every tool the server lists.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Put before each tool's name to make its capability's name.
    #[serde(default)]
    pub prefix: String,
    /// Parley starts without this server when it fails, and keeps trying to start it.
    #[serde(default)]
    pub optional: bool,
    /// Time limit of one tool call.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Time limit of a start: the process or session, the handshake, the tool list.
    #[serde(default = "default_start_timeout_ms")]
    pub start_timeout_ms: u64,
    /// Wait before the first restart of a server that exited or failed; doubled each time.
    #[serde(default = "default_restart_backoff_ms")]
    pub restart_backoff_ms: u64,
    /// Longest wait between restarts.
    #[serde(default = "default_restart_backoff_max_ms")]
    pub restart_backoff_max_ms: u64,
}

fn default_start_timeout_ms() -> u64 {
    30_000
}

fn default_restart_backoff_ms() -> u64 {
    500
}

fn default_restart_backoff_max_ms() -> u64 {
    30_000
}

/// `"error"`, `"null"`, or `{ result = <any value> }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum NotFoundSpec {
    Keyword(String),
    Result(NotFoundResult),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotFoundResult {
    pub result: Value,
}

/// An `agent` binding: another agent performs the capability, over a protocol agreed with it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentBindingSpec {
    /// The peer's NLIP URL (`${VAR}` references allowed; no scheme means `http://`).
    pub url: String,
    /// Path of the protocol document, relative to the capabilities file.
    pub protocol: String,
    /// Constant fields of every request (a JSON object); the input is merged into it.
    #[serde(default)]
    pub request: Option<Value>,
    /// JSON pointer of the object the input's fields go into; empty = the request itself.
    #[serde(default)]
    pub input: String,
    /// JSON pointer that gets a fresh message id (a UUID) in every request.
    #[serde(default)]
    pub message_id: Option<String>,
    /// JSON pointer that gets the time of the request (RFC 3339, UTC).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// JSON pointer into the protocol's answer; absent or empty = the whole answer.
    #[serde(default)]
    pub result_pointer: String,
    /// Ask in natural language when no protocol can be agreed (the default).
    #[serde(default = "default_fallback")]
    pub fallback: bool,
    #[serde(default = "default_agent_timeout_ms")]
    pub timeout_ms: u64,
    /// The credential presented to the peer as `Authorization: Bearer` (an API key the peer
    /// gave this agent); `${VAR}` references allowed, so it need not sit in the file.
    #[serde(default)]
    pub token: Option<String>,
}

fn default_fallback() -> bool {
    true
}

fn default_agent_timeout_ms() -> u64 {
    30_000
}
