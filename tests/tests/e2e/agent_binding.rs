//! A Parley agent as a requester: the front desk (examples/front-desk), whose capabilities are
//! bound to the product desk (a second Parley agent, examples/capabilities.toml). A peer asks the
//! front desk in natural language or through a protocol; the front desk asks the product desk
//! through the protocol it negotiated with it, once, and then at 0-RTT; and when the product
//! desk cannot agree to a protocol, the front desk asks it in natural language and answers with
//! that, or fails when its capability has no room for such an answer.

use std::sync::Arc;

use parley::client::NlipClient;
use parley::config::Settings;
use parley::negotiation::requester::Outcome;
use parley_anp::ProtocolHash;
use parley_nlip::{ErrorInfo, Format, Message};
use parley_store::{Role, Store};
use parley_tests::{TestApp, capabilities_with, repo_root, test_settings};
use serde_json::Value;

use crate::support::{new_requester, product_protocol, request};

async fn store_of(settings: &Settings) -> Arc<dyn Store> {
    parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("store")
}

/// Sends `text` to the agent at `url`; returns the reply's text and its structured parts.
async fn ask(url: &str, text: &str) -> (Message, String, Vec<Value>) {
    let mut client = NlipClient::connect(url, false).await.expect("connect");
    let reply = client
        .send(&Message::text("english", text))
        .await
        .expect("a reply")
        .message;
    let said = reply.text_content().unwrap_or_default().to_owned();
    let data = reply
        .payload_submessages()
        .filter(|s| s.format == Format::Structured)
        .filter_map(|s| match &s.content {
            parley_nlip::Content::Json(value) => Some(value.clone()),
            parley_nlip::Content::Bytes(_) => None,
        })
        .collect();
    (reply, said, data)
}

/// The product desk and, bound to it, the front desk (with `extra` capabilities appended to its
/// file, written beside a copy in `dir`).
struct Desks {
    desk: TestApp,
    desk_settings: Settings,
    front: TestApp,
    front_settings: Settings,
    _dirs: [tempfile::TempDir; 2],
}

async fn desks() -> Desks {
    let desk_dir = tempfile::tempdir().expect("tempdir");
    let desk_settings = test_settings(desk_dir.path());
    let desk = TestApp::spawn(&desk_settings).await;
    let front_dir = tempfile::tempdir().expect("tempdir");
    let mut front_settings = test_settings(front_dir.path());
    front_settings.capabilities = None;
    // A handler's deadline counts its capabilities' time, and the front desk's handler waits
    // for another agent's answer: room for that on a busy machine.
    front_settings.sandbox.deadline_ms = 10_000;
    let file = repo_root().join("examples/front-desk/capabilities.toml");
    let base = format!("http://{}", desk.addr);
    let capabilities = capabilities_with(&file, &[("PRODUCT_DESK_URL", &base)]);
    let front = TestApp::spawn_with(&front_settings, capabilities).await;
    Desks {
        desk,
        desk_settings,
        front,
        front_settings,
        _dirs: [desk_dir, front_dir],
    }
}

