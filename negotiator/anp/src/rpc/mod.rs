//! ANP 1.2's JSON-RPC binding of the meta-protocol (ANP-06 v1.2, draft): the values of
//! `anp.get_capabilities` and `anp.negotiate`, their errors, and the negotiation result's digest.
//! Pure: parsing and building JSON; the server's framing (`parley::negotiation::jsonrpc`) does the
//! negotiating.
//!
//! # Layout
//! - [`envelope`]: JSON-RPC 2.0 itself: one request read from bytes ([`Envelope`]), the
//!   response to it, and [`RpcError`] with the standard codes and the draft's 1600–1608.
//! - [`params`]: what `anp.negotiate` carries (`params.meta` and `params.body`), checked
//!   ([`NegotiateParams`]): the mode, the candidate protocols, the caller's profiles, security
//!   profiles and content types.
//! - [`result`]: the draft's `NegotiationResult`, protocol artifacts, and
//!   [`negotiation_digest`] over a canonical JSON.
//!
//! # What Parley fixes where the draft leaves it open
//! - A candidate protocol is Parley's protocol hash (`sha256:<hex>`, or the draft's
//!   `sha-256:<base64url>` digest form of the same SHA-256) or an artifact object holding it
//!   and, for drafting, the document itself (see [`Candidate`]).
//! - The digest is SHA-256 over the canonical JSON ([`canonical_json`]: object keys sorted by
//!   their UTF-16 code units, no whitespace, as RFC 8785 has it for the strings, integers and
//!   nulls hashed here) of the result's negotiation id, agreed protocol, parties, end-point and
//!   validity (see [`DigestInput`]).

pub mod envelope;
pub mod params;
pub mod result;

pub use envelope::{Envelope, EnvelopeError, RpcError, error_response, success_response};
pub use params::{Candidate, Mode, NegotiateParams};
pub use result::{
    Artifact, DigestInput, NegotiationResult, Selected, canonical_json, digest_of_text,
    negotiation_digest,
};

/// The Profile of `anp.negotiate` requests (`params.meta.profile`).
pub const PROFILE: &str = "anp.meta.negotiation.v1";
/// The Profile `anp.get_capabilities` belongs to (ANP Core Binding).
pub const CORE_PROFILE: &str = "anp.core.binding.v1";
/// The one security profile Parley offers: the transport's (TLS, on the listener or in front of
/// it). Parley implements no end-to-end encryption.
pub const SECURITY_PROFILE: &str = "transport-protected";
/// The content type of negotiation and application payloads.
pub const CONTENT_TYPE: &str = "application/json";

/// The methods of the binding.
pub mod method {
    pub const NEGOTIATE: &str = "anp.negotiate";
    pub const GET_CAPABILITIES: &str = "anp.get_capabilities";
}

/// The `execution.mode` of a result: the agreed protocol is called directly, its payload
/// structured JSON.
pub const EXECUTION_MODE: &str = "direct_structured_call";
