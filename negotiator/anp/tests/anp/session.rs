//! Negotiation state machines: the rules AgentConnect breaks, enforced.

use std::collections::HashSet;

use parley_anp::messages::{CodeGenerationStatus, MetaMessage, MetaStatus};
use parley_anp::session::Side;
use parley_anp::{
    FixVerdict, NegotiationError, ProtocolHash, ProviderSession, RequesterSession, SessionConfig,
    Step, Verdict,
};
use proptest::prelude::*;
use serde_json::json;

fn pn(seq: u64, text: &str, status: MetaStatus) -> MetaMessage {
    MetaMessage::protocol_negotiation(seq, text, None, status)
}

fn negotiating(seq: u64, text: &str) -> MetaMessage {
    pn(seq, text, MetaStatus::Negotiating)
}

fn provider() -> ProviderSession {
    ProviderSession::new(SessionConfig::default())
}

fn expect_evaluate(step: Step) -> (String, ProtocolHash) {
    match step {
        Step::Evaluate { text, hash } => (text, hash),
        other => panic!("expected Evaluate, got {other:?}"),
    }
}

fn expect_send(step: Step) -> MetaMessage {
    match step {
        Step::Send(m) => m,
        other => panic!("expected Send, got {other:?}"),
    }
}

fn expect_rejected(step: Step, code: &str) -> Option<MetaMessage> {
    match step {
        Step::Rejected { reason, send } => {
            assert_eq!(reason.code(), code, "{reason}");
            send
        }
        other => panic!("expected Rejected({code}), got {other:?}"),
    }
}

fn seq_of(msg: &MetaMessage) -> u64 {
    match msg {
        MetaMessage::ProtocolNegotiation(m) => m.sequence_id,
        other => panic!("not a protocolNegotiation: {other:?}"),
    }
}

#[test]
fn happy_path_both_sides_with_counter_proposal() {
    let mut req = RequesterSession::new(SessionConfig::default());
    let mut prov = provider();

    // Requester proposes A (0); provider counters with B (1); requester accepts B (2).
    let m0 = expect_send(req.start("A"));
    assert_eq!(seq_of(&m0), 0);
    let (text, hash) = expect_evaluate(prov.receive(m0));
    assert_eq!(text, "A");
    let m1 = expect_send(prov.evaluated(
        &hash,
        Verdict::Counter {
            text: "B".into(),
            summary: "narrowed to what we serve".into(),
        },
    ));
    assert_eq!(seq_of(&m1), 1);
    let (text, hash) = expect_evaluate(req.receive(m1));
    assert_eq!(text, "B");
    let Step::Accepted {
        hash: agreed,
        text,
        send: Some(m2),
    } = req.evaluated(&hash, Verdict::Accept)
    else {
        panic!("requester should accept");
    };
    assert_eq!(
        (agreed, text.as_str(), seq_of(&m2)),
        (ProtocolHash::of("B"), "B", 2)
    );
    let Step::Accepted {
        hash: agreed_p,
        send: None,
        ..
    } = prov.receive(m2)
    else {
        panic!("provider should see its own proposal accepted");
    };
    assert_eq!(agreed_p, agreed);

    // Code generation: the provider finishes first, then the requester.
    let cg_p = expect_send(prov.code_generated(Ok(())));
    assert_eq!(
        cg_p,
        MetaMessage::code_generation(CodeGenerationStatus::Generated)
    );
    assert_eq!(req.receive(cg_p), Step::Wait);
    let Step::Ready {
        hash,
        send: Some(cg_r),
    } = req.code_generated(Ok(()))
    else {
        panic!("requester ready");
    };
    assert_eq!(hash, agreed);
    assert!(matches!(prov.receive(cg_r), Step::Ready { send: None, .. }));
    assert!(prov.is_ready() && req.is_ready());
    assert_eq!(prov.agreed().map(|(h, _)| h), Some(agreed));
    assert_eq!(prov.last_sequence_id(), Some(2));
    assert_eq!(prov.rounds(), 2);
}

