//! The listeners: one accept loop over hyper-util's HTTP/1.1 + HTTP/2 connection builder, used
//! by the NLIP listener and the upload listener alike: one connection slot per connection, at
//! most `limits.max_connections_per_address` connections per client address, the head, idle and
//! send timeouts, graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::admission::AddressGuard;
use super::{AppState, http, prepare_socket};
use crate::peer::{PeerAddress, PeerIdentity};

/// What a listener answers itself, before its router: the NLIP listener answers `POST /nlip`
/// (the hot path), the upload listener nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HotPath {
    NlipPost,
    None,
}

/// A listener: one hyper connection (HTTP/1.1 or HTTP/2, with upgrades for WebSocket) per
/// accepted socket, each served by an [`NlipService`] that knows its peer's address. A
/// connection from an address that already holds `limits.max_connections_per_address` is
/// closed as soon as it is accepted. With TLS configured (`state.tls`), every connection is a
/// TLS connection, with the configuration in force when it was accepted. After `stop`, it
/// accepts no more connections, asks each open one to finish its in-flight request and close,
/// and returns once all have.
pub(super) async fn serve(
    state: AppState,
    listener: TcpListener,
    router: Router,
    hot_path: HotPath,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        router,
        state,
        hot_path,
    });
    let limits = &shared.state.limits;
    let connection = Arc::new(Connection {
        builder: connection_builder(&shared.state),
        head_timeout: Duration::from_millis(limits.header_read_timeout_ms),
        send_timeout: Duration::from_millis(limits.send_timeout_ms),
        request_timeout: Duration::from_millis(limits.request_timeout_ms),
        // Stopping: every connection finishes the requests it has and closes; `serve`
        // returns once all have.
        stopping: tokio_util::sync::CancellationToken::new(),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let per_address = Arc::clone(&shared.state.admission.connections);
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
        let permit = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(permit) => permit,
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
        let Some(address) = per_address.try_acquire(PeerAddress::of(peer)) else {
            // No request exists yet to answer: the connection is closed, and its slot freed.
            tracing::debug!(
                %peer,
                limit = limits.max_connections_per_address,
                "connection refused: limits.max_connections_per_address reached for its address"
            );
            crate::metrics::refused("connections_per_address");
            continue;
        };
        prepare_socket(&stream);
        // The service lives as long as the connection, and with it the slot; a WebSocket
        // session takes a clone along when the connection is upgraded.
        let service = NlipService {
            shared: shared.clone(),
            peer,
            slot: ConnectionSlot {
                _held: Arc::new((permit, address)),
            },
            activity: Arc::default(),
            identity: None,
        };
        let tls = shared.state.tls.as_ref().map(|tls| tls.acceptor());
        connections.spawn(Arc::clone(&connection).serve(stream, service, tls));
    }
    drop(listener);
    connection.stopping.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// hyper's connection builder with the listener's limits: HTTP/1's head timer, and HTTP/2
/// connections pinged like WebSocket sessions (a peer that does not answer within two more
/// intervals is gone, and its connection and slot with it).
fn connection_builder(state: &AppState) -> Builder {
    let limits = &state.limits;
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms));
    let ping = Duration::from_millis(limits.ws_ping_interval_ms);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(ping)
        .keep_alive_timeout(ping.saturating_mul(2))
        // RFC 8441 extended CONNECT: WebSocket over HTTP/2.
        .enable_connect_protocol();
    builder
}

type Builder = hyper_util::server::conn::auto::Builder<TokioExecutor>;

/// What serving one accepted connection takes, shared by all of them.
struct Connection {
    builder: Builder,
    head_timeout: Duration,
    send_timeout: Duration,
    request_timeout: Duration,
    stopping: tokio_util::sync::CancellationToken,
}

