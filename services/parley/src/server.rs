//! The transports: HTTP (ECMA-431) and WebSocket (ECMA-432) on the NLIP listener, and the
//! out-of-band upload listener on its own port. They decode, hand the message to the
//! [`Agent`], and encode; every failure leaves as an NLIP message.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use axum::{Extension, Router};
use futures::FutureExt as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parley_nlip::Message;
use parley_store::StoreError;
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};

use crate::agent::{Agent, Reply, bare_error, upload_reply};
use crate::config::Limits;
use crate::error::ApiError;

/// Shared state behind every route.
#[derive(Debug, Clone)]
pub struct AppState {
    pub agent: Arc<Agent>,
    pub limits: Limits,
    limiter: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
    /// `limits.max_concurrent_requests`: NLIP requests beyond it wait for a permit.
    permits: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn new(agent: Arc<Agent>, limits: Limits) -> Self {
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
            limiter,
            permits,
        }
    }

    fn check_rate(&self, peer: SocketAddr) -> Result<(), ApiError> {
        match &self.limiter {
            Some(l) if l.check_key(&peer.ip()).is_err() => Err(ApiError::RateLimited),
            _ => Ok(()),
        }
    }

    /// Runs the agent under the request timeout.
    async fn answer(&self, request: Message, peer: SocketAddr) -> Reply {
        let timeout = Duration::from_millis(self.limits.request_timeout_ms);
        match tokio::time::timeout(timeout, self.agent.handle(&request, peer)).await {
            Ok(reply) => reply,
            Err(_) => self.agent.error_reply(
                &request,
                None,
                ApiError::Timeout(self.limits.request_timeout_ms),
            ),
        }
    }
}

/// The NLIP listener's routes, as an axum router.
///
/// [`serve`] answers `POST /nlip` itself, straight from hyper (see [`NlipService`]), and hands
/// every other request to this router; the router's own `POST /nlip` route runs the same code
/// for callers that embed the router (tests drive it with `oneshot`). No router-wide layers:
/// axum wraps every route in each one; the other routes get the panic guard as their own layer.
pub fn app(state: AppState) -> Router {
    let guard = || tower_http::catch_panic::CatchPanicLayer::custom(panic_response);
    Router::new()
        .route("/nlip", post(post_nlip).fallback(method_not_allowed))
        .route("/nlip/", post(post_nlip).fallback(method_not_allowed))
        .route("/nlip/ws", get(ws_cbor).layer(guard()))
        .route("/nlip/ws/text", get(ws_text).layer(guard()))
        .route("/health", get(health).layer(guard()))
        .route("/metrics", get(metrics_text).layer(guard()))
        .fallback(not_found)
        .with_state(state)
}

/// The upload listener's routes (ECMA-431: a different port).
pub fn upload_app(state: AppState) -> Router {
    Router::new()
        .route("/upload", post(post_upload).fallback(method_not_allowed))
        .route("/uploads/{id}", get(get_upload))
        .fallback(not_found)
        .layer(DefaultBodyLimit::disable())
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
    let main = serve_nlip(state.clone(), listener, wait(rx.clone()));
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
/// With Nagle's algorithm on, a peer that sent several messages on one WebSocket without waiting
/// got every answer after the first about 40 ms late: each was held back until the peer's
/// delayed ACK of the one before (20 such messages: 44 ms instead of 0.4 ms on loopback).
fn prepare_socket(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(peer = ?stream.peer_addr().ok(), error = %e, "could not set TCP_NODELAY");
    }
}

