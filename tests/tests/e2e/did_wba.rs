//! ANP DID-WBA authentication over real sockets: DID documents and keys made at run time with
//! the `anp` crate and published by a local HTTP server (fetched over plain http, as
//! `resolve_http_hosts` allows), a Parley server with `[access.did_wba]` and a peers file naming
//! one DID with the right to negotiate. A signed request is that peer's (on `POST /nlip`, a
//! WebSocket upgrade and `POST /anp/rpc`), so is a legacy `DIDWba` header; a replay, another
//! key's signature, an unknown DID and a tampered body are 401 `unauthenticated`, recorded in
//! the audit log with the scheme `did-wba`; a DID without an entry has the anonymous grants.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use axum::response::IntoResponse as _;
use parley::client::{Credential, DidSigner};
use parley::negotiation::anp::AnpOptions;
use parley::negotiation::requester::{Outcome, Requester, Wire};
use parley_auth::did_wba::anp::PrivateKeyMaterial;
use parley_auth::did_wba::anp::authentication::{
    DidDocumentOptions, create_did_wba_document, generate_auth_header,
    generate_http_signature_headers,
};
use parley_auth::did_wba::anp::proof::{
    Rfc9421OriginProofGenerationOptions, generate_rfc9421_origin_proof,
};
use parley_nlip::{ErrorInfo, Message};
use parley_store::AuditFilter;
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};

/// A DID, its document and its key (also as PEM, as a client's key file holds it).
struct Identity {
    did: String,
    document: Value,
    key: PrivateKeyMaterial,
    pem: String,
}

/// Publishes DID documents at the paths their DIDs name; anything else is 404.
#[derive(Clone, Default)]
struct DidHost {
    documents: Arc<RwLock<HashMap<String, Value>>>,
    port: u16,
}

