//! Reasoner backends (built-in, OpenAI-compatible) and the ANP meta-protocol.
//!
//! # Reasoners (layout)
//! - [`reasoner`]: the [`Reasoner`] trait, [`NlRequest`]/[`NlAnswer`], the typed
//!   [`ReasonerError`], the backends [`BuiltinReasoner`] (deterministic, no network) and
//!   [`OpenAiReasoner`] (any OpenAI-compatible chat-completions endpoint, capabilities as tools),
//!   and [`ReasonerConfig`] + [`build()`] used by the server to pick one. The same config feeds
//!   [`build_protocol_reasoner`] for the meta-protocol: [`BuiltinProtocolReasoner`], or
//!   [`HybridProtocolReasoner`] (built-in first, then [`OpenAiProtocolReasoner`]) when a model
//!   is configured; [`ProtocolReasoner::model_calls`] counts the model requests.
//! - `testing` (feature `testing`): `ScriptedOpenAi`, a scripted OpenAI-compatible server on
//!   loopback for this crate's and the server's tests.
//!
//! Invariants: reasoners depend on `parley-capabilities` (never the reverse) and never on axum
//! outside `testing`; an `Ok` answer always has non-empty text, every backend failure is a typed
//! error; prompts, bodies and API keys are never logged above `debug` (keys never).

// --- ANP meta-protocol core: pure, no IO ---
// `protocol` (+ private `markdown`): protocol documents, schemas, test cases and fixtures;
// `hash`: ProtocolHash over the exact text; `anp`: the seed-002 messages; `session`: provider
// and requester state machines returning `Step`s for the server's async driver; `mapping`,
// `handler_gen`, `draft`, `protocol_reasoner`: the `ProtocolReasoner` trait and its built-in,
// deterministic backend; `verify`: test cases through a `HandlerRunner` (the sandbox).
pub mod anp;
pub mod draft;
pub mod handler_gen;
pub mod hash;
pub mod mapping;
mod markdown;
pub mod protocol;
pub mod protocol_reasoner;
pub mod session;
pub mod verify;

pub use anp::{MessageError, MetaMessage, MetaProtocolInfo, NegotiationStatus};
pub use hash::{HashParseError, ProtocolHash};
pub use mapping::{CapabilitySpec, Mapping};
pub use protocol::{
    Fixture, Fixtures, MatchMode, ProtocolDoc, ProtocolError, SchemaRole, SchemaViolation,
    Sections, TestCase, parse_test_cases,
};
pub use protocol_reasoner::{
    BuiltinProtocolReasoner, Evaluation, GeneratedHandler, ProtocolReasoner, ProtocolReasonerError,
};
pub use session::{
    FixVerdict, NegotiationError, ProviderSession, RequesterSession, SessionConfig, Step, Verdict,
};
pub use verify::{CaseReport, HandlerRunner, VerificationReport};

// --- Reasoners: natural-language answers over the operator's capabilities ---
// `reasoner` owns the `Reasoner` trait, its two backends (built-in, OpenAI-compatible), their
// config and `build`. It depends on `parley-capabilities`, never the other way round.
pub mod reasoner;
/// Scripted OpenAI-compatible server for tests (feature `testing`, never in the shipped binary).
#[cfg(feature = "testing")]
pub mod testing;

pub use reasoner::{
    ApiKey, BuiltinReasoner, CapabilityCall, NlAnswer, NlRequest, OpenAiConfig, OpenAiReasoner,
    Reasoner, ReasonerConfig, ReasonerError, Speaker, Turn, build,
};
pub use reasoner::{
    HybridProtocolReasoner, ModelAnswerError, OpenAiProtocolReasoner, build_protocol_reasoner,
};
