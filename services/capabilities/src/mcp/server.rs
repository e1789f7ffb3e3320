//! One MCP server as Parley holds it: its connection (a child process or a Streamable HTTP
//! session, through `rmcp`), the calls made over it, and the tail of its standard error.
//! [`super::supervisor`] keeps the connection alive.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError,
    ServiceExt,
};
use rmcp::transport::{
    StreamableHttpClientTransport, TokioChildProcess,
    streamable_http_client::StreamableHttpClientTransportConfig,
};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use super::config::{ServerConfig, Transport};
use super::tools;
use crate::CapabilityError;

/// Lines of a server's standard error kept for the report of a failure, and their length.
const STDERR_LINES: usize = 20;
const STDERR_LINE_CHARS: usize = 500;
/// How long a failed server's standard error is read to its end once the server is gone.
const STDERR_DRAIN: Duration = Duration::from_secs(2);

/// A declared server and the state of its connection.
pub(crate) struct Server {
    pub(crate) config: ServerConfig,
    /// Its place in the file, which decides name clashes between servers (the first wins).
    pub(crate) index: usize,
    link: RwLock<Link>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.config.name)
            .field("transport", &self.config.transport_kind())
            .finish_non_exhaustive()
    }
}

enum Link {
    NotStarted,
    Up(Live),
    Down(String),
}

/// A running connection: what a call needs.
#[derive(Clone)]
pub(crate) struct Live {
    pub(crate) peer: Peer<RoleClient>,
    /// Every tool the server lists (explicit bindings may call tools `tools` leaves out).
    pub(crate) tools: Arc<HashSet<String>>,
    /// Told when a call finds the connection broken, so the supervisor reconnects.
    pub(crate) broken: Arc<Notify>,
}

impl Server {
    pub(crate) fn new(config: ServerConfig, index: usize) -> Self {
        Server {
            config,
            index,
            link: RwLock::new(Link::NotStarted),
        }
    }

    pub(crate) fn set_up(&self, live: Live) {
        *self.link.write().unwrap_or_else(|e| e.into_inner()) = Link::Up(live);
    }

    pub(crate) fn set_down(&self, reason: String) {
        *self.link.write().unwrap_or_else(|e| e.into_inner()) = Link::Down(reason);
    }

    /// The connection a call of `tool` goes over, or why there is none.
    fn live_for(&self, capability: &str, tool: &str) -> Result<Live, CapabilityError> {
        let unavailable = |message: String| CapabilityError::Unavailable {
            capability: capability.to_owned(),
            message,
        };
        let name = &self.config.name;
        match &*self.link.read().unwrap_or_else(|e| e.into_inner()) {
            Link::Up(live) if live.tools.contains(tool) => Ok(live.clone()),
            Link::Up(_) => Err(unavailable(format!(
                "the MCP server `{name}` does not list the tool `{tool}`"
            ))),
            Link::NotStarted => Err(unavailable(format!(
                "the MCP server `{name}` has not been started"
            ))),
            Link::Down(reason) => Err(unavailable(format!(
                "the MCP server `{name}` is down ({reason}); it is being restarted"
            ))),
        }
    }