impl DidHost {
    async fn start() -> DidHost {
        let documents: Arc<RwLock<HashMap<String, Value>>> = Arc::default();
        let published = Arc::clone(&documents);
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let published = Arc::clone(&published);
            async move {
                let found = published.read().expect("lock").get(uri.path()).cloned();
                match found {
                    Some(document) => axum::Json(document).into_response(),
                    None => axum::http::StatusCode::NOT_FOUND.into_response(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        DidHost { documents, port }
    }

    /// A new identity under `/agents/<name>/`, published when `publish`.
    fn identity(&self, name: &str, publish: bool) -> Identity {
        let options = DidDocumentOptions {
            port: Some(self.port),
            path_segments: vec!["agents".into(), name.into()],
            ..DidDocumentOptions::default()
        };
        let bundle = create_did_wba_document("localhost", options).expect("a DID document");
        let pem = bundle.keys["key-1"].private_key_pem.clone();
        let key = PrivateKeyMaterial::from_pem(&pem).expect("its key");
        let did = bundle.did().expect("an id").to_owned();
        if publish {
            let path: Vec<&str> = did.split(':').skip(3).collect();
            let path = format!("/{}/did.json", path.join("/"));
            let mut documents = self.documents.write().expect("lock");
            documents.insert(path, bundle.did_document.clone());
        }
        Identity {
            did,
            document: bundle.did_document,
            key,
            pem,
        }
    }
}

/// The headers of an HTTP Message Signature by `key` (as `who`'s document names it) over a
/// request to `url` with `body`.
fn signature(
    who: &Identity,
    key: &PrivateKeyMaterial,
    method: &str,
    url: &str,
    body: Option<&[u8]>,
) -> BTreeMap<String, String> {
    generate_http_signature_headers(
        &who.document,
        url,
        method,
        key,
        None,
        body,
        Default::default(),
    )
    .expect("signed")
}

/// POSTs `body` to `url` with `headers`: the status, the answer and its NLIP error.
async fn post(
    url: &str,
    headers: &BTreeMap<String, String>,
    body: &[u8],
) -> (u16, Value, Option<ErrorInfo>) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let answer: Value = response.json().await.expect("JSON");
    let error = parley_nlip::from_json_value(&answer)
        .ok()
        .and_then(|m| ErrorInfo::from_message(&m));
    (status, answer, error)
}

/// A signed POST of `body` by `who` to `url`.
async fn signed_post(who: &Identity, url: &str, body: &[u8]) -> (u16, Value, Option<ErrorInfo>) {
    post(
        url,
        &signature(who, &who.key, "POST", url, Some(body)),
        body,
    )
    .await
}

fn hello() -> Vec<u8> {
    let hello = parley_anp::MetaMessage::source_hello(parley_anp::MetaProtocolInfo::parley([]));
    let message = parley::negotiation::nlip::wrap("hello", &[hello]);
    serde_json::to_vec(&parley_nlip::to_json_value(&message)).expect("JSON")
}

fn text() -> Vec<u8> {
    serde_json::to_vec(&parley_nlip::to_json_value(&Message::text(
        "english", "hello",
    )))
    .expect("JSON")
}

fn assert_unauthenticated(what: &str, (status, answer, error): (u16, Value, Option<ErrorInfo>)) {
    assert_eq!(status, 401, "{what}: {answer}");
    assert_eq!(
        error.expect("an NLIP error").code,
        "unauthenticated",
        "{what}"
    );
}

/// A server answering as `127.0.0.1` with DID-WBA on, whose peers file lets `alice` negotiate
/// protocols over `getProductInfo`; anonymous peers may only talk.
fn settings_with(dir: &std::path::Path, alice: &Identity) -> parley::config::Settings {
    let peers = dir.join("peers.toml");
    std::fs::write(
        &peers,
        format!(
            "[[peers]]\nid = \"alice\"\ndid = \"{}\"\nnegotiate = true\ntalk = true\ncapabilities = [\"getProductInfo\"]\n",
            alice.did
        ),
    )
    .expect("peers file");
    let mut settings = test_settings(dir);
    settings.access = Default::default();
    settings.access.peers_file = Some(peers);
    settings.access.did_wba.enabled = true;
    settings.access.did_wba.allowed_domains = vec!["127.0.0.1".into()];
    settings.access.did_wba.resolve_http_hosts = vec!["localhost".into()];
    settings
}

/// The failed authentications in the audit log of the server with `settings`.
async fn failed_authentications(
    settings: &parley::config::Settings,
) -> Vec<parley_store::AuditEvent> {
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the store");
    store
        .list_audit(AuditFilter {
            action: Some("authenticate".into()),
            limit: parley_store::MAX_PAGE,
            ..AuditFilter::default()
        })
        .await
        .expect("the audit log")
}

#[tokio::test]
async fn did_wba_signatures_name_their_peer_and_forgeries_and_replays_are_refused() {
    let host = DidHost::start().await;
    let alice = host.identity("alice", true);
    let carol = host.identity("carol", true);
    let mallory = host.identity("mallory", false);

    let dir = tempfile::tempdir().expect("tempdir");
    let settings = settings_with(dir.path(), &alice);
    let app = TestApp::spawn(&settings).await;
    let url = app.url();

    // Anonymous peers talk only; alice's signature lets her negotiate.
    let (status, answer, error) = post(&url, &BTreeMap::new(), &hello()).await;
    assert_eq!(status, 401, "anonymous may not negotiate: {answer}");
    assert_eq!(
        error.expect("an NLIP error").code,
        "authentication_required"
    );
    assert!(
        answer.to_string().contains("did-wba"),
        "the request for authentication names the scheme: {answer}"
    );
    let (status, answer, _) = signed_post(&alice, &url, &hello()).await;
    assert_eq!(status, 200, "alice may negotiate: {answer}");

    // The legacy header signs the domain.
    let legacy = generate_auth_header(&alice.document, "127.0.0.1", &alice.key, "1.1")
        .expect("a legacy header");
    let header = BTreeMap::from([("authorization".to_owned(), legacy)]);
    let (status, answer, _) = post(&url, &header, &hello()).await;
    assert_eq!(status, 200, "the legacy header is alice's too: {answer}");
    assert_unauthenticated(
        "a replayed legacy header",
        post(&url, &header, &hello()).await,
    );

    // Inside the message (the NLIP authentication exchange): the legacy credential in an
    // authentication token opens a session of alice's; a replay of it is refused.
    let legacy = generate_auth_header(&alice.document, "127.0.0.1", &alice.key, "1.1")
        .expect("a legacy header");
    let hello_with = |credential: &str| {
        let hello = parley_anp::MetaMessage::source_hello(parley_anp::MetaProtocolInfo::parley([]));
        let message = parley::negotiation::nlip::wrap("hello", &[hello]).with_submessage(
            parley_nlip::Submessage::new(parley_nlip::Format::Token, "authentication", credential),
        );
        serde_json::to_vec(&parley_nlip::to_json_value(&message)).expect("JSON")
    };
    let (status, answer, _) = post(&url, &BTreeMap::new(), &hello_with(&legacy)).await;
    assert_eq!(status, 200, "alice, inside the message: {answer}");
    assert!(
        answer.to_string().contains("authentication_parley"),
        "a session token of the agent's own: {answer}"
    );
    assert_unauthenticated(
        "a replayed credential inside the message",
        post(&url, &BTreeMap::new(), &hello_with(&legacy)).await,
    );

    // A replay, another key, an unknown DID, a tampered body.
    let body = hello();
    let signed = signature(&alice, &alice.key, "POST", &url, Some(&body));
    assert_eq!(post(&url, &signed, &body).await.0, 200);
    assert_unauthenticated("a replay", post(&url, &signed, &body).await);
    let forged = signature(&alice, &carol.key, "POST", &url, Some(&body));
    assert_unauthenticated("another key", post(&url, &forged, &body).await);
    assert_unauthenticated("an unknown DID", signed_post(&mallory, &url, &body).await);
    let tampered = signature(&alice, &alice.key, "POST", &url, Some(&text()));
    assert_unauthenticated("a tampered body", post(&url, &tampered, &body).await);

    // A DID without an entry is a named peer with the anonymous grants.
    let (status, answer, _) = signed_post(&carol, &url, &text()).await;
    assert_eq!(status, 200, "carol may talk: {answer}");
    let (status, answer, error) = signed_post(&carol, &url, &hello()).await;
    assert_eq!(status, 403, "carol may not negotiate: {answer}");
    assert_eq!(error.expect("an NLIP error").code, "forbidden");

    // A WebSocket upgrade is signed as a GET of its http URL; a replay is refused before it.
    {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let ws_url = app.http("/nlip/ws");
        let headers = signature(&alice, &alice.key, "GET", &ws_url, None);
        let upgrade = || {
            let mut request = app.ws("/nlip/ws").into_client_request().expect("a request");
            for (name, value) in &headers {
                let name = axum::http::HeaderName::from_bytes(name.as_bytes()).expect("a name");
                request
                    .headers_mut()
                    .insert(name, value.parse().expect("a value"));
            }
            request
        };
        let (socket, _) = tokio_tungstenite::connect_async(upgrade())
            .await
            .expect("upgraded");
        drop(socket);
        match tokio_tungstenite::connect_async(upgrade()).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status().as_u16(), 401)
            }
            other => panic!("a replayed upgrade: {:?}", other.map(|_| ())),
        }
    }

    // `POST /anp/rpc` checks the body the signature covers.
    let rpc = app.http("/anp/rpc");
    let call = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "anp.unknown"}))
        .expect("JSON");
    let (status, answer, _) = signed_post(&alice, &rpc, &call).await;
    assert_eq!(status, 200, "{answer}");
    let other = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 2, "method": "anp.unknown"}))
        .expect("JSON");
    let tampered = signature(&alice, &alice.key, "POST", &rpc, Some(&call));
    let (status, answer, _) = post(&rpc, &tampered, &other).await;
    assert_eq!(status, 401, "{answer}");

    // Every refusal is in the audit log, as a failed `did-wba` authentication.
    let failed = failed_authentications(&settings).await;
    assert!(failed.len() >= 7, "{failed:?}");
    for event in &failed {
        // A credential carried inside a message fails as the in-message scheme.
        assert!(
            matches!(event.subject.as_str(), "did-wba" | "nlip-token") && event.outcome == "failed",
            "{event:?}"
        );
    }
    let replay = |e: &&parley_store::AuditEvent| {
        let detail = e.detail.as_ref().map(Value::to_string).unwrap_or_default();
        detail
            .to_lowercase()
            .contains("nonce has already been used")
    };
    assert!(
        failed.iter().any(|e| replay(&e)),
        "a replay is named: {failed:?}"
    );
    app.stop().await;
}

