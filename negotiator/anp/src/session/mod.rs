//! Negotiation sessions: pure, synchronous state machines for both sides of the meta-protocol.
//!
//! A session does no IO and no reasoning. Every call returns a [`Step`] telling the caller (the
//! server's async driver) what to do next: send a message, run the reasoner over a text, generate
//! a handler, or stop. Sessions are `Serialize`/`Deserialize` so a driver serving stateless HTTP
//! can keep one between requests of a conversation.
//!
//! # Flow
//! ```text
//! requester                                   provider
//!   start(text) ── protocolNegotiation(0, negotiating) ──▶ receive → Evaluate{text}
//!                                                           evaluated(hash, Accept | Counter | Reject)
//!   receive → Evaluate / Accepted / Rejected ◀── protocolNegotiation(1, accepted | negotiating | rejected)
//!   … rounds repeat, ids +1 per message …
//!   Accepted → generate code                   Accepted → generate + verify handler
//!   code_generated(Ok) ─ codeGeneration(generated) ─▶  ◀─ codeGeneration(generated) ─ code_generated(Ok)
//!   Ready (both sides generated)                Ready
//!   optional: testCasesNegotiation, fixErrorNegotiation (either side, any time once agreed)
//! ```
//!
//! # sequenceId (our reading of seed 002)
//! The seed says ids start at 0, "each negotiation message's sequenceId needs to increment by 1",
//! and each side must check that "the sequenceId returned by the other party increments". We
//! read this as **one counter shared by both directions** over the `protocolNegotiation`
//! messages of one negotiation: the requester's first proposal is 0, the provider's answer 1,
//! the requester's next message 2, and so on — every `protocolNegotiation` message, whatever its
//! status, carries the previous one's id + 1. Parley sends exactly that. It takes what
//! AgentConnect, the one other implementation, sends: a provider accepts 1 as the first id, a
//! requester accepts 2 as the answer to its 0 (both: a peer counting from 1), and either
//! continues from there; once agreed, one `accepted` echo of the agreement whose id does not
//! move on (AgentConnect answers `accepted` with `accepted`, repeating its last id) is taken
//! and changes nothing. Other meta-protocol messages
//! (`codeGeneration`, `testCasesNegotiation`, `fixErrorNegotiation`,
//! `naturalLanguageNegotiation`) have no `sequenceId` and do not advance the counter. A wrong
//! id is a [`NegotiationError::Sequence`], not a warning.
//!
//! # Rounds
//! [`SessionConfig::max_rounds`] bounds the number of *proposals* (`negotiating` messages,
//! counting both sides) in each of the three negotiations (protocol, test cases, error fixing).
//! A peer proposal beyond the limit is not evaluated, and a local counter-proposal beyond it is
//! not sent: either way the session ends as rejected with [`NegotiationError::RoundLimit`]
//! (during protocol negotiation the peer is told with a `rejected` message).
//!
//! # Invariants
//! - [`Step::Accepted`] is only returned for a text this side itself evaluated and accepted
//!   ([`Verdict::Accept`] for exactly that text's hash) or itself proposed (a requester's draft,
//!   either side's counter-proposal). A peer's `accepted` naming any other text — including the
//!   very first message of a negotiation arriving already `accepted` — is refused with
//!   [`NegotiationError::UnevaluatedAcceptance`].
//! - A peer may end the negotiation with `rejected` or `timeout` also while this side owes it a
//!   verdict (it gave up on a question, say).
//! - Every status is handled: `timeout` ends the session cleanly ([`NegotiationError::Timeout`];
//!   Parley never sends one to a peer: it is not in the seed's list, and AgentConnect fails on it),
//!   `codeGeneration` `error` is a failure ([`NegotiationError::CodeGeneration`]).
//! - Every rule break ends the session: it returns [`Step::Rejected`] and stays closed; later
//!   calls return [`Step::Rejected`] with [`NegotiationError::SessionClosed`], except a peer's
//!   own `rejected` or `timeout` `protocolNegotiation`, which echoes the end and is answered with
//!   [`Step::Wait`].
//! - No call panics, whatever the input or call order.

mod machine;
mod peer;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::machine::{Core, SessionPhase};
use crate::hash::ProtocolHash;
use crate::messages::{MetaMessage, NaturalLanguageNegotiation};

