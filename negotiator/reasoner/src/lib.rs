//! Reasoners: natural-language answers over the operator's capabilities, and the reasoning the
//! ANP meta-protocol needs (evaluate a protocol, generate and fix its handler, draft one).

pub mod draft;
pub mod handler_gen;
pub mod planner;
pub mod protocol_reasoner;
pub mod reasoner;
/// Scripted OpenAI-compatible server for tests (feature `testing`, never in the shipped binary).
#[cfg(feature = "testing")]
pub mod testing;

/// The handler plan the planner produces: the crate `parley-mapping`, shared with the sandbox's
/// mapping runtime.
pub use parley_mapping as mapping;
pub use parley_mapping::Mapping;
pub use planner::DeclaredCapability;
pub use protocol_reasoner::{
    BuiltinProtocolReasoner, Evaluation, GeneratedHandler, ProtocolReasoner, ProtocolReasonerError,
};
pub use reasoner::{
    ApiKey, BuiltinReasoner, CapabilityCall, DialogueTurn, NlAnswer, NlRequest, OpenAiConfig,
    OpenAiReasoner, Reasoner, ReasonerConfig, ReasonerError, Speaker, build,
};
pub use reasoner::{
    HybridProtocolReasoner, ModelAnswerError, OpenAiProtocolReasoner, build_protocol_reasoner,
};