/// The NLIP listener: one hyper connection (HTTP/1.1 or HTTP/2, with upgrades for WebSocket)
/// per accepted socket, each served by an [`NlipService`] that knows its peer's address.
/// After `stop`, it accepts no more connections, asks each open one to finish its in-flight
/// request and close, and returns once all have.
async fn serve_nlip(
    state: AppState,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        router: app(state.clone()),
        state,
    });
    let limits = &shared.state.limits;
    let head_timeout = Duration::from_millis(limits.header_read_timeout_ms);
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_timeout);
    // HTTP/2 connections are pinged like WebSocket sessions: a peer that does not answer within
    // two more intervals is gone, and its connection (and slot) is dropped.
    let ping = Duration::from_millis(limits.ws_ping_interval_ms);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(ping)
        .keep_alive_timeout(ping.saturating_mul(2))
        // RFC 8441 extended CONNECT: WebSocket over HTTP/2.
        .enable_connect_protocol();
    let builder = Arc::new(builder);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    // Stopping: every connection finishes the requests it has and closes; `serve_nlip` returns
    // once all have.
    let stopping = tokio_util::sync::CancellationToken::new();
    let connections = tokio_util::task::TaskTracker::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        if slots.available_permits() == 0 {
            tracing::warn!(
                limit = limits.max_connections,
                "limits.max_connections reached: no new connections until one closes"
            );
        }
        // Nothing closes the semaphore; `Err` cannot happen.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(permit) => ConnectionSlot {
                    _permit: Arc::new(permit),
                },
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        prepare_socket(&stream);
        // The service lives as long as the connection, and with it the slot; a WebSocket
        // session takes a clone along when the connection is upgraded.
        let activity = Arc::new(Activity::default());
        let service = NlipService {
            shared: shared.clone(),
            peer,
            slot,
            activity: Arc::clone(&activity),
        };
        let builder = Arc::clone(&builder);
        let stopping = stopping.clone();
        connections.spawn(async move {
            // hyper's head timer starts at a request's first byte (or at the previous answer);
            // a peer that connects and never sends one gets the same time, then is dropped.
            // (`peek`, not `readable`: readiness may be reported before any byte has come.)
            let mut first = [0u8; 1];
            let first_byte = tokio::select! {
                peeked = tokio::time::timeout(head_timeout, stream.peek(&mut first)) => peeked,
                // Stopping: a connection with no request yet is simply closed.
                () = stopping.cancelled() => return,
            };
            if !matches!(first_byte, Ok(Ok(1..))) {
                tracing::debug!(%peer, "connection closed: no request within the head timeout");
                return;
            }
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            // Closed gracefully (HTTP/2: GOAWAY, then the streams in flight finish) when the
            // server stops, or when no request has been in flight for one to two head timeouts:
            // HTTP/1 has hyper's head timer for that, HTTP/2 nothing else, and an idle peer that
            // answers pings would hold its connection slot for ever.
            let mut closing = false;
            let ended = loop {
                tokio::select! {
                    biased;
                    ended = connection.as_mut() => break ended,
                    () = stopping.cancelled(), if !closing => {
                        closing = true;
                        connection.as_mut().graceful_shutdown();
                    }
                    () = activity.idle(head_timeout), if !closing => {
                        tracing::debug!(%peer, "connection closed: idle for the head timeout");
                        closing = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            };
            if let Err(e) = ended {
                tracing::trace!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Requests in flight on one connection, and a count of their beginnings and ends: what tells
/// an idle connection without reading a clock on every request.
#[derive(Debug, Default)]
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    events: std::sync::atomic::AtomicU64,
}

impl Activity {
    /// Marks a request as in flight until the guard is dropped.
    fn begin(self: &Arc<Self>) -> InFlight {
        use std::sync::atomic::Ordering::Relaxed;
        self.in_flight.fetch_add(1, Relaxed);
        self.events.fetch_add(1, Relaxed);
        InFlight(Arc::clone(self))
    }

    /// Completes once a whole `limit` has passed with no request in flight, none beginning and
    /// none ending: between one and two `limit`s after the last request ended.
    async fn idle(&self, limit: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut seen = self.events.load(Relaxed);
        loop {
            tokio::time::sleep(limit).await;
            let now = self.events.load(Relaxed);
            if now == seen && self.in_flight.load(Relaxed) == 0 {
                return;
            }
            seen = now;
        }
    }
}

/// A request in flight on its connection (see [`Activity`]).
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.events.fetch_add(1, Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// An accept error: a connection that died before it was accepted is skipped; anything else
/// (out of file descriptors, say) is logged and retried after a pause, as axum does.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; retrying in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// What every connection of the NLIP listener shares.
#[derive(Debug)]
struct Shared {
    state: AppState,
    router: Router,
}

/// The hyper service of one NLIP connection. `POST /nlip` (the hot path: every NLIP message
/// over HTTP) is answered here directly, with the peer address the connection was accepted
/// with, a body read without boxing and a reply body that is not boxed either; axum's routing,
/// extension map and extractors would roughly double the per-request work of a small message.
/// Everything else goes to the [`app`] router, with the peer address as [`ConnectInfo`].
#[derive(Debug, Clone)]
struct NlipService {
    shared: Arc<Shared>,
    peer: SocketAddr,
    slot: ConnectionSlot,
    activity: Arc<Activity>,
}

/// One of the listener's `limits.max_connections` slots, held by a connection and by the
/// WebSocket session it was upgraded to; freed when both are gone.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionSlot {
    _permit: Arc<tokio::sync::OwnedSemaphorePermit>,
}

type NlipBody = http_body_util::Either<http_body_util::Full<Bytes>, Body>;

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for NlipService {
    type Response = Response<NlipBody>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Response<NlipBody>, std::convert::Infallible>> + Send>,
    >;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let shared = self.shared.clone();
        let peer = self.peer;
        let in_flight = self.activity.begin();
        if request.method() == axum::http::Method::POST
            && matches!(request.uri().path(), "/nlip" | "/nlip/")
        {
            return Box::pin(async move {
                let _in_flight = in_flight;
                let response = nlip_post(&shared.state, peer, request).await;
                Ok(response.map(http_body_util::Either::Left))
            });
        }
        let mut request = request;
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(self.slot.clone());
        Box::pin(async move {
            use tower::ServiceExt as _;
            let _in_flight = in_flight;
            let response = shared.router.clone().oneshot(request).await?;
            Ok(response.map(http_body_util::Either::Right))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Cbor,
}

impl Encoding {
    fn of(headers: &HeaderMap) -> Result<Encoding, ApiError> {
        let Some(ct) = headers.get(header::CONTENT_TYPE) else {
            return Ok(Encoding::Json);
        };
        // What nearly every client sends, compared as bytes before any parsing.
        if ct.as_bytes() == b"application/json" {
            return Ok(Encoding::Json);
        }
        let ct = ct.to_str().unwrap_or_default();
        let essence = ct.split(';').next().unwrap_or_default().trim();
        let is = |name: &str| essence.eq_ignore_ascii_case(name);
        // `+json` after a non-empty type (`get` also refuses a cut inside a character).
        let json_suffix = essence.len() > 5
            && essence
                .get(essence.len() - 5..)
                .is_some_and(|s| s.eq_ignore_ascii_case("+json"));
        if is("application/cbor") {
            Ok(Encoding::Cbor)
        } else if is("application/json") || is("text/json") || essence.is_empty() || json_suffix {
            Ok(Encoding::Json)
        } else {
            Err(ApiError::UnsupportedMediaType(ct.to_owned()))
        }
    }

    fn decode(self, bytes: &[u8]) -> Result<Message, ApiError> {
        Ok(match self {
            Encoding::Json => parley_nlip::from_json_slice(bytes)?,
            Encoding::Cbor => parley_nlip::from_cbor_slice(bytes)?,
        })
    }

    /// The reply as an HTTP response, encoded the way the request came.
    fn respond(
        self,
        status: StatusCode,
        message: &Message,
    ) -> Response<http_body_util::Full<Bytes>> {
        let (body, ct) = match self {
            Encoding::Json => (parley_nlip::to_json_vec(message), "application/json"),
            Encoding::Cbor => (parley_nlip::to_cbor_vec(message), "application/cbor"),
        };
        let mut response = Response::new(http_body_util::Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        response
    }
}

fn error_response(encoding: Encoding, error: ApiError) -> Response<http_body_util::Full<Bytes>> {
    encoding.respond(error.status(), &bare_error(&error))
}

/// Reads a body of at most `limit` bytes; a longer one is a 413 in NLIP form. A body that
/// declares a larger length is refused before any of it is read. A small message arrives in
/// one frame, which is kept as it came; only a body in several frames is copied together.
async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    use http_body_util::BodyExt as _;
    let too_large = || ApiError::TooLarge { limit };
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined: Option<Vec<u8>> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::MalformedJson(format!("could not read the request body: {e}"))
        })?;
        // Trailers carry nothing an NLIP message needs.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        len += data.len();
        if len > limit {
            return Err(too_large());
        }
        match (&mut joined, first.take()) {
            (Some(all), _) => all.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(earlier)) => {
                let mut all = Vec::with_capacity(len);
                all.extend_from_slice(&earlier);
                all.extend_from_slice(&data);
                joined = Some(all);
            }
        }
    }
    Ok(match joined {
        Some(all) => Bytes::from(all),
        None => first.unwrap_or_default(),
    })
}

/// `POST /nlip` through the axum router (the same work as the direct path of [`serve`]).
async fn post_nlip(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: axum::extract::Request,
) -> Response {
    nlip_post(&state, peer, request).await.into_response()
}

/// One NLIP message over HTTP: the concurrency permit, the panic guard, then the exchange.
async fn nlip_post<B>(
    state: &AppState,
    peer: SocketAddr,
    request: axum::http::Request<B>,
) -> Response<http_body_util::Full<Bytes>>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    // Requests beyond the limit wait here, before their body is read. (`acquire` only fails
    // on a closed semaphore, and nothing closes this one.)
    let _permit = state.permits.acquire().await.ok();
    // A bug must not cost the peer its answer: a panic becomes an opaque NLIP 500.
    match std::panic::AssertUnwindSafe(answer_post(state, peer, request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(_) => error_response(Encoding::Json, panicked()),
    }
}

async fn answer_post<B>(
    state: &AppState,
    peer: SocketAddr,
    request: axum::http::Request<B>,
) -> Response<http_body_util::Full<Bytes>>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    // Only the Content-Type is needed: it is read in place, and the rest of the head is
    // dropped before the first await rather than carried through the exchange.
    let (encoding, body) = {
        let (parts, body) = request.into_parts();
        (Encoding::of(&parts.headers), body)
    };
    let encoding = match encoding {
        Ok(e) => e,
        Err(e) => return error_response(Encoding::Json, e),
    };
    if let Err(e) = state.check_rate(peer) {
        return error_response(encoding, e);
    }
    // The body must arrive within the request timeout: a peer that sends it slowly, or stops
    // half-way, holds a concurrency permit only that long. (A body already received, the
    // usual case, is read without arming a timer.)
    let ms = state.limits.request_timeout_ms;
    let body = tokio::time::timeout(
        Duration::from_millis(ms),
        read_body(body, state.limits.max_message_bytes),
    );
    let request = match body
        .await
        .unwrap_or(Err(ApiError::SlowBody(ms)))
        .and_then(|b| encoding.decode(&b))
    {
        Ok(m) => m,
        Err(e) => return error_response(encoding, e),
    };
    let reply = state.answer(request, peer).await;
    encoding.respond(reply.status, &reply.message)
}

async fn health(State(state): State<AppState>) -> Response {
    match state.agent.store.ping().await {
        Ok(()) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({
                "status": "ok",
                "store": state.agent.store.backend_name(),
                "reasoner": state.agent.reasoner.backend(),
            })),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: store unreachable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(serde_json::json!({"status": "unavailable", "store": "unreachable"})),
            )
                .into_response()
        }
    }
}