/// Limits of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// Maximum proposals per negotiation, both sides counted (seed 002 recommends at most 10).
    pub max_rounds: u32,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self { max_rounds: 10 }
    }
}

/// Which side of the negotiation a session plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionRole {
    /// Proposes first (sequenceId 0).
    Requester,
    /// Answers proposals against its capabilities.
    Provider,
}

/// Who did something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Local,
    Peer,
}

/// The local reasoner's decision about a proposal (protocol text or test cases).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "camelCase")]
pub enum Verdict {
    Accept,
    /// Propose this full text instead, with a summary of what changed.
    Counter {
        text: String,
        summary: String,
    },
    Reject {
        reason: String,
    },
}

/// The local decision about a peer's error report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "camelCase")]
pub enum FixVerdict {
    /// The error is ours: we will regenerate our code.
    Fix,
    /// We see no error on our side, for this reason.
    Decline { reason: String },
}

/// Why a session ended without (or after losing) agreement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum NegotiationError {
    #[error("wrong sequenceId {got}: expected {expected}")]
    Sequence { expected: String, got: u64 },
    #[error("the negotiation exceeded its limit of {limit} rounds")]
    RoundLimit { limit: u32 },
    #[error(
        "the peer accepted a text this side never evaluated or proposed{}",
        .hash.map(|h| format!(" (sha256 {h})")).unwrap_or_default()
    )]
    UnevaluatedAcceptance { hash: Option<ProtocolHash> },
    #[error("invalid message: {message}")]
    InvalidMessage { message: String },
    #[error("message out of turn: {message}")]
    OutOfTurn { message: String },
    #[error("the peer rejected the negotiation{}", .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    PeerRejected { reason: Option<String> },
    #[error("this side declined: {reason}")]
    Declined { reason: String },
    #[error("the negotiation timed out ({by:?} side)")]
    Timeout { by: Side },
    #[error("code generation failed on the {by:?} side{}", .detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    CodeGeneration { by: Side, detail: Option<String> },
    #[error("the session has ended")]
    SessionClosed,
    #[error("the session was driven out of order: {message}")]
    InvalidState { message: String },
    #[error(
        "meta-protocol version {version:?} is not supported: this side speaks {}",
        crate::messages::META_PROTOCOL_VERSION
    )]
    UnsupportedVersion { version: String },
}

impl NegotiationError {
    /// A stable machine-readable code (the serde tag too).
    pub fn code(&self) -> &'static str {
        match self {
            NegotiationError::Sequence { .. } => "sequence_error",
            NegotiationError::RoundLimit { .. } => "round_limit",
            NegotiationError::UnevaluatedAcceptance { .. } => "unevaluated_acceptance",
            NegotiationError::InvalidMessage { .. } => "invalid_message",
            NegotiationError::OutOfTurn { .. } => "out_of_turn",
            NegotiationError::PeerRejected { .. } => "peer_rejected",
            NegotiationError::Declined { .. } => "declined",
            NegotiationError::Timeout { .. } => "timeout",
            NegotiationError::CodeGeneration { .. } => "code_generation_failed",
            NegotiationError::SessionClosed => "session_closed",
            NegotiationError::InvalidState { .. } => "invalid_state",
            NegotiationError::UnsupportedVersion { .. } => "unsupported_version",
        }
    }
}

