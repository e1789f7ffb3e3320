//! `testCasesNegotiation` initiated by the provider: a Parley requester proposes a protocol
//! without test cases of its own to a Parley provider, which verifies its handler against cases
//! written from its capabilities and proposes those cases to a requester whose hello announced
//! `testCasesNegotiation` (over NLIP and over seed 002's `/anp`); the requester checks them
//! against the protocol's schemas and accepts, and both sides keep them. A requester that does
//! not announce the exchange is sent no cases and is served all the same.

use std::sync::Arc;

use parley::negotiation::anp::AnpOptions;
use parley::negotiation::requester::{Negotiated, Outcome, Requester, Wire};
use parley_anp::messages::capability;
use parley_anp::{MetaMessage, MetaProtocolInfo, ProtocolHash};
use parley_store::{Direction, Store};
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};

use crate::faults::meta_of;
use crate::negotiation::send_meta;
use crate::requester::store_of;
use crate::support::{new_requester, product_protocol, request};

/// The product protocol without its test cases section.
pub(crate) fn without_test_cases() -> String {
    let text = product_protocol();
    let cut = text.find("# Test Cases").expect("a test cases section");
    text[..cut].to_owned()
}

/// The transcript's `testCasesNegotiation` messages as (direction, status).
fn test_cases_messages(transcript: &[(Direction, Value)]) -> Vec<(Direction, String)> {
    transcript
        .iter()
        .filter(|(_, v)| v["action"] == "testCasesNegotiation")
        .map(|(d, v)| (*d, v["status"].as_str().unwrap_or("?").to_owned()))
        .collect()
}

/// Checks an agreement reached with the provider's cases: the requester returns them and keeps
/// them in its transcript, the provider's active handler was verified against them, and the
/// protocol serves.
async fn assert_cases_agreed(
    negotiated: &Negotiated,
    requester: &Requester,
    url: &str,
    provider: &Arc<dyn Store>,
) {
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    // The provider proposed (inbound to the requester), the requester accepted.
    assert_eq!(
        test_cases_messages(&negotiated.transcript),
        [
            (Direction::Inbound, "negotiating".to_owned()),
            (Direction::Outbound, "accepted".to_owned()),
        ],
        "{:#?}",
        negotiated.transcript
    );
    let agreed = negotiated.test_cases.as_deref().expect("agreed test cases");
    let cases = parley_anp::parse_test_cases(agreed).expect("the agreed cases read");
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    // "missing input" (a request without `productId`) is not among them: the request schema
    // refuses it before any handler could answer it.
    assert_eq!(names, ["found", "not found"]);

    // The requester's store keeps the exchange with the negotiation.
    let hash = negotiated.hash.to_string();
    let recorded = requester
        .store
        .negotiations_for_protocol(&hash)
        .await
        .expect("query");
    let record = requester
        .store
        .get_negotiation(recorded[0].id)
        .await
        .expect("query")
        .expect("the negotiation");
    let kept: Vec<&Value> = record
        .transcript
        .iter()
        .map(|m| &m.message)
        .filter(|m| m["action"] == "testCasesNegotiation" && m["status"] == "negotiating")
        .collect();
    assert_eq!(kept.len(), 1, "{:#?}", record.transcript);
    assert_eq!(kept[0]["testCases"].as_str(), Some(agreed));

    // The provider's active handler was verified against those cases, which its record holds.
    let handler = provider
        .active_handler(&hash)
        .await
        .expect("query")
        .expect("an active handler");
    let verification = handler.verification.expect("a verification record");
    assert_eq!(verification["testCasesOrigin"], "generated");
    assert_eq!(
        serde_json::from_value::<Vec<parley_anp::TestCase>>(verification["testCases"].clone())
            .expect("cases"),
        cases
    );
    assert_eq!(handler.verification_passed, Some(true));

    // The protocol serves.
    let called = requester
        .call(url, &negotiated.hash, request("m1", "P12345"))
        .await
        .expect("served");
    assert_eq!(called.answer["status"]["code"], 200, "{}", called.answer);
}

#[tokio::test]
async fn the_provider_proposes_generated_cases_for_a_protocol_without_any_and_they_are_agreed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let text = without_test_cases();
    assert!(
        parley_anp::ProtocolDoc::parse(text.clone())
            .expect("a protocol")
            .test_cases()
            .is_empty()
    );

    let negotiated = requester
        .negotiate(&app.url(), &text, |_| {})
        .await
        .expect("negotiated");
    let provider = store_of(&settings).await;
    assert_cases_agreed(&negotiated, &requester, &app.url(), &provider).await;
    app.stop().await;
}

