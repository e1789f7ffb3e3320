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
//! status, carries the previous one's id + 1. A provider also accepts 1 as the first id (some
//! peers count from 1) and continues from there. Other meta-protocol messages
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
//! - Every status is handled: `timeout` ends the session cleanly ([`NegotiationError::Timeout`]),
//!   `codeGeneration` `error` is a failure ([`NegotiationError::CodeGeneration`]).
//! - Every rule break ends the session: it returns [`Step::Rejected`] and stays closed; later
//!   calls return [`Step::Rejected`] with [`NegotiationError::SessionClosed`].
//! - No call panics, whatever the input or call order.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::ProtocolHash;
use crate::messages::{
    CodeGenerationStatus, FixErrorNegotiation, MetaMessage, MetaStatus, NaturalLanguageNegotiation,
    ProtocolNegotiation, TestCasesNegotiation,
};

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
        }
    }
}

/// Counts one more proposal against the round limit; the error is what the session fails with.
fn next_round(counter: &mut u32, limit: u32) -> Result<(), NegotiationError> {
    if *counter >= limit {
        return Err(NegotiationError::RoundLimit { limit });
    }
    *counter += 1;
    Ok(())
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
    /// A natural-language negotiation message; it does not change the session. Answer a
    /// `REQUEST` with a `RESPONSE` carrying the same `messageId` if you wish.
    Converse(NaturalLanguageNegotiation),
    /// The session ended without agreement (or broke after it). Send `send` (if any) and stop.
    Rejected {
        reason: NegotiationError,
        send: Option<MetaMessage>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
enum SessionPhase {
    /// Requester before `start`.
    Idle,
    /// Waiting for the peer's next `protocolNegotiation`.
    Negotiating,
    /// A peer proposal awaits our verdict.
    Evaluating {
        text: String,
        hash: ProtocolHash,
    },
    /// Agreed; code generation under way on one or both sides.
    Generating {
        local: bool,
        peer: bool,
    },
    /// Agreed and both sides generated code.
    Ready,
    Closed {
        code: String,
    },
}

/// Test case and error-fix sub-negotiations, live once the protocol is agreed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct After {
    test_case_rounds: u32,
    /// Test cases we proposed last (text), awaiting the peer.
    our_test_cases: Option<String>,
    /// Peer test cases awaiting our verdict.
    pending_test_cases: Option<String>,
    agreed_test_cases: Option<String>,
    fix_rounds: u32,
    /// We reported an error and await the peer's answer.
    fix_outstanding: bool,
    /// A peer error report awaiting our verdict.
    pending_fix: Option<String>,
}

/// The state machine shared by both roles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Core {
    role: SessionRole,
    config: SessionConfig,
    phase: SessionPhase,
    /// The last sequenceId sent or received.
    last_seq: Option<u64>,
    /// Protocol proposals so far, both sides.
    proposals: u32,
    /// Our latest proposal (text), the only text a peer may accept.
    our_proposal: Option<String>,
    agreed: Option<(ProtocolHash, String)>,
    after: After,
}

impl Core {
    fn new(role: SessionRole, config: SessionConfig) -> Self {
        Self {
            role,
            config,
            phase: match role {
                SessionRole::Requester => SessionPhase::Idle,
                SessionRole::Provider => SessionPhase::Negotiating,
            },
            last_seq: None,
            proposals: 0,
            our_proposal: None,
            agreed: None,
            after: After::default(),
        }
    }

    fn is_negotiating(&self) -> bool {
        matches!(
            self.phase,
            SessionPhase::Idle | SessionPhase::Negotiating | SessionPhase::Evaluating { .. }
        )
    }

    fn next_seq(&self) -> u64 {
        // Saturating: an absurd peer id has already been refused by `check_seq`, which uses
        // checked arithmetic; this only runs on ids we accepted.
        self.last_seq.map_or(0, |s| s.saturating_add(1))
    }

    /// Ends the session. During protocol negotiation the peer is told with `rejected`.
    fn fail(&mut self, reason: NegotiationError) -> Step {
        let send = if self.is_negotiating() && !matches!(self.phase, SessionPhase::Idle) {
            let seq = self.next_seq();
            self.last_seq = Some(seq);
            Some(MetaMessage::protocol_negotiation(
                seq,
                "",
                Some(reason.to_string()),
                MetaStatus::Rejected,
            ))
        } else {
            None
        };
        self.close_quietly(reason, send)
    }