fn panicked() -> ApiError {
    ApiError::internal(anyhow::anyhow!("a request handler panicked"))
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    error_response(Encoding::Json, panicked()).into_response()
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    crate::metrics::protocol_model_calls(state.agent.provider.reasoner.model_calls());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(),
    )
        .into_response()
}

async fn not_found() -> Response {
    error_response(Encoding::Json, ApiError::NotFound).into_response()
}

async fn method_not_allowed() -> Response {
    error_response(Encoding::Json, ApiError::MethodNotAllowed).into_response()
}

// --- WebSocket (ECMA-432) ------------------------------------------------------------------

/// Which end-point a socket was opened on: CBOR binary frames or UTF-8 JSON text frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Cbor,
    Text,
}

async fn ws_cbor(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    slot: Option<Extension<ConnectionSlot>>,
) -> Response {
    upgrade(ws, state, peer, slot, Framing::Cbor)
}

async fn ws_text(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    slot: Option<Extension<ConnectionSlot>>,
) -> Response {
    upgrade(ws, state, peer, slot, Framing::Text)
}

/// How much a WebSocket session reads at a time, and the read buffer it allocates up front.
/// tungstenite zero-fills the free part of that buffer before every read: at its default of
/// 128 KiB, a `memset` larger than the CPU's first-level cache for every frame (and for every read
/// that found nothing), about 2.5 % of the provider's CPU in the negotiation bench, and 128 KiB
/// held by every connection. NLIP messages are small; a large one takes several reads.
pub const WS_READ_CHUNK: usize = 8 * 1024;

