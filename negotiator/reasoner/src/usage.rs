//! What language-model calls cost: why each was made ([`ModelPurpose`]), and a [`UsageMeter`]
//! that adds up calls and the tokens the model's responses reported, per purpose.
//!
//! A meter belongs to whoever wants to know what some work cost (one natural-language answer, one
//! negotiation's turn): it hands the meter to a backend with [`crate::Reasoner::metered`] or
//! [`crate::ProtocolReasoner::metered`] (or the helpers [`metered`] and [`metered_protocol`]),
//! works through the view that returns, and then [`UsageMeter::take`]s what it spent. Nothing is
//! process-wide: two negotiations running at once on one shared backend each see their own calls.
//!
//! Tokens are the `usage` of each chat-completion response (`prompt_tokens`,
//! `completion_tokens`). A request whose response carried no `usage` (some OpenAI-compatible
//! servers leave it out) or that got no response at all (an HTTP error, a timeout) still counts as
//! a call, and as an *unmetered* one: its tokens are unknown, so the token counts are a lower
//! bound whenever [`UsageTally::unmetered_calls`] is above 0.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::dialogue::Reasoner;
use crate::protocol_reasoner::ProtocolReasoner;

/// Why a model is called: the `purpose` of its `model.call` span, and the label of the metrics
/// and store rows that count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ModelPurpose {
    /// One request of a natural-language answer (a tool round is one more).
    Answer,
    /// Accept, counter or reject a proposed protocol.
    Evaluate,
    /// The handler of an agreed protocol.
    GenerateHandler,
    /// A corrected handler after a failure.
    FixHandler,
    /// A requester's first protocol document.
    Draft,
    /// Accept, counter or reject proposed test cases.
    EvaluateTestCases,
    /// As a requester, accept or decline a provider's correction of a test expectation.
    ReviewFix,
    /// As a requester, answer a provider's question about the proposal.
    AnswerQuestion,
}

impl ModelPurpose {
    /// Every purpose, in declaration order.
    pub const ALL: &'static [ModelPurpose] = &[
        ModelPurpose::Answer,
        ModelPurpose::Evaluate,
        ModelPurpose::GenerateHandler,
        ModelPurpose::FixHandler,
        ModelPurpose::Draft,
        ModelPurpose::EvaluateTestCases,
        ModelPurpose::ReviewFix,
        ModelPurpose::AnswerQuestion,
    ];

    /// The name of the operation that makes the call: `answer`, `evaluate`, `generate_handler`,
    /// `fix_handler`, `draft`, `evaluate_test_cases`, `review_fix`, `answer_question`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelPurpose::Answer => "answer",
            ModelPurpose::Evaluate => "evaluate",
            ModelPurpose::GenerateHandler => "generate_handler",
            ModelPurpose::FixHandler => "fix_handler",
            ModelPurpose::Draft => "draft",
            ModelPurpose::EvaluateTestCases => "evaluate_test_cases",
            ModelPurpose::ReviewFix => "review_fix",
            ModelPurpose::AnswerQuestion => "answer_question",
        }
    }
}

impl std::fmt::Display for ModelPurpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tokens one chat-completion response reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCount {
    pub prompt: u64,
    pub completion: u64,
}

/// Model calls and tokens for one purpose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTally {
    /// Requests sent, whatever came back.
    pub calls: u64,
    /// Of `calls`, those whose tokens are unknown (no `usage` in the response, or no response).
    pub unmetered_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl UsageTally {
    /// Prompt and completion tokens together.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Adds one call: with the tokens its response reported, or unmetered (`None`).
    pub fn add_call(&mut self, tokens: Option<TokenCount>) {
        self.calls += 1;
        match tokens {
            Some(t) => {
                self.prompt_tokens = self.prompt_tokens.saturating_add(t.prompt);
                self.completion_tokens = self.completion_tokens.saturating_add(t.completion);
            }
            None => self.unmetered_calls += 1,
        }
    }

    /// Adds another tally to this one.
    pub fn add(&mut self, other: &UsageTally) {
        self.calls = self.calls.saturating_add(other.calls);
        self.unmetered_calls = self.unmetered_calls.saturating_add(other.unmetered_calls);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }
}

