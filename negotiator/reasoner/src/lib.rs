//! Reasoners: the part of a Parley agent that decides. Two traits, each with a deterministic
//! built-in backend and one over an OpenAI-compatible chat-completions endpoint:
//!
//! - [`Reasoner`] answers natural-language NLIP messages ([`NlRequest`] → [`NlAnswer`]), using
//!   the operator's capabilities: [`BuiltinReasoner`], [`OpenAiReasoner`] (capabilities offered
//!   as tools).
//! - [`ProtocolReasoner`] does the reasoning the ANP meta-protocol needs (evaluate a proposed
//!   protocol, generate and fix its handler, draft one, review test cases):
//!   [`BuiltinProtocolReasoner`], [`OpenAiProtocolReasoner`], and [`HybridProtocolReasoner`]
//!   (built-in first, the model only where the built-in one cannot decide).
//!
//! The server picks the backends from one [`ReasonerConfig`] with [`build`] and
//! [`build_protocol_reasoner`].
//!
//! # Layout
//! | module | what it owns |
//! | --- | --- |
//! | [`dialogue`] | the [`Reasoner`] trait, its request/answer types and both backends |
//! | [`protocol_reasoner`] | the [`ProtocolReasoner`] trait, [`Evaluation`], [`GeneratedHandler`], the built-in (+ counter-proposals), hybrid and OpenAI backends (prompts, answer validation) |
//! | [`planner`] | the built-in protocol reasoner's core: a protocol mapped onto one capability ([`planner::plan`] → a [`Mapping`] and its gaps) |
//! | [`handler_gen`] | the JavaScript handler generated from a [`Mapping`] |
//! | [`draft`] | protocol documents Parley writes: the requester's first draft, and the rendering counter-proposals share |
//! | `schema` | reading JSON Schemas (properties, required fields, types) |
//! | `untrusted` | how peer text, history, capability output and proposed documents reach a model: as data in envelopes they cannot close, under fixed system prompts |
//! | `chat` | the OpenAI-compatible endpoint both model backends use ([`OpenAiConfig`], [`ApiKey`]) |
//! | [`usage`] | what model calls cost: [`ModelPurpose`], and the [`UsageMeter`] a caller hands a backend through its `metered` view to count calls and tokens per purpose |
//! | `config` | [`ReasonerConfig`], [`build`], [`build_protocol_reasoner`] |
//! | [`mapping`] | re-export of the crate `parley-mapping`: the [`Mapping`] type, shared with the sandbox's mapping runtime |
//! | `testing` | (feature `testing`) `ScriptedOpenAi`, a scripted OpenAI-compatible server on loopback for this crate's and the server's tests |
//!
//! # Invariants
//! - Dependencies point one way: this crate uses `parley-anp` (documents, sessions' verdicts),
//!   `parley-capabilities` and `parley-mapping`, and none of them knows it. No axum outside
//!   `testing`.
//! - An `Ok` answer always has non-empty text, an `Ok` evaluation or handler is never empty;
//!   every backend failure is a typed error ([`ReasonerError`], [`ProtocolReasonerError`]).
//! - What a peer wrote or a capability returned reaches a model only inside an envelope of
//!   `untrusted`; system prompts hold the operator's configuration and fixed text alone.
//! - Every model request is one `model.call` span (purpose, model, the tokens its response
//!   reported); prompts, bodies and API keys are never logged (keys never even in `Debug`).
//! - Usage is counted where the caller asks, never process-wide: through a backend's `metered`
//!   view, into the caller's [`UsageMeter`].

mod chat;
mod config;
pub mod dialogue;
pub mod draft;
mod error;
pub mod handler_gen;
pub mod planner;
pub mod protocol_reasoner;
mod schema;
/// Scripted OpenAI-compatible server for tests (feature `testing`, never in the shipped binary).
#[cfg(feature = "testing")]
pub mod testing;
mod untrusted;
pub mod usage;

/// The handler plan the planner produces: the crate `parley-mapping`, shared with the sandbox's
/// mapping runtime.
pub use parley_mapping as mapping;
pub use parley_mapping::Mapping;

pub use chat::{ApiKey, OpenAiConfig};
pub use config::{ReasonerConfig, build, build_protocol_reasoner};
pub use dialogue::{
    BuiltinReasoner, CapabilityCall, DialogueTurn, NlAnswer, NlRequest, OpenAiReasoner, Reasoner,
    Speaker,
};
pub use error::ReasonerError;
pub use planner::DeclaredCapability;
pub use protocol_reasoner::{
    Assessment, BuiltinProtocolReasoner, Evaluation, Exchange, GeneratedHandler,
    HybridProtocolReasoner, Inquiry, ModelAnswerError, OpenAiProtocolReasoner, ProtocolReasoner,
    ProtocolReasonerError, requester_answer,
};
pub use usage::{ModelPurpose, TokenCount, UsageMeter, UsageTally, metered, metered_protocol};