/// An `anp.negotiate` request (a structured selection of a protocol nobody agreed), by `who`
/// with an origin proof signed by `key` for the agent `target`, when `who` is given.
fn selection(who: Option<(&Identity, &PrivateKeyMaterial)>, target: &str) -> Vec<u8> {
    let mut meta = json!({
        "profile": parley_anp::rpc::PROFILE,
        "target": {"kind": "agent", "did": target},
    });
    let body = json!({
        "mode": "structured_selection",
        "intent": {"summary": "product information"},
        "candidateProtocols": [format!("sha256:{}", "ab".repeat(32))],
    });
    let mut params = json!({});
    if let Some((who, key)) = who {
        meta["sender_did"] = json!(who.did);
        let options = Rfc9421OriginProofGenerationOptions {
            nonce: Some(format!("{:?}", std::time::SystemTime::now())),
            ..Rfc9421OriginProofGenerationOptions::default()
        };
        let keyid = format!("{}#key-1", who.did);
        let proof =
            generate_rfc9421_origin_proof("anp.negotiate", &meta, &body, key, &keyid, options)
                .expect("an origin proof");
        params["auth"] = json!({"origin_proof": proof});
    }
    params["meta"] = meta;
    params["body"] = body;
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "anp.negotiate", "params": params});
    serde_json::to_vec(&request).expect("JSON")
}

