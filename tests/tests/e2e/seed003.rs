//! The seed-003 example (examples/seed003): a provider serving the weather-station capabilities,
//! a requester negotiating the station-reading protocol, whose messages are seed-003 envelopes
//! (`header` + `body`), over real NLIP with the built-in reasoner; then QUERY messages answered
//! by a RESPONSE or an ERROR whose `reply_to` is the query's `id`.

use parley::negotiation::requester::Outcome;
use parley_anp::ProtocolHash;
use parley_tests::{TestApp, repo_root, test_settings};
use serde_json::{Value, json};

use crate::support::new_requester;

fn station_protocol() -> String {
    std::fs::read_to_string(repo_root().join("examples/seed003/protocols/station-reading.md"))
        .expect("seed-003 protocol")
}

/// A seed-003 QUERY for a station's reading.
fn query(id: &str, conversation: &str, body: Value) -> Value {
    json!({
        "header": {
            "version": "1.0",
            "sender": "agent://requester",
            "receiver": "agent://fjord-weather",
            "type": "QUERY",
            "id": id,
            "timestamp": "2026-11-27T10:00:00Z",
            "content_type": "application/json",
            "conversation_id": conversation
        },
        "body": body
    })
}

/// The reply's header links it to `request` as seed 003 says: `reply_to` is the query's `id`,
/// same conversation, sender and receiver swapped.
fn assert_linked(request: &Value, answer: &Value, kind: &str) {
    let (asked, header) = (&request["header"], &answer["header"]);
    assert_eq!(header["reply_to"], asked["id"], "{answer}");
    assert_eq!(
        header["conversation_id"], asked["conversation_id"],
        "{answer}"
    );
    assert_eq!(header["sender"], asked["receiver"], "{answer}");
    assert_eq!(header["receiver"], asked["sender"], "{answer}");
    assert_eq!(header["version"], "1.0", "{answer}");
    assert_eq!(header["content_type"], "application/json", "{answer}");
    assert_eq!(header["type"], kind, "{answer}");
}

#[tokio::test]
async fn negotiates_and_queries_the_seed003_station_protocol() {
    let provider_dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(provider_dir.path());
    settings.capabilities = Some(repo_root().join("examples/seed003/capabilities.toml"));
    let provider = TestApp::spawn(&settings).await;

    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let text = station_protocol();
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    assert_eq!(negotiated.hash, ProtocolHash::of(&text));
    let hash = negotiated.hash;

    // Found: a RESPONSE with the station's latest reading, maintenance fields left out.
    let asked = query("q-100", "conv-7", json!({"stationId": "WS-102"}));
    let found = requester
        .call(&provider.url(), &hash, asked.clone())
        .await
        .expect("call");
    assert!(found.renegotiated.is_none());
    let answer = &found.answer;
    assert_linked(&asked, answer, "RESPONSE");
    assert_eq!(answer["body"]["status"]["code"], 200, "{answer}");
    let reading = &answer["body"]["reading"];
    assert_eq!(reading["stationId"], "WS-102");
    assert_eq!(reading["name"], "Flåm Valley");
    assert_eq!(reading["temperatureC"], -1.5);
    assert_eq!(reading["humidity"], 74);
    assert!(reading.get("technician").is_none(), "{reading}");

    // Not found: an ERROR linked to its query, status 404, no reading.
    let asked = query("q-101", "conv-7", json!({"stationId": "WS-999"}));
    let missing = requester
        .call(&provider.url(), &hash, asked.clone())
        .await
        .expect("call");
    assert_linked(&asked, &missing.answer, "ERROR");
    assert_eq!(missing.answer["body"]["status"]["code"], 404);
    assert_eq!(missing.answer["body"]["reading"], Value::Null);

    // A query outside the request schema is refused before it is sent.
    match requester
        .call(&provider.url(), &hash, query("q-102", "conv-7", json!({})))
        .await
    {
        Err(parley::negotiation::requester::RequesterError::InvalidRequest(why)) => {
            assert!(why.contains("stationId"), "{why}");
        }
        other => panic!("a query without a station id: {other:?}"),
    }
    provider.stop().await;
}
