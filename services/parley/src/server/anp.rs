//! `GET /anp`: the seed-002 framing over WebSocket (see `negotiation::anp`). Frames are answered
//! in order, each under the request time limit and the throttles; pings keep the
//! connection alive, and a peer silent for three ping intervals, or one that does not read a
//! reply or a ping within `limits.send_timeout_ms`, is disconnected. When the
//! connection ends, a negotiation the peer left open ends too.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::ws::{
    CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade, close_code,
};
use axum::extract::{ConnectInfo, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse as _, Response};

use super::AppState;
use super::http::{Encoding, error_response};
use super::listener::ConnectionSlot;
use super::websocket::{WS_READ_CHUNK, keep_alive, send_within};
use crate::error::ApiError;
use crate::negotiation::anp::Connection;
use crate::negotiation::anp::serve::error_for;
use crate::peer::Caller;
use crate::throttle::Kind;
use parley_anp::frame::{Frame, ProtocolType};

/// The route's handler: upgrades, then runs the connection (which keeps its connection slot).
/// The caller is resolved from the upgrade request's credentials; a wrong one is refused with
/// 401 before upgrading.
pub(super) async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    slot: Option<Extension<ConnectionSlot>>,
    request: Parts,
) -> Response {
    let caller = match state.caller(peer, &request, None).await {
        Ok(caller) => caller,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    let limit = state.limits.max_message_bytes;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(WS_READ_CHUNK)
        .on_upgrade(move |socket| async move {
            run(socket, state, caller).await;
            drop(slot);
        })
}

async fn run(mut socket: WebSocket, state: AppState, caller: Caller) {
    let peer = caller.addr;
    let within = Duration::from_millis(state.limits.send_timeout_ms);
    let interval = Duration::from_millis(state.limits.ws_ping_interval_ms);
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut last_seen = tokio::time::Instant::now();
    let mut connection = Connection::new(state.agent.clone(), caller);
    let mut closed_by_peer = false;
    tracing::debug!(%peer, "anp connection opened");
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let Some(incoming) = incoming else { break };
                last_seen = tokio::time::Instant::now();
                let bytes = match incoming {
                    // Seed 002 sends binary frames; a text frame's bytes are read the same way.
                    Ok(WsMessage::Binary(bytes)) => bytes,
                    Ok(WsMessage::Text(text)) => Bytes::from(text.as_str().to_owned()),
                    Ok(WsMessage::Close(_)) => {
                        closed_by_peer = true;
                        break;
                    }
                    Ok(WsMessage::Ping(_) | WsMessage::Pong(_)) => continue,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "anp connection error");
                        let close = CloseFrame {
                            code: close_code::SIZE,
                            reason: "message too large or malformed frame".into(),
                        };
                        send_within(&mut socket, WsMessage::Close(Some(close)), within).await;
                        break;
                    }
                };
                let replies = answer(&state, &mut connection, peer, &bytes).await;
                let mut sent = true;
                for reply in replies {
                    if !send_within(&mut socket, WsMessage::Binary(reply.into()), within).await {
                        sent = false;
                        break;
                    }
                }
                if !sent {
                    break;
                }
            }
            _ = ticker.tick() => {
                if !keep_alive(&mut socket, last_seen, interval, within).await {
                    tracing::debug!(%peer, "anp connection idle or not reading: closing");
                    break;
                }
            }
        }
    }
    let caller = connection.caller().clone();
    crate::access::scoped(caller, connection.close()).await;
    if closed_by_peer {
        // Answered once every frame before it, and the connection's end, were handled: a peer
        // that waits for this knows the provider is done with the connection.
        send_within(&mut socket, WsMessage::Close(None), within).await;
    }
    tracing::debug!(%peer, "anp connection closed");
}

/// One frame's answer, under the throttles (every frame a message, a meta frame a negotiation
/// message too; a natural-language frame meets the reasoner's throttle in the agent) and the
/// time limit.
async fn answer(
    state: &AppState,
    connection: &mut Connection,
    peer: SocketAddr,
    bytes: &[u8],
) -> Vec<Vec<u8>> {
    let is_meta = Frame::decode(bytes).is_ok_and(|frame| frame.kind == ProtocolType::Meta);
    let throttled = state.check_rate(peer).and_then(|()| match is_meta {
        true => state.admission.throttle(Kind::Negotiations, peer),
        false => Ok(()),
    });
    if let Err(e) = throttled {
        return vec![error_for(bytes, &e)];
    }
    let limit = state.limits.request_timeout_ms;
    let span = tracing::debug_span!("anp.frame", %peer);
    let caller = connection.caller().clone();
    let answered = tracing::Instrument::instrument(connection.answer(bytes), span);
    let answered = crate::access::scoped(caller, answered);
    match tokio::time::timeout(Duration::from_millis(limit), answered).await {
        Ok(replies) => replies,
        Err(_) => vec![error_for(bytes, &ApiError::Timeout(limit))],
    }
}
