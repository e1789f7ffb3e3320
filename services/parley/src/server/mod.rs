//! The transports: HTTP (ECMA-431) and WebSocket (ECMA-432) on the NLIP listener, and the
//! out-of-band upload listener on its own port. They decode, hand the message to the
//! [`Agent`], and encode; every failure leaves as an NLIP message.
//!
//! # Layout
//! - `listener`: the accept loop both listeners run and its per-connection service, which
//!   answers `POST /nlip` itself on the NLIP listener and hands every other request to the
//!   listener's router (`app`, `upload_app`).
//! - `admission`: what one client address may hold (connections, requests in flight) and the
//!   throttles (`crate::throttle`) a request meets before it is read.
//! - `http`: `POST /nlip` and the small HTTP end-points (metrics, 404, 405).
//! - `health`: `/health/live`, `/health/ready` and `/health`, and the [`Readiness`] start-up
//!   reports into.
//! - `websocket`: `/nlip/ws` (CBOR) and `/nlip/ws/text` (JSON).
//! - `anp`: `/anp`, the meta-protocol's seed-002 framing (`negotiation::anp`).
//! - `anp_rpc`: `POST /anp/rpc`, ANP 1.2's JSON-RPC binding (`negotiation::jsonrpc`), and the
//!   discovery documents that point at it.
//! - `mcp`: `/mcp` when configured, the MCP server (`mcp_server`) behind the admission above.
//! - `upload`: the upload listener's routes.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get, post};
use parley_nlip::Message;
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument as _;

use crate::agent::{Agent, Reply};
use crate::config::{Limits, McpSettings};
use crate::error::ApiError;
use crate::peer::Caller;

mod admission;
mod anp;
mod anp_rpc;
mod health;
mod http;
mod listener;
mod mcp;
mod upload;
mod websocket;

pub use health::{ModelEndpoint, Readiness, Sandbox};
pub use upload::upload_app;
pub use websocket::WS_READ_CHUNK;

/// Shared state behind every route.
#[derive(Debug, Clone)]
pub struct AppState {
    pub agent: Arc<Agent>,
    pub limits: Limits,
    /// What `/health/ready` reports beyond the database.
    pub readiness: Arc<Readiness>,
    /// Per-address connections and requests in flight, and the throttles a request meets
    /// before it is read.
    admission: Arc<admission::Admission>,
    /// `limits.max_concurrent_requests`: NLIP requests beyond it wait for a permit.
    permits: Arc<tokio::sync::Semaphore>,
    /// The ethics statement `GET /ethics` publishes (ECMA-434 §7.1.3).
    ethics: Arc<str>,
    /// `/mcp`'s settings when it is served; `None`, it is 404.
    mcp: Option<Arc<McpSettings>>,
    /// TLS on both listeners, when configured (`listener` runs the handshakes).
    pub tls: Option<Arc<crate::tls::ServerTls>>,
}

