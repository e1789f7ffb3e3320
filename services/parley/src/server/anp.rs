//! `GET /anp`: the seed-002 framing over WebSocket (see `negotiation::anp`). Frames are answered
//! in order, each under the request time limit and the per-address rate limit; pings keep the
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
use axum::response::Response;

use super::AppState;
use super::listener::ConnectionSlot;
use super::websocket::{WS_READ_CHUNK, keep_alive, send_within};
use crate::audit::Actor;
use crate::error::ApiError;
use crate::negotiation::anp::Connection;
use crate::negotiation::anp::serve::error_for;

/// The route's handler: upgrades, then runs the connection (which keeps its connection slot).
pub(super) async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    slot: Option<Extension<ConnectionSlot>>,
) -> Response {
    let limit = state.limits.max_message_bytes;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(WS_READ_CHUNK)
        .on_upgrade(move |socket| async move {
            run(socket, state, peer).await;
            drop(slot);
        })
}

async fn run(mut socket: WebSocket, state: AppState, peer: SocketAddr) {
    let within = Duration::from_millis(state.limits.send_timeout_ms);
    let interval = Duration::from_millis(state.limits.ws_ping_interval_ms);
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut last_seen = tokio::time::Instant::now();
    let mut connection = Connection::new(state.agent.clone(), peer);
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
    crate::audit::acting_for(Actor::at(peer), connection.close()).await;
    if closed_by_peer {
        // Answered once every frame before it, and the connection's end, were handled: a peer
        // that waits for this knows the provider is done with the connection.
        send_within(&mut socket, WsMessage::Close(None), within).await;
    }
    tracing::debug!(%peer, "anp connection closed");
}

/// One frame's answer, under the rate and time limits.
async fn answer(
    state: &AppState,
    connection: &mut Connection,
    peer: SocketAddr,
    bytes: &[u8],
) -> Vec<Vec<u8>> {
    if let Err(e) = state.check_rate(peer) {
        return vec![error_for(bytes, &e)];
    }
    let limit = state.limits.request_timeout_ms;
    let span = tracing::debug_span!("anp.frame", %peer);
    let answered = crate::audit::acting_for(Actor::at(peer), connection.answer(bytes));
    let answered = tracing::Instrument::instrument(answered, span);
    match tokio::time::timeout(Duration::from_millis(limit), answered).await {
        Ok(replies) => replies,
        Err(_) => vec![error_for(bytes, &ApiError::Timeout(limit))],
    }
}