/// The session keeps the connection's slot (`limits.max_connections`) until it ends; a router
/// served other than by [`serve`] has none.
fn upgrade(
    ws: WebSocketUpgrade,
    state: AppState,
    peer: SocketAddr,
    slot: Option<Extension<ConnectionSlot>>,
    framing: Framing,
) -> Response {
    let limit = state.limits.max_message_bytes;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(WS_READ_CHUNK)
        .on_upgrade(move |socket| async move {
            run_socket(socket, state, peer, framing).await;
            drop(slot);
        })
}

/// One connection: messages are answered in order; pings keep it alive; a peer silent for
/// three ping intervals is disconnected.
async fn run_socket(mut socket: WebSocket, state: AppState, peer: SocketAddr, framing: Framing) {
    let interval = Duration::from_millis(state.limits.ws_ping_interval_ms);
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut last_seen = tokio::time::Instant::now();
    tracing::debug!(%peer, ?framing, "websocket opened");
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let Some(incoming) = incoming else { break };
                last_seen = tokio::time::Instant::now();
                let frame = match incoming {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "websocket error");
                        // Oversized frames end here: tell the peer why before closing.
                        let close = axum::extract::ws::CloseFrame {
                            code: axum::extract::ws::close_code::SIZE,
                            reason: "message too large or malformed frame".into(),
                        };
                        let _ = socket.send(WsMessage::Close(Some(close))).await;
                        break;
                    }
                };
                let reply = match frame {
                    WsMessage::Binary(bytes) => {
                        answer_frame(&state, peer, &bytes, Encoding::Cbor, framing).await
                    }
                    WsMessage::Text(text) => {
                        answer_frame(&state, peer, text.as_bytes(), Encoding::Json, framing).await
                    }
                    WsMessage::Close(_) => break,
                    WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
                };
                if socket.send(reply).await.is_err() {
                    break;
                }
            }
            _ = ticker.tick() => {
                if last_seen.elapsed() > interval * 3 {
                    tracing::debug!(%peer, "websocket idle: closing");
                    let _ = socket.send(WsMessage::Close(None)).await;
                    break;
                }
                if socket.send(WsMessage::Ping(Bytes::from_static(b"parley"))).await.is_err() {
                    break;
                }
            }
        }
    }
    tracing::debug!(%peer, "websocket closed");
}