/// What the driver must do next. `send` fields are to be delivered to the peer before acting.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this message, then wait for the peer's next message.
    Send(MetaMessage),
    /// Nothing to send; wait for the peer.
    Wait,
    /// Run the reasoner over this protocol text, then call `evaluated(hash, verdict)`.
    Evaluate { text: String, hash: ProtocolHash },
    /// The protocol is agreed. Send `send` (if any), then generate (and, on the provider,
    /// verify) the handler for `text` and call `code_generated`.
    Accepted {
        hash: ProtocolHash,
        text: String,
        send: Option<MetaMessage>,
    },
    /// Both sides reported generated code. Send `send` (if any); application traffic may flow.
    Ready {
        hash: ProtocolHash,
        send: Option<MetaMessage>,
    },
    /// Run the reasoner over these proposed test cases, then call `test_cases_evaluated`.
    EvaluateTestCases { test_cases: String },
    /// Test cases agreed. Send `send` (if any); run them as extra verification.
    TestCasesAgreed {
        test_cases: String,
        send: Option<MetaMessage>,
    },
    /// The peer rejected our test cases; the protocol stays agreed.
    TestCasesRejected { reason: Option<String> },
    /// The peer reports an error on our side: analyse it, then call `fix_evaluated`.
    FixError { description: String },
    /// We agreed to fix: send `send`, regenerate the handler with `description` as input,
    /// then call `code_generated`.
    Regenerate {
        description: String,
        send: Option<MetaMessage>,
    },
    /// The peer declined our error report; the protocol stays agreed.
    FixDeclined { reason: String },
    /// The peer accepted our error report: the error was its own (for a requester's report on a
    /// provider's answers, the requester's expectation). The peer regenerates and sends
    /// `codeGeneration` again; a side whose own code generation waited on the report calls
    /// `code_generated` now.
    FixAccepted { description: String },
    /// A natural-language negotiation message; it does not change the session. Answer a
    /// `REQUEST` with a `RESPONSE` carrying the same `messageId` if you wish.
    Converse(NaturalLanguageNegotiation),
    /// The session ended without agreement (or broke after it). Send `send` (if any) and stop.
    Rejected {
        reason: NegotiationError,
        send: Option<MetaMessage>,
    },
}

macro_rules! session_common {
    ($t:ident) => {
        impl $t {
            /// Handles one message from the peer.
            pub fn receive(&mut self, message: MetaMessage) -> Step {
                self.0.receive(message)
            }

            /// Parses (never panicking) and handles one message from the peer; a malformed
            /// message ends the session with [`NegotiationError::InvalidMessage`].
            pub fn receive_value(&mut self, message: Value) -> Step {
                self.0.receive_value(message)
            }

            /// The reasoner's verdict on the proposal of the last [`Step::Evaluate`]; `hash`
            /// must be that step's hash.
            pub fn evaluated(&mut self, hash: &ProtocolHash, verdict: Verdict) -> Step {
                self.0.evaluated(hash, verdict)
            }

            /// This side's handler was generated (and, on a provider, verified) — or not.
            pub fn code_generated(&mut self, result: Result<(), String>) -> Step {
                self.0.code_generated(result)
            }

            /// Proposes extra test cases (once agreed).
            pub fn propose_test_cases(&mut self, test_cases: impl Into<String>) -> Step {
                self.0.propose_test_cases(test_cases.into())
            }

            /// The reasoner's verdict on the test cases of the last [`Step::EvaluateTestCases`].
            pub fn test_cases_evaluated(&mut self, verdict: Verdict) -> Step {
                self.0.test_cases_evaluated(verdict)
            }

            /// Reports an error in the peer's messages (once agreed).
            pub fn report_error(&mut self, description: impl Into<String>) -> Step {
                self.0.report_error(description.into())
            }

            /// Our decision on the error report of the last [`Step::FixError`].
            pub fn fix_evaluated(&mut self, verdict: FixVerdict) -> Step {
                self.0.fix_evaluated(verdict)
            }

            /// The driver's deadline for the peer's next message passed.
            pub fn timeout(&mut self) -> Step {
                self.0.timeout()
            }

            /// The agreed protocol, once there is one (it stays after later failures).
            pub fn agreed(&self) -> Option<(ProtocolHash, &str)> {
                self.0.agreed.as_ref().map(|(h, t)| (*h, t.as_str()))
            }

            /// Test cases agreed through `testCasesNegotiation`, if any.
            pub fn agreed_test_cases(&self) -> Option<&str> {
                self.0.after.agreed_test_cases.as_deref()
            }

            /// True once the session ended (rejected, timed out, or broken).
            pub fn is_closed(&self) -> bool {
                self.0.closed()
            }

            /// True once both sides reported generated code.
            pub fn is_ready(&self) -> bool {
                self.0.phase == SessionPhase::Ready
            }

            /// The stable code of the error that closed the session.
            pub fn closed_code(&self) -> Option<&str> {
                match &self.0.phase {
                    SessionPhase::Closed { code } => Some(code),
                    _ => None,
                }
            }

            /// The last sequenceId sent or received.
            pub fn last_sequence_id(&self) -> Option<u64> {
                self.0.last_seq
            }

            /// Protocol proposals so far (both sides).
            pub fn rounds(&self) -> u32 {
                self.0.proposals
            }

            pub fn config(&self) -> SessionConfig {
                self.0.config
            }
        }
    };
}