    /// Calls `tool` with `args` within `timeout`; a call still open then is cancelled on the
    /// server (`notifications/cancelled`).
    pub(crate) async fn call(
        &self,
        capability: &str,
        tool: &str,
        args: &Value,
        timeout: Duration,
    ) -> Result<Value, CapabilityError> {
        let live = self.live_for(capability, tool)?;
        let arguments = match args {
            Value::Object(fields) => fields.clone(),
            _ => Map::new(),
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments),
        ));
        let deadline = tokio::time::Instant::now() + timeout;
        let timed_out = || CapabilityError::Timeout {
            capability: capability.to_owned(),
            after: timeout,
        };
        let sent = tokio::time::timeout_at(
            deadline,
            live.peer
                .send_request_with_option(request, PeerRequestOptions::no_options()),
        )
        .await
        .map_err(|_| timed_out())?;
        let mut handle = sent.map_err(|e| self.failed(capability, &live, e))?;
        let answer = match tokio::time::timeout_at(deadline, &mut handle.rx).await {
            Ok(Ok(answer)) => answer.map_err(|e| self.failed(capability, &live, e))?,
            Ok(Err(_)) => {
                return Err(self.failed(capability, &live, ServiceError::TransportClosed));
            }
            Err(_) => {
                let _ = handle.cancel(Some("timed out".to_owned())).await;
                return Err(timed_out());
            }
        };
        let ServerResult::CallToolResult(result) = answer else {
            return Err(CapabilityError::BindingFailed {
                capability: capability.to_owned(),
                message: format!(
                    "the MCP server `{}` did not answer tools/call with a tool result",
                    self.config.name
                ),
            });
        };
        let wire = serde_json::to_value(&result).map_err(|e| CapabilityError::BindingFailed {
            capability: capability.to_owned(),
            message: format!("the tool result cannot be read: {e}"),
        })?;
        tools::result(capability, &wire)
    }

    /// A failed exchange: a closed or broken connection makes the capability unavailable (and
    /// the supervisor reconnect); an error the server answered is the binding's failure.
    fn failed(&self, capability: &str, live: &Live, error: ServiceError) -> CapabilityError {
        let name = &self.config.name;
        match error {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                live.broken.notify_one();
                CapabilityError::Unavailable {
                    capability: capability.to_owned(),
                    message: format!("the connection to the MCP server `{name}` broke: {error}"),
                }
            }
            ServiceError::McpError(e) => CapabilityError::BindingFailed {
                capability: capability.to_owned(),
                message: format!(
                    "the MCP server `{name}` refused the call ({}): {}",
                    e.code.0, e.message
                ),
            },
            other => CapabilityError::BindingFailed {
                capability: capability.to_owned(),
                message: format!("the call to the MCP server `{name}` failed: {other}"),
            },
        }
    }
}

/// Why a server could not be started or listed, with what it wrote to standard error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) stderr: String,
}

/// Receives the server's notifications: a changed tool list wakes the supervisor.
pub(crate) struct Handler {
    pub(crate) tools_changed: Arc<Notify>,
}

impl rmcp::ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("parley", env!("CARGO_PKG_VERSION")),
        )
    }
}

pub(crate) type Running = RunningService<RoleClient, Handler>;

/// Starts the server's process (stdio) or opens its session (HTTP), and runs the MCP handshake
/// within the start time limit.
pub(crate) async fn connect(
    config: &ServerConfig,
    handler: Handler,
) -> Result<(Running, StderrTail), Failure> {
    let limit = config.start_timeout;
    let (handshake, tail) = match &config.transport {
        Transport::Stdio {
            program,
            args,
            env,
            cwd,
        } => {
            let mut command = tokio::process::Command::new(program);
            command
                .args(args)
                .envs(env)
                .current_dir(cwd)
                .kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(command)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| Failure {
                    message: format!("cannot run `{program}` in {}: {e}", cwd.display()),
                    stderr: String::new(),
                })?;
            let tail = StderrTail::spawn(&config.name, stderr);
            (
                tokio::time::timeout(limit, handler.serve(transport)).await,
                tail,
            )
        }
        Transport::Http { url, headers } => {
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers.clone()),
            );
            (
                tokio::time::timeout(limit, handler.serve(transport)).await,
                StderrTail::spawn(&config.name, None),
            )
        }
    };
    let message = match handshake {
        Ok(Ok(running)) => return Ok((running, tail)),
        Ok(Err(e)) => format!("the MCP handshake failed: {e}"),
        Err(_) => format!(
            "the MCP handshake did not finish within {} ms",
            limit.as_millis()
        ),
    };
    Err(Failure {
        message,
        stderr: tail.finish().await,
    })
}

/// The last lines a server wrote to standard error, read as it writes them (each is also
/// logged at debug level).
pub(crate) struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl StderrTail {
    fn spawn(server: &str, stderr: Option<tokio::process::ChildStderr>) -> StderrTail {
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let reader = stderr.map(|stderr| {
            let (lines, server) = (Arc::clone(&lines), server.to_owned());
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(stderr);
                let mut raw = Vec::new();
                loop {
                    raw.clear();
                    match reader.read_until(b'\n', &mut raw).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let line: String = String::from_utf8_lossy(&raw)
                        .trim_end()
                        .chars()
                        .take(STDERR_LINE_CHARS)
                        .collect();
                    tracing::debug!(server = %server, "mcp server stderr: {line}");
                    let mut kept = lines.lock().unwrap_or_else(|e| e.into_inner());
                    if kept.len() == STDERR_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            })
        });
        StderrTail { lines, reader }
    }

    /// What the server wrote, once it has closed its standard error (or after a short wait,
    /// for a server whose children keep it open).
    pub(crate) async fn finish(mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
        self.text()
    }

    pub(crate) fn text(&self) -> String {
        let kept = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}
