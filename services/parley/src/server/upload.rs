//! Out-of-band uploads (ECMA-430 §6.4) on their own listener: content-addressed in the store,
//! named in the reply by their URI. An upload is held in memory while it arrives, so how many
//! arrive at once is capped (`limits.max_concurrent_uploads`, and per address), and what they
//! take together in the store (`limits.max_upload_storage_bytes`).

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::AppState;
use super::http::{Encoding, error_response, method_not_allowed, not_found, read_body_within};
use crate::access::Action;
use crate::error::ApiError;
use crate::throttle::Kind;

/// The upload listener's routes (ECMA-431: a different port).
pub fn upload_app(state: AppState) -> Router {
    Router::new()
        .route("/upload", post(post_upload).fallback(method_not_allowed))
        .route("/uploads/{id}", get(get_upload))
        .fallback(not_found)
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

#[derive(Debug, Deserialize)]
struct UploadQuery {
    filename: Option<String>,
}

/// Stores one upload, for a caller that may talk (an upload is only ever referred to by a
/// message).
async fn post_upload(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<UploadQuery>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let permitted = match state.caller(peer, &parts, None).await {
        Ok(caller) => {
            caller
                .check(Action::Talk)
                .and_then(|()| match caller.principal.id.as_deref() {
                    Some(id) => state.admission.throttle_peer(Kind::Uploads, id),
                    None => Ok(()),
                })
        }
        Err(e) => Err(e),
    };
    if let Err(e) = permitted {
        return error_response(Encoding::Json, e).into_response();
    }
    let headers = parts.headers;
    // Nothing waits: an address over its rate or its share, or a server receiving as many
    // uploads as it takes at once, answers 429 at once.
    let _slot = match state.admission.admit_upload(peer) {
        Ok(slot) => slot,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    let body = read_body_within(
        body,
        state.limits.max_upload_bytes,
        state.limits.upload_timeout_ms,
    );
    let bytes = match body.await {
        Ok(b) => b,
        Err(e) => return error_response(Encoding::Json, e).into_response(),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream");
    let stored = state
        .agent
        .put_upload(&bytes, content_type, query.filename.as_deref())
        .await;
    match stored {
        Ok(reply) => Encoding::Json
            .respond(StatusCode::CREATED, &reply)
            .into_response(),
        Err(e) => error_response(Encoding::Json, e).into_response(),
    }
}

async fn get_upload(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match state.agent.upload(&id).await {
        Ok(Some(upload)) => {
            let ct = HeaderValue::from_str(&upload.meta.content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            // Peers choose what they upload: serve it as a download that no browser renders or
            // sniffs, so uploaded HTML or script never runs as a page of this origin.
            let headers = [
                (header::CONTENT_TYPE, ct),
                (
                    header::CONTENT_DISPOSITION,
                    attachment(upload.meta.filename.as_deref()),
                ),
                (
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ),
                (
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static("sandbox"),
                ),
            ];
            (StatusCode::OK, headers, upload.bytes).into_response()
        }
        Ok(None) => error_response(Encoding::Json, ApiError::UploadNotFound(id)).into_response(),
        Err(e) => error_response(Encoding::Json, e).into_response(),
    }
}

/// `attachment`, with the uploader's file name when it is plain enough to quote as it is.
fn attachment(filename: Option<&str>) -> HeaderValue {
    let plain = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ' '))
    };
    match filename.filter(|name| plain(name)) {
        Some(name) => HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
            .unwrap_or(HeaderValue::from_static("attachment")),
        None => HeaderValue::from_static("attachment"),
    }
}