/// The provider's side: answers a requester's proposals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSession(Core);

impl ProviderSession {
    pub fn new(config: SessionConfig) -> Self {
        Self(Core::new(SessionRole::Provider, config))
    }

    /// Counts a question this side asks the peer (`naturalLanguageNegotiation`) about the
    /// proposal of the last [`Step::Evaluate`] as one round: questions and proposals share
    /// [`SessionConfig::max_rounds`]. [`NegotiationError::RoundLimit`] when no round is left (the
    /// session is unchanged: decide without asking), [`NegotiationError::InvalidState`] when no
    /// proposal awaits a verdict.
    pub fn question_asked(&mut self) -> Result<(), NegotiationError> {
        if !matches!(self.0.phase, SessionPhase::Evaluating { .. }) {
            return Err(NegotiationError::InvalidState {
                message: "a question about a proposal is asked while it awaits a verdict".into(),
            });
        }
        machine::next_round(&mut self.0.proposals, self.0.config.max_rounds)
    }
}

/// The requester's side: proposes first with [`RequesterSession::start`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequesterSession(Core);

impl RequesterSession {
    pub fn new(config: SessionConfig) -> Self {
        Self(Core::new(SessionRole::Requester, config))
    }

    /// Sends the first proposal (sequenceId 0). The text counts as evaluated by this side.
    pub fn start(&mut self, protocol_text: impl Into<String>) -> Step {
        let text = protocol_text.into();
        if text.trim().is_empty() {
            return self
                .0
                .misuse("the first proposal must carry the full protocol text");
        }
        self.0.start(text)
    }
}

session_common!(ProviderSession);
session_common!(RequesterSession);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::MetaStatus;

    fn proposal(seq: u64, text: &str) -> MetaMessage {
        MetaMessage::protocol_negotiation(seq, text, None, MetaStatus::Negotiating)
    }

    #[test]
    fn provider_accepts_after_evaluation() {
        let mut p = ProviderSession::new(SessionConfig::default());
        let Step::Evaluate { text, hash } = p.receive(proposal(0, "P")) else {
            panic!("expected Evaluate");
        };
        assert_eq!(text, "P");
        let Step::Accepted { hash: h, send, .. } = p.evaluated(&hash, Verdict::Accept) else {
            panic!("expected Accepted");
        };
        assert_eq!(h, ProtocolHash::of("P"));
        let Some(MetaMessage::ProtocolNegotiation(m)) = send else {
            panic!("expected a protocolNegotiation");
        };
        assert_eq!((m.sequence_id, m.status), (1, MetaStatus::Accepted));
    }

    #[test]
    fn a_report_the_peer_accepts_lets_the_reporter_finish_its_code_generation() {
        // The provider's answers differ from the requester's expectations: it reports that
        // instead of finishing code generation; the requester accepts; the provider finishes.
        let mut p = ProviderSession::new(SessionConfig::default());
        let Step::Evaluate { hash, .. } = p.receive(proposal(0, "P")) else {
            panic!("expected Evaluate");
        };
        assert!(matches!(
            p.evaluated(&hash, Verdict::Accept),
            Step::Accepted { .. }
        ));
        assert!(matches!(
            p.report_error("expectations differ"),
            Step::Send(_)
        ));
        let generated =
            MetaMessage::code_generation(crate::messages::CodeGenerationStatus::Generated);
        assert_eq!(p.receive(generated.clone()), Step::Wait);
        let accepted =
            MetaMessage::fix_error_negotiation("expectations differ", MetaStatus::Accepted);
        assert_eq!(
            p.receive(accepted),
            Step::FixAccepted {
                description: "expectations differ".into()
            }
        );
        assert!(matches!(p.code_generated(Ok(())), Step::Send(_)));
        assert!(matches!(p.receive(generated), Step::Ready { .. }));
    }

    #[test]
    fn session_state_round_trips_through_json() {
        let mut p = ProviderSession::new(SessionConfig::default());
        let _ = p.receive(proposal(0, "P"));
        let json = serde_json::to_string(&p).expect("serialises");
        let back: ProviderSession = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, p);
    }
}