    fn close_quietly(&mut self, reason: NegotiationError, send: Option<MetaMessage>) -> Step {
        tracing::debug!(code = reason.code(), "negotiator.session ended");
        self.phase = SessionPhase::Closed {
            code: reason.code().to_owned(),
        };
        Step::Rejected { reason, send }
    }

    fn closed(&self) -> bool {
        matches!(self.phase, SessionPhase::Closed { .. })
    }

    // --- local actions ----------------------------------------------------------------------

    fn start(&mut self, text: String) -> Step {
        if self.phase != SessionPhase::Idle {
            return self.misuse("start() called on a session that already started");
        }
        self.proposals = 1;
        self.last_seq = Some(0);
        self.phase = SessionPhase::Negotiating;
        self.our_proposal = Some(text.clone());
        Step::Send(MetaMessage::protocol_negotiation(
            0,
            text,
            None,
            MetaStatus::Negotiating,
        ))
    }

    fn evaluated(&mut self, hash: &ProtocolHash, verdict: Verdict) -> Step {
        let SessionPhase::Evaluating {
            text,
            hash: pending,
        } = &self.phase
        else {
            return self.misuse("evaluated() called with no proposal awaiting evaluation");
        };
        if pending != hash {
            return self.misuse("evaluated() called for a different text than the one proposed");
        }
        let text = text.clone();
        let hash = *pending;
        match verdict {
            Verdict::Accept => {
                let seq = self.next_seq();
                self.last_seq = Some(seq);
                self.agree(hash, text.clone());
                Step::Accepted {
                    hash,
                    text: text.clone(),
                    send: Some(MetaMessage::protocol_negotiation(
                        seq,
                        text,
                        None,
                        MetaStatus::Accepted,
                    )),
                }
            }
            Verdict::Counter { text, summary } => {
                if text.trim().is_empty() {
                    // An empty proposal is never sent (AgentConnect sends one when its model fails).
                    return self.misuse("a counter-proposal must carry the full protocol text");
                }
                if let Err(e) = next_round(&mut self.proposals, self.config.max_rounds) {
                    self.phase = SessionPhase::Negotiating;
                    return self.fail(e);
                }
                let seq = self.next_seq();
                self.last_seq = Some(seq);
                self.our_proposal = Some(text.clone());
                self.phase = SessionPhase::Negotiating;
                Step::Send(MetaMessage::protocol_negotiation(
                    seq,
                    text,
                    Some(summary),
                    MetaStatus::Negotiating,
                ))
            }
            Verdict::Reject { reason } => {
                self.phase = SessionPhase::Negotiating;
                self.fail(NegotiationError::Declined { reason })
            }
        }
    }

    fn agree(&mut self, hash: ProtocolHash, text: String) {
        self.agreed = Some((hash, text));
        self.phase = SessionPhase::Generating {
            local: false,
            peer: false,
        };
    }

    fn code_generated(&mut self, result: Result<(), String>) -> Step {
        let SessionPhase::Generating { local: false, peer } = self.phase else {
            return self.misuse("code_generated() called while no code generation was due");
        };
        match result {
            Ok(()) => {
                let msg = MetaMessage::code_generation(CodeGenerationStatus::Generated);
                if peer {
                    self.phase = SessionPhase::Ready;
                    match &self.agreed {
                        Some((hash, _)) => Step::Ready {
                            hash: *hash,
                            send: Some(msg),
                        },
                        None => self.misuse("no agreed protocol"),
                    }
                } else {
                    self.phase = SessionPhase::Generating { local: true, peer };
                    Step::Send(msg)
                }
            }
            Err(detail) => {
                let msg = MetaMessage::code_generation(CodeGenerationStatus::Error);
                self.close_quietly(
                    NegotiationError::CodeGeneration {
                        by: Side::Local,
                        detail: Some(detail),
                    },
                    Some(msg),
                )
            }
        }
    }

    fn test_cases_evaluated(&mut self, verdict: Verdict) -> Step {
        let Some(text) = self.after.pending_test_cases.take() else {
            return self.misuse("test_cases_evaluated() called with no test cases pending");
        };
        match verdict {
            Verdict::Accept => {
                self.after.agreed_test_cases = Some(text.clone());
                self.after.our_test_cases = None;
                Step::TestCasesAgreed {
                    test_cases: text.clone(),
                    send: Some(MetaMessage::test_cases_negotiation(
                        text,
                        None,
                        MetaStatus::Accepted,
                    )),
                }
            }
            Verdict::Counter { text, summary } => {
                if text.trim().is_empty() {
                    return self.misuse("a test case counter-proposal must carry the full text");
                }
                if let Err(e) = next_round(&mut self.after.test_case_rounds, self.config.max_rounds)
                {
                    return self.fail(e);
                }
                self.after.our_test_cases = Some(text.clone());
                Step::Send(MetaMessage::test_cases_negotiation(
                    text,
                    Some(summary),
                    MetaStatus::Negotiating,
                ))
            }
            Verdict::Reject { reason } => {
                self.after.our_test_cases = None;
                Step::Send(MetaMessage::test_cases_negotiation(
                    "",
                    Some(reason),
                    MetaStatus::Rejected,
                ))
            }
        }
    }