#[tokio::test]
async fn a_capability_bound_to_another_agent_is_answered_through_a_negotiated_protocol() {
    let d = desks().await;
    let hash = ProtocolHash::of(&product_protocol());
    let (desk_store, front_store) = (
        store_of(&d.desk_settings).await,
        store_of(&d.front_settings).await,
    );

    // In natural language: the front desk's reasoner calls its getProductInfo, which the front
    // desk performs by negotiating the product protocol with the product desk, then calling it.
    let (_, said, data) = ask(&d.front.url(), "How much is product P12345?").await;
    assert!(said.contains("getProductInfo"), "{said}");
    assert_eq!(data.len(), 1, "{data:?}");
    assert_eq!(data[0]["productName"], "High-performance Laptop");
    assert_eq!(data[0]["price"], 1299.99);
    assert!(data[0].get("supplier").is_none(), "{data:?}");
    let desk_side = desk_store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("query");
    assert_eq!(desk_side.len(), 1, "the product desk negotiated once");
    let front_side = front_store
        .agreements_for_protocol(&hash.to_string())
        .await
        .expect("query");
    assert!(
        front_side
            .iter()
            .any(|a| a.role == Role::Requester && a.peer.contains(&d.desk.addr.to_string())),
        "the front desk keeps its agreement with the product desk: {front_side:?}"
    );

    // A second question is answered through that agreement: no new negotiation.
    let (_, said, data) = ask(&d.front.url(), "getProductInfo P99999").await;
    assert_eq!(data, [Value::Null], "{said}");

    // Through a protocol: a requester negotiates the same product protocol with the front desk,
    // whose handler calls getProductInfo, which asks the product desk at 0-RTT.
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let negotiated = requester
        .negotiate(&d.front.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiation with the front desk");
    assert_eq!(negotiated.outcome, Outcome::Agreed, "{negotiated:?}");
    let found = requester
        .call(&d.front.url(), &hash, request("via-front-1", "P23456"))
        .await
        .expect("call");
    assert_eq!(found.answer["status"]["code"], 200, "{}", found.answer);
    assert_eq!(found.answer["messageId"], "via-front-1");
    assert_eq!(found.answer["productInfo"]["productId"], "P23456");
    let missing = requester
        .call(&d.front.url(), &hash, request("via-front-2", "P99999"))
        .await
        .expect("call");
    assert_eq!(missing.answer["status"]["code"], 404, "{}", missing.answer);
    assert_eq!(missing.answer["productInfo"], Value::Null);
    let desk_side = desk_store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("query");
    assert_eq!(desk_side.len(), 1, "still the one negotiation");
    d.front.stop().await;
    d.desk.stop().await;
}

#[tokio::test]
async fn a_peer_that_cannot_agree_is_asked_in_natural_language() {
    let d = desks().await;
    let tracking =
        std::fs::read_to_string(repo_root().join("examples/protocols/order-tracking.md"))
            .expect("order-tracking protocol");

    // The product desk rejects order tracking (it has no carrier or tracking number), so the
    // front desk asks it in natural language and answers with the fallback object.
    let (reply, said, data) = ask(&d.front.url(), r#"trackOrder {"orderId": "O-1001"}"#).await;
    assert!(ErrorInfo::from_message(&reply).is_none(), "{said}");
    assert_eq!(data.len(), 1, "{said}: {data:?}");
    let fallback = &data[0]["fallback"];
    let reason = fallback["reason"].as_str().expect("a reason");
    assert!(reason.contains("without agreement"), "{reason}");
    let text = fallback["text"].as_str().expect("the desk's words");
    assert!(text.contains("shipped"), "{text}");
    assert_eq!(fallback["data"]["status"], "shipped", "{fallback}");
    assert_eq!(fallback["data"]["orderId"], "O-1001", "{fallback}");
    let front_store = store_of(&d.front_settings).await;
    let agreements = front_store
        .agreements_for_protocol(&ProtocolHash::of(&tracking).to_string())
        .await
        .expect("query");
    assert!(agreements.is_empty(), "nothing agreed: {agreements:?}");
    d.front.stop().await;

    // A capability whose output schema has no room for that answer fails with it instead.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("strict.toml");
    let protocol = repo_root().join("examples/protocols/order-tracking.md");
    std::fs::write(
        &file,
        format!(
            r#"[agent]
name = "Strict front desk"
description = "Tracks orders through the tracking protocol only."

[[capabilities]]
name = "trackOrder"
description = "Track a customer order by its id (e.g. O-1001): status, carrier and tracking number."
read_only = true
input_schema = {{ type = "object", required = ["orderId"], properties = {{ orderId = {{ type = "string" }} }} }}
output_schema = {{ type = ["object", "null"], required = ["orderStatus", "carrier", "trackingNumber"] }}
binding = {{ type = "agent", url = "http://{desk}", protocol = {protocol:?}, request = {{ type = "REQUEST", action = "trackOrder" }}, message_id = "/messageId", result_pointer = "/tracking" }}
"#,
            desk = d.desk.addr,
            protocol = protocol.display().to_string(),
        ),
    )
    .expect("capabilities file");
    let strict_dir = tempfile::tempdir().expect("tempdir");
    let strict = TestApp::spawn_with(
        &test_settings(strict_dir.path()),
        capabilities_with(&file, &[]),
    )
    .await;
    let (reply, said, _) = ask(&strict.url(), r#"trackOrder {"orderId": "O-1001"}"#).await;
    let error = ErrorInfo::from_message(&reply).expect("an NLIP error");
    assert_eq!(error.code, "binding_failed", "{said}");
    assert!(
        error.message.contains("output_schema does not admit"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("shipped"),
        "the desk's words: {}",
        error.message
    );
    strict.stop().await;
    d.desk.stop().await;
}

#[tokio::test]
async fn a_binding_whose_protocol_is_not_a_protocol_document_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("notes.md"),
        "# Requirements\n\nAsk nicely.\n",
    )
    .expect("write");
    let file = dir.path().join("front.toml");
    std::fs::write(
        &file,
        r#"[agent]
name = "front"
description = "asks another agent"

[[capabilities]]
name = "ask"
description = "asks"
input_schema = { type = "object" }
output_schema = {}
binding = { type = "agent", url = "127.0.0.1:9", protocol = "notes.md" }
"#,
    )
    .expect("capabilities file");
    let settings = test_settings(dir.path());
    let refused =
        parley::startup::Bound::with_capabilities(&settings, capabilities_with(&file, &[]))
            .await
            .expect_err("refused at start");
    let message = parley::error::chain(&refused);
    assert!(
        message.contains("capability `ask`") && message.contains("notes.md"),
        "{message}"
    );
}

#[tokio::test]
async fn a_binding_presents_its_token_to_a_desk_that_lets_only_its_peers_in() {
    // The product desk: anonymous peers may do nothing; the front desk is a peer with a key that
    // may negotiate and use getProductInfo.
    let desk_dir = tempfile::tempdir().expect("tempdir");
    let mut desk_settings = test_settings(desk_dir.path());
    desk_settings.access = Default::default();
    desk_settings.access.anonymous = parley_auth::Grants::default();
    let desk = TestApp::spawn(&desk_settings).await;
    let desk_store = store_of(&desk_settings).await;
    let key = parley_auth::ApiKey::generate().expect("a key");
    let stored = key.stored();
    desk_store
        .add_peer(parley_store::NewPeer {
            id: "front-desk".into(),
            key_id: Some(stored.key_id),
            key_digest: Some(stored.digest),
            grants: serde_json::json!({"negotiate": true, "capabilities": ["getProductInfo"]}),
        })
        .await
        .expect("the front desk is a peer");

    // The front desk's file, its bindings presenting ${PRODUCT_DESK_KEY}.
    let front_dir = tempfile::tempdir().expect("tempdir");
    let examples = repo_root().join("examples");
    let text = std::fs::read_to_string(examples.join("front-desk/capabilities.toml"))
        .expect("the example")
        .replace(
            "url = \"${PRODUCT_DESK_URL}\"",
            "url = \"${PRODUCT_DESK_URL}\"\ntoken = \"${PRODUCT_DESK_KEY}\"",
        )
        .replace(
            "protocol = \"../protocols/",
            &format!("protocol = \"{}/protocols/", examples.display()),
        );
    assert!(text.contains("PRODUCT_DESK_KEY"));
    let file = front_dir.path().join("capabilities.toml");
    std::fs::write(&file, text).expect("written");
    let mut front_settings = test_settings(front_dir.path());
    front_settings.capabilities = None;
    front_settings.sandbox.deadline_ms = 10_000;
    let base = format!("http://{}", desk.addr);
    let revealed = key.reveal();
    let wrong = format!("parley_0123456789abcdef_{}", "A".repeat(43));
    for (presented, answered) in [(revealed.as_str(), true), (wrong.as_str(), false)] {
        let capabilities = capabilities_with(
            &file,
            &[("PRODUCT_DESK_URL", &base), ("PRODUCT_DESK_KEY", presented)],
        );
        let front = TestApp::spawn_with(&front_settings, capabilities).await;
        let (_, said, data) = ask(&front.url(), "How much is product P12345?").await;
        if answered {
            assert_eq!(data.len(), 1, "{said}: {data:?}");
            assert_eq!(data[0]["price"], 1299.99, "{said}");
        } else {
            assert_eq!(data.len(), 1, "{said}: {data:?}");
            assert_eq!(data[0]["code"], "binding_failed", "{data:?}");
            assert!(
                said.contains("unauthenticated"),
                "the desk refused the key: {said}"
            );
        }
        front.stop().await;
    }
    let agreements = desk_store
        .agreements_for_protocol(&ProtocolHash::of(&product_protocol()).to_string())
        .await
        .expect("query");
    assert!(
        agreements.iter().any(|a| a.peer == "peer:front-desk"),
        "the desk's agreement names the front desk's key, not its address: {agreements:?}"
    );
    desk.stop().await;
}
