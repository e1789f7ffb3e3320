//! The peer's messages: sequence ids, turns and statuses checked before the session moves on.

use serde_json::Value;

use super::machine::{Core, SessionPhase, next_round};
use super::{NegotiationError, SessionRole, Side, Step};
use crate::hash::ProtocolHash;
use crate::messages::{
    CodeGenerationStatus, FixErrorNegotiation, MetaMessage, MetaStatus, ProtocolNegotiation,
    TestCasesNegotiation,
};

impl Core {
    pub(super) fn receive_value(&mut self, value: Value) -> Step {
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

    pub(super) fn receive(&mut self, msg: MetaMessage) -> Step {
        if self.closed() {
            // The peer's own end of a negotiation that is over (AgentConnect answers `rejected`
            // with `rejected`): nothing to answer.
            if let MetaMessage::ProtocolNegotiation(m) = &msg
                && matches!(m.status, MetaStatus::Rejected | MetaStatus::Timeout)
            {
                return Step::Wait;
            }
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
                // A provider that counts from 1 (AgentConnect) answers the requester's first
                // proposal, 0, with 2: the id it gives the answer to a 1. From there on, +1.
                Some(1) if got == 2 && self.role == SessionRole::Requester => Ok(()),
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
            // The peer may end the negotiation while this side owes an answer (it asked this
            // side no more than it will answer): its `rejected` or `timeout` is taken.
            SessionPhase::Evaluating { .. }
                if matches!(m.status, MetaStatus::Rejected | MetaStatus::Timeout) => {}
            SessionPhase::Evaluating { .. } => {
                return self.fail(NegotiationError::OutOfTurn {
                    message: "protocolNegotiation while this side still owes an answer".into(),
                });
            }
            _ => return self.on_protocol_after_agreement(m),
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

    /// A `protocolNegotiation` once the protocol is agreed: the only legal ones are a terminal
    /// status from a peer that changed its mind, honoured as a rejection, and one echo.
    fn on_protocol_after_agreement(&mut self, m: ProtocolNegotiation) -> Step {
        match m.status {
            MetaStatus::Timeout => {
                self.close_quietly(NegotiationError::Timeout { by: Side::Peer }, None)
            }
            MetaStatus::Rejected => self.close_quietly(
                NegotiationError::PeerRejected {
                    reason: m.modification_summary,
                },
                None,
            ),
            MetaStatus::Accepted if self.is_echo(&m) => {
                self.echoed = true;
                Step::Wait
            }
            _ => self.fail(NegotiationError::OutOfTurn {
                message: "protocolNegotiation after the protocol was agreed".into(),
            }),
        }
    }

    /// Whether `m`, arriving once the protocol is agreed, echoes the agreement: `accepted`,
    /// naming the agreed text (or none), with an id no later than the next one. AgentConnect
    /// answers an `accepted` with one of its own that repeats its last id; one such echo is
    /// taken, and changes nothing.
    fn is_echo(&self, m: &ProtocolNegotiation) -> bool {
        let names_agreed = match &self.agreed {
            Some((hash, _)) => {
                m.candidate_protocols.is_empty() || hash.matches(&m.candidate_protocols)
            }
            None => false,
        };
        let in_sequence = self
            .last_seq
            .is_some_and(|last| m.sequence_id <= last.saturating_add(1));
        !self.echoed && names_agreed && in_sequence
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
                Step::FixAccepted {
                    description: m.error_description,
                }
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
