//! The test cases a handler is verified against, and the ones the provider proposes with
//! `testCasesNegotiation`.
//!
//! A protocol document has test cases of its own when its reader finds any
//! (`ProtocolDoc::test_cases`: structured cases, or prose cases with a request and a checkable
//! expectation). A document without any (no test cases section, or one whose cases could not be
//! read, which `ProtocolDoc::unclear` then names) is verified against, in order of preference:
//! 1. the test cases agreed for it in this negotiation through `testCasesNegotiation`;
//! 2. test cases generated from the capability that serves it
//!    (`BuiltinProtocolReasoner::generate_test_cases`, deterministic and offline whatever the
//!    configured reasoner) whose requests follow the protocol's request schema (a request that
//!    does not is refused before any handler sees it, so such a case tests nothing a peer can
//!    observe), of which only those the handler passes are kept: they are the provider's own
//!    expectations, so a generated case the handler fails is dropped, never disputed with the
//!    peer. A handler that passes none is not verified.
//!
//! Once the handler is verified against generated cases, the provider proposes them, in the
//! same turn and ahead of its `codeGeneration` (so a requester that has both learns of the
//! cases before its session is ready), but only to a peer whose hello announced
//! `testCasesNegotiation`: a peer that sent no hello (AgentConnect, which also leaves the
//! message unhandled) or announced less is sent none, and its handler serves as verified against
//! the provider's cases. The peer's answer: `accepted`, and the cases are the agreement's (the
//! session's `agreed_test_cases`, which a later rebuild of the handler verifies against, as the
//! handler's verification record in the store holds them under `testCases`); `rejected`, and the
//! protocol stays agreed without agreed cases (they are not proposed again: there are no others);
//! `negotiating`, and the peer's cases are run against the handler as any peer's cases are. The
//! session's round limit bounds the exchange.

use parley_anp::messages::capability::TEST_CASES_NEGOTIATION;
use parley_anp::{ProtocolDoc, Step, TestCase, VerificationReport, parse_test_cases};
use parley_reasoner::BuiltinProtocolReasoner;
use parley_store::HandlerRecord;
use serde_json::Value;

use super::Provider;
use super::driver::Turn;
use super::state::{Negotiation, NegotiationState};

/// Where the cases a handler is verified against come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// The protocol document's own.
    Document,
    /// Agreed through `testCasesNegotiation` for a document without any.
    Agreed,
    /// Written by the provider for a document without any.
    Generated,
}

/// The test cases of one verification.
#[derive(Debug, Clone)]
pub(super) struct Cases {
    pub list: Vec<TestCase>,
    pub origin: Origin,
}

impl Cases {
    /// What a verification leaves: of generated cases, those the handler passed (all of them,
    /// failures included, when it passed none, so that the failure shows); other cases as
    /// they are.
    pub fn kept(&self, report: VerificationReport) -> (Cases, VerificationReport) {
        if self.origin != Origin::Generated || !report.cases.iter().any(|c| c.passed) {
            return (self.clone(), report);
        }
        let (list, cases): (Vec<_>, Vec<_>) = self
            .list
            .iter()
            .cloned()
            .zip(report.cases)
            .filter(|(_, r)| r.passed)
            .unzip();
        (
            Cases {
                list,
                origin: Origin::Generated,
            },
            VerificationReport { cases },
        )
    }

    /// The verification record kept with the handler: the report and, for cases the document
    /// does not hold, the cases themselves (`testCases`), so that what the handler was verified
    /// against can be read back ([`verified_cases`]).
    pub fn record(&self, report: &VerificationReport) -> Value {
        let mut record = serde_json::to_value(report).unwrap_or(Value::Null);
        if self.origin != Origin::Document
            && let Some(fields) = record.as_object_mut()
        {
            let cases = serde_json::to_value(&self.list).unwrap_or(Value::Null);
            fields.insert(RECORDED_CASES.into(), cases);
            fields.insert("testCasesOrigin".into(), self.origin.name().into());
        }
        record
    }

    /// The cases to propose to the peer: generated ones only.
    pub fn to_propose(&self) -> Option<Vec<TestCase>> {
        (self.origin == Origin::Generated).then(|| self.list.clone())
    }
}

/// Where a verification record keeps the cases the document does not hold.
const RECORDED_CASES: &str = "testCases";

/// The test cases handler `record` of `doc`'s protocol was verified against: the document's
/// own, or those its verification record keeps ([`Cases::record`]: agreed with the peer, or
/// written by the provider for a document without any).
pub(super) fn verified_cases(doc: &ProtocolDoc, record: &HandlerRecord) -> Vec<TestCase> {
    if !doc.test_cases().is_empty() {
        return doc.test_cases().to_vec();
    }
    record
        .verification
        .as_ref()
        .and_then(|v| v.get(RECORDED_CASES))
        .and_then(|cases| serde_json::from_value(cases.clone()).ok())
        .unwrap_or_default()
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Document => "document",
            Origin::Agreed => "agreed",
            Origin::Generated => "generated",
        }
    }
}