    fn propose_test_cases(&mut self, text: String) -> Step {
        if !self.agreed_phase() || self.after.pending_test_cases.is_some() {
            return self
                .misuse("test cases can only be proposed once agreed and not mid-evaluation");
        }
        if text.trim().is_empty() {
            return self.misuse("proposed test cases must not be empty");
        }
        if let Err(e) = next_round(&mut self.after.test_case_rounds, self.config.max_rounds) {
            return self.fail(e);
        }
        self.after.our_test_cases = Some(text.clone());
        Step::Send(MetaMessage::test_cases_negotiation(
            text,
            None,
            MetaStatus::Negotiating,
        ))
    }

    fn report_error(&mut self, description: String) -> Step {
        if !self.agreed_phase() || self.after.fix_outstanding {
            return self.misuse("errors can only be reported once agreed, one at a time");
        }
        if description.trim().is_empty() {
            return self.misuse("an error report must describe the error");
        }
        if let Err(e) = next_round(&mut self.after.fix_rounds, self.config.max_rounds) {
            return self.fail(e);
        }
        self.after.fix_outstanding = true;
        Step::Send(MetaMessage::fix_error_negotiation(
            description,
            MetaStatus::Negotiating,
        ))
    }

    fn fix_evaluated(&mut self, verdict: FixVerdict) -> Step {
        let Some(description) = self.after.pending_fix.take() else {
            return self.misuse("fix_evaluated() called with no error report pending");
        };
        match verdict {
            FixVerdict::Fix => {
                let peer = match self.phase {
                    SessionPhase::Generating { peer, .. } => peer,
                    _ => true,
                };
                self.phase = SessionPhase::Generating { local: false, peer };
                Step::Regenerate {
                    description: description.clone(),
                    send: Some(MetaMessage::fix_error_negotiation(
                        description,
                        MetaStatus::Accepted,
                    )),
                }
            }
            FixVerdict::Decline { reason } => Step::Send(MetaMessage::fix_error_negotiation(
                reason,
                MetaStatus::Rejected,
            )),
        }
    }

    /// The driver's deadline for the peer passed.
    fn timeout(&mut self) -> Step {
        if self.closed() {
            return Step::Rejected {
                reason: NegotiationError::SessionClosed,
                send: None,
            };
        }
        let send = if self.is_negotiating() && self.phase != SessionPhase::Idle {
            let seq = self.next_seq();
            self.last_seq = Some(seq);
            Some(MetaMessage::protocol_negotiation(
                seq,
                "",
                None,
                MetaStatus::Timeout,
            ))
        } else if self.after.our_test_cases.is_some() {
            Some(MetaMessage::test_cases_negotiation(
                "",
                None,
                MetaStatus::Timeout,
            ))
        } else if self.after.fix_outstanding {
            Some(MetaMessage::fix_error_negotiation("", MetaStatus::Timeout))
        } else {
            None
        };
        self.close_quietly(NegotiationError::Timeout { by: Side::Local }, send)
    }

    fn misuse(&mut self, message: &str) -> Step {
        if self.closed() {
            return Step::Rejected {
                reason: NegotiationError::SessionClosed,
                send: None,
            };
        }
        self.fail(NegotiationError::InvalidState {
            message: message.to_owned(),
        })
    }

    fn agreed_phase(&self) -> bool {
        matches!(
            self.phase,
            SessionPhase::Generating { .. } | SessionPhase::Ready
        )
    }

    // --- peer messages ------------------------------------------------------------------------

    fn receive_value(&mut self, value: Value) -> Step {
        match MetaMessage::from_value(value) {
            Ok(msg) => self.receive(msg),
            Err(e) => {
                if self.closed() {
                    return Step::Rejected {
                        reason: NegotiationError::SessionClosed,
                        send: None,
                    };
                }
                self.fail(NegotiationError::InvalidMessage { message: e.0 })
            }
        }
    }

