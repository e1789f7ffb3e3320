//! The transports: HTTP (ECMA-431) and WebSocket (ECMA-432) on the NLIP listener, and the
//! out-of-band upload listener on its own port. They decode, hand the message to the
//! [`Agent`], and encode; every failure leaves as an NLIP message.
//!
//! # Layout
//! - `listener`: the NLIP listener's accept loop and its per-connection service, which
//!   answers `POST /nlip` itself and hands every other request to the router (`app`).
//! - `http`: `POST /nlip` and the small HTTP end-points (metrics, 404, 405).
//! - `health`: `/health/live`, `/health/ready` and `/health`, and the [`Readiness`] start-up
//!   reports into.
//! - `websocket`: `/nlip/ws` (CBOR) and `/nlip/ws/text` (JSON).
//! - `anp`: `/anp`, the meta-protocol's seed-002 framing (`negotiation::anp`).
//! - `upload`: the upload listener's routes.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use axum::serve::ListenerExt as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use parley_nlip::Message;
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument as _;

use crate::agent::{Agent, Reply};
use crate::config::Limits;
use crate::error::ApiError;

mod anp;
mod health;
mod http;
mod listener;
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
    limiter: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    /// `limits.max_concurrent_requests`: NLIP requests beyond it wait for a permit.
    permits: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn new(agent: Arc<Agent>, limits: Limits, readiness: Arc<Readiness>) -> Self {
        let limiter = NonZeroU32::new(limits.rate_limit_per_second).map(|rate| {
            let burst = NonZeroU32::new(limits.rate_limit_burst).unwrap_or(rate);
            Arc::new(RateLimiter::keyed(
                Quota::per_second(rate).allow_burst(burst),
            ))
        });
        let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_requests));
        AppState {
            agent,
            limits,
            readiness,
            limiter,
            permits,
        }
    }

    pub(crate) fn check_rate(&self, peer: SocketAddr) -> Result<(), ApiError> {
        match &self.limiter {
            Some(l) if l.check_key(&peer.ip()).is_err() => Err(ApiError::RateLimited),
            _ => Ok(()),
        }
    }

    /// Runs the agent under the request timeout, in an `nlip.request` span (`transport`:
    /// `http` or `ws`). The span is at debug level: at the default level it is disabled, and
    /// costs the hot path nothing measurable.
    pub(crate) async fn answer(
        &self,
        request: Message,
        peer: SocketAddr,
        transport: &'static str,
    ) -> Reply {
        let span = tracing::debug_span!(
            "nlip.request",
            transport,
            %peer,
            conversation = tracing::field::Empty
        );
        let timeout = Duration::from_millis(self.limits.request_timeout_ms);
        let handled = self.agent.handle(&request, peer).instrument(span);
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
    use http::{method_not_allowed, metrics_text, not_found, panic_response};
    use websocket::{Framing, route};
    let guard = || tower_http::catch_panic::CatchPanicLayer::custom(panic_response);
    Router::new()
        .route("/nlip", any(method_not_allowed))
        .route("/nlip/", any(method_not_allowed))
        .route("/nlip/ws", route(Framing::Cbor).layer(guard()))
        .route("/nlip/ws/text", route(Framing::Text).layer(guard()))
        .route("/anp", get(anp::upgrade).layer(guard()))
        .route("/health", get(health::health).layer(guard()))
        .route("/health/live", get(health::live).layer(guard()))
        .route("/health/ready", get(health::ready).layer(guard()))
        .route("/metrics", get(metrics_text).layer(guard()))
        .fallback(not_found)
        .with_state(state)
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
    let main = listener::serve_nlip(state.clone(), listener, wait(rx.clone()));
    let uploads = axum::serve(
        upload_listener.tap_io(|stream| prepare_socket(stream)),
        upload_app(state).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(wait(rx));
    let trigger = async move {
        shutdown.await;
        tracing::info!("shutting down: draining in-flight requests");
        let _ = tx.send(true);
    };
    let (a, b, ()) = tokio::join!(main, async { uploads.await }, trigger);
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
