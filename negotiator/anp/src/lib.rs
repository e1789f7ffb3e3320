//! The ANP meta-protocol core: protocol documents, hashes, messages, session state machines and
//! verification. Pure: no IO, no reasoning.

pub mod anp;
pub mod hash;
mod markdown;
pub mod protocol;
pub mod session;
pub mod verify;

pub use anp::{MessageError, MetaMessage, MetaProtocolInfo, NegotiationStatus};
pub use hash::{HashParseError, ProtocolHash};
pub use protocol::{
    Fixture, Fixtures, MatchMode, ProtocolDoc, ProtocolError, SchemaRole, SchemaViolation,
    Sections, TestCase, parse_test_cases,
};
pub use session::{
    FixVerdict, NegotiationError, ProviderSession, RequesterSession, SessionConfig, Step, Verdict,
};
pub use verify::{CaseReport, HandlerRunner, VerificationReport};
