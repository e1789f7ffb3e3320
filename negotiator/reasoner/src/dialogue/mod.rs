//! Natural-language dialogue: the part of a Parley agent that answers NLIP text messages.
//!
//! A [`Reasoner`] answers natural-language NLIP messages ([`NlRequest`] → [`NlAnswer`]), using
//! the operator's capabilities where its backend can. Two backends exist:
//!
//! | backend | network | what it does |
//! | --- | --- | --- |
//! | [`BuiltinReasoner`] (`builtin`) | none | deterministic: describes the capabilities, runs explicit `<capability> <JSON arguments>` invocations, understands simple requests that name what a capability does and carry its input ("status of order O-1001"), and says plainly when it cannot tell |
//! | [`OpenAiReasoner`] (`openai`) | an OpenAI-compatible chat-completions endpoint | answers with the model, offering capabilities as tools and really calling them |
//!
//! The server picks one with [`crate::ReasonerConfig`] and [`crate::build`], and holds it as
//! `Arc<dyn Reasoner>`.
//!
//! # Extending the trait
//! Add an operation as a method with a *default* body returning
//! [`ReasonerError::Unsupported`] when a backend may reasonably lack it, so each backend opts in
//! explicitly; keep every method `&self` (backends are shared between connections, with no lock
//! around them) and make failures typed [`ReasonerError`]s — a backend failure must reach the
//! caller as an error, never as an empty or made-up result.

mod builtin;
mod openai;

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use parley_capabilities::CapabilityError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use builtin::BuiltinReasoner;
pub use openai::OpenAiReasoner;

use crate::ReasonerError;
use crate::usage::UsageMeter;

/// Who said a [`DialogueTurn`] of the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// The remote agent or user talking to us.
    Peer,
    /// This agent.
    Agent,
}

/// One earlier message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DialogueTurn {
    pub speaker: Speaker,
    pub text: String,
}

impl DialogueTurn {
    pub fn peer(text: impl Into<String>) -> Self {
        Self {
            speaker: Speaker::Peer,
            text: text.into(),
        }
    }
    pub fn agent(text: impl Into<String>) -> Self {
        Self {
            speaker: Speaker::Agent,
            text: text.into(),
        }
    }
}

/// A natural-language message to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlRequest {
    /// The message text (markdown is fine).
    pub text: String,
    /// The language of the NLIP text format, e.g. `"english"`; the answer should use it.
    pub language: String,
    /// Prior turns of the same conversation, oldest first, without the current message.
    pub history: Vec<DialogueTurn>,
}

impl NlRequest {
    /// An English request with no history.
    pub fn english(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            language: "english".to_owned(),
            history: Vec::new(),
        }
    }
}

/// One capability invocation made while answering, for audit logs and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityCall {
    pub capability: String,
    /// The arguments as requested (the raw text, as a JSON string, when they were not JSON).
    pub arguments: Value,
    pub result: Result<Value, CapabilityError>,
}

/// The answer to an [`NlRequest`]. `text` is never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct NlAnswer {
    pub text: String,
    /// Capabilities invoked while answering, in order.
    pub capability_calls: Vec<CapabilityCall>,
    /// Language-model requests made (0 for the built-in backend).
    pub model_calls: u32,
    /// Set when the answer is the report of a capability call that failed (or of a capability
    /// that does not exist): the request was understood and could not be done. `text` explains
    /// it; the server answers with an NLIP error carrying the error's code. A backend that
    /// recovers from a failed call (a model that corrects its arguments) leaves it `None`.
    pub failure: Option<CapabilityError>,
}

impl NlAnswer {
    /// A text answer that called nothing.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            capability_calls: Vec::new(),
            model_calls: 0,
            failure: None,
        }
    }
}

/// A reasoning backend. Implementations are shared (`Arc<dyn Reasoner>`) across connections.
#[async_trait]
pub trait Reasoner: Send + Sync + Debug {
    /// Short stable backend name: `"builtin"`, `"openai"`.
    fn backend(&self) -> &'static str;

    /// A view of this backend that also counts every model call it makes in `meter` (see
    /// [`crate::usage`]); it shares the backend's client, so making one per answer is cheap.
    /// `None` for a backend that never calls a model: use it as it is
    /// ([`crate::usage::metered`] does both).
    fn metered(&self, meter: &UsageMeter) -> Option<Arc<dyn Reasoner>> {
        let _ = meter;
        None
    }

    /// Answers a natural-language message, invoking capabilities as needed. An `Ok` answer
    /// always has non-empty text; anything the backend cannot produce is an `Err`.
    async fn answer(&self, req: NlRequest) -> Result<NlAnswer, ReasonerError>;
}