#[test]
fn provider_accepts_peers_that_count_from_one() {
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(1, "A")));
    let Step::Accepted { send: Some(m), .. } = p.evaluated(&hash, Verdict::Accept) else {
        panic!("accept");
    };
    assert_eq!(seq_of(&m), 2);
}

#[test]
fn a_requester_takes_the_answers_of_a_provider_that_counts_from_one() {
    // As AgentConnect's provider answers: our 0 is answered with 2 (its reply to a 1), a
    // counter-proposal; we accept it with 3, and it echoes the agreement with 2 again.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    let (_, hash) = expect_evaluate(r.receive(negotiating(2, "B")));
    let Step::Accepted { send: Some(m), .. } = r.evaluated(&hash, Verdict::Accept) else {
        panic!("accept");
    };
    assert_eq!(seq_of(&m), 3);
    assert_eq!(r.receive(pn(2, "B", MetaStatus::Accepted)), Step::Wait);
    let generated = MetaMessage::code_generation(CodeGenerationStatus::Generated);
    assert_eq!(r.receive(generated), Step::Wait);
    assert!(matches!(
        r.code_generated(Ok(())),
        Step::Ready { send: Some(_), .. }
    ));
    // The skip is taken for the first answer only, and by a requester only.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    expect_rejected(r.receive(negotiating(3, "B")), "sequence_error");
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "A")));
    expect_send(p.evaluated(
        &hash,
        Verdict::Counter {
            text: "B".into(),
            summary: "s".into(),
        },
    ));
    expect_rejected(p.receive(negotiating(3, "C")), "sequence_error");
}

#[test]
fn one_echo_of_the_agreement_is_taken_and_nothing_else_after_it() {
    // AgentConnect's requester answers our `accepted` (2) with its own, repeating its id 1.
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(1, "A")));
    assert!(matches!(
        p.evaluated(&hash, Verdict::Accept),
        Step::Accepted { .. }
    ));
    assert_eq!(p.receive(pn(1, "A", MetaStatus::Accepted)), Step::Wait);
    // A second echo is out of turn.
    expect_rejected(p.receive(pn(1, "A", MetaStatus::Accepted)), "out_of_turn");

    // An echo naming another text, or an id beyond the next, is no echo.
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "A")));
    assert!(matches!(
        p.evaluated(&hash, Verdict::Accept),
        Step::Accepted { .. }
    ));
    expect_rejected(p.receive(pn(2, "Z", MetaStatus::Accepted)), "out_of_turn");
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "A")));
    assert!(matches!(
        p.evaluated(&hash, Verdict::Accept),
        Step::Accepted { .. }
    ));
    expect_rejected(p.receive(pn(5, "A", MetaStatus::Accepted)), "out_of_turn");
    // After the echo the session goes on to code generation as before.
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "A")));
    assert!(matches!(
        p.evaluated(&hash, Verdict::Accept),
        Step::Accepted { .. }
    ));
    expect_send(p.code_generated(Ok(())));
    assert_eq!(p.receive(pn(0, "", MetaStatus::Accepted)), Step::Wait);
    let generated = MetaMessage::code_generation(CodeGenerationStatus::Generated);
    assert!(matches!(p.receive(generated), Step::Ready { .. }));
}

#[test]
fn a_rejection_echoed_after_the_end_is_taken_quietly() {
    // AgentConnect answers our `rejected` with its own.
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(1, "A")));
    let reason = "no capability serves it".to_owned();
    expect_rejected(p.evaluated(&hash, Verdict::Reject { reason }), "declined");
    assert_eq!(p.receive(pn(1, "", MetaStatus::Rejected)), Step::Wait);
    assert_eq!(p.closed_code(), Some("declined"));
    // Anything else after the end is still refused.
    expect_rejected(p.receive(negotiating(3, "B")), "session_closed");
}

