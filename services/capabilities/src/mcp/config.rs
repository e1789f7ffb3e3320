//! Load-time checks of the `[[mcp_servers]]` entries and of explicit `mcp` bindings: everything
//! about a server that can be refused before it starts (names, transport, headers, limits).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};

use crate::LoadError;
use crate::file::{McpServerSpec, McpSpec};
use crate::http::{expand_env, header};
use crate::load::{Ctx, Env, MAX_TIMEOUT_MS};
use crate::mcp::{McpBinding, Server};

/// Longest a server may take to start and list its tools, and longest restart delay.
const MAX_START_TIMEOUT_MS: u64 = 300_000;
const MAX_BACKOFF_MS: u64 = 3_600_000;

/// How Parley reaches a server.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// A child process speaking MCP on its standard input and output, started in the directory
    /// of the capabilities file.
    Stdio {
        program: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: PathBuf,
    },
    /// Streamable HTTP at `url`, every request carrying `headers`.
    Http {
        url: String,
        headers: HashMap<HeaderName, HeaderValue>,
    },
}

/// One `[[mcp_servers]]` entry, checked.
#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    /// The tools that become capabilities; `None`: every tool the server lists.
    pub(crate) tools: Option<Vec<String>>,
    /// The tools explicit `mcp` bindings call: the server must list them at start.
    pub(crate) bound_tools: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) optional: bool,
    pub(crate) call_timeout: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) restart_backoff: Duration,
    pub(crate) restart_backoff_max: Duration,
}

