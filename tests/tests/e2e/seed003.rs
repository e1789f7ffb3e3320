//! The seed-003 example (examples/seed003): a provider serving the weather-station capabilities,
//! a requester negotiating its protocols, whose messages are seed-003 envelopes (`header` +
//! `body`), over real NLIP with the built-in reasoner; then QUERY messages answered by a RESPONSE
//! or an ERROR, and INFORM messages answered by an ACKNOWLEDGE or an ERROR, each linked to its
//! request by `reply_to`. The network's log, which the INFORM's capability writes to, is a second
//! Parley agent's upload end-point.

use parley::config::Settings;
use parley::negotiation::requester::{Outcome, Requester};
use parley_anp::ProtocolHash;
use parley_tests::{TestApp, capabilities_with, repo_root, test_settings};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::new_requester;

fn seed003_protocol(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("examples/seed003/protocols").join(name))
        .expect("seed-003 protocol")
}

/// The weather network on the seed-003 capabilities, its notes going to the log at `log_url`.
async fn weather_network(settings: &Settings, log_url: &str) -> TestApp {
    let file = repo_root().join("examples/seed003/capabilities.toml");
    let capabilities = capabilities_with(&file, &[("STATION_LOG_URL", log_url)]);
    TestApp::spawn_with(settings, capabilities).await
}

/// A seed-003 QUERY for a station's reading.
fn query(id: &str, conversation: &str, body: Value) -> Value {
    message("QUERY", id, conversation, body)
}

/// A seed-003 message of `kind` from the requester to the network.
fn message(kind: &str, id: &str, conversation: &str, body: Value) -> Value {
    json!({
        "header": {
            "version": "1.0",
            "sender": "agent://requester",
            "receiver": "agent://fjord-weather",
            "type": kind,
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
    // Queries never write to the log: nothing listens at its address.
    let provider = weather_network(&test_settings(provider_dir.path()), "http://127.0.0.1:9").await;

    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let text = seed003_protocol("station-reading.md");
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

/// The record id a content-addressed log gives `note` about `station` as the `http` binding
/// sends it: the SHA-256 of its JSON body, fields in the binding's `body` order.
fn record_id(station: &str, note: &str) -> String {
    let body = serde_json::to_vec(&json!({"stationId": station, "note": note})).expect("json");
    hex::encode(Sha256::digest(body))
}

/// Sends an INFORM with `id` and `body` through protocol `hash`; returns the answer, checked to
/// be a `kind` message linked to the INFORM.
async fn inform(
    requester: &Requester,
    url: &str,
    hash: &ProtocolHash,
    id: &str,
    body: Value,
    kind: &str,
) -> Value {
    let sent = message("INFORM", id, "conv-12", body);
    let called = requester.call(url, hash, sent.clone()).await.expect("call");
    assert_linked(&sent, &called.answer, kind);
    called.answer
}

/// What the log holds under `id`: its HTTP status and JSON body.
async fn logged(log: &TestApp, id: &str) -> (u16, Value) {
    let response = reqwest::get(format!("http://{}/uploads/{id}", log.upload_addr))
        .await
        .expect("the log answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn negotiates_and_informs_with_the_seed003_note_protocol() {
    let log_dir = tempfile::tempdir().expect("tempdir");
    let mut log_settings = test_settings(log_dir.path());
    log_settings.capabilities = None;
    let log = TestApp::spawn(&log_settings).await;
    let provider_dir = tempfile::tempdir().expect("tempdir");
    let log_url = format!("http://{}", log.upload_addr);
    let provider = weather_network(&test_settings(provider_dir.path()), &log_url).await;

    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let text = seed003_protocol("station-note.md");
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
    let hash = negotiated.hash;
    // Verification answered the log from the test cases' fixtures: their notes are not in it.
    for (station, note) in [
        (
            "WS-103",
            "Anemometer iced up; wind readings unreliable until it thaws.",
        ),
        ("WS-101", "Rain gauge cleaned."),
    ] {
        let (status, _) = logged(&log, &record_id(station, note)).await;
        assert_eq!(status, 404, "verification recorded {note:?}");
    }

    // An INFORM is recorded and ACKNOWLEDGEd, linked to it, with the record's id.
    let url = provider.url();
    let note = "Mast inspected after the storm; no damage.";
    let body = json!({"stationId": "WS-102", "note": note});
    let answer = inform(&requester, &url, &hash, "inf-7", body, "ACKNOWLEDGE").await;
    assert_eq!(answer["body"]["status"]["code"], 200, "{answer}");
    let id = answer["body"]["record"]["id"]
        .as_str()
        .expect("a record id");
    assert_eq!(id, record_id("WS-102", note), "{answer}");
    let (status, stored) = logged(&log, id).await;
    assert_eq!(status, 200);
    assert_eq!(stored, json!({"stationId": "WS-102", "note": note}));

    // A station id the capability refuses: an ERROR with status 400.
    let body = json!({"stationId": "station 2", "note": note});
    let refused = inform(&requester, &url, &hash, "inf-8", body, "ERROR").await;
    assert_eq!(refused["body"]["status"]["code"], 400);
    assert_eq!(refused["body"]["record"], Value::Null);

    // The log is down: an ERROR with status 500.
    log.stop().await;
    let body = json!({"stationId": "WS-101", "note": "Battery replaced."});
    let failed = inform(&requester, &url, &hash, "inf-9", body, "ERROR").await;
    assert_eq!(failed["body"]["status"]["code"], 500);
    assert_eq!(failed["body"]["record"], Value::Null);
    provider.stop().await;
}