impl Provider {
    /// The cases to verify `doc`'s handler against (see the module docs); `None` when the
    /// document has none and none can be written for it.
    pub(super) fn cases_for(&self, doc: &ProtocolDoc, negotiation: &Negotiation) -> Option<Cases> {
        if !doc.test_cases().is_empty() {
            return Some(Cases {
                list: doc.test_cases().to_vec(),
                origin: Origin::Document,
            });
        }
        let agreed = negotiation
            .session
            .agreed_test_cases()
            .and_then(|text| parse_test_cases(text).ok())
            .filter(|cases| !cases.is_empty());
        if let Some(list) = agreed {
            return Some(Cases {
                list,
                origin: Origin::Agreed,
            });
        }
        let mut generated = BuiltinProtocolReasoner.generate_test_cases(doc, &self.specs);
        generated.retain(|case| doc.validate_request(&case.request).is_ok());
        (!generated.is_empty()).then_some(Cases {
            list: generated,
            origin: Origin::Generated,
        })
    }

    /// After the handler was verified (`next`: the session's answer to that): proposes the
    /// generated cases it passed to a peer that takes `testCasesNegotiation`, ahead of `next`'s
    /// messages. Returns the step to drive on: `next`, or the session's end when proposing
    /// broke a rule of its own.
    pub(super) fn propose_generated(
        &self,
        negotiation: &mut Negotiation,
        turn: &mut Turn,
        next: Step,
    ) -> Step {
        let proposable = matches!(next, Step::Send(_) | Step::Ready { .. });
        let Some(cases) = negotiation.generated_cases.clone() else {
            return next;
        };
        if !proposable || !turn.peer_takes_cases {
            return next;
        }
        let body = parley_reasoner::draft::render_test_cases(&cases);
        match negotiation.session.propose_test_cases(body) {
            Step::Send(proposal) => {
                let names: Vec<String> = cases.iter().map(|c| format!("`{}`", c.name)).collect();
                turn.outbox.push(proposal);
                turn.summary.push(format!(
                    "The protocol has no test cases of its own: proposing {} written from this provider's capabilities ({}), which its handler passes.",
                    cases.len(),
                    names.join(", ")
                ));
                next
            }
            ended => ended,
        }
    }
}

impl NegotiationState {
    /// Whether the peer's hello announced `testCasesNegotiation`: unlike
    /// [`NegotiationState::peer_supports`], a peer that sent no hello is not assumed to take it
    /// (AgentConnect sends none and leaves the message unhandled).
    pub(super) fn peer_takes_cases(&self) -> bool {
        self.peer_capabilities
            .as_ref()
            .is_some_and(|caps| caps.iter().any(|c| c == TEST_CASES_NEGOTIATION))
    }
}

#[cfg(test)]
mod tests {
    use parley_anp::CaseReport;
    use serde_json::json;

    use super::*;

    fn case(name: &str) -> TestCase {
        serde_json::from_value(json!({"name": name, "request": {}, "expectedResponse": {}}))
            .expect("a case")
    }

    fn report(passed: &[bool]) -> VerificationReport {
        VerificationReport {
            cases: passed
                .iter()
                .enumerate()
                .map(|(i, p)| CaseReport {
                    name: format!("c{i}"),
                    passed: *p,
                    failures: if *p { vec![] } else { vec!["differs".into()] },
                    response: None,
                })
                .collect(),
        }
    }

    fn cases(origin: Origin) -> Cases {
        Cases {
            list: vec![case("c0"), case("c1"), case("c2")],
            origin,
        }
    }

    #[test]
    fn generated_cases_the_handler_fails_are_dropped() {
        let (kept, report) = cases(Origin::Generated).kept(report(&[true, false, true]));
        let names: Vec<&str> = kept.list.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["c0", "c2"]);
        assert!(report.passed());
        assert_eq!(report.cases.len(), 2);
        let record = kept.record(&report);
        assert_eq!(record["testCases"].as_array().map(Vec::len), Some(2));
        assert_eq!(record["testCasesOrigin"], "generated");
        assert_eq!(kept.to_propose().map(|c| c.len()), Some(2));
    }

    #[test]
    fn a_handler_that_passes_no_generated_case_keeps_its_failures() {
        let (kept, report) = cases(Origin::Generated).kept(report(&[false, false, false]));
        assert_eq!(kept.list.len(), 3);
        assert!(!report.passed());
    }

    #[test]
    fn the_documents_own_cases_all_count_and_are_not_proposed() {
        let (kept, report) = cases(Origin::Document).kept(report(&[true, false, true]));
        assert_eq!(kept.list.len(), 3);
        assert!(!report.passed());
        assert!(kept.to_propose().is_none());
        assert!(kept.record(&report).get("testCases").is_none());
    }

    #[test]
    fn only_a_hello_that_announces_it_takes_test_cases() {
        let mut state = NegotiationState::default();
        // No hello (AgentConnect): nothing is assumed.
        assert!(!state.peer_takes_cases());
        state.peer_capabilities = Some(vec!["fixErrorNegotiation".into()]);
        assert!(!state.peer_takes_cases());
        state.peer_capabilities = Some(vec![TEST_CASES_NEGOTIATION.into()]);
        assert!(state.peer_takes_cases());
    }
}
