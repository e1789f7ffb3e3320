//! Reasoners: natural-language answers over the operator's capabilities, and the reasoning the
//! ANP meta-protocol needs (evaluate a protocol, generate and fix its handler, draft one).

pub mod draft;
pub mod handler_gen;
pub mod mapping;
pub mod protocol_reasoner;
pub mod reasoner;
/// Scripted OpenAI-compatible server for tests (feature `testing`, never in the shipped binary).
#[cfg(feature = "testing")]
pub mod testing;

pub use mapping::{CapabilitySpec, Mapping};
pub use protocol_reasoner::{
    BuiltinProtocolReasoner, Evaluation, GeneratedHandler, ProtocolReasoner, ProtocolReasonerError,
};
pub use reasoner::{
    ApiKey, BuiltinReasoner, CapabilityCall, NlAnswer, NlRequest, OpenAiConfig, OpenAiReasoner,
    Reasoner, ReasonerConfig, ReasonerError, Speaker, Turn, build,
};
pub use reasoner::{
    HybridProtocolReasoner, ModelAnswerError, OpenAiProtocolReasoner, build_protocol_reasoner,
};