#[test]
fn wrong_sequence_ids_are_rejected() {
    // A first id other than 0 or 1.
    let mut p = provider();
    let send = expect_rejected(p.receive(negotiating(2, "A")), "sequence_error");
    assert!(matches!(
        send,
        Some(MetaMessage::ProtocolNegotiation(ref m)) if m.status == MetaStatus::Rejected
    ));
    assert!(p.is_closed());
    assert_eq!(p.closed_code(), Some("sequence_error"));
    // Closed stays closed.
    expect_rejected(p.receive(negotiating(3, "A")), "session_closed");

    // A skipped id later on.
    let mut p = provider();
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "A")));
    expect_send(p.evaluated(
        &hash,
        Verdict::Counter {
            text: "B".into(),
            summary: "s".into(),
        },
    ));
    expect_rejected(p.receive(negotiating(3, "C")), "sequence_error");

    // A repeated id.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    expect_rejected(r.receive(negotiating(0, "B")), "sequence_error");

    // u64::MAX never overflows.
    let mut p = provider();
    expect_rejected(p.receive(negotiating(u64::MAX, "A")), "sequence_error");
}

#[test]
fn round_limit_is_enforced_on_both_directions() {
    let config = SessionConfig { max_rounds: 3 };
    // Peer proposals 0 and 2, our counter 1: the peer's third proposal (seq 2) is the 3rd
    // proposal, allowed; our next counter would be the 4th.
    let mut p = ProviderSession::new(config);
    let (_, h) = expect_evaluate(p.receive(negotiating(0, "A")));
    expect_send(p.evaluated(
        &h,
        Verdict::Counter {
            text: "B".into(),
            summary: "s".into(),
        },
    ));
    let (_, h) = expect_evaluate(p.receive(negotiating(2, "C")));
    let send = expect_rejected(
        p.evaluated(
            &h,
            Verdict::Counter {
                text: "D".into(),
                summary: "s".into(),
            },
        ),
        "round_limit",
    );
    assert_eq!(send.as_ref().map(seq_of), Some(3));

    // The requester refuses a peer proposal beyond the limit without evaluating it.
    let mut r = RequesterSession::new(SessionConfig { max_rounds: 2 });
    expect_send(r.start("A"));
    let (_, h) = expect_evaluate(r.receive(negotiating(1, "B")));
    expect_rejected(
        r.evaluated(
            &h,
            Verdict::Counter {
                text: "C".into(),
                summary: "s".into(),
            },
        ),
        "round_limit",
    );
    let mut r = RequesterSession::new(SessionConfig { max_rounds: 1 });
    expect_send(r.start("A"));
    expect_rejected(r.receive(negotiating(1, "B")), "round_limit");
}

#[test]
fn acceptance_needs_local_evaluation_of_the_exact_text() {
    // A first message already marked accepted is never accepted.
    let mut p = provider();
    let send = expect_rejected(
        p.receive(pn(0, "A", MetaStatus::Accepted)),
        "unevaluated_acceptance",
    );
    assert!(send.is_some());
    assert!(p.agreed().is_none());

    // A peer accepting a text we never proposed.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    expect_rejected(
        r.receive(pn(1, "A, slightly different", MetaStatus::Accepted)),
        "unevaluated_acceptance",
    );

    // A peer accepting an outdated proposal of ours.
    let mut p = provider();
    let (_, h) = expect_evaluate(p.receive(negotiating(0, "A")));
    expect_send(p.evaluated(
        &h,
        Verdict::Counter {
            text: "B".into(),
            summary: "s".into(),
        },
    ));
    let (_, h) = expect_evaluate(p.receive(negotiating(2, "C")));
    expect_send(p.evaluated(
        &h,
        Verdict::Counter {
            text: "D".into(),
            summary: "s".into(),
        },
    ));
    expect_rejected(
        p.receive(pn(4, "B", MetaStatus::Accepted)),
        "unevaluated_acceptance",
    );

    // An empty candidateProtocols with `accepted` means our last proposal.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    let Step::Accepted { text, .. } = r.receive(pn(1, "", MetaStatus::Accepted)) else {
        panic!("accepted");
    };
    assert_eq!(text, "A");

    // A verdict for a different text than the pending one is a driver bug, not an acceptance.
    let mut p = provider();
    expect_evaluate(p.receive(negotiating(0, "A")));
    expect_rejected(
        p.evaluated(&ProtocolHash::of("B"), Verdict::Accept),
        "invalid_state",
    );
    assert!(p.agreed().is_none());
}

