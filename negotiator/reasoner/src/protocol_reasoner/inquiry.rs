//! Questions about a proposal, asked of the peer through `naturalLanguageNegotiation`.
//!
//! A provider's protocol reasoner may answer an evaluation with a question for the requester
//! instead of a verdict ([`Assessment::Ask`]); the provider sends it, and evaluates the proposal
//! again with the requester's answer ([`Inquiry::exchanges`]). Whether one more question may be
//! asked is the caller's decision ([`Inquiry::may_ask`]): past its limits the reasoner must decide.
//!
//! The requester answers from its own protocol document ([`requester_answer`] without a model).

use parley_anp::protocol::ProtocolDoc;
use serde::{Deserialize, Serialize};

use super::Evaluation;

/// One question asked of the peer, and the peer's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub question: String,
    pub answer: String,
}

/// What an evaluation may use beyond the proposal and the capabilities.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inquiry<'a> {
    /// The questions asked about this proposal so far, with the peer's answers, in order.
    pub exchanges: &'a [Exchange],
    /// Whether one more question may be asked; when not, the reasoner decides.
    pub may_ask: bool,
}

/// An evaluation, or a question for the peer before one.
#[derive(Debug, Clone, PartialEq)]
pub enum Assessment {
    Decided(Evaluation),
    /// Ask the peer this (never empty) before deciding.
    Ask {
        question: String,
    },
}

/// The requester's answer to a provider's question when no model answers for it: its protocol
/// document is all it knows, so the answer restates the document's requirement and says so.
/// Deterministic: the same document and question give the same answer.
pub fn requester_answer(doc: &ProtocolDoc, question: &str) -> String {
    let _ = question;
    let requirement = doc
        .sections()
        .requirements
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    match requirement {
        Some(requirement) => format!(
            "The requester has no other information than its protocol document. Its \
             requirement:\n\n{requirement}"
        ),
        None => "The requester has no other information than its protocol document, which \
                 states no requirement beyond its data format."
            .to_owned(),
    }
}