/// Decodes a frame in the encoding it arrived in and answers in the same encoding. A
/// frame the end-point does not carry (text on the CBOR socket is accepted leniently;
/// binary on the text socket is not) gets an error, and the connection stays usable.
async fn answer_frame(
    state: &AppState,
    peer: SocketAddr,
    bytes: &[u8],
    encoding: Encoding,
    framing: Framing,
) -> WsMessage {
    let decoded = if framing == Framing::Text && encoding == Encoding::Cbor {
        Err(ApiError::UnsupportedMediaType(
            "binary frame on /nlip/ws/text; send UTF-8 JSON text frames, or CBOR to /nlip/ws"
                .into(),
        ))
    } else {
        state.check_rate(peer).and_then(|()| encoding.decode(bytes))
    };
    let message = match decoded {
        Ok(request) => state.answer(request, peer).await.message,
        Err(e) => bare_error(&e),
    };
    // The text end-point always answers in text, even when the peer sent binary.
    let reply_encoding = if framing == Framing::Text {
        Encoding::Json
    } else {
        encoding
    };
    match reply_encoding {
        Encoding::Cbor => WsMessage::Binary(parley_nlip::to_cbor_vec(&message).into()),
        Encoding::Json => WsMessage::Text(
            String::from_utf8(parley_nlip::to_json_vec(&message))
                .expect("serde_json writes UTF-8")
                .into(),
        ),
    }
}

