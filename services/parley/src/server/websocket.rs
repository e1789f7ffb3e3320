//! WebSocket (ECMA-432): CBOR binary frames at `/nlip/ws`, UTF-8 JSON text frames at
//! `/nlip/ws/text`; one NLIP message per frame, answered in order.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse as _, Response};
use axum::routing::{MethodRouter, get};

use super::AppState;
use super::http::{Encoding, error_response};
use super::listener::ConnectionSlot;
use crate::agent::bare_error;
use crate::error::ApiError;
use crate::peer::Caller;

/// Which end-point a socket was opened on: CBOR binary frames or UTF-8 JSON text frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Cbor,
    Text,
}

/// The route of a WebSocket end-point carrying `framing`.
pub(super) fn route(framing: Framing) -> MethodRouter<AppState> {
    get(
        move |ws: WebSocketUpgrade,
              State(state): State<AppState>,
              ConnectInfo(peer): ConnectInfo<SocketAddr>,
              slot: Option<Extension<ConnectionSlot>>,
              request: Parts| async move {
            let caller = state.caller(peer, &request, None).await;
            match caller {
                Ok(caller) => upgrade(ws, state, caller, slot, framing),
                Err(e) => error_response(Encoding::Json, e).into_response(),
            }
        },
    )
}

/// How much a WebSocket session reads at a time, and the read buffer it allocates up front.
/// tungstenite zero-fills the free part of that buffer before every read: at its default of
/// 128 KiB, that is a `memset` larger than the CPU's first-level cache for every frame (and for
/// every read that finds nothing), and 128 KiB held by every connection. NLIP messages are small;
/// a large one takes several reads.
pub const WS_READ_CHUNK: usize = 8 * 1024;

/// The session keeps the connection's slot (`limits.max_connections`) until it ends; a router
/// served other than by [`serve`] has none. Its caller is resolved once, from the upgrade
/// request's credentials (a wrong one is refused with 401 before upgrading).
fn upgrade(
    ws: WebSocketUpgrade,
    state: AppState,
    caller: Caller,
    slot: Option<Extension<ConnectionSlot>>,
    framing: Framing,
) -> Response {
    let limit = state.limits.max_message_bytes;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(WS_READ_CHUNK)
        .on_upgrade(move |socket| async move {
            run_socket(socket, state, caller, framing).await;
            drop(slot);
        })
}

/// Sends `message`, or gives up after `within`: a peer that does not read what it is sent
/// cannot hold its session (and its connection slot) open by never reading. `false` when the
/// session is over.
/// One keep-alive tick of a WebSocket session: a peer silent for three ping intervals is sent a
/// close, anyone else a ping. False when the session should end (silent, or not reading).
pub(super) async fn keep_alive(
    socket: &mut WebSocket,
    last_seen: tokio::time::Instant,
    interval: Duration,
    within: Duration,
) -> bool {
    if last_seen.elapsed() > interval * 3 {
        send_within(socket, WsMessage::Close(None), within).await;
        return false;
    }
    send_within(
        socket,
        WsMessage::Ping(Bytes::from_static(b"parley")),
        within,
    )
    .await
}

pub(super) async fn send_within(
    socket: &mut WebSocket,
    message: WsMessage,
    within: Duration,
) -> bool {
    match tokio::time::timeout(within, socket.send(message)).await {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            tracing::debug!("websocket peer does not read: closing");
            crate::metrics::refused("send_timeout");
            false
        }
    }
}

/// One connection: messages are answered in order; pings keep it alive; a peer silent for
/// three ping intervals, or one that does not read an answer or a ping within
/// `limits.send_timeout_ms`, is disconnected.
async fn run_socket(mut socket: WebSocket, state: AppState, caller: Caller, framing: Framing) {
    let peer = caller.addr;
    let within = Duration::from_millis(state.limits.send_timeout_ms);
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
                        send_within(&mut socket, WsMessage::Close(Some(close)), within).await;
                        break;
                    }
                };
                let reply = match frame {
                    WsMessage::Binary(bytes) => {
                        answer_frame(&state, &caller, &bytes, Encoding::Cbor, framing).await
                    }
                    WsMessage::Text(text) => {
                        answer_frame(&state, &caller, text.as_bytes(), Encoding::Json, framing).await
                    }
                    WsMessage::Close(_) => break,
                    WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
                };
                if !send_within(&mut socket, reply, within).await {
                    break;
                }
            }
            _ = ticker.tick() => {
                if !keep_alive(&mut socket, last_seen, interval, within).await {
                    tracing::debug!(%peer, "websocket idle or not reading: closing");
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
    caller: &Caller,
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
        state
            .check_rate(caller.addr)
            .and_then(|()| encoding.decode(bytes))
    };
    let message = match decoded {
        Ok(request) => state.answer(request, caller, "ws").await.message,
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
