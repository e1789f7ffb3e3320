//! `/mcp`, when configured: the MCP server (`crate::mcp_server`) on the NLIP listener, behind
//! the same per-address admission as `POST /nlip` (the rate, the requests in flight, a permit
//! of `limits.max_concurrent_requests`); over a limit, the request gets the 429 NLIP error with
//! `Retry-After` that every transport gives. Its body, too, is read as an NLIP message's is:
//! within `limits.request_timeout_ms` (408) and `limits.max_message_bytes` (413), before rmcp
//! sees it, so a peer that sends slowly holds its permit no longer than that. Its credentials
//! are resolved as every transport's are (`crate::access`); the [`Caller`](crate::peer::Caller)
//! rides in the request's extensions to the MCP handler, which lists and calls only what it
//! may.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{MethodRouter, any};

use super::AppState;
use super::http::{Encoding, error_response, read_body_within};
use crate::config::McpSettings;
use crate::mcp_server::{self, McpService};

/// The route of `/mcp` (every method: rmcp answers the ones Streamable HTTP does not use).
pub(super) fn route(state: &AppState, settings: &McpSettings) -> MethodRouter<AppState> {
    let service = mcp_server::service(
        state.agent.clone(),
        settings,
        state.limits.max_message_bytes,
        Duration::from_millis(state.limits.request_timeout_ms),
    );
    any(
        move |State(state): State<AppState>,
              ConnectInfo(peer): ConnectInfo<SocketAddr>,
              request: Request| { admitted(state, peer, service.clone(), request) },
    )
}

/// Serves one request once its address is admitted.
async fn admitted(
    state: AppState,
    peer: SocketAddr,
    service: McpService,
    request: Request,
) -> Response {
    let _address = match state.admission.admit(peer) {
        Ok(guard) => guard,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    // `acquire` only fails on a closed semaphore, and nothing closes this one.
    let _permit = state.permits.acquire().await.ok();
    let (mut parts, body) = request.into_parts();
    // The caller travels to the MCP handler in the request's extensions (rmcp hands it the
    // parts); a wrong credential is refused here, before rmcp reads anything.
    let caller = match state.caller(peer, &parts, None).await {
        Ok(caller) => caller,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    parts.extensions.insert(caller);
    let body = read_body_within(
        body,
        state.limits.max_message_bytes,
        state.limits.request_timeout_ms,
    );
    let body = match body.await {
        Ok(body) => body,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    let request = Request::from_parts(parts, Body::from(body));
    use tower::ServiceExt as _;
    let Ok(response) = service.oneshot(request).await;
    response.map(Body::new)
}