#[tokio::test]
async fn over_anp_the_provider_proposes_generated_cases_and_they_are_agreed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = Requester {
        wire: Wire::Anp(AnpOptions::default()),
        ..new_requester(local.path()).await
    };
    let base = format!("http://{}", app.addr);
    let negotiated = requester
        .negotiate(&base, &without_test_cases(), |_| {})
        .await
        .expect("negotiated");
    let provider = store_of(&settings).await;
    assert_cases_agreed(&negotiated, &requester, &base, &provider).await;
    app.stop().await;
}

#[tokio::test]
async fn a_requester_that_does_not_announce_the_exchange_is_sent_no_test_cases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let without: Vec<String> = capability::ALL
        .iter()
        .filter(|c| **c != capability::TEST_CASES_NEGOTIATION)
        .map(|c| (*c).to_owned())
        .collect();
    let text = without_test_cases();

    let negotiated = requester
        .negotiate_with(&app.url(), &text, &without, |_| {})
        .await
        .expect("negotiated");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    assert!(
        test_cases_messages(&negotiated.transcript).is_empty(),
        "{:#?}",
        negotiated.transcript
    );
    assert!(negotiated.test_cases.is_none());
    // The provider's handler is verified against its own cases all the same, and serves.
    let hash = ProtocolHash::of(&text).to_string();
    let handler = store_of(&settings)
        .await
        .active_handler(&hash)
        .await
        .expect("query")
        .expect("an active handler");
    assert_eq!(handler.verification_passed, Some(true));
    let called = requester
        .call(&app.url(), &negotiated.hash, request("m2", "P12345"))
        .await
        .expect("served");
    assert_eq!(called.answer["status"]["code"], 200, "{}", called.answer);
    app.stop().await;
}

/// A requester driven message by message over NLIP: the provider proposes its cases with its
/// acceptance, ahead of its `codeGeneration`; a rejection leaves the protocol agreed and active
/// with nothing proposed again, and a counter-proposal beyond the round limit ends the exchange
/// with an error instead of another round.
#[tokio::test]
async fn a_rejection_or_a_counter_proposal_beyond_the_round_limit_ends_the_exchange() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    // The provider's proposal is the one round of test cases allowed.
    settings.negotiation.max_rounds = 1;
    let app = TestApp::spawn(&settings).await;
    let text = without_test_cases();
    let hash = ProtocolHash::of(&text).to_string();
    let hello = MetaMessage::source_hello(MetaProtocolInfo::parley([])).to_value();
    let proposal = json!({"action": "protocolNegotiation", "sequenceId": 0,
                          "candidateProtocols": text, "status": "negotiating"});
    let generated = json!({"action": "codeGeneration", "status": "generated"});

    // Each negotiation: hello and proposal; the provider accepts, proposes its cases, then
    // reports its code generated.
    let open = || async {
        let (status, reply) = send_meta(&app, &[hello.clone(), proposal.clone()], None).await;
        assert_eq!(status, 200, "{reply:?}");
        let metas = meta_of(&reply);
        let actions: Vec<&str> = metas.iter().filter_map(|m| m["action"].as_str()).collect();
        assert_eq!(
            actions,
            [
                "protocolNegotiation",
                "testCasesNegotiation",
                "codeGeneration"
            ],
            "{metas:#?}"
        );
        let conversation = reply
            .tokens()
            .find(|t| t.token_kind() == Some(parley_nlip::TokenKind::Conversation))
            .expect("a conversation token")
            .clone();
        let proposed = metas
            .iter()
            .find(|m| m["action"] == "testCasesNegotiation")
            .map(|m| m["testCases"].clone());
        (conversation, proposed.expect("the proposed cases"))
    };

    // Rejected: the protocol is active all the same, and nothing more is proposed.
    let (conversation, _) = open().await;
    let rejected = json!({"action": "testCasesNegotiation", "testCases": "",
                          "modificationSummary": "not these", "status": "rejected"});
    let (status, reply) =
        send_meta(&app, &[generated.clone(), rejected], Some(&conversation)).await;
    assert_eq!(status, 200, "{reply:?}");
    assert!(meta_of(&reply).is_empty(), "{reply:?}");
    let provider = store_of(&settings).await;
    assert!(
        provider
            .active_handler(&hash)
            .await
            .expect("query")
            .is_some()
    );

    // Countered: a second round of test cases is over the limit, and the exchange ends.
    let (conversation, cases) = open().await;
    let counter = json!({"action": "testCasesNegotiation", "testCases": cases,
                         "modificationSummary": "the same, once more", "status": "negotiating"});
    let (status, reply) = send_meta(&app, &[generated.clone(), counter], Some(&conversation)).await;
    assert_eq!(status, 422, "{reply:?}");
    let error = parley_nlip::ErrorInfo::from_message(&reply).expect("an error");
    assert_eq!(error.code, "round_limit", "{}", error.message);
    assert!(
        !meta_of(&reply)
            .iter()
            .any(|m| m["action"] == "testCasesNegotiation"),
        "{reply:?}"
    );
    app.stop().await;
}
