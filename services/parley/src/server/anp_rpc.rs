//! `POST /anp/rpc`: ANP 1.2's JSON-RPC binding of the meta-protocol (`negotiation::jsonrpc`),
//! behind the same per-address admission as `POST /nlip` and `/mcp` (the rate, the requests in
//! flight, a permit of `limits.max_concurrent_requests`), its body read within
//! `limits.request_timeout_ms` and `limits.max_message_bytes`, its answer within the request
//! time limit. Every answer is a JSON-RPC response: a request the server cannot take (over a
//! limit, too large, too slow) gets `-32000` with the stable code of the NLIP error it would
//! have been, under that error's HTTP status; a notification gets 204 and no body.
//!
//! `GET /.well-known/agent-descriptions` (ANP-08's discovery page) and
//! `GET /agents/parley/ad.json` (the agent description, with its `MetaProtocolInterface`) tell
//! ANP peers where the end-point is.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use parley_anp::rpc::{Envelope, RpcError, error_response};
use serde_json::Value;

use super::AppState;
use super::http::read_body_within;
use crate::error::ApiError;
use crate::negotiation::jsonrpc::describe::{agent_description, discovery_page};
use crate::negotiation::jsonrpc::{Endpoint, Urls, refusal, request_id};
use crate::peer::Caller;

/// `POST /anp/rpc`.
pub(super) async fn rpc(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let refuse = |id: &Value, e: ApiError| {
        let mut response = (e.status(), Json(refusal(id, &e))).into_response();
        if let Some(wait) = e.retry_after() {
            let seconds = crate::throttle::whole_seconds(wait);
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    };
    let _address = match state.admission.admit(peer) {
        Ok(guard) => guard,
        Err(e) => return refuse(&Value::Null, e),
    };
    let urls = urls_of(&state, &request);
    let (head, body) = request.into_parts();
    // A DID-WBA signature may cover the body: that caller is resolved once the body is read.
    let signs_body = state.signs_body(&head.headers);
    let early = if signs_body {
        None
    } else {
        match state.caller(peer, &head, None).await {
            Ok(caller) => Some(caller),
            Err(e) => return refuse(&Value::Null, e),
        }
    };
    // `acquire` only fails on a closed semaphore, and nothing closes this one.
    let _permit = state.permits.acquire().await.ok();
    let limits = &state.limits;
    let body = read_body_within(body, limits.max_message_bytes, limits.request_timeout_ms);
    let bytes = match body.await {
        Ok(bytes) => bytes,
        Err(e) => return refuse(&Value::Null, e),
    };
    let caller = match early {
        Some(caller) => caller,
        None => match state.caller(peer, &head, Some(&bytes)).await {
            Ok(caller) => caller,
            Err(e) => return refuse(&request_id(&bytes), e),
        },
    };
    let caller = match origin_proven(&state, caller, &bytes).await {
        Ok(caller) => caller,
        Err(e) => return refuse(&request_id(&bytes), e),
    };
    let endpoint = Endpoint {
        agent: state.agent.clone(),
        caller: caller.clone(),
        urls,
        valid_for: state.agent.provider().limits().agreement_valid_for(),
        max_request_bytes: limits.max_message_bytes,
    };
    let within = Duration::from_millis(limits.request_timeout_ms);
    let span = tracing::debug_span!("anp.rpc", %peer);
    let answered = tracing::Instrument::instrument(
        crate::access::scoped(caller, endpoint.answer(&bytes)),
        span,
    );
    match tokio::time::timeout(within, answered).await {
        Ok(Some(answer)) => Json(answer).into_response(),
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Err(_) => refuse(
            &request_id(&bytes),
            ApiError::Timeout(limits.request_timeout_ms),
        ),
    }
}

/// The caller, named by the request's origin proof when its HTTP request named nobody
/// (`Access::origin_proven`; the proof is the ANP 1.2 way to prove the sender whatever carried
/// the request). A request the server cannot read is left to the end-point to refuse.
async fn origin_proven(state: &AppState, caller: Caller, bytes: &[u8]) -> Result<Caller, ApiError> {
    let access = state.agent.access();
    if caller.principal.id.is_some() || !access.takes_did_wba() {
        return Ok(caller);
    }
    let Ok(envelope) = Envelope::parse(bytes) else {
        return Ok(caller);
    };
    match access
        .origin_proven(&envelope.method, &envelope.params)
        .await
    {
        Ok(Some(principal)) => Ok(Caller::new(caller.addr, Arc::new(principal))),
        Ok(None) => Ok(caller),
        Err(ApiError::Unauthenticated(reason)) => {
            let actor = crate::audit::Actor::at(caller.addr);
            let audit = state.agent.audit();
            audit
                .authentication_failed(&actor, ORIGIN_PROOF, &reason)
                .await;
            Err(ApiError::Unauthenticated(reason))
        }
        Err(e) => Err(e),
    }
}

/// The scheme of a failed origin proof in the audit log.
const ORIGIN_PROOF: &str = "anp-origin-proof";

/// `/anp/rpc` with another method than POST: 405, with a JSON-RPC error saying so.
pub(super) async fn not_post() -> Response {
    let error = RpcError::invalid_request("JSON-RPC requests are POSTed to this end-point");
    let headers = [(axum::http::header::ALLOW, "POST")];
    let body = Json(error_response(&Value::Null, &error));
    (StatusCode::METHOD_NOT_ALLOWED, headers, body).into_response()
}

/// `GET /.well-known/agent-descriptions`.
pub(super) async fn discovery(State(state): State<AppState>, request: Request) -> Response {
    Json(discovery_page(&urls_of(&state, &request))).into_response()
}

/// `GET /agents/parley/ad.json`.
pub(super) async fn description(State(state): State<AppState>, request: Request) -> Response {
    let urls = urls_of(&state, &request);
    Json(agent_description(&state.agent, &urls)).into_response()
}

/// The end-points' URLs as the peer reached this agent: the request's authority (HTTP/2) or
/// `Host` header, when it is a valid `host[:port]`; the scheme the listener speaks.
fn urls_of<B>(state: &AppState, request: &axum::http::Request<B>) -> Urls {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            let host = request.headers().get(axum::http::header::HOST)?;
            let host = host.to_str().ok()?;
            host.parse::<axum::http::uri::Authority>()
                .ok()
                .map(|a| a.as_str().to_owned())
        })
        .filter(|a| !a.contains('@'));
    Urls::at(host.as_deref(), state.tls.is_some())
}
