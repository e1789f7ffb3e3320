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
    #[error("unknown upload {0:?}; upload the content first")]
    UnknownUpload(String),
    #[error("the request took longer than {0} ms")]
    Timeout(u64),
    #[error("the request body did not arrive within {0} ms")]
    SlowBody(u64),
    #[error("too many requests; slow down")]
    RateLimited,
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

    /// A rule the peer broke in the meta-protocol.
    pub fn negotiation(e: &parley_negotiator::NegotiationError) -> Self {
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
            ApiError::UnknownUpload(_) => "unknown_upload",
            ApiError::Timeout(_) => "timeout",
            ApiError::SlowBody(_) => "request_timeout",
            ApiError::RateLimited => "rate_limited",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::UnknownProtocol(_) => "unknown_protocol",
            ApiError::BadProtocolToken(_) => "invalid_protocol_token",
            ApiError::InvalidProtocolMessage(_) => "invalid_request",
            ApiError::Handler { code, .. } | ApiError::Negotiation { code, .. } => code,
            ApiError::Reasoner { code, .. } => code,
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
            | ApiError::Negotiation { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::UnknownProtocol(_) => StatusCode::NOT_FOUND,
            ApiError::Handler { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::SlowBody(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Reasoner { .. } => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error's NLIP form. Internal errors are logged here, once, with their cause
    /// chain, and reach the peer only as an opaque message.
    pub fn to_info(&self) -> ErrorInfo {
        if let ApiError::Internal(e) = self {
            tracing::error!(error = chain(e.as_ref()), "internal error");
        }
        let info = ErrorInfo::new(self.code(), self.to_string());
        match self {
            ApiError::Invalid(v) => info.with_field(v.field.clone()),
            _ => info,
        }
    }
}

/// An error and its causes, outermost first, joined with `: `.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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

impl From<parley_store::StoreError> for ApiError {
    fn from(e: parley_store::StoreError) -> Self {
        ApiError::internal(e)
    }
}
