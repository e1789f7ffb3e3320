//! The ANP meta-protocol core: what two agents exchange to agree on a protocol, and how a
//! handler is proven against it. Pure: no IO, no reasoning, no async runtime.
//!
//! # Layout
//! | module | what it owns |
//! | --- | --- |
//! | [`protocol`] (+ private `markdown`) | protocol documents: sections, request/response schemas (compiled, validating), test cases and their fixtures ([`ProtocolDoc`], [`parse_test_cases`]) |
//! | [`hash`] | [`ProtocolHash`], the SHA-256 of a protocol's exact text, which names it everywhere (0-RTT reuse) |
//! | [`frame`] | the seed-002 frame: a header byte naming the protocol type, or bare JSON ([`Frame`]) |
//! | [`messages`] | the seed-002 meta-protocol messages ([`MetaMessage`], [`MetaProtocolInfo`], [`MetaStatus`]) with the seed's JSON field names |
//! | [`session`] | the provider's and requester's state machines ([`ProviderSession`], [`RequesterSession`]), returning [`Step`]s for the server's async driver |
//! | [`verify`] | a protocol's test cases run through a [`HandlerRunner`] (the server's sandbox) and judged precisely ([`VerificationReport`]) |
//! | [`rpc`] | ANP 1.2's JSON-RPC binding (ANP-06 v1.2): `anp.negotiate`'s parameters, the `NegotiationResult`, the 1600–1608 errors, the negotiation digest |
//! | [`fix`] | the requester's guard rails for a provider's `fixErrorNegotiation`: which corrected expectations it may accept ([`review_fix`]) |
//!
//! What to decide at each step (accept a protocol, generate a handler) is not here: sessions
//! ask for it with a [`Step`] and take the answer as a [`Verdict`]; the reasoners live in
//! `parley-reasoner`, which depends on this crate, never the reverse.
//!
//! # Invariants
//! - No IO: the only side effect is `tracing` events. [`verify`] awaits the runner it is given
//!   and nothing else.
//! - A [`ProtocolDoc`] keeps the exact text it was parsed from, and its hash is that text's.
//! - Parsing never panics: malformed documents and messages are typed errors
//!   ([`ProtocolError`], [`MessageError`]), and a session that meets one ends with a
//!   [`NegotiationError`] instead of panicking, whatever the input or call order.
//! - Sessions are serializable, so a driver serving stateless HTTP keeps one between requests.

pub mod fix;
pub mod frame;
pub mod hash;
mod markdown;
pub mod messages;
pub mod protocol;
pub mod rpc;
pub mod session;
pub mod verify;

pub use fix::{Correction, FixReview, review_fix};
pub use frame::{Frame, FrameError, ProtocolType};
pub use hash::{HashParseError, ProtocolHash};
pub use messages::{MessageError, MetaMessage, MetaProtocolInfo, MetaStatus};
pub use protocol::{
    Condition, DocLimits, FieldCheck, Fixture, Fixtures, MatchMode, ProtocolDoc, ProtocolError,
    SchemaRole, SchemaViolation, Sections, TestCase, parse_test_cases, parse_test_cases_within,
    review_test_cases,
};
pub use session::{
    FixVerdict, NegotiationError, ProviderSession, RequesterSession, SessionConfig, Step, Verdict,
};
pub use verify::{CaseReport, HandlerRunner, VerificationReport};
