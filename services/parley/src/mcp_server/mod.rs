//! Parley as an MCP server: its capabilities and the protocols it serves as a provider, offered
//! as MCP tools on `/mcp` (Streamable HTTP, on the official SDK, `rmcp`), so an MCP client uses
//! Parley without knowing NLIP.
//!
//! Served only when configured (`[mcp] serve`, `--serve-mcp`, `PARLEY_SERVE_MCP`); the route
//! itself, behind the NLIP listener's per-address admission, is `server::mcp`.
//!
//! # Layout
//! - `tools`: what becomes a tool and under which name: each capability under its own name
//!   (input schema, output schema, `readOnlyHint` from `read_only`), each protocol with an
//!   active handler as `protocol_<first 12 hex digits of its hash>` (request schema in,
//!   response schema out); and which tool a name calls.
//! - `call`: performing a call, through the same paths as everything else: a capability
//!   through `Capabilities::invoke` (what a handler's `host.call` reaches), a protocol through
//!   `Provider::application` (what an NLIP application message reaches), under the request
//!   timeout; what a result and an error become.
//!
//! # Decisions
//! - **Stateless.** Every request is answered on its own (rmcp's stateless mode, answers as
//!   JSON): no MCP session is kept, so an MCP client costs no memory between its requests and
//!   two instances on one database answer alike. `initialize` still works for clients of the
//!   revision before the current one (2025-11-25); the current revision (2026-07-28) has no
//!   sessions anyway. What follows from it: no server-to-client notifications, so no
//!   `notifications/tools/list_changed`; instead every `tools/list` reads the set as it is
//!   (the capability catalogue's current generation, the store's active protocols), and says so
//!   with a `ttlMs` of 0.
//! - **Objects only.** MCP tools take an object and answer with an object. A schema that is
//!   not `"type": "object"` (a capability that may answer `null`) is wrapped: the tool's output
//!   is `{"result": …}` (input: `{"request": …}`), and the value travels in that field.
//! - **Errors.** A call that fails (bad arguments, a capability or handler error, a timeout) is
//!   a tool result with `isError: true` whose text content is `{"error": {"code", "message"}}`, the
//!   stable code of the path it took; a name that is no tool is the JSON-RPC error MCP defines
//!   for it (invalid params, "unknown tool").
//! - **Identity.** Calls are made as the peer's address (`crate::peer`), as NLIP messages
//!   are; no credential is checked. The place for that check is `ParleyMcp::call_tool`,
//!   before the call, from the HTTP request's parts (see ARCHITECTURE.md).

mod call;
mod tools;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};

use crate::agent::Agent;
use crate::config::McpSettings;

/// The MCP revisions `/mcp` speaks: the current one and the one before it.
static REVISIONS: [ProtocolVersion; 2] =
    [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// The tower service of `/mcp`.
pub type McpService = StreamableHttpService<ParleyMcp, NeverSessionManager>;

/// Builds the `/mcp` service over `agent`'s capabilities and provider. `max_body` bounds a
/// request's body (the NLIP message limit), `timeout` a tool call (the request timeout).
pub fn service(
    agent: Arc<Agent>,
    settings: &McpSettings,
    max_body: usize,
    timeout: Duration,
) -> McpService {
    let shared = Arc::new(tools::Tools::new(agent, settings.max_protocol_tools));
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(max_body)
        .with_allowed_hosts(settings.allowed_hosts.clone());
    let handler = ParleyMcp {
        tools: shared,
        timeout,
    };
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The MCP server handler: one per request (the service clones it), all sharing [`tools::Tools`].
#[derive(Debug, Clone)]
pub struct ParleyMcp {
    tools: Arc<tools::Tools>,
    timeout: Duration,
}

impl rmcp::ServerHandler for ParleyMcp {
    fn get_info(&self) -> ServerConfig {
        let agent = self.tools.agent_info();
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("parley", env!("CARGO_PKG_VERSION"))
                    .with_title(agent.name.clone()),
            )
            .with_instructions(agent.description.clone())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&REVISIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools.list().await?;
        // Fresh on every list: the set changes while Parley runs.
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(0))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The caller, known by its address: no credential is checked here yet.
        let peer = peer_of(&context).ok_or_else(|| {
            ErrorData::internal_error("the request reached /mcp without its peer address", None)
        })?;
        let target = self.tools.resolve(&request.name).await?;
        let arguments = request.arguments.unwrap_or_default();
        let call = call::perform(&self.tools, target, arguments, peer, self.timeout);
        let result = crate::audit::acting_for(crate::audit::Actor::at(peer), call).await;
        Ok(result.into())
    }
}

/// The peer address the listener put on the HTTP request, which rmcp hands the handler with
/// the request's parts.
fn peer_of(context: &RequestContext<RoleServer>) -> Option<SocketAddr> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    let axum::extract::ConnectInfo(addr) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()?;
    Some(*addr)
}