impl ServerConfig {
    /// `stdio` or `http`, for logs.
    pub(crate) fn transport_kind(&self) -> &'static str {
        match self.transport {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

/// Checks every server entry: unique names, exactly one of `command` and `url`, headers and
/// environment with their `${VAR}` references resolved, limits in range.
pub(crate) fn load_servers(
    source_name: &str,
    specs: Vec<McpServerSpec>,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<Vec<ServerConfig>, LoadError> {
    let mut seen = HashSet::new();
    let mut servers = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let ctx = Ctx::new(source_name, format!("mcp_servers #{index}"));
        if !valid_server_name(&spec.name) {
            return Err(ctx.err(
                "name",
                format!(
                    "`{}` is not a valid server name (1-64 letters, digits, `_`, `-`, `.`)",
                    spec.name
                ),
            ));
        }
        if !seen.insert(spec.name.clone()) {
            return Err(ctx.err("name", format!("duplicate MCP server name `{}`", spec.name)));
        }
        let ctx = Ctx::new(source_name, format!("MCP server `{}`", spec.name));
        servers.push(load_server(&ctx, spec, base_dir, env)?);
    }
    Ok(servers)
}

fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn load_server(
    ctx: &Ctx<'_>,
    spec: McpServerSpec,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<ServerConfig, LoadError> {
    let transport = match (spec.command, spec.url) {
        (Some(command), None) => {
            if !spec.headers.is_empty() {
                return Err(ctx.err("headers", "headers apply to a `url` server only"));
            }
            stdio(ctx, command, spec.env, base_dir, env)?
        }
        (None, Some(url)) => {
            if !spec.env.is_empty() {
                return Err(ctx.err("env", "env applies to a `command` server only"));
            }
            http(ctx, &url, &spec.headers, env)?
        }
        _ => {
            return Err(ctx.err(
                "command",
                "give exactly one of `command` (stdio) and `url` (Streamable HTTP)",
            ));
        }
    };
    if let Some(tools) = &spec.tools {
        let mut seen = HashSet::new();
        for tool in tools {
            if !seen.insert(tool) {
                return Err(ctx.err("tools", format!("`{tool}` is listed twice")));
            }
        }
    }
    Ok(ServerConfig {
        name: spec.name,
        transport,
        tools: spec.tools,
        bound_tools: Vec::new(),
        prefix: spec.prefix,
        optional: spec.optional,
        call_timeout: millis(ctx, "timeout_ms", spec.timeout_ms, MAX_TIMEOUT_MS)?,
        start_timeout: millis(
            ctx,
            "start_timeout_ms",
            spec.start_timeout_ms,
            MAX_START_TIMEOUT_MS,
        )?,
        restart_backoff: millis(
            ctx,
            "restart_backoff_ms",
            spec.restart_backoff_ms,
            MAX_BACKOFF_MS,
        )?,
        restart_backoff_max: {
            let max = millis(
                ctx,
                "restart_backoff_max_ms",
                spec.restart_backoff_max_ms,
                MAX_BACKOFF_MS,
            )?;
            if max.as_millis() < u128::from(spec.restart_backoff_ms) {
                return Err(ctx.err(
                    "restart_backoff_max_ms",
                    "must not be less than restart_backoff_ms",
                ));
            }
            max
        },
    })
}

fn millis(ctx: &Ctx<'_>, field: &str, value: u64, max: u64) -> Result<Duration, LoadError> {
    if value == 0 || value > max {
        return Err(ctx.err(field, format!("{value} is out of range (1..={max})")));
    }
    Ok(Duration::from_millis(value))
}

fn stdio(
    ctx: &Ctx<'_>,
    command: Vec<String>,
    vars: BTreeMap<String, String>,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<Transport, LoadError> {
    let mut parts = command.into_iter();
    let program = parts
        .next()
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| ctx.err("command", "must name a program to run"))?;
    // A bare name is looked up on PATH; a relative path (`./server.sh`, `bin/server`) is the
    // file's directory's, as the working directory of the process is.
    let program = if program.contains('/') && Path::new(&program).is_relative() {
        base_dir.join(&program).display().to_string()
    } else {
        program
    };
    let mut resolved = BTreeMap::new();
    for (name, value) in vars {
        let field = format!("env.{name}");
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(ctx.err(&field, "is not a valid environment variable name"));
        }
        let value = expand_env(&value, env).map_err(|m| ctx.err(&field, m))?;
        resolved.insert(name, value);
    }
    Ok(Transport::Stdio {
        program,
        args: parts.collect(),
        env: resolved,
        cwd: base_dir.to_owned(),
    })
}

fn http(
    ctx: &Ctx<'_>,
    url: &str,
    headers: &BTreeMap<String, String>,
    env: Env<'_>,
) -> Result<Transport, LoadError> {
    let url = expand_env(url, env).map_err(|m| ctx.err("url", m))?;
    match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
        Ok(_) => return Err(ctx.err("url", "must be an http:// or https:// URL with a host")),
        Err(e) => return Err(ctx.err("url", format!("not a valid URL: {e}"))),
    }
    let mut checked = HashMap::new();
    for (name, value) in headers {
        let field = format!("headers.{name}");
        let value = expand_env(value, env).map_err(|m| ctx.err(&field, m))?;
        let (name, value) = header(name, &value).map_err(|m| ctx.err(&field, m))?;
        checked.insert(name, value);
    }
    Ok(Transport::Http {
        url,
        headers: checked,
    })
}

/// An explicit `binding = { type = "mcp", server, tool }`: the server must be declared.
pub(crate) fn load_binding(
    ctx: &Ctx<'_>,
    spec: McpSpec,
    servers: &[Arc<Server>],
) -> Result<McpBinding, LoadError> {
    let server = servers
        .iter()
        .find(|s| s.config.name == spec.server)
        .ok_or_else(|| {
            ctx.err(
                "binding.server",
                format!("no [[mcp_servers]] entry is named `{}`", spec.server),
            )
        })?;
    if spec.tool.trim().is_empty() {
        return Err(ctx.err("binding.tool", "must name a tool"));
    }
    let timeout = match spec.timeout_ms {
        Some(ms) => millis(ctx, "binding.timeout_ms", ms, MAX_TIMEOUT_MS)?,
        None => server.config.call_timeout,
    };
    Ok(McpBinding {
        server: Arc::clone(server),
        tool: spec.tool,
        timeout,
    })
}
