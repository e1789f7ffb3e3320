//! The ANP meta-protocol core: protocol documents, hashes, messages, session state machines and
//! verification. Pure: no IO, no reasoning.

pub mod hash;
mod markdown;
pub mod messages;
pub mod protocol;
pub mod session;
pub mod verify;

pub use hash::{HashParseError, ProtocolHash};
pub use messages::{MessageError, MetaMessage, MetaProtocolInfo, MetaStatus};
pub use protocol::{
    Fixture, Fixtures, MatchMode, ProtocolDoc, ProtocolError, SchemaRole, SchemaViolation,
    Sections, TestCase, parse_test_cases,
};
pub use session::{
    FixVerdict, NegotiationError, ProviderSession, RequesterSession, SessionConfig, Step, Verdict,
};
pub use verify::{CaseReport, HandlerRunner, VerificationReport};
