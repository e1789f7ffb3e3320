//! `POST /nlip` (ECMA-431): one NLIP message in, one out, JSON or CBOR; and the small HTTP
//! end-points beside it (metrics, the NLIP-shaped 404 and 405).

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;
use parley_nlip::Message;

use super::AppState;
use crate::agent::{Reply, bare_error};
use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    Json,
    Cbor,
}

impl Encoding {
    pub(super) fn of(headers: &HeaderMap) -> Result<Encoding, ApiError> {
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

    pub(super) fn decode(self, bytes: &[u8]) -> Result<Message, ApiError> {
        Ok(match self {
            Encoding::Json => parley_nlip::from_json_slice(bytes)?,
            Encoding::Cbor => parley_nlip::from_cbor_slice(bytes)?,
        })
    }

    /// The reply as an HTTP response, encoded the way the request came.
    pub(super) fn respond(
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

/// An error as an HTTP response: its status, its NLIP form, a `Retry-After` when the same
/// request may pass later, and the scheme to authenticate with when its credential was refused.
pub(super) fn error_response(
    encoding: Encoding,
    error: ApiError,
) -> Response<http_body_util::Full<Bytes>> {
    let response = encoding.respond(error.status(), &bare_error(&error));
    with_challenge(with_retry_after(response, error.retry_after()))
}

/// The agent's reply as an HTTP response: its status, and its `Retry-After` when it has one.
fn reply_response(encoding: Encoding, reply: &Reply) -> Response<http_body_util::Full<Bytes>> {
    let response = encoding.respond(reply.status, &reply.message);
    with_challenge(with_retry_after(response, reply.retry_after))
}

/// `response` with a `Retry-After` of `wait` in whole seconds, rounded up, when there is a wait.
fn with_retry_after<B>(mut response: Response<B>, wait: Option<Duration>) -> Response<B> {
    if let Some(wait) = wait {
        let seconds = crate::throttle::whole_seconds(wait);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// `response` with the scheme to authenticate with when it refuses a credential (401).
fn with_challenge<B>(mut response: Response<B>) -> Response<B> {
    if response.status() == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"parley\""),
        );
    }
    response
}

/// [`read_body`] within `ms` milliseconds: a peer that sends its body slowly, or stops half-way,
/// holds what it was admitted with only that long (`slow_body`). A body already received, the
/// usual case, is read without arming a timer.
pub(super) async fn read_body_within<B>(body: B, limit: usize, ms: u64) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    tokio::time::timeout(Duration::from_millis(ms), read_body(body, limit))
        .await
        .unwrap_or(Err(ApiError::SlowBody(ms)))
}

/// Reads a body of at most `limit` bytes; a longer one is a 413 in NLIP form. A body that
/// declares a larger length is refused before any of it is read. A small message arrives in
/// one frame, which is kept as it came; only a body in several frames is copied together.
pub(super) async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, ApiError>
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

/// One NLIP message over HTTP: the panic guard, the address's admission (rate, requests in
/// flight), the caller's credentials, the concurrency permit, then the exchange (a caller
/// whose DID-WBA signature may cover the body is resolved after the permit, with the body).
pub(super) async fn nlip_post<B>(
    state: &AppState,
    peer: SocketAddr,
    request: axum::http::Request<B>,
) -> Response<http_body_util::Full<Bytes>>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let exchange = async {
        // Only the Content-Type and the credentials are needed: they are read in place, and
        // the rest of the head is dropped before the body is read.
        let (parts, body) = request.into_parts();
        let encoding = match Encoding::of(&parts.headers) {
            Ok(e) => e,
            Err(e) => return error_response(Encoding::Json, e),
        };
        // An address over its rate or its requests in flight is answered at once; the others
        // wait here for a permit of `max_concurrent_requests`, before their body is read.
        // (`acquire` only fails on a closed semaphore, and nothing closes this one.)
        let _address = match state.admission.admit(peer) {
            Ok(guard) => guard,
            Err(e) => return error_response(encoding, e),
        };
        // A DID-WBA signature may cover the body: its caller is resolved once the body is
        // read (`Err` keeps the head for that). Every other caller is resolved here, and the
        // head dropped before the body is read.
        let pending = if state.signs_body(&parts.headers) {
            Err(parts)
        } else {
            let caller = state.caller(peer, &parts, None).await;
            drop(parts);
            match caller {
                Ok(caller) => Ok(caller),
                Err(e) => return error_response(encoding, e),
            }
        };
        let _permit = state.permits.acquire().await.ok();
        // The body must arrive within the request timeout.
        let body = read_body_within(
            body,
            state.limits.max_message_bytes,
            state.limits.request_timeout_ms,
        );
        let bytes = match body.await {
            Ok(bytes) => bytes,
            Err(e) => return error_response(encoding, e),
        };
        let caller = match pending {
            Ok(caller) => caller,
            Err(head) => match state.caller(peer, &head, Some(&bytes)).await {
                Ok(caller) => caller,
                Err(e) => return error_response(encoding, e),
            },
        };
        let request = match encoding.decode(&bytes) {
            Ok(m) => m,
            Err(e) => return error_response(encoding, e),
        };
        let reply = state.answer(request, &caller, "http").await;
        reply_response(encoding, &reply)
    };
    // A bug must not cost the peer its answer: a panic becomes an opaque NLIP 500.
    match std::panic::AssertUnwindSafe(exchange).catch_unwind().await {
        Ok(response) => response,
        Err(_) => error_response(Encoding::Json, panicked()),
    }
}

fn panicked() -> ApiError {
    ApiError::internal("a request handler panicked")
}

pub(super) fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    error_response(Encoding::Json, panicked()).into_response()
}

pub(super) async fn metrics_text() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(),
    )
        .into_response()
}

pub(super) async fn not_found() -> Response {
    error_response(Encoding::Json, ApiError::NotFound).into_response()
}

pub(super) async fn method_not_allowed() -> Response {
    error_response(Encoding::Json, ApiError::MethodNotAllowed).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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