#[test]
fn every_status_is_handled() {
    // Peer timeout ends the session cleanly, with nothing to send.
    let mut p = provider();
    let (_, h) = expect_evaluate(p.receive(negotiating(0, "A")));
    expect_send(p.evaluated(
        &h,
        Verdict::Counter {
            text: "B".into(),
            summary: "s".into(),
        },
    ));
    let Step::Rejected { reason, send } = p.receive(pn(2, "", MetaStatus::Timeout)) else {
        panic!("rejected");
    };
    assert_eq!(reason, NegotiationError::Timeout { by: Side::Peer });
    assert!(send.is_none());

    // Peer rejection, with its reason.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    let rejected = MetaMessage::protocol_negotiation(
        1,
        "",
        Some("we sell no such thing".into()),
        MetaStatus::Rejected,
    );
    let Step::Rejected { reason, .. } = r.receive(rejected) else {
        panic!("rejected");
    };
    assert_eq!(reason.code(), "peer_rejected");
    assert!(reason.to_string().contains("no such thing"));

    // Local timeout tells the peer.
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    let send = expect_rejected(r.timeout(), "timeout");
    assert!(matches!(
        send,
        Some(MetaMessage::ProtocolNegotiation(ref m)) if m.status == MetaStatus::Timeout && m.sequence_id == 1
    ));

    // Local rejection.
    let mut p = provider();
    let (_, h) = expect_evaluate(p.receive(negotiating(0, "A")));
    let send = expect_rejected(
        p.evaluated(
            &h,
            Verdict::Reject {
                reason: "nothing maps".into(),
            },
        ),
        "declined",
    );
    assert!(matches!(
        send,
        Some(MetaMessage::ProtocolNegotiation(ref m)) if m.status == MetaStatus::Rejected && m.sequence_id == 1
    ));
}

#[test]
fn unknown_status_ends_the_session_as_invalid() {
    let mut p = provider();
    expect_rejected(
        p.receive_value(json!({
            "action": "protocolNegotiation", "sequenceId": 0,
            "candidateProtocols": "A", "status": "pondering"
        })),
        "invalid_message",
    );
}

fn agreed_provider() -> ProviderSession {
    let mut p = provider();
    let (_, h) = expect_evaluate(p.receive(negotiating(0, "A")));
    assert!(matches!(
        p.evaluated(&h, Verdict::Accept),
        Step::Accepted { .. }
    ));
    p
}

#[test]
fn code_generation_error_is_a_failure() {
    let mut p = agreed_provider();
    expect_rejected(
        p.receive(MetaMessage::code_generation(CodeGenerationStatus::Error)),
        "code_generation_failed",
    );

    let mut p = agreed_provider();
    let send = expect_rejected(
        p.code_generated(Err("tests failed".into())),
        "code_generation_failed",
    );
    assert_eq!(
        send,
        Some(MetaMessage::code_generation(CodeGenerationStatus::Error))
    );

    // codeGeneration before agreement is out of turn.
    let mut p = provider();
    expect_rejected(
        p.receive(MetaMessage::code_generation(
            CodeGenerationStatus::Generated,
        )),
        "out_of_turn",
    );
}