#[tokio::test]
async fn an_origin_proof_names_the_sender_of_an_anp_negotiate_request() {
    let host = DidHost::start().await;
    let alice = host.identity("alice", true);
    let carol = host.identity("carol", true);
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = settings_with(dir.path(), &alice);
    let app = TestApp::spawn(&settings).await;
    let rpc = app.http("/anp/rpc");
    let here = "did:wba:127.0.0.1:agents:parley";
    let none = BTreeMap::new();

    // Anonymous callers may not negotiate (1607); alice's proof lets her: her selection gets
    // as far as finding no such protocol (1601).
    let (status, answer, _) = post(&rpc, &none, &selection(None, here)).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(1607)),
        "{answer}"
    );
    let request = selection(Some((&alice, &alice.key)), here);
    let (status, answer, _) = post(&rpc, &none, &request).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(1601)),
        "{answer}"
    );

    // A replay, another key, a proof for another agent: 401, never anonymous.
    let refused = |what: &str, (status, answer, _): (u16, Value, Option<ErrorInfo>)| {
        assert_eq!(status, 401, "{what}: {answer}");
        assert_eq!(answer["error"]["data"]["code"], "unauthenticated", "{what}");
    };
    refused("a replay", post(&rpc, &none, &request).await);
    let forged = selection(Some((&alice, &carol.key)), here);
    refused("another key", post(&rpc, &none, &forged).await);
    let elsewhere = selection(Some((&alice, &alice.key)), "did:wba:agent.example:agents:x");
    refused("another agent", post(&rpc, &none, &elsewhere).await);

    // A DID without an entry holds the anonymous grants.
    let (_, answer, _) = post(&rpc, &none, &selection(Some((&carol, &carol.key)), here)).await;
    assert_eq!(answer["error"]["code"].as_i64(), Some(1607), "{answer}");

    let failed = failed_authentications(&settings).await;
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed.iter().all(|e| e.subject == "anp-origin-proof"),
        "{failed:?}"
    );
    app.stop().await;
}

/// A Parley requester speaking `wire` as `who`: every request it sends is signed.
async fn signing_requester(dir: &std::path::Path, who: &Identity, wire: Wire) -> Requester {
    let signer = DidSigner::new(&who.document.to_string(), &who.pem).expect("a signer");
    Requester {
        wire,
        token: Some(Credential::DidWba(Arc::new(signer))),
        ..crate::support::new_requester(dir).await
    }
}

#[tokio::test]
async fn a_parley_requester_signs_with_its_did_over_every_framing() {
    let host = DidHost::start().await;
    let alice = host.identity("alice", true);
    let carol = host.identity("carol", true);
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&settings_with(dir.path(), &alice)).await;
    let base = format!("http://{}", app.addr);
    let ws = format!("ws://{}", app.addr);
    let text = crate::support::product_protocol();

    // Only alice may negotiate: her requesters negotiate and call over NLIP (HTTP and
    // WebSocket), seed 002's `/anp` and ANP 1.2's JSON-RPC, every request signed afresh.
    let wires = [
        (base.as_str(), Wire::Nlip),
        (ws.as_str(), Wire::Nlip),
        (base.as_str(), Wire::Anp(AnpOptions::default())),
        (base.as_str(), Wire::Anp12),
    ];
    for (url, wire) in wires {
        let local = tempfile::tempdir().expect("tempdir");
        let requester = signing_requester(local.path(), &alice, wire).await;
        let negotiated = requester
            .negotiate(url, &text, |_| {})
            .await
            .unwrap_or_else(|e| panic!("{url} {wire:?}: {e}"));
        // The first negotiates; the provider then knows the protocol as alice's (0-RTT).
        assert!(
            matches!(negotiated.outcome, Outcome::Agreed | Outcome::ZeroRtt),
            "{url} {wire:?}: {:?}",
            negotiated.outcome
        );
        let called = requester
            .call(
                url,
                &negotiated.hash,
                crate::support::request("d1", "P12345"),
            )
            .await
            .unwrap_or_else(|e| panic!("{url} {wire:?}: {e}"));
        assert_eq!(called.answer["messageId"], "d1", "{url} {wire:?}");
    }

    // Carol's DID has no entry: she is a named peer with the anonymous grants.
    let local = tempfile::tempdir().expect("tempdir");
    let requester = signing_requester(local.path(), &carol, Wire::Nlip).await;
    let refused = requester
        .negotiate(&base, &text, |_| {})
        .await
        .expect_err("carol may not negotiate");
    assert!(
        refused.to_string().contains("forbidden")
            || refused.to_string().contains("may not negotiate"),
        "{refused}"
    );
    app.stop().await;
}
