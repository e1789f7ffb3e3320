//! The requester's decision, through real Parley agents: a protocol when one is agreed or can
//! be, natural language when none can (a provider that rejects, a peer without the
//! meta-protocol), 0-RTT on the second request, base URLs for HTTP and WebSocket and without a
//! scheme, short hashes;
//! and `fixErrorNegotiation` accepted for a guessed product name and price, declined for a
//! changed status code, and a model reviewer that can narrow the guard rails but never widen
//! them.

use std::path::Path;
use std::sync::Arc;

use parley::negotiation::requester::{
    FallbackReason, Outcome, ProtocolRef, Requested, Requester, RequesterError,
};
use parley_anp::ProtocolHash;
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{OpenAiConfig, OpenAiProtocolReasoner};
use parley_store::Store;
use parley_tests::{TestApp, test_settings};
use serde_json::Value;

use crate::support::{new_requester, product_protocol, request};

pub(crate) async fn store_of(settings: &parley::config::Settings) -> Arc<dyn Store> {
    parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("provider store")
}

/// How many negotiations of protocol `hash` the provider has on record.
pub(crate) async fn negotiations(store: &Arc<dyn Store>, hash: &ProtocolHash) -> usize {
    store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("negotiations")
        .len()
}

/// A provider whose only capability is the order-status lookup: it cannot serve the product
/// protocol.
pub(crate) fn orders_only_settings(dir: &Path) -> parley::config::Settings {
    let orders = parley_tests::repo_root().join("examples/data/orders.json");
    let capabilities = dir.join("orders-only.toml");
    std::fs::write(
        &capabilities,
        format!(
            r#"[agent]
name = "Order desk"
description = "Tells the status of customer orders."

[[capabilities]]
name = "getOrderStatus"
description = "Look up a customer order by its id (e.g. O-1001) and return its status."
read_only = true
input_schema = {{ type = "object", required = ["orderId"], properties = {{ orderId = {{ type = "string" }} }} }}
output_schema = {{ type = "object", required = ["orderId", "status"], properties = {{ orderId = {{ type = "string" }}, status = {{ type = "string" }} }} }}
binding = {{ type = "dataset", file = {orders:?}, key = "orderId", not_found = "error" }}
"#
        ),
    )
    .expect("capabilities file");
    let mut settings = test_settings(dir);
    settings.capabilities = Some(capabilities);
    settings
}