#[test]
fn test_cases_and_error_fixing() {
    let mut p = agreed_provider();
    expect_send(p.code_generated(Ok(())));
    assert!(matches!(
        p.receive(MetaMessage::code_generation(
            CodeGenerationStatus::Generated
        )),
        Step::Ready { .. }
    ));

    // The peer proposes test cases; we counter; it accepts ours.
    let step = p.receive(MetaMessage::test_cases_negotiation(
        "cases v1",
        None,
        MetaStatus::Negotiating,
    ));
    assert_eq!(
        step,
        Step::EvaluateTestCases {
            test_cases: "cases v1".into()
        }
    );
    expect_send(p.test_cases_evaluated(Verdict::Counter {
        text: "cases v2".into(),
        summary: "fixed ids".into(),
    }));
    let step = p.receive(MetaMessage::test_cases_negotiation(
        "cases v2",
        None,
        MetaStatus::Accepted,
    ));
    assert!(
        matches!(step, Step::TestCasesAgreed { ref test_cases, send: None } if test_cases == "cases v2")
    );
    assert_eq!(p.agreed_test_cases(), Some("cases v2"));

    // Accepting test cases nobody proposed.
    let mut q = agreed_provider();
    expect_rejected(
        q.receive(MetaMessage::test_cases_negotiation(
            "x",
            None,
            MetaStatus::Accepted,
        )),
        "unevaluated_acceptance",
    );

    // The peer reports an error in our responses; we fix it and regenerate.
    let step = p.receive(MetaMessage::fix_error_negotiation(
        "status.code is missing",
        MetaStatus::Negotiating,
    ));
    assert_eq!(
        step,
        Step::FixError {
            description: "status.code is missing".into()
        }
    );
    let Step::Regenerate {
        send: Some(ack), ..
    } = p.fix_evaluated(FixVerdict::Fix)
    else {
        panic!("regenerate");
    };
    assert_eq!(
        ack,
        MetaMessage::fix_error_negotiation("status.code is missing", MetaStatus::Accepted)
    );
    assert!(!p.is_ready());
    assert!(matches!(
        p.code_generated(Ok(())),
        Step::Ready { send: Some(_), .. }
    ));

    // We report an error; the peer declines; still ready.
    expect_send(p.report_error("price is a string"));
    let step = p.receive(MetaMessage::fix_error_negotiation(
        "price is a number in our messages",
        MetaStatus::Rejected,
    ));
    assert!(matches!(step, Step::FixDeclined { .. }));
    assert!(p.is_ready());

    // A fix timeout ends the session.
    expect_send(p.report_error("again"));
    expect_rejected(
        p.receive(MetaMessage::fix_error_negotiation("", MetaStatus::Timeout)),
        "timeout",
    );
}

#[test]
fn natural_language_does_not_disturb_the_sequence() {
    let mut r = RequesterSession::new(SessionConfig::default());
    expect_send(r.start("A"));
    let nl = MetaMessage::natural_language(
        parley_anp::messages::NlMessageType::Request,
        "0123456789abcdef",
        "what currencies?",
    );
    assert!(matches!(r.receive(nl), Step::Converse(_)));
    assert!(matches!(
        r.receive(negotiating(1, "B")),
        Step::Evaluate { .. }
    ));
}

// --- property tests ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Event {
    Peer(MetaMessage),
    Raw(serde_json::Value),
    Evaluate(u8),
    CodeGenerated(bool),
    ProposeTestCases(u8),
    TestCasesVerdict(u8),
    ReportError,
    Fix(bool),
    Timeout,
}

const TEXTS: [&str; 4] = ["A", "B", "C", ""];

fn arb_status() -> impl Strategy<Value = MetaStatus> {
    prop_oneof![
        Just(MetaStatus::Negotiating),
        Just(MetaStatus::Accepted),
        Just(MetaStatus::Rejected),
        Just(MetaStatus::Timeout),
    ]
}

fn arb_text() -> impl Strategy<Value = String> {
    (0..TEXTS.len()).prop_map(|i| TEXTS[i].to_owned())
}

