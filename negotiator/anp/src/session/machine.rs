//! The state machine both session roles share: its state (`Core`, `SessionPhase`) and the
//! local actions (start, verdicts, generated code, test cases and error reports this side
//! proposes, timeouts). The peer's messages are handled in `peer`.

use serde::{Deserialize, Serialize};

use super::{FixVerdict, NegotiationError, SessionConfig, SessionRole, Side, Step, Verdict};
use crate::hash::ProtocolHash;
use crate::messages::{CodeGenerationStatus, MetaMessage, MetaStatus};

/// Counts one more proposal against the round limit; the error is what the session fails with.
pub(super) fn next_round(counter: &mut u32, limit: u32) -> Result<(), NegotiationError> {
    if *counter >= limit {
        return Err(NegotiationError::RoundLimit { limit });
    }
    *counter += 1;
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub(super) enum SessionPhase {
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
pub(super) struct After {
    pub(super) test_case_rounds: u32,
    /// Test cases we proposed last (text), awaiting the peer.
    pub(super) our_test_cases: Option<String>,
    /// Peer test cases awaiting our verdict.
    pub(super) pending_test_cases: Option<String>,
    pub(super) agreed_test_cases: Option<String>,
    pub(super) fix_rounds: u32,
    /// We reported an error and await the peer's answer.
    pub(super) fix_outstanding: bool,
    /// A peer error report awaiting our verdict.
    pub(super) pending_fix: Option<String>,
}

/// The state machine shared by both roles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Core {
    pub(super) role: SessionRole,
    pub(super) config: SessionConfig,
    pub(super) phase: SessionPhase,
    /// The last sequenceId sent or received.
    pub(super) last_seq: Option<u64>,
    /// Protocol proposals so far, both sides.
    pub(super) proposals: u32,
    /// Our latest proposal (text), the only text a peer may accept.
    pub(super) our_proposal: Option<String>,
    pub(super) agreed: Option<(ProtocolHash, String)>,
    pub(super) after: After,
    /// The peer echoed the agreement once already (see `is_echo`).
    #[serde(default)]
    pub(super) echoed: bool,
}

impl Core {
    pub(super) fn new(role: SessionRole, config: SessionConfig) -> Self {
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
            echoed: false,
        }
    }

    pub(super) fn is_negotiating(&self) -> bool {
        matches!(
            self.phase,
            SessionPhase::Idle | SessionPhase::Negotiating | SessionPhase::Evaluating { .. }
        )
    }

    pub(super) fn next_seq(&self) -> u64 {
        // Saturating: an absurd peer id has already been refused by `check_seq`, which uses
        // checked arithmetic; this only runs on ids we accepted.
        self.last_seq.map_or(0, |s| s.saturating_add(1))
    }

    /// Ends the session. During protocol negotiation the peer is told with `rejected`.
    pub(super) fn fail(&mut self, reason: NegotiationError) -> Step {
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

    pub(super) fn close_quietly(
        &mut self,
        reason: NegotiationError,
        send: Option<MetaMessage>,
    ) -> Step {
        tracing::debug!(code = reason.code(), "session ended");
        self.phase = SessionPhase::Closed {
            code: reason.code().to_owned(),
        };
        Step::Rejected { reason, send }
    }

    pub(super) fn closed(&self) -> bool {
        matches!(self.phase, SessionPhase::Closed { .. })
    }

    pub(super) fn start(&mut self, text: String) -> Step {
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

    pub(super) fn evaluated(&mut self, hash: &ProtocolHash, verdict: Verdict) -> Step {
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

    pub(super) fn agree(&mut self, hash: ProtocolHash, text: String) {
        self.agreed = Some((hash, text));
        self.phase = SessionPhase::Generating {
            local: false,
            peer: false,
        };
    }

    pub(super) fn code_generated(&mut self, result: Result<(), String>) -> Step {
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

    pub(super) fn test_cases_evaluated(&mut self, verdict: Verdict) -> Step {
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

    pub(super) fn propose_test_cases(&mut self, text: String) -> Step {
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

    pub(super) fn report_error(&mut self, description: String) -> Step {
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

    pub(super) fn fix_evaluated(&mut self, verdict: FixVerdict) -> Step {
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
    pub(super) fn timeout(&mut self) -> Step {
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

    pub(super) fn misuse(&mut self, message: &str) -> Step {
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

    pub(super) fn agreed_phase(&self) -> bool {
        matches!(
            self.phase,
            SessionPhase::Generating { .. } | SessionPhase::Ready
        )
    }
}
