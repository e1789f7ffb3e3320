//! `ApiError`: every way a request can fail, each with a stable code, an HTTP status, and
//! a rendering as an NLIP error message. Internal causes are logged, never sent.

use axum::http::StatusCode;
use parley_nlip::{DecodeError, ErrorInfo, ValidationError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("malformed JSON: {0}")]
    MalformedJson(String),
    #[error("malformed CBOR: {0}")]
    MalformedCbor(String),
    #[error("invalid NLIP message: {0}")]
    Invalid(ValidationError),
    #[error("message is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("unsupported content type {0:?}; send application/json or application/cbor")]
    UnsupportedMediaType(String),
    #[error("unknown conversation {0:?}; send the message without this token to start a new one")]
    UnknownConversation(String),
    /// A credential was presented and does not name a peer (malformed, unknown, revoked).
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// The peer presented no credential (or its session ended) and what it asked needs one: the
    /// reply is a control message asking for authentication (ECMA-430 §6.2.2), and the message
    /// says what the peer may do without.
    #[error("{0}")]
    AuthenticationRequired(String),
    /// The peer may not do what it asked; the message says what it may do instead.
    #[error("{0}")]
    Forbidden(String),
    /// A message refers to an upload that does not exist: the message cannot be processed.
    #[error("unknown upload {0:?}; upload the content first")]
    UnknownUpload(String),
    /// The upload asked for (`GET /uploads/{id}`) does not exist: the resource is not there.
    #[error("unknown upload {0:?}; upload the content first")]
    UploadNotFound(String),
    #[error("the request took longer than {0} ms")]
    Timeout(u64),
    #[error("the request body did not arrive within {0} ms")]
    SlowBody(u64),
    /// A throttle refused the work: too many of its kind from one address or peer.
    #[error("{0}")]
    RateLimited(crate::throttle::RetryAfter),
    /// The address already has `limits.max_concurrent_requests_per_address` requests in
    /// flight.
    #[error("this address already has {limit} requests in flight; retry when one is answered")]
    TooManyInFlight { limit: usize },
    /// `limits.max_concurrent_uploads` (or the per-address share) uploads are arriving.
    #[error("{limit} uploads are already arriving; retry when one has been stored")]
    TooManyUploads { limit: usize },
    /// The upload would take the stored uploads beyond `limits.max_upload_storage_bytes`.
    #[error(
        "the uploads stored here may take at most {limit} bytes together; this one does not fit"
    )]
    UploadQuota { limit: u64 },
    #[error("no such end-point; NLIP messages are POSTed to /nlip")]
    NotFound,
    #[error("method not allowed here; NLIP messages are POSTed to /nlip")]
    MethodNotAllowed,
    #[error("unknown protocol {0}; negotiate it first (control message with protocolNegotiation)")]
    UnknownProtocol(String),
    #[error(
        "invalid protocol token {0:?}; expected a SHA-256 hash (hex, optionally sha256:-prefixed)"
    )]
    BadProtocolToken(String),
    #[error("the message does not follow the protocol: {0}")]
    InvalidProtocolMessage(String),
    #[error("the protocol handler failed: {message}")]
    Handler { code: String, message: String },
    #[error("negotiation rule broken: {message}")]
    Negotiation { code: String, message: String },
    #[error("the reasoner failed: {message}")]
    Reasoner { code: String, message: String },
    /// A capability the request was understood to need failed (its code: `not_found`,
    /// `invalid_arguments`, `unknown_capability`, `binding_failed`, `invalid_result`,
    /// `timeout`); the message says which capability and why.
    #[error("{message}")]
    Capability { code: String, message: String },
    /// A row the request needs does not exist (the store's `NotFound`).
    #[error("not found: {0}")]
    Missing(String),
    /// The request lost a race with another one, or contradicts what is stored (the store's
    /// `Conflict`): the same request may succeed when sent again.
    #[error("conflict: {0}; send the message again")]
    Conflict(String),
    /// The store refuses what the request carries (the store's `Invalid`: U+0000 in a text, an
    /// empty content type, a malformed id).
    #[error("the content cannot be stored: {0}")]
    Unstorable(String),
    /// The database is unreachable, busy, or its storage failed (disk full, read-only, its file
    /// gone): the same request may pass later.
    #[error("the database is unavailable; try again later")]
    StoreUnavailable(#[source] parley_store::StoreError),
    #[error("internal error")]
    Internal(#[source] BoxError),
}

/// An opaque cause, kept for the log.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl ApiError {
    /// An internal failure: logged with its cause, sent to the peer only as `internal`.
    pub fn internal(e: impl Into<BoxError>) -> Self {
        ApiError::Internal(e.into())
    }

    /// A capability call that failed, with the capability's stable code.
    pub fn capability(e: &parley_capabilities::CapabilityError) -> Self {
        ApiError::Capability {
            code: e.code().to_owned(),
            message: e.to_string(),
        }
    }

    /// A rule the peer broke in the meta-protocol.
    pub fn negotiation(e: &parley_anp::NegotiationError) -> Self {
        ApiError::Negotiation {
            code: e.code().to_owned(),
            message: e.to_string(),
        }
    }

    /// The stable, machine-readable code.
    pub fn code(&self) -> &str {
        match self {
            ApiError::MalformedJson(_) => "malformed_json",
            ApiError::MalformedCbor(_) => "malformed_cbor",
            ApiError::Invalid(_) => "invalid_message",
            ApiError::TooLarge { .. } => "message_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::UnknownConversation(_) => "unknown_conversation",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::AuthenticationRequired(_) => "authentication_required",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::UnknownUpload(_) | ApiError::UploadNotFound(_) => "unknown_upload",
            ApiError::Timeout(_) => "timeout",
            ApiError::SlowBody(_) => "request_timeout",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::TooManyInFlight { .. } => "too_many_in_flight",
            ApiError::TooManyUploads { .. } => "too_many_uploads",
            ApiError::UploadQuota { .. } => "upload_quota_exceeded",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::UnknownProtocol(_) => "unknown_protocol",
            ApiError::BadProtocolToken(_) => "invalid_protocol_token",
            ApiError::InvalidProtocolMessage(_) => "invalid_request",
            ApiError::Handler { code, .. } | ApiError::Negotiation { code, .. } => code,
            ApiError::Reasoner { code, .. } | ApiError::Capability { code, .. } => code,
            ApiError::Missing(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Unstorable(_) => "invalid_content",
            ApiError::StoreUnavailable(_) => "store_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::MalformedJson(_) | ApiError::MalformedCbor(_) => StatusCode::BAD_REQUEST,
            ApiError::Invalid(_)
            | ApiError::UnknownConversation(_)
            | ApiError::UnknownUpload(_)
            | ApiError::BadProtocolToken(_)
            | ApiError::InvalidProtocolMessage(_)
            | ApiError::Negotiation { .. }
            | ApiError::Unstorable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::UnknownProtocol(_) | ApiError::UploadNotFound(_) | ApiError::Missing(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unauthenticated(_) | ApiError::AuthenticationRequired(_) => {
                StatusCode::UNAUTHORIZED
            }
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Handler { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::SlowBody(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::RateLimited { .. }
            | ApiError::TooManyInFlight { .. }
            | ApiError::TooManyUploads { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::UploadQuota { .. } => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Reasoner { .. } => StatusCode::BAD_GATEWAY,
            ApiError::Capability { code, .. } => match code.as_str() {
                "not_found" => StatusCode::NOT_FOUND,
                "forbidden" => StatusCode::FORBIDDEN,
                "invalid_arguments" | "unknown_capability" => StatusCode::UNPROCESSABLE_ENTITY,
                "timeout" => StatusCode::GATEWAY_TIMEOUT,
                _ => StatusCode::BAD_GATEWAY,
            },
            ApiError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// How long until the same request may pass (an HTTP `Retry-After`, the error JSON's
    /// `retry_after_ms`), for the errors that say "not now" rather than "not so".
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            ApiError::RateLimited(refused) => Some(refused.wait),
            ApiError::TooManyInFlight { .. }
            | ApiError::TooManyUploads { .. }
            | ApiError::StoreUnavailable(_) => Some(std::time::Duration::from_secs(1)),
            _ => None,
        }
    }

    /// The error's NLIP form. Internal errors are logged here, once, with their cause
    /// chain, and reach the peer only as an opaque message; what the store refused is an
    /// answer to the peer, logged at debug.
    pub fn to_info(&self) -> ErrorInfo {
        match self {
            ApiError::Internal(e) => tracing::error!(error = chain(e.as_ref()), "internal error"),
            ApiError::StoreUnavailable(e) => {
                tracing::warn!(error = chain(e), "the database is unavailable");
            }
            ApiError::Missing(_) | ApiError::Conflict(_) | ApiError::Unstorable(_) => {
                tracing::debug!(code = self.code(), error = %self, "the store refused the request");
            }
            _ => {}
        }
        let mut info = ErrorInfo::new(self.code(), self.to_string());
        if let Some(wait) = self.retry_after() {
            info = info.with_retry_after_ms(crate::throttle::whole_millis(wait));
        }
        match self {
            ApiError::Invalid(v) => info.with_field(v.field.clone()),
            _ => info,
        }
    }
}

/// An error and its causes, outermost first, joined with `: `, each cause once.
pub use parley_capabilities::error_chain as chain;

impl From<crate::throttle::RetryAfter> for ApiError {
    fn from(refused: crate::throttle::RetryAfter) -> Self {
        ApiError::RateLimited(refused)
    }
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Json(e) => ApiError::MalformedJson(e.to_string()),
            DecodeError::Cbor(e) => ApiError::MalformedCbor(e),
            DecodeError::Invalid(v) => ApiError::Invalid(v),
        }
    }
}

/// What the store decided reaches the peer as its own error; a database that is unavailable
/// (unreachable, busy, its storage failed) is a 503 to retry; one that failed otherwise is an
/// internal error.
impl From<parley_store::StoreError> for ApiError {
    fn from(e: parley_store::StoreError) -> Self {
        use parley_store::StoreError;
        match e {
            StoreError::NotFound { what } => ApiError::Missing(what),
            StoreError::Conflict { what } => ApiError::Conflict(what),
            StoreError::Invalid(why) => ApiError::Unstorable(why),
            StoreError::Unavailable(_) => ApiError::StoreUnavailable(e),
            StoreError::Database(_) | StoreError::Migrate(_) => ApiError::internal(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use parley_store::StoreError;
    use tracing::{Event, Level, Subscriber};
    use tracing_subscriber::Registry;
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

    use super::*;

    /// The levels of the events emitted while it is the default subscriber.
    #[derive(Debug, Clone, Default)]
    struct Levels(Arc<Mutex<Vec<Level>>>);

    impl<S: Subscriber> Layer<S> for Levels {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            self.0
                .lock()
                .expect("not poisoned")
                .push(*event.metadata().level());
        }
    }

    /// Renders `error` as a peer sees it; returns its code, status and the levels logged.
    fn rendered(error: ApiError) -> (String, u16, Vec<Level>) {
        let levels = Levels::default();
        let _guard = tracing::subscriber::set_default(Registry::default().with(levels.clone()));
        let info = error.to_info();
        let logged = levels.0.lock().expect("not poisoned").clone();
        (info.code, error.status().as_u16(), logged)
    }

    #[test]
    fn what_the_store_decided_reaches_the_peer_as_its_own_error_logged_at_debug() {
        let cases = [
            (
                StoreError::NotFound {
                    what: "conversation c".into(),
                },
                "not_found",
                404,
            ),
            (
                StoreError::Conflict {
                    what: "a stale version".into(),
                },
                "conflict",
                409,
            ),
            (
                StoreError::Invalid("message contains U+0000".into()),
                "invalid_content",
                422,
            ),
        ];
        for (store_error, code, status) in cases {
            let (rendered_code, rendered_status, logged) = rendered(store_error.into());
            assert_eq!((rendered_code.as_str(), rendered_status), (code, status));
            assert_eq!(logged, [Level::DEBUG], "{code}");
        }
    }

    #[test]
    fn an_internal_error_is_logged_as_an_error_and_stays_opaque() {
        let (code, status, logged) = rendered(ApiError::internal("disk on fire"));
        assert_eq!((code.as_str(), status), ("internal", 500));
        assert_eq!(logged, [Level::ERROR]);
    }

    /// An error with a message and an optional source.
    #[derive(Debug)]
    struct Link(String, Option<Box<Link>>);

    impl std::fmt::Display for Link {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Link {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    fn links(texts: &[&str]) -> Link {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| {
                Some(Link(text.to_string(), source.map(Box::new)))
            })
            .expect("at least one link")
    }

    #[test]
    fn a_chain_names_each_cause_once() {
        let os = "No such file or directory (os error 2)";
        let read = format!("cannot read parley.toml: {os}");
        assert_eq!(chain(&links(&[&read, os])), read);
        assert_eq!(
            chain(&links(&["cannot start", &read, os])),
            format!("cannot start: {read}")
        );
        // Only a parent's own text hides a cause; a cause already shown higher up is shown again.
        assert_eq!(chain(&links(&["a", "b", "a"])), "a: b: a");
        assert_eq!(chain(&links(&["a", "b"])), "a: b");
    }

    #[test]
    fn an_upload_asked_for_is_a_404_and_one_referred_to_a_422() {
        let asked = ApiError::UploadNotFound("x".into());
        let referred = ApiError::UnknownUpload("x".into());
        assert_eq!(
            (asked.code(), asked.status().as_u16()),
            ("unknown_upload", 404)
        );
        assert_eq!(
            (referred.code(), referred.status().as_u16()),
            ("unknown_upload", 422)
        );
    }
}