fn arb_peer_message() -> impl Strategy<Value = MetaMessage> {
    prop_oneof![
        4 => (0u64..8, arb_text(), arb_status())
            .prop_map(|(seq, text, status)| MetaMessage::protocol_negotiation(seq, text, None, status)),
        1 => any::<u64>().prop_map(|seq| negotiating(seq, "A")),
        1 => prop_oneof![Just(CodeGenerationStatus::Generated), Just(CodeGenerationStatus::Error)]
            .prop_map(MetaMessage::code_generation),
        1 => (arb_text(), arb_status())
            .prop_map(|(t, s)| MetaMessage::test_cases_negotiation(t, None, s)),
        1 => (arb_text(), arb_status())
            .prop_map(|(t, s)| MetaMessage::fix_error_negotiation(t, s)),
    ]
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => arb_peer_message().prop_map(Event::Peer),
        1 => Just(Event::Raw(json!({"action": "protocolNegotiation", "sequenceId": 1, "status": "??"}))),
        4 => any::<u8>().prop_map(Event::Evaluate),
        1 => any::<bool>().prop_map(Event::CodeGenerated),
        1 => any::<u8>().prop_map(Event::ProposeTestCases),
        1 => any::<u8>().prop_map(Event::TestCasesVerdict),
        1 => Just(Event::ReportError),
        1 => any::<bool>().prop_map(Event::Fix),
        1 => Just(Event::Timeout),
    ]
}