    fn receive(&mut self, msg: MetaMessage) -> Step {
        if self.closed() {
            return Step::Rejected {
                reason: NegotiationError::SessionClosed,
                send: None,
            };
        }
        match msg {
            MetaMessage::NaturalLanguageNegotiation(m) => Step::Converse(m),
            MetaMessage::SourceHello(_) | MetaMessage::DestinationHello(_) => {
                self.fail(NegotiationError::InvalidMessage {
                    message: "hello messages open a connection; they are not part of a negotiation"
                        .into(),
                })
            }
            MetaMessage::ProtocolNegotiation(m) => self.on_protocol(m),
            MetaMessage::CodeGeneration(m) => self.on_code_generation(m.status),
            MetaMessage::TestCasesNegotiation(m) => self.on_test_cases(m),
            MetaMessage::FixErrorNegotiation(m) => self.on_fix_error(m),
        }
    }

    fn check_seq(&self, got: u64) -> Result<(), NegotiationError> {
        match self.last_seq {
            // Only a provider receives a first message; 0 per the spec, 1 from peers counting from 1.
            None if got <= 1 => Ok(()),
            None => Err(NegotiationError::Sequence {
                expected: "0 (or 1)".into(),
                got,
            }),
            Some(last) => match last.checked_add(1) {
                Some(expected) if expected == got => Ok(()),
                Some(expected) => Err(NegotiationError::Sequence {
                    expected: expected.to_string(),
                    got,
                }),
                None => Err(NegotiationError::Sequence {
                    expected: "nothing (the sequence is exhausted)".into(),
                    got,
                }),
            },
        }
    }

    fn on_protocol(&mut self, m: ProtocolNegotiation) -> Step {
        match self.phase {
            SessionPhase::Negotiating => {}
            SessionPhase::Idle => {
                return self.fail(NegotiationError::OutOfTurn {
                    message: "protocolNegotiation before this side proposed".into(),
                });
            }
            SessionPhase::Evaluating { .. } => {
                return self.fail(NegotiationError::OutOfTurn {
                    message: "protocolNegotiation while this side still owes an answer".into(),
                });
            }
            _ => {
                // After agreement the only legal ones are a terminal status from a peer that
                // changed its mind, which we honour as a rejection.
                return match m.status {
                    MetaStatus::Timeout => {
                        self.close_quietly(NegotiationError::Timeout { by: Side::Peer }, None)
                    }
                    MetaStatus::Rejected => self.close_quietly(
                        NegotiationError::PeerRejected {
                            reason: m.modification_summary,
                        },
                        None,
                    ),
                    _ => self.fail(NegotiationError::OutOfTurn {
                        message: "protocolNegotiation after the protocol was agreed".into(),
                    }),
                };
            }
        }
        if let Err(e) = self.check_seq(m.sequence_id) {
            return self.fail(e);
        }
        self.last_seq = Some(m.sequence_id);
        match m.status {
            MetaStatus::Negotiating => {
                if let Err(e) = next_round(&mut self.proposals, self.config.max_rounds) {
                    return self.fail(e);
                }
                let text = m.candidate_protocols;
                let hash = ProtocolHash::of(&text);
                self.phase = SessionPhase::Evaluating {
                    text: text.clone(),
                    hash,
                };
                Step::Evaluate { text, hash }
            }
            MetaStatus::Accepted => {
                let ours = self.our_proposal.clone();
                let named = (!m.candidate_protocols.is_empty())
                    .then(|| ProtocolHash::of(&m.candidate_protocols));
                match ours {
                    Some(text) if named.is_none_or(|h| h.matches(&text)) => {
                        let hash = ProtocolHash::of(&text);
                        self.agree(hash, text.clone());
                        Step::Accepted {
                            hash,
                            text,
                            send: None,
                        }
                    }
                    _ => self.fail(NegotiationError::UnevaluatedAcceptance { hash: named }),
                }
            }
            MetaStatus::Rejected => self.close_quietly(
                NegotiationError::PeerRejected {
                    reason: m.modification_summary.filter(|s| !s.trim().is_empty()),
                },
                None,
            ),
            MetaStatus::Timeout => {
                self.close_quietly(NegotiationError::Timeout { by: Side::Peer }, None)
            }
        }
    }