impl AppState {
    pub fn new(agent: Arc<Agent>, limits: Limits, readiness: Arc<Readiness>) -> Self {
        let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_requests));
        let throttles = Arc::clone(agent.throttles());
        AppState {
            agent,
            admission: Arc::new(admission::Admission::new(&limits, throttles)),
            limits,
            readiness,
            permits,
            ethics: Arc::from(""),
            mcp: None,
            tls: None,
        }
    }

    /// The state publishing `statement` at `GET /ethics`.
    pub fn with_ethics(mut self, statement: &str) -> Self {
        self.ethics = Arc::from(statement);
        self
    }

    /// Serves `/mcp` when `settings` say so.
    pub fn with_mcp(mut self, settings: &McpSettings) -> Self {
        self.mcp = settings.serve.then(|| Arc::new(settings.clone()));
        self
    }

    /// Whether `/mcp` is served.
    pub fn serves_mcp(&self) -> bool {
        self.mcp.is_some()
    }

    /// The throttle of one message from `peer` (a WebSocket message or an `/anp` frame: its
    /// session already counts as one of the address's connections, and answers one message at
    /// a time).
    pub(crate) fn check_rate(&self, peer: SocketAddr) -> Result<(), ApiError> {
        self.admission
            .throttle(crate::throttle::Kind::Messages, peer)
    }

    /// Resolves the credentials of a request from `peer` (its `Authorization` header, the
    /// client certificate the listener put in its extensions, a DID-WBA signature over its head
    /// and `body`) to its [`Caller`]. A failure is recorded in the audit log before it returns.
    pub(crate) async fn caller(
        &self,
        peer: SocketAddr,
        head: &axum::http::request::Parts,
        body: Option<&[u8]>,
    ) -> Result<Caller, ApiError> {
        let access = self.agent.access();
        let authorization = head.headers.get(axum::http::header::AUTHORIZATION);
        let (resolved, scheme) = if access.presents_did_wba(&head.headers) {
            let tls = self.tls.is_some();
            let principal = access.did_wba_request(head, tls, body).await;
            (principal.map(Arc::new), crate::access::did_wba::SCHEME)
        } else {
            let identity = head.extensions.get::<crate::peer::PeerIdentity>();
            let principal = access.resolve(authorization, identity).await;
            (principal, crate::access::scheme_of(authorization))
        };
        match resolved {
            Ok(principal) => Ok(Caller::new(peer, principal)),
            Err(ApiError::Unauthenticated(reason)) => {
                let actor = crate::audit::Actor::at(peer);
                let audit = self.agent.audit();
                audit.authentication_failed(&actor, scheme, &reason).await;
                Err(ApiError::Unauthenticated(reason))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a request's caller is resolved only once its body is read: its DID-WBA
    /// signature may cover the body (`POST /nlip`, `POST /anp/rpc`).
    pub(crate) fn signs_body(&self, headers: &axum::http::HeaderMap) -> bool {
        self.agent.access().did_wba_signs_body(headers)
    }

    /// Runs the agent under the request timeout, in an `nlip.request` span (`transport`:
    /// `http` or `ws`). The span is at debug level: at the default level it is disabled, and
    /// costs the hot path nothing measurable.
    pub(crate) async fn answer(
        &self,
        request: Message,
        caller: &Caller,
        transport: &'static str,
    ) -> Reply {
        let span = tracing::debug_span!(
            "nlip.request",
            transport,
            peer = %caller.addr,
            conversation = tracing::field::Empty
        );
        let timeout = Duration::from_millis(self.limits.request_timeout_ms);
        let handled = self.agent.handle(&request, caller).instrument(span);
        match tokio::time::timeout(timeout, handled).await {
            Ok(reply) => reply,
            Err(_) => self.agent.error_reply(
                &request,
                None,
                ApiError::Timeout(self.limits.request_timeout_ms),
            ),
        }
    }
}

/// The NLIP listener's routes other than `POST /nlip`, as an axum router.
///
/// `POST /nlip` has one implementation, [`http::nlip_post`], which the listener's
/// per-connection service (`listener::NlipService`) calls straight from hyper, before any
/// routing: the hot path carries no routing table, extension map or boxed bodies. Every other
/// request comes here; the NLIP paths answer other methods with the NLIP-shaped 405. No
/// router-wide layers: axum wraps every route in each one; the other routes get the panic
/// guard as their own layer.
fn app(state: AppState) -> Router {
    use crate::negotiation::jsonrpc::describe::{DESCRIPTION_PATH, DISCOVERY_PATH};
    use http::{method_not_allowed, metrics_text, not_found, panic_response};
    use websocket::{Framing, route};
    let guard = || tower_http::catch_panic::CatchPanicLayer::custom(panic_response);
    let mut router = Router::new();
    if let Some(settings) = &state.mcp {
        router = router.route("/mcp", mcp::route(&state, settings).layer(guard()));
    }
    router
        .route("/nlip", any(method_not_allowed))
        .route("/nlip/", any(method_not_allowed))
        .route("/nlip/ws", route(Framing::Cbor).layer(guard()))
        .route("/nlip/ws/text", route(Framing::Text).layer(guard()))
        .route("/anp", get(anp::upgrade).layer(guard()))
        .route(
            "/anp/rpc",
            post(anp_rpc::rpc)
                .fallback(anp_rpc::not_post)
                .layer(guard()),
        )
        .route(DISCOVERY_PATH, get(anp_rpc::discovery).layer(guard()))
        .route(DESCRIPTION_PATH, get(anp_rpc::description).layer(guard()))
        .route("/health", get(health::health).layer(guard()))
        .route("/health/live", get(health::live).layer(guard()))
        .route("/health/ready", get(health::ready).layer(guard()))
        .route("/metrics", get(metrics_text).layer(guard()))
        .route("/ethics", get(ethics).layer(guard()))
        .fallback(not_found)
        .with_state(state)
}

/// `GET /ethics`: the operator's ethics statement, as Markdown.
async fn ethics(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/markdown; charset=utf-8",
        )],
        state.ethics.to_string(),
    )
}

/// Serves both listeners until `shutdown` completes, then drains in-flight requests.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    upload_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    use listener::HotPath;
    let main = listener::serve(
        state.clone(),
        listener,
        app(state.clone()),
        HotPath::NlipPost,
        wait(rx.clone()),
    );
    let uploads = listener::serve(
        state.clone(),
        upload_listener,
        upload_app(state.clone()),
        HotPath::None,
        wait(rx.clone()),
    );
    // The throttles keep a little state per address and peer they have seen; those quiet for
    // longer than their burst takes to refill are forgotten once a minute.
    let forget = {
        let admission = Arc::clone(&state.admission);
        let stopped = wait(rx);
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(60));
            let mut stopped = std::pin::pin!(stopped);
            loop {
                tokio::select! {
                    _ = every.tick() => admission.forget_quiet(),
                    () = &mut stopped => break,
                }
            }
        }
    };
    let trigger = async move {
        shutdown.await;
        tracing::info!("shutting down: draining in-flight requests");
        let _ = tx.send(true);
    };
    let (a, b, (), ()) = tokio::join!(main, uploads, forget, trigger);
    a.and(b)
}

/// An accepted connection's socket sends each answer as soon as it is written (`TCP_NODELAY`).
/// With Nagle's algorithm on, a peer that sends several messages on one WebSocket without
/// waiting gets every answer after the first late: each is held back until the peer's delayed
/// ACK of the one before (some 40 ms on Linux).
fn prepare_socket(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(peer = ?stream.peer_addr().ok(), error = %e, "could not set TCP_NODELAY");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_send_without_delay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        assert!(!stream.nodelay().expect("TCP_NODELAY"), "off by default");
        prepare_socket(&stream);
        assert!(stream.nodelay().expect("TCP_NODELAY"));
    }
}