// --- uploads (§6.4) ------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct UploadQuery {
    filename: Option<String>,
}

async fn post_upload(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = state.check_rate(peer) {
        return error_response(Encoding::Json, e).into_response();
    }
    let bytes = match read_body(body, state.limits.max_upload_bytes).await {
        Ok(b) => b,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream");
    match state
        .agent
        .store
        .put_upload(&bytes, content_type, query.filename.as_deref())
        .await
    {
        Ok(meta) => {
            let uri = format!("{}/uploads/{}", state.agent.upload_base, meta.id);
            Encoding::Json
                .respond(StatusCode::CREATED, &upload_reply(&uri, &meta))
                .into_response()
        }
        Err(e) => error_response(Encoding::Json, e.into()).into_response(),
    }
}

async fn get_upload(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match state.agent.store.get_upload(&id).await {
        Ok(Some(upload)) => {
            let ct = HeaderValue::from_str(&upload.meta.content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            (StatusCode::OK, [(header::CONTENT_TYPE, ct)], upload.bytes).into_response()
        }
        // An id that is not a SHA-256 names no upload either.
        Ok(None) | Err(StoreError::Invalid(_)) => {
            error_response(Encoding::Json, ApiError::UploadNotFound(id)).into_response()
        }
        Err(e) => error_response(Encoding::Json, e.into()).into_response(),
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

    fn of(content_type: Option<&str>) -> Result<Encoding, String> {
        let mut headers = HeaderMap::new();
        if let Some(ct) = content_type {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(ct).expect("a valid header value"),
            );
        }
        Encoding::of(&headers).map_err(|e| e.to_string())
    }

    #[test]
    fn content_types_choose_the_encoding() {
        assert_eq!(of(None), Ok(Encoding::Json));
        assert_eq!(of(Some("application/json")), Ok(Encoding::Json));
        assert_eq!(
            of(Some("Application/JSON; charset=utf-8")),
            Ok(Encoding::Json)
        );
        assert_eq!(of(Some("text/json")), Ok(Encoding::Json));
        assert_eq!(of(Some("application/nlip+JSON")), Ok(Encoding::Json));
        assert_eq!(of(Some("")), Ok(Encoding::Json));
        assert_eq!(of(Some("application/cbor")), Ok(Encoding::Cbor));
        assert_eq!(of(Some(" APPLICATION/CBOR ;x=1")), Ok(Encoding::Cbor));
        for refused in [
            "text/plain",
            "+json",
            "application/xml",
            "application/cbor-seq",
        ] {
            let error = of(Some(refused)).expect_err(refused);
            assert!(error.contains(refused), "{error}");
        }
    }
}
