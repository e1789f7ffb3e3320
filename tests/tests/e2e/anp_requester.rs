//! Parley as requester over seed 002's framing (`Wire::Anp`) against a Parley provider's
//! `/anp`: a negotiation, calls on new connections served at 0-RTT through the hello, a
//! provider that forgot the protocol, a provider's error report answered on the same connection,
//! and the natural-language fallback in a natural-language frame.

use parley::negotiation::anp::AnpOptions;
use parley::negotiation::requester::{
    FallbackReason, Outcome, ProtocolRef, Requested, Requester, RequesterError, Wire,
};
use parley_anp::{MetaMessage, ProtocolHash};
use parley_store::Direction;
use parley_tests::{TestApp, test_settings};
use serde_json::Value;

use crate::requester::{
    fix_errors, guessed_protocol, negotiations, orders_only_settings, store_of,
};
use crate::support::{new_requester, product_protocol, request};

/// A requester over `/anp` with its own store in `dir`.
async fn anp_requester(dir: &std::path::Path) -> Requester {
    Requester {
        wire: Wire::Anp(AnpOptions::default()),
        ..new_requester(dir).await
    }
}

/// The provider's base URL, as people type it: no path, so `/anp` for this framing.
fn base(app: &TestApp) -> String {
    format!("http://{}", app.addr)
}

fn kinds(transcript: &[(Direction, Value)]) -> Vec<String> {
    transcript
        .iter()
        .map(|(d, v)| {
            let kind = MetaMessage::from_value(v.clone()).map_or("?", |m| m.kind());
            let way = if *d == Direction::Outbound {
                "out"
            } else {
                "in"
            };
            format!("{way}:{kind}")
        })
        .collect()
}

#[tokio::test]
async fn negotiates_over_anp_then_calls_at_zero_rtt_on_new_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = anp_requester(local.path()).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);

    let negotiated = requester
        .negotiate(&base(&provider), &text, |_| {})
        .await
        .expect("negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    assert_eq!(
        kinds(&negotiated.transcript),
        [
            "out:sourceHello",
            "in:destinationHello",
            "out:protocolNegotiation",
            "in:protocolNegotiation",
            "in:codeGeneration",
            "out:codeGeneration"
        ]
    );

    // Each call is a new connection: the hello selects the protocol, and the request follows.
    let found = requester
        .call(&base(&provider), &hash, request("a1", "P12345"))
        .await
        .expect("call");
    assert!(found.renegotiated.is_none());
    assert!(found.reply.is_none(), "seed 002 has no envelope");
    assert_eq!(found.answer["messageId"], "a1");
    assert_eq!(found.answer["productInfo"]["currency"], "USD");
    let missing = requester
        .call(&base(&provider), &hash, request("a2", "P99999"))
        .await
        .expect("call");
    assert_eq!(missing.answer["status"]["code"], 404);

    // The requester restarts; its request by text finds the agreement and the provider's hello
    // confirms it: no negotiation.
    drop(requester);
    let requester = anp_requester(local.path()).await;
    let requested = requester
        .request(
            &base(&provider),
            ProtocolRef::Text(text.clone()),
            request("a3", "P12345"),
            false,
            |_| {},
        )
        .await
        .expect("request");
    let Requested::Protocol {
        negotiated, called, ..
    } = &requested
    else {
        panic!("answered through the protocol: {requested:?}");
    };
    assert!(negotiated.is_none() && called.renegotiated.is_none());
    assert_eq!(called.answer["status"]["code"], 200);
    let provider_store = store_of(&settings).await;
    assert_eq!(negotiations(&provider_store, &hash).await, 1);
    provider.stop().await;
}

#[tokio::test]
async fn a_providers_error_report_is_answered_on_the_same_connection() {
    let text = guessed_protocol();
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = anp_requester(local.path()).await;
    let negotiated = requester
        .negotiate(&base(&provider), &text, |_| {})
        .await
        .expect("negotiate");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    let fixes = fix_errors(&negotiated.transcript);
    assert_eq!(fixes.len(), 2, "{fixes:?}");
    assert_eq!(
        (fixes[0].0.as_str(), fixes[0].1.as_str()),
        ("Inbound", "negotiating")
    );
    assert_eq!(
        (fixes[1].0.as_str(), fixes[1].1.as_str()),
        ("Outbound", "accepted")
    );
    let called = requester
        .call(&base(&provider), &negotiated.hash, request("g1", "P12345"))
        .await
        .expect("call");
    assert_eq!(called.answer["productInfo"]["price"], 1299.99);
    provider.stop().await;
}

#[tokio::test]
async fn a_rejected_protocol_falls_back_to_a_natural_language_frame() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&orders_only_settings(dir.path())).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = anp_requester(local.path()).await;
    let requested = requester
        .request(
            &base(&provider),
            ProtocolRef::Text(product_protocol()),
            request("r1", "P12345"),
            true,
            |_| {},
        )
        .await
        .expect("answered in natural language");
    let Requested::Fallback { reason, .. } = &requested else {
        panic!("a fallback: {requested:?}");
    };
    assert!(
        matches!(reason, FallbackReason::Rejected { .. }),
        "{reason:?}"
    );
    assert!(!requested.text().trim().is_empty());

    let refused = requester
        .request(
            &base(&provider),
            ProtocolRef::Text(product_protocol()),
            request("r2", "P12345"),
            false,
            |_| {},
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(RequesterError::NoAgreement(FallbackReason::Rejected { .. }))
        ),
        "{refused:?}"
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_provider_that_never_heard_of_the_protocol_gets_it_negotiated_on_the_call() {
    let local = tempfile::tempdir().expect("tempdir");
    let requester = anp_requester(local.path()).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);
    let first_dir = tempfile::tempdir().expect("tempdir");
    let first = TestApp::spawn(&test_settings(first_dir.path())).await;
    requester
        .negotiate(&base(&first), &text, |_| {})
        .await
        .expect("negotiated");
    first.stop().await;

    // Another provider, on a database of its own: the call's hello selects nothing, and the
    // protocol is negotiated again on the same connection.
    let other_dir = tempfile::tempdir().expect("tempdir");
    let other = TestApp::spawn(&test_settings(other_dir.path())).await;
    let called = requester
        .call(&base(&other), &hash, request("a4", "P12345"))
        .await
        .expect("call");
    let again = called.renegotiated.expect("negotiated again");
    assert_eq!(again.outcome, Outcome::Agreed);
    assert_eq!(called.answer["status"]["code"], 200);
    other.stop().await;
}
