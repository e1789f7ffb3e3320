//! The seed-002 framing on `GET /anp`, spoken by hand over a real WebSocket: a negotiation in
//! meta frames, application frames with and without the header byte, natural language,
//! 0-RTT on a new connection through the hello, and what a peer gets for frames that are
//! malformed, unsupported, out of order, or for leaving in the middle of a negotiation.

use futures::{SinkExt, StreamExt};
use parley_anp::ProtocolHash;
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::support::{product_protocol, request};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Header bytes of the four protocol types.
const META: u8 = 0x00;
const APPLICATION: u8 = 0x40;
const NATURAL_LANGUAGE: u8 = 0x80;
const VERIFICATION: u8 = 0xC0;

/// A seed-002 connection, as a peer sees it.
struct Peer(Socket);

impl Peer {
    async fn connect(app: &TestApp) -> Peer {
        let (socket, _) = tokio_tungstenite::connect_async(app.ws("/anp"))
            .await
            .expect("connect to /anp");
        Peer(socket)
    }

    async fn send_raw(&mut self, bytes: Vec<u8>) {
        self.0.send(Ws::Binary(bytes.into())).await.expect("send");
    }

    async fn send(&mut self, header: u8, value: &Value) {
        let mut bytes = vec![header];
        bytes.extend(serde_json::to_vec(value).expect("json"));
        self.send_raw(bytes).await;
    }

    /// The next frame's bytes.
    async fn recv_raw(&mut self) -> Vec<u8> {
        loop {
            match self.0.next().await.expect("a frame").expect("no error") {
                Ws::Binary(bytes) => return bytes.to_vec(),
                Ws::Ping(_) | Ws::Pong(_) => continue,
                other => panic!("expected a binary frame, got {other:?}"),
            }
        }
    }

    /// The next frame: its header byte and its JSON.
    async fn recv(&mut self) -> (u8, Value) {
        let bytes = self.recv_raw().await;
        let value = serde_json::from_slice(&bytes[1..]).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&bytes));
        });
        (bytes[0], value)
    }

    /// The next frame, which must be a meta frame.
    async fn recv_meta(&mut self) -> Value {
        let (header, value) = self.recv().await;
        assert_eq!(header, META, "{value}");
        value
    }
}

fn source_hello(hashes: &[ProtocolHash]) -> Value {
    let mut hello = json!({
        "version": "1.0",
        "type": "sourceHello",
        "metaProtocol": {"version": "1.0", "supportedCapabilities": ["naturalLanguageNegotiation"]}
    });
    if let Some(first) = hashes.first() {
        hello["metaProtocol"]["protocolHash"] = json!(first.to_hex());
    }
    hello
}

fn proposal(seq: u64, text: &str) -> Value {
    json!({"action": "protocolNegotiation", "sequenceId": seq,
           "candidateProtocols": text, "status": "negotiating"})
}

/// Negotiates the product protocol on `peer` in meta frames, to the end.
async fn negotiate_product(peer: &mut Peer) -> ProtocolHash {
    let text = product_protocol();
    peer.send(META, &source_hello(&[])).await;
    let hello = peer.recv_meta().await;
    assert_eq!(hello["type"], "destinationHello");
    assert!(hello["metaProtocol"].get("selectedProtocol").is_none());
    // It announces what it implements, and the verification protocol is not among it.
    let capabilities = hello["metaProtocol"]["supportedCapabilities"].to_string();
    assert!(
        capabilities.contains("naturalLanguageNegotiation"),
        "{capabilities}"
    );
    assert!(
        !capabilities.contains("verificationProtocol"),
        "{capabilities}"
    );

    peer.send(META, &proposal(0, &text)).await;
    let accepted = peer.recv_meta().await;
    assert_eq!(accepted["action"], "protocolNegotiation");
    assert_eq!(accepted["status"], "accepted", "{accepted}");
    assert_eq!(accepted["sequenceId"], 1);
    let generated = peer.recv_meta().await;
    assert_eq!(
        generated,
        json!({"action": "codeGeneration", "status": "generated"})
    );
    peer.send(
        META,
        &json!({"action": "codeGeneration", "status": "generated"}),
    )
    .await;
    // That needs no answer; a request answered after it shows it was handled.
    peer.send(APPLICATION, &request("ready", "P12345")).await;
    let (header, answer) = peer.recv().await;
    assert_eq!(header, APPLICATION, "{answer}");
    assert_eq!(answer["status"]["code"], 200, "{answer}");
    ProtocolHash::of(&text)
}