/// The transcript's `fixErrorNegotiation` messages as (direction, status, description).
pub(crate) fn fix_errors(
    transcript: &[(parley_store::Direction, Value)],
) -> Vec<(String, String, String)> {
    transcript
        .iter()
        .filter(|(_, v)| v["action"] == "fixErrorNegotiation")
        .map(|(d, v)| {
            (
                format!("{d:?}"),
                v["status"].as_str().unwrap_or_default().to_owned(),
                v["errorDescription"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn negotiates_then_calls_then_calls_at_zero_rtt_over_base_urls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;
    let provider_store = store_of(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);
    // The base URL, as people type it: no path.
    let http = format!("http://{}", provider.addr);

    let mut stages = Vec::new();
    let first = requester
        .request(
            &http,
            ProtocolRef::Text(text.clone()),
            request("r1", "P12345"),
            true,
            |p| stages.push(p.stage),
        )
        .await
        .expect("request");
    let Requested::Protocol {
        hash: used,
        negotiated: Some(negotiated),
        called,
    } = &first
    else {
        panic!("negotiated, then called: {first:?}");
    };
    assert_eq!(*used, hash);
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    assert_eq!(
        called.answer["productInfo"]["productName"],
        "High-performance Laptop"
    );
    assert!(stages.contains(&"negotiating"), "{stages:?}");
    assert_eq!(negotiations(&provider_store, &hash).await, 1);
    assert!(
        requester
            .agreed_with(&provider.url(), &hash)
            .await
            .expect("query")
    );

    // The second request, by hash, over the WebSocket base URL: the agreement is known, so no
    // negotiation happens, not even a hello.
    let ws = format!("ws://{}/", provider.addr);
    let second = requester
        .request(
            &ws,
            ProtocolRef::Hash(hash),
            request("r2", "P99999"),
            true,
            |p| panic!("no negotiation at 0-RTT, yet {p:?}"),
        )
        .await
        .expect("request");
    let Requested::Protocol {
        negotiated: None,
        called,
        ..
    } = &second
    else {
        panic!("0-RTT: {second:?}");
    };
    assert_eq!(called.answer["status"]["code"], 404);
    assert_eq!(
        negotiations(&provider_store, &hash).await,
        1,
        "no new negotiation"
    );

    // Host and port only, as people type them: an http:// URL, the same peer, so the protocol
    // given as text is called at once through the agreement.
    let third = requester
        .request(
            &provider.addr.to_string(),
            ProtocolRef::Text(text.clone()),
            request("r3", "P12345"),
            true,
            |p| panic!("the agreement is known, yet {p:?}"),
        )
        .await
        .expect("request");
    let Requested::Protocol {
        negotiated: None,
        called,
        ..
    } = &third
    else {
        panic!("through the agreement: {third:?}");
    };
    assert_eq!(called.answer["status"]["code"], 200);
    let mut client =
        parley::client::NlipClient::connect(&format!("localhost:{}", provider.addr.port()), false)
            .await
            .expect("a scheme-less URL is http://");
    let reply = client
        .send(&parley_nlip::Message::text("english", "help"))
        .await
        .expect("a reply");
    assert_eq!(reply.status, 200);
    provider.stop().await;
}

#[tokio::test]
async fn a_provider_that_cannot_serve_the_protocol_is_asked_in_natural_language() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = orders_only_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let text = product_protocol();

    let requested = requester
        .request(
            &provider.url(),
            ProtocolRef::Text(text.clone()),
            request("r1", "P12345"),
            true,
            |_| {},
        )
        .await
        .expect("answered in natural language");
    let Requested::Fallback { reason, reply } = &requested else {
        panic!("a fallback: {requested:?}");
    };
    assert!(
        matches!(reason, FallbackReason::Rejected { .. }),
        "{reason:?}"
    );
    assert!(!reply.is_control(), "a plain NLIP message answers");
    assert!(!requested.text().trim().is_empty());
    // The provider rejected it on the record; nothing was agreed.
    let provider_store = store_of(&settings).await;
    assert!(
        provider_store
            .active_handler(&ProtocolHash::of(&text).to_string())
            .await
            .expect("query")
            .is_none()
    );
    assert!(
        !requester
            .agreed_with(&provider.url(), &ProtocolHash::of(&text))
            .await
            .expect("query")
    );

    // Without the fallback it is an error that says why.
    let refused = requester
        .request(
            &provider.url(),
            ProtocolRef::Text(text),
            request("r2", "P12345"),
            false,
            |_| {},
        )
        .await;
    match refused {
        Err(RequesterError::NoAgreement(FallbackReason::Rejected { .. })) => {}
        other => panic!("expected NoAgreement: {other:?}"),
    }

    // By hash the request goes out at once; the provider does not know the protocol, the
    // negotiation that follows is rejected, and natural language answers.
    let hash = ProtocolHash::of(&product_protocol());
    let requested = requester
        .request(
            &provider.url(),
            ProtocolRef::Hash(hash),
            request("r3", "P12345"),
            true,
            |_| {},
        )
        .await
        .expect("answered in natural language");
    assert!(
        matches!(
            &requested,
            Requested::Fallback {
                reason: FallbackReason::Rejected { .. },
                ..
            }
        ),
        "{requested:?}"
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_peer_without_the_meta_protocol_gets_the_request_in_natural_language() {
    // An NLIP peer that knows nothing of ANP: it echoes every message.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let addr = listener.local_addr().expect("addr");
    let echo = axum::Router::new().route(
        "/nlip",
        axum::routing::post(|body: axum::body::Bytes| async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, echo).await });
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;

    let requested = requester
        .request(
            &format!("http://{addr}"),
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
    assert_eq!(*reason, FallbackReason::NotSupported);
    // The echo shows what was sent: the protocol's requirement and the request.
    let sent = requested.text();
    assert!(sent.starts_with("Look up one product"), "{sent}");
    assert!(sent.contains(r#""productId":"P12345""#), "{sent}");
    server.abort();
}

#[tokio::test]
async fn short_hashes_resolve_as_git_resolves_them() {
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    // Seventeen protocols: two of them share their first hex digit.
    let mut hashes = Vec::new();
    for i in 0..17 {
        let stored = requester
            .store
            .put_protocol(&format!("# Requirements\n\nProtocol {i}.\n"))
            .await
            .expect("put");
        hashes.push(stored.hash);
    }
    let hash = &hashes[0];
    let resolved = requester.resolve_hash(&hash[..8]).await.expect("unique");
    assert_eq!(resolved.to_string(), *hash);
    let upper = format!("sha256:{}", hash[..10].to_uppercase());
    assert_eq!(
        requester
            .resolve_hash(&upper)
            .await
            .expect("unique")
            .to_string(),
        *hash
    );
    let shared = hashes
        .iter()
        .find_map(|h| {
            let first = &h[..1];
            (hashes.iter().filter(|o| o.starts_with(first)).count() > 1).then(|| first.to_owned())
        })
        .expect("pigeonhole");
    match requester.resolve_hash(&shared).await {
        Err(RequesterError::Ambiguous { candidates, .. }) => assert!(candidates.len() > 1),
        other => panic!("ambiguous: {other:?}"),
    }
    let unused = (0..16)
        .map(|d| format!("{d:x}{d:x}{d:x}{d:x}"))
        .find(|p| !hashes.iter().any(|h| h.starts_with(p.as_str())))
        .expect("an unused prefix");
    assert!(matches!(
        requester.resolve_hash(&unused).await,
        Err(RequesterError::UnknownLocally(_))
    ));
    assert!(matches!(
        requester.resolve_hash("P12345").await,
        Err(RequesterError::NotAHash(_))
    ));
}

/// The product protocol with a first test case that guesses the product's name and price and
/// gives no fixture, so the provider's verification asks its real catalogue (a read-only
/// capability) and answers with the real values: valid, keeping every status and field, only
/// the data differs.
pub(crate) fn guessed_protocol() -> String {
    let text = product_protocol()
        .replacen(
            r#""productName": "High-performance Laptop","#,
            r#""productName": "Laptop","#,
            1,
        )
        .replacen(r#""price": 1299.99,"#, r#""price": 999,"#, 1);
    let start = text
        .find(r#""fixtures""#)
        .expect("the first case's fixtures");
    let end = start + text[start..].find("\n    }\n  },").expect("their end") + "\n    }".len();
    let text = format!("{}\"fixtures\": {{}}{}", &text[..start], &text[end..]);
    let doc = parley_anp::ProtocolDoc::parse(text.as_str()).expect("still a protocol");
    assert!(doc.test_cases()[0].fixtures.is_empty());
    assert_eq!(
        doc.test_cases()[0].expected_response["productInfo"]["price"],
        999
    );
    text
}

#[tokio::test]
async fn a_guessed_product_name_and_price_are_corrected_by_the_provider() {
    let text = guessed_protocol();
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
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
    assert!(fixes[0].2.contains("productName"), "{}", fixes[0].2);
    assert_eq!(
        (fixes[1].0.as_str(), fixes[1].1.as_str()),
        ("Outbound", "accepted")
    );

    // The provider's handler is active, on record as verified with the accepted correction,
    // and serves the real data.
    let provider_store = store_of(&settings).await;
    let active = provider_store
        .active_handler(&negotiated.hash.to_string())
        .await
        .expect("query")
        .expect("an active handler");
    assert_eq!(active.verification_passed, Some(true));
    let called = requester
        .call(&provider.url(), &negotiated.hash, request("c1", "P12345"))
        .await
        .expect("call");
    assert_eq!(called.answer["productInfo"]["price"], 1299.99);
    provider.stop().await;
}

#[tokio::test]
async fn a_correction_that_changes_a_status_code_is_declined() {
    // The requester expects 201 for a product that exists; the provider answers 200.
    let text = product_protocol().replacen(
        r#""status": { "code": 200 }"#,
        r#""status": { "code": 201 }"#,
        1,
    );
    assert_ne!(text, product_protocol());
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiate");
    assert!(
        matches!(&negotiated.outcome, Outcome::Rejected { code, .. } if code == "code_generation_failed"),
        "{:?}",
        negotiated.outcome
    );
    let fixes = fix_errors(&negotiated.transcript);
    assert_eq!(fixes.len(), 2, "{fixes:?}");
    assert_eq!(
        (fixes[1].0.as_str(), fixes[1].1.as_str()),
        ("Outbound", "rejected")
    );
    assert!(
        fixes[1].2.contains("status /status/code from 201 to 200"),
        "the reason is given: {}",
        fixes[1].2
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_model_reviewer_may_decline_what_the_guard_rails_allow_and_is_not_asked_otherwise() {
    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::text(
        r#"{"decision": "reject", "reason": "we resell it under the name Laptop"}"#,
    ));
    let reviewer =
        OpenAiProtocolReasoner::new(OpenAiConfig::new(model.base_url(), "scripted-model"))
            .expect("reviewer");
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = Requester {
        reviewer: Some(Arc::new(reviewer)),
        ..new_requester(local.path()).await
    };

    // Within the guard rails: the model is asked, once, and its "no" stands.
    let negotiated = requester
        .negotiate(&provider.url(), &guessed_protocol(), |_| {})
        .await
        .expect("negotiate");
    assert!(
        matches!(&negotiated.outcome, Outcome::Rejected { code, .. } if code == "code_generation_failed"),
        "{:?}",
        negotiated.outcome
    );
    let fixes = fix_errors(&negotiated.transcript);
    assert_eq!(
        (fixes[1].0.as_str(), fixes[1].1.as_str()),
        ("Outbound", "rejected")
    );
    assert_eq!(fixes[1].2, "we resell it under the name Laptop");
    let requests = model.requests();
    assert_eq!(requests.len(), 1, "one review");
    let prompt = requests[0].body["messages"].to_string();
    assert!(
        prompt.contains("High-performance Laptop"),
        "the corrections reach the model"
    );

    // Outside them (a status code change) the model is not even asked: it could only widen.
    model.push(ScriptedReply::text(
        r#"{"decision": "accept", "reason": "fine"}"#,
    ));
    let text = product_protocol().replacen(
        r#""status": { "code": 200 }"#,
        r#""status": { "code": 201 }"#,
        1,
    );
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiate");
    assert!(matches!(negotiated.outcome, Outcome::Rejected { .. }));
    assert_eq!(model.requests().len(), 1, "no second review");
    provider.stop().await;
}