    fn on_code_generation(&mut self, status: CodeGenerationStatus) -> Step {
        let SessionPhase::Generating { local, peer } = self.phase else {
            return self.fail(NegotiationError::OutOfTurn {
                message:
                    "codeGeneration before a protocol was agreed, or after both sides generated"
                        .into(),
            });
        };
        if status == CodeGenerationStatus::Error {
            return self.close_quietly(
                NegotiationError::CodeGeneration {
                    by: Side::Peer,
                    detail: None,
                },
                None,
            );
        }
        if peer {
            return self.fail(NegotiationError::OutOfTurn {
                message: "a second codeGeneration from the peer".into(),
            });
        }
        if local {
            self.phase = SessionPhase::Ready;
            match &self.agreed {
                Some((hash, _)) => Step::Ready {
                    hash: *hash,
                    send: None,
                },
                None => self.misuse("no agreed protocol"),
            }
        } else {
            self.phase = SessionPhase::Generating { local, peer: true };
            Step::Wait
        }
    }

    fn on_test_cases(&mut self, m: TestCasesNegotiation) -> Step {
        if !self.agreed_phase() {
            return self.fail(NegotiationError::OutOfTurn {
                message: "testCasesNegotiation before a protocol was agreed".into(),
            });
        }
        if self.after.pending_test_cases.is_some() {
            return self.fail(NegotiationError::OutOfTurn {
                message: "testCasesNegotiation while this side still owes an answer".into(),
            });
        }
        match m.status {
            MetaStatus::Negotiating => {
                if let Err(e) = next_round(&mut self.after.test_case_rounds, self.config.max_rounds)
                {
                    return self.fail(e);
                }
                self.after.our_test_cases = None;
                self.after.pending_test_cases = Some(m.test_cases.clone());
                Step::EvaluateTestCases {
                    test_cases: m.test_cases,
                }
            }
            MetaStatus::Accepted => {
                let named = (!m.test_cases.is_empty()).then(|| ProtocolHash::of(&m.test_cases));
                match self.after.our_test_cases.take() {
                    Some(text) if named.is_none_or(|h| h.matches(&text)) => {
                        self.after.agreed_test_cases = Some(text.clone());
                        Step::TestCasesAgreed {
                            test_cases: text,
                            send: None,
                        }
                    }
                    _ => self.fail(NegotiationError::UnevaluatedAcceptance { hash: named }),
                }
            }
            MetaStatus::Rejected => {
                if self.after.our_test_cases.take().is_none() {
                    return self.fail(NegotiationError::OutOfTurn {
                        message: "test cases rejected, but none were proposed".into(),
                    });
                }
                Step::TestCasesRejected {
                    reason: m.modification_summary.filter(|s| !s.trim().is_empty()),
                }
            }
            MetaStatus::Timeout => {
                self.close_quietly(NegotiationError::Timeout { by: Side::Peer }, None)
            }
        }
    }

    fn on_fix_error(&mut self, m: FixErrorNegotiation) -> Step {
        if !self.agreed_phase() {
            return self.fail(NegotiationError::OutOfTurn {
                message: "fixErrorNegotiation before a protocol was agreed".into(),
            });
        }
        match m.status {
            MetaStatus::Negotiating => {
                if self.after.pending_fix.is_some() {
                    return self.fail(NegotiationError::OutOfTurn {
                        message: "a second error report while this side still owes an answer"
                            .into(),
                    });
                }
                if let Err(e) = next_round(&mut self.after.fix_rounds, self.config.max_rounds) {
                    return self.fail(e);
                }
                // A counter-report answers ours.
                self.after.fix_outstanding = false;
                self.after.pending_fix = Some(m.error_description.clone());
                Step::FixError {
                    description: m.error_description,
                }
            }
            MetaStatus::Accepted => {
                if !self.after.fix_outstanding {
                    return self.fail(NegotiationError::OutOfTurn {
                        message: "an error fix was accepted, but no error was reported".into(),
                    });
                }
                self.after.fix_outstanding = false;
                // The peer regenerates its code and will send codeGeneration again.
                let local = match self.phase {
                    SessionPhase::Generating { local, .. } => local,
                    _ => true,
                };
                self.phase = SessionPhase::Generating { local, peer: false };
                Step::Wait
            }
            MetaStatus::Rejected => {
                if !self.after.fix_outstanding {
                    return self.fail(NegotiationError::OutOfTurn {
                        message: "an error fix was rejected, but no error was reported".into(),
                    });
                }
                self.after.fix_outstanding = false;
                Step::FixDeclined {
                    reason: m.error_description,
                }
            }
            MetaStatus::Timeout => {
                self.close_quietly(NegotiationError::Timeout { by: Side::Peer }, None)
            }
        }
    }
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
    fn session_state_round_trips_through_json() {
        let mut p = ProviderSession::new(SessionConfig::default());
        let _ = p.receive(proposal(0, "P"));
        let json = serde_json::to_string(&p).expect("serialises");
        let back: ProviderSession = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, p);
    }
}