/// Drives either role through random events, checking after every step that nothing was
/// accepted that this side did not evaluate-and-accept or propose itself, and that the round
/// limit holds.
fn drive(requester: bool, max_rounds: u32, events: Vec<Event>) {
    let config = SessionConfig { max_rounds };
    let mut req = RequesterSession::new(config);
    let mut prov = ProviderSession::new(config);
    // Texts this side vouches for: accepted after evaluating, or proposed itself.
    let mut vouched: HashSet<ProtocolHash> = HashSet::new();
    let mut pending: Option<(String, ProtocolHash)> = None;
    let mut accepted_once = false;

    macro_rules! call {
        ($method:ident $(, $arg:expr)*) => {
            if requester { req.$method($($arg),*) } else { prov.$method($($arg),*) }
        };
    }

    if requester {
        let step = req.start("A");
        vouched.insert(ProtocolHash::of("A"));
        assert!(matches!(step, Step::Send(_)));
    }
    for event in events {
        let step = match event {
            Event::Peer(m) => call!(receive, m),
            Event::Raw(v) => call!(receive_value, v),
            Event::Evaluate(choice) => {
                // With nothing pending this is a driver bug the session must refuse; such a
                // verdict vouches for nothing.
                let real = pending.is_some();
                let (text, hash) = pending
                    .clone()
                    .unwrap_or_else(|| ("B".to_owned(), ProtocolHash::of("B")));
                let verdict = match choice % 3 {
                    0 => {
                        if real {
                            vouched.insert(ProtocolHash::of(&text));
                        }
                        Verdict::Accept
                    }
                    1 => {
                        let counter = TEXTS[(choice as usize / 3) % 3].to_owned();
                        if real {
                            vouched.insert(ProtocolHash::of(&counter));
                        }
                        Verdict::Counter {
                            text: counter,
                            summary: "s".into(),
                        }
                    }
                    _ => Verdict::Reject { reason: "r".into() },
                };
                call!(evaluated, &hash, verdict)
            }
            Event::CodeGenerated(ok) => {
                call!(code_generated, if ok { Ok(()) } else { Err("x".into()) })
            }
            Event::ProposeTestCases(i) => call!(propose_test_cases, TEXTS[i as usize % 4]),
            Event::TestCasesVerdict(i) => call!(
                test_cases_evaluated,
                match i % 3 {
                    0 => Verdict::Accept,
                    1 => Verdict::Counter {
                        text: "T".into(),
                        summary: "s".into()
                    },
                    _ => Verdict::Reject { reason: "r".into() },
                }
            ),
            Event::ReportError => call!(report_error, "bad"),
            Event::Fix(fix) => call!(
                fix_evaluated,
                if fix {
                    FixVerdict::Fix
                } else {
                    FixVerdict::Decline {
                        reason: "no".into(),
                    }
                }
            ),
            Event::Timeout => call!(timeout),
        };
        pending = None;
        match step {
            Step::Evaluate { text, hash } => {
                assert_eq!(hash, ProtocolHash::of(&text));
                pending = Some((text, hash));
            }
            Step::Accepted { hash, text, .. } => {
                assert_eq!(hash, ProtocolHash::of(&text));
                assert!(
                    vouched.contains(&hash),
                    "accepted {text:?}, which this side never evaluated or proposed"
                );
                assert!(!accepted_once, "accepted twice");
                accepted_once = true;
            }
            Step::Send(MetaMessage::ProtocolNegotiation(m))
                if m.status == MetaStatus::Negotiating =>
            {
                assert!(
                    !m.candidate_protocols.trim().is_empty(),
                    "empty proposal sent"
                );
            }
            _ => {}
        }
        let rounds = if requester {
            req.rounds()
        } else {
            prov.rounds()
        };
        assert!(rounds <= max_rounds, "{rounds} rounds > {max_rounds}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_provider_sequences(events in prop::collection::vec(arb_event(), 0..24), max in 1u32..5) {
        drive(false, max, events);
    }

    #[test]
    fn random_requester_sequences(events in prop::collection::vec(arb_event(), 0..24), max in 1u32..5) {
        drive(true, max, events);
    }
}

#[test]
fn a_question_about_a_proposal_is_a_round_and_only_while_it_awaits_a_verdict() {
    let mut p = ProviderSession::new(SessionConfig { max_rounds: 3 });
    assert!(matches!(
        p.question_asked(),
        Err(NegotiationError::InvalidState { .. })
    ));
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "P")));
    assert_eq!(p.question_asked(), Ok(()));
    assert_eq!(p.question_asked(), Ok(()));
    assert_eq!(p.rounds(), 3);
    assert_eq!(
        p.question_asked(),
        Err(NegotiationError::RoundLimit { limit: 3 })
    );
    // The session still waits for its verdict, and a question asked nothing of the sequence.
    let step = p.evaluated(&hash, Verdict::Accept);
    let Step::Accepted {
        send: Some(MetaMessage::ProtocolNegotiation(m)),
        ..
    } = step
    else {
        panic!("expected Accepted, got {step:?}");
    };
    assert_eq!(m.sequence_id, 1);
    // A counter-proposal would be one round too many now.
    let mut p = ProviderSession::new(SessionConfig { max_rounds: 2 });
    let (_, hash) = expect_evaluate(p.receive(negotiating(0, "P")));
    assert_eq!(p.question_asked(), Ok(()));
    let counter = Verdict::Counter {
        text: "Q".into(),
        summary: "changed".into(),
    };
    expect_rejected(p.evaluated(&hash, counter), "round_limit");
}

#[test]
fn the_peer_may_end_the_negotiation_while_a_verdict_is_owed() {
    for status in [MetaStatus::Rejected, MetaStatus::Timeout] {
        let mut p = provider();
        expect_evaluate(p.receive(negotiating(0, "P")));
        let step = p.receive(pn(1, "", status));
        let Step::Rejected { reason, send: None } = step else {
            panic!("ended quietly: {step:?}");
        };
        assert!(matches!(
            reason,
            NegotiationError::PeerRejected { .. } | NegotiationError::Timeout { .. }
        ));
        assert!(p.is_closed());
    }
    // Anything else is still out of turn.
    let mut p = provider();
    expect_evaluate(p.receive(negotiating(0, "P")));
    expect_rejected(p.receive(negotiating(1, "Q")), "out_of_turn");
}