impl Connection {
    /// Serves one accepted connection until it ends: over TLS when `tls` is given.
    async fn serve(
        self: Arc<Self>,
        stream: tokio::net::TcpStream,
        mut service: NlipService,
        tls: Option<TlsAcceptor>,
    ) {
        let peer = service.peer;
        // hyper's head timer starts at a request's first byte (or at the previous answer);
        // a peer that connects and never sends one gets the same time, then is dropped.
        // (`peek`, not `readable`: readiness may be reported before any byte has come.)
        let mut first = [0u8; 1];
        let first_byte = tokio::select! {
            peeked = tokio::time::timeout(self.head_timeout, stream.peek(&mut first)) => peeked,
            // Stopping: a connection with no request yet is simply closed.
            () = self.stopping.cancelled() => return,
        };
        if !matches!(first_byte, Ok(Ok(1..))) {
            tracing::debug!(%peer, "connection closed: no request within the head timeout");
            return;
        }
        let Some(acceptor) = tls else {
            return self.run(stream, service).await;
        };
        // The handshake is the first thing a TLS peer sends: it gets the head timeout too, and
        // what is not a TLS handshake (plaintext HTTP, say) ends the connection and frees its
        // slot.
        let handshake = tokio::select! {
            done = tokio::time::timeout(self.head_timeout, acceptor.accept(stream)) => done,
            () = self.stopping.cancelled() => return,
        };
        let stream = match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "connection closed: the TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "connection closed: no TLS handshake within the head timeout");
                return;
            }
        };
        service.identity = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(<[_]>::first)
            .and_then(crate::tls::identity_of);
        if let Some(identity) = &service.identity {
            tracing::debug!(%peer, %identity, "TLS client certificate verified");
        }
        self.run(stream, service).await;
    }

    /// Serves HTTP on an accepted (and, with TLS, handshaken) connection until it ends.
    async fn run<I>(&self, stream: I, service: NlipService)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = service.peer;
        let activity = Arc::clone(&service.activity);
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service);
        let mut connection = std::pin::pin!(connection);
        // Closed gracefully (HTTP/2: GOAWAY, then the streams in flight finish) when the
        // server stops, or when no request has been in flight for one to two head timeouts:
        // HTTP/1 has hyper's head timer for that, HTTP/2 nothing else, and an idle peer that
        // answers pings would hold its connection slot for ever. A connection that has not
        // finished closing within its grace (the answers in flight, then the send timeout: a
        // peer that does not read its last answer) is dropped.
        let grace = tokio::time::sleep(Duration::MAX);
        let mut grace = std::pin::pin!(grace);
        let mut closing = false;
        let ended = loop {
            tokio::select! {
                biased;
                ended = connection.as_mut() => break ended,
                () = self.stopping.cancelled(), if !closing => {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                    let within = self.request_timeout + self.send_timeout;
                    grace.as_mut().reset(tokio::time::Instant::now() + within);
                }
                () = activity.idle(self.head_timeout), if !closing => {
                    tracing::debug!(%peer, "connection closed: idle for the head timeout");
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                    grace.as_mut().reset(tokio::time::Instant::now() + self.send_timeout);
                }
                () = &mut grace, if closing => {
                    tracing::debug!(%peer, "connection dropped: it did not finish closing in time");
                    break Ok(());
                }
            }
        };
        if let Err(e) = ended {
            tracing::trace!(%peer, error = %e, "connection ended with an error");
        }
    }
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

/// What every connection of a listener shares.
#[derive(Debug)]
struct Shared {
    state: AppState,
    router: Router,
    hot_path: HotPath,
}

/// The hyper service of one connection of either listener. On the NLIP listener, `POST /nlip`
/// (the hot path: every NLIP message over HTTP) is answered here directly, with the peer address the connection was accepted
/// with, a body read without boxing and a reply body that is not boxed either; axum's routing,
/// extension map and extractors would roughly double the per-request work of a small message.
/// Everything else goes to the listener's router (`app` or `upload_app`), with the peer
/// address as [`ConnectInfo`].
/// A request on a connection whose client certificate named its peer carries that
/// [`PeerIdentity`] in its extensions, on either path.
#[derive(Debug, Clone)]
struct NlipService {
    shared: Arc<Shared>,
    peer: SocketAddr,
    slot: ConnectionSlot,
    activity: Arc<Activity>,
    identity: Option<PeerIdentity>,
}

/// One of the listener's `limits.max_connections` slots and one of its address's
/// `limits.max_connections_per_address`, held by a connection and by the WebSocket session it
/// was upgraded to; freed when both are gone.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionSlot {
    _held: Arc<(tokio::sync::OwnedSemaphorePermit, AddressGuard)>,
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
        let mut request = request;
        if let Some(identity) = &self.identity {
            request.extensions_mut().insert(identity.clone());
        }
        if shared.hot_path == HotPath::NlipPost
            && request.method() == axum::http::Method::POST
            && matches!(request.uri().path(), "/nlip" | "/nlip/")
        {
            return Box::pin(async move {
                let _in_flight = in_flight;
                let response = http::nlip_post(&shared.state, peer, request).await;
                Ok(response.map(http_body_util::Either::Left))
            });
        }
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