#[tokio::test]
async fn a_negotiation_in_meta_frames_then_application_frames_in_both_forms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut peer = Peer::connect(&app).await;
    negotiate_product(&mut peer).await;

    peer.send(APPLICATION, &request("m1", "P12345")).await;
    let (header, answer) = peer.recv().await;
    assert_eq!(header, APPLICATION, "answered in kind: {answer}");
    assert_eq!(answer["messageId"], "m1");
    assert_eq!(answer["status"]["code"], 200);
    assert_eq!(answer["productInfo"]["productId"], "P12345");

    // Bare JSON, as AgentConnect's generated code sends it, is answered bare.
    peer.send_raw(serde_json::to_vec(&request("m2", "P99999")).expect("json"))
        .await;
    let bytes = peer.recv_raw().await;
    assert_eq!(bytes[0], b'{', "{}", String::from_utf8_lossy(&bytes));
    let answer: Value = serde_json::from_slice(&bytes).expect("bare JSON");
    assert_eq!(answer["messageId"], "m2");
    assert_eq!(answer["status"]["code"], 404);

    // A request outside the protocol's schema is an error in kind; the connection goes on.
    peer.send_raw(br#"{"messageId": "m3", "productId": 42}"#.to_vec())
        .await;
    let bytes = peer.recv_raw().await;
    let error: Value = serde_json::from_slice(&bytes).expect("bare JSON");
    assert_eq!(error["error"]["code"], "invalid_request", "{error}");

    // Natural language on the same connection goes to the reasoner.
    let mut nl = vec![NATURAL_LANGUAGE];
    nl.extend_from_slice(b"How much is product P12345?");
    peer.send_raw(nl).await;
    let bytes = peer.recv_raw().await;
    assert_eq!(bytes[0], NATURAL_LANGUAGE);
    let text = String::from_utf8(bytes[1..].to_vec()).expect("UTF-8");
    assert!(text.contains("1299.99"), "{text}");
    app.stop().await;
}

#[tokio::test]
async fn a_known_protocol_is_served_at_zero_rtt_on_a_new_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut first = Peer::connect(&app).await;
    let hash = negotiate_product(&mut first).await;
    drop(first);

    let mut peer = Peer::connect(&app).await;
    // Before any hello, no protocol applies on this connection.
    peer.send_raw(serde_json::to_vec(&request("m0", "P12345")).expect("json"))
        .await;
    let error: Value = serde_json::from_slice(&peer.recv_raw().await).expect("bare JSON");
    assert_eq!(error["error"]["code"], "no_protocol", "{error}");

    peer.send(META, &source_hello(&[hash])).await;
    let hello = peer.recv_meta().await;
    assert_eq!(hello["type"], "destinationHello");
    assert_eq!(hello["metaProtocol"]["selectedProtocol"], hash.to_hex());
    peer.send_raw(serde_json::to_vec(&request("m1", "P12345")).expect("json"))
        .await;
    let answer: Value = serde_json::from_slice(&peer.recv_raw().await).expect("bare JSON");
    assert_eq!(answer["status"]["code"], 200, "{answer}");
    app.stop().await;
}

#[tokio::test]
async fn a_requester_shaped_like_agentconnect_negotiates_by_its_own_counting() {
    // AgentConnect's requester counts from 1 and echoes the provider's `accepted` with its own
    // last id; its hello is not sent at all, and its application frames are bare JSON.
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut peer = Peer::connect(&app).await;
    let text = product_protocol();
    peer.send(META, &proposal(1, &text)).await;
    let accepted = peer.recv_meta().await;
    assert_eq!(accepted["status"], "accepted", "{accepted}");
    assert_eq!(accepted["sequenceId"], 2);
    assert_eq!(peer.recv_meta().await["action"], "codeGeneration");
    let echo = json!({"action": "protocolNegotiation", "sequenceId": 1,
                      "candidateProtocols": text, "status": "accepted"});
    peer.send(META, &echo).await;
    peer.send(
        META,
        &json!({"action": "codeGeneration", "status": "generated"}),
    )
    .await;
    // Neither needs an answer: the next frame answers the request.
    peer.send_raw(serde_json::to_vec(&request("ac1", "P12345")).expect("json"))
        .await;
    let answer: Value = serde_json::from_slice(&peer.recv_raw().await).expect("bare JSON");
    assert_eq!(answer["messageId"], "ac1", "{answer}");
    assert_eq!(answer["status"]["code"], 200, "{answer}");
    app.stop().await;
}

#[tokio::test]
async fn a_rejection_echoed_by_the_peer_needs_no_answer() {
    // This test's own log (its server runs on its thread): what the provider records.
    let logs = crate::agent::logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&crate::requester::orders_only_settings(dir.path())).await;
    let mut peer = Peer::connect(&app).await;
    peer.send(META, &proposal(1, &product_protocol())).await;
    let rejected = peer.recv_meta().await;
    assert_eq!(rejected["status"], "rejected", "{rejected}");
    assert_eq!(rejected["sequenceId"], 2);
    // AgentConnect's echo of the end, then something else: the next frame answers that.
    let echo = json!({"action": "protocolNegotiation", "sequenceId": 1,
                      "candidateProtocols": "", "status": "rejected"});
    peer.send(META, &echo).await;
    let mut nl = vec![NATURAL_LANGUAGE];
    nl.extend_from_slice(b"status of order O-1001");
    peer.send_raw(nl).await;
    let bytes = peer.recv_raw().await;
    assert_eq!(
        bytes[0],
        NATURAL_LANGUAGE,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    app.stop().await;
    // The echo went to the negotiation it ends: no second one was started (and rejected) by it.
    let log = String::from_utf8(logs.lock().expect("log").clone()).expect("UTF-8");
    assert_eq!(log.matches("negotiation started").count(), 1, "{log}");
    assert_eq!(log.matches("negotiation ended").count(), 1, "{log}");
}