/// Adds up model calls and tokens per purpose. Clones share one tally (a clone handed to a
/// backend records into the caller's meter); the lock is held only to add or read, never across
/// an await.
#[derive(Debug, Clone, Default)]
pub struct UsageMeter {
    tallies: Arc<Mutex<BTreeMap<ModelPurpose, UsageTally>>>,
}

impl UsageMeter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one call for `purpose`: with the tokens its response reported, or unmetered.
    pub fn record(&self, purpose: ModelPurpose, tokens: Option<TokenCount>) {
        self.lock().entry(purpose).or_default().add_call(tokens);
    }

    /// What has been recorded so far, by purpose (in [`ModelPurpose`] order); the meter keeps it.
    pub fn snapshot(&self) -> Vec<(ModelPurpose, UsageTally)> {
        self.lock().iter().map(|(p, t)| (*p, *t)).collect()
    }

    /// What has been recorded so far, by purpose, leaving the meter empty: take it once the work
    /// it measured is done, and record it where it belongs.
    pub fn take(&self) -> Vec<(ModelPurpose, UsageTally)> {
        std::mem::take(&mut *self.lock()).into_iter().collect()
    }

    /// All purposes together.
    pub fn total(&self) -> UsageTally {
        let mut total = UsageTally::default();
        for tally in self.lock().values() {
            total.add(tally);
        }
        total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ModelPurpose, UsageTally>> {
        // A panic while the lock is held cannot leave a tally half-updated in a way that matters
        // (each update is a few additions), so a poisoned lock is still used.
        self.tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `reasoner` with its model calls also recorded in `meter` (itself when it calls no model).
pub fn metered(reasoner: &Arc<dyn Reasoner>, meter: &UsageMeter) -> Arc<dyn Reasoner> {
    reasoner.metered(meter).unwrap_or_else(|| reasoner.clone())
}

/// `reasoner` with its model calls also recorded in `meter` (itself when it calls no model).
pub fn metered_protocol(
    reasoner: &Arc<dyn ProtocolReasoner>,
    meter: &UsageMeter,
) -> Arc<dyn ProtocolReasoner> {
    reasoner.metered(meter).unwrap_or_else(|| reasoner.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_adds_up_per_purpose_and_clones_share_it() {
        let meter = UsageMeter::new();
        let handed_out = meter.clone();
        handed_out.record(
            ModelPurpose::Evaluate,
            Some(TokenCount {
                prompt: 100,
                completion: 7,
            }),
        );
        handed_out.record(ModelPurpose::Answer, None);
        handed_out.record(
            ModelPurpose::Answer,
            Some(TokenCount {
                prompt: 40,
                completion: 2,
            }),
        );
        let answer = UsageTally {
            calls: 2,
            unmetered_calls: 1,
            prompt_tokens: 40,
            completion_tokens: 2,
        };
        let evaluate = UsageTally {
            calls: 1,
            unmetered_calls: 0,
            prompt_tokens: 100,
            completion_tokens: 7,
        };
        assert_eq!(
            meter.snapshot(),
            [
                (ModelPurpose::Answer, answer),
                (ModelPurpose::Evaluate, evaluate)
            ]
        );
        assert_eq!(meter.total().calls, 3);
        assert_eq!(meter.total().tokens(), 149);
        assert_eq!(meter.take().len(), 2);
        assert!(meter.snapshot().is_empty(), "take leaves the meter empty");
    }

    #[test]
    fn purpose_names_are_the_span_names() {
        let names: Vec<_> = ModelPurpose::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(
            names,
            [
                "answer",
                "evaluate",
                "generate_handler",
                "fix_handler",
                "draft",
                "evaluate_test_cases",
                "review_fix",
                "answer_question"
            ]
        );
    }
}