#[tokio::test]
async fn a_hello_offers_in_the_seeds_fields_and_an_unknown_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut first = Peer::connect(&app).await;
    let hash = negotiate_product(&mut first).await;
    drop(first);

    // `candidateProtocols` alone, with a URI the provider does not know before the hash.
    let mut peer = Peer::connect(&app).await;
    let mut hello = source_hello(&[]);
    hello["metaProtocol"]["candidateProtocols"] =
        json!(["https://example.com/protocol/1.0", hash.to_hex()]);
    peer.send(META, &hello).await;
    let answer = peer.recv_meta().await;
    assert_eq!(answer["metaProtocol"]["selectedProtocol"], hash.to_hex());

    // A meta-protocol of another major version is refused, and nothing is selected.
    let mut peer = Peer::connect(&app).await;
    let mut hello = source_hello(&[hash]);
    hello["metaProtocol"]["version"] = json!("2.0");
    peer.send(META, &hello).await;
    let answer = peer.recv_meta().await;
    assert_eq!(answer["type"], "destinationHello");
    assert_eq!(answer["metaProtocol"]["version"], "1.0");
    assert!(answer["metaProtocol"].get("selectedProtocol").is_none());
    let error = peer.recv_meta().await;
    assert_eq!(error["error"]["code"], "unsupported_version", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("2.0"),
        "{error}"
    );
    peer.send_raw(serde_json::to_vec(&request("v1", "P12345")).expect("json"))
        .await;
    let refused: Value = serde_json::from_slice(&peer.recv_raw().await).expect("bare JSON");
    assert_eq!(refused["error"]["code"], "no_protocol", "{refused}");
    app.stop().await;
}

#[tokio::test]
async fn malformed_and_unsupported_frames_get_error_frames_on_a_connection_that_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut peer = Peer::connect(&app).await;

    let cases: [(Vec<u8>, u8, &str); 5] = [
        (Vec::new(), META, "malformed_frame"),
        (vec![META, b'n', b'o', b'{'], META, "malformed_json"),
        (vec![META, b'[', b']'], META, "invalid_message"),
        (
            vec![VERIFICATION, b'{', b'}'],
            VERIFICATION,
            "unsupported_protocol_type",
        ),
        (
            vec![NATURAL_LANGUAGE, 0xff, 0xfe],
            NATURAL_LANGUAGE,
            "malformed_frame",
        ),
    ];
    for (bytes, header, code) in cases {
        peer.send_raw(bytes).await;
        let (got, error) = peer.recv().await;
        assert_eq!(got, header, "{error}");
        assert_eq!(error["error"]["code"], code, "{error}");
    }
    // A meta message that is no meta-protocol message ends the negotiation it would start.
    peer.send(META, &json!({"action": "dance", "sequenceId": 0}))
        .await;
    let rejected = peer.recv_meta().await;
    assert_eq!(rejected["status"], "rejected", "{rejected}");
    let error = peer.recv_meta().await;
    assert_eq!(error["error"]["code"], "invalid_message", "{error}");
    // Out of order: a sequence that skips ahead.
    peer.send(META, &proposal(7, &product_protocol())).await;
    let rejected = peer.recv_meta().await;
    assert_eq!(rejected["status"], "rejected", "{rejected}");
    let error = peer.recv_meta().await;
    assert_eq!(error["error"]["code"], "sequence_error", "{error}");

    // The connection still negotiates.
    negotiate_product(&mut peer).await;
    app.stop().await;
}

#[tokio::test]
async fn a_peer_that_leaves_mid_negotiation_ends_it_and_the_server_goes_on() {
    crate::agent::logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut peer = Peer::connect(&app).await;
    // An accepted proposal: the provider waits for the peer's codeGeneration, which never comes.
    peer.send(META, &proposal(0, &product_protocol())).await;
    assert_eq!(peer.recv_meta().await["status"], "accepted");
    assert_eq!(peer.recv_meta().await["action"], "codeGeneration");
    peer.0.close(None).await.expect("close");
    drop(peer);

    // Another peer negotiates on a new connection meanwhile.
    let mut other = Peer::connect(&app).await;
    negotiate_product(&mut other).await;
    other.send(APPLICATION, &request("m1", "P12345")).await;
    assert_eq!(other.recv().await.1["status"]["code"], 200);

    let log = crate::agentconnect::logged(&["negotiation ended", "outcome=\"timeout\""]).await;
    assert!(log.contains("the peer left an open negotiation"), "{log}");
    // The other peer leaves too, after its negotiation was done: nothing of it ends. The server
    // answers its close once it handled it.
    other.0.close(None).await.expect("close");
    while let Some(Ok(_)) = other.0.next().await {}
    app.stop().await;
    let log = String::from_utf8(crate::agent::logs().lock().expect("log").clone()).expect("UTF-8");
    assert_eq!(
        log.matches("the peer left an open negotiation").count(),
        1,
        "{log}"
    );
}
