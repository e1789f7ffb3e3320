//! What the modules share: the lock on the process's model counters, the example product
//! protocol, a request for it, a requester with a store of its own, connections from a
//! second loopback address, a POST that reads the reply's error code, and waiting for readiness.

use std::path::Path;

use parley::negotiation::requester::Requester;
use parley_tests::repo_root;
use serde_json::{Value, json};

/// Taken by every test that makes a server call a model. The metrics recorder is one per process,
/// so a test that compares model counters before and after holds this for its whole turn.
pub static MODEL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The text of `examples/protocols/product-info.md` (seed 002's product protocol).
pub fn product_protocol() -> String {
    std::fs::read_to_string(repo_root().join("examples/protocols/product-info.md"))
        .expect("example protocol")
}

/// The handler the built-in reasoner writes for the product protocol over the example
/// capabilities: a correct handler, for a scripted model to answer with.
pub async fn builtin_handler() -> parley_reasoner::GeneratedHandler {
    let doc = parley_anp::ProtocolDoc::parse(product_protocol()).expect("doc");
    let capabilities =
        parley::startup::load_capabilities(Some(&parley_tests::example_capabilities()))
            .await
            .expect("capabilities");
    parley_reasoner::BuiltinProtocolReasoner
        .generate_sync(
            &doc,
            &parley_reasoner::DeclaredCapability::all(&capabilities),
            None,
        )
        .expect("built-in handler")
}

/// A `getProductInfo` request of the product protocol.
pub fn request(id: &str, product: &str) -> Value {
    json!({"messageId": id, "type": "REQUEST", "action": "getProductInfo", "productId": product})
}

/// A requester with its own SQLite store in `dir` (reopening the same dir is a restart).
pub async fn new_requester(dir: &Path) -> Requester {
    let url = format!("sqlite://{}/requester.db?mode=rwc", dir.display());
    let store = parley_store::connect(&url, Default::default())
        .await
        .expect("requester store");
    Requester::new(store)
}

/// A new requester (its store in `dir`) that negotiated the product protocol with the agent at
/// `url`, and how that ended.
pub async fn negotiated_product(
    dir: &Path,
    url: &str,
) -> (Requester, parley::negotiation::requester::Negotiated) {
    let requester = new_requester(dir).await;
    let negotiated = requester
        .negotiate(url, &product_protocol(), |_| {})
        .await
        .expect("the negotiation runs");
    (requester, negotiated)
}

/// A second loopback address: a peer other than the tests' usual 127.0.0.1.
pub const OTHER: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

/// A TCP connection to `server` from `from`.
pub async fn connect_from(
    from: std::net::IpAddr,
    server: std::net::SocketAddr,
) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::new(from, 0))
        .expect("bind a loopback address");
    socket.connect(server).await.expect("connect")
}

/// An HTTP client whose connections come from `from`.
pub fn client_from(from: std::net::IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from)
        .build()
        .expect("client")
}

/// POSTs `body` to the app's NLIP end-point: the status, the reply and its NLIP error code
/// (empty on success).
pub async fn post_coded(app: &parley_tests::TestApp, body: &Value) -> (u16, Value, String) {
    let (status, reply) = parley_tests::post_json(&app.url(), body).await;
    let message = parley_nlip::from_json_value(&reply).expect("an NLIP message");
    let code = parley_nlip::ErrorInfo::from_message(&message)
        .map(|e| e.code)
        .unwrap_or_default();
    (status, reply, code)
}

/// The id of the conversation a reply belongs to (the server's `conversation_parley` token).
pub fn conversation_of(reply: &Value) -> String {
    let reply = parley_nlip::from_json_value(reply).expect("an NLIP message");
    let token = reply
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .expect("the conversation's token");
    token.content.as_str().expect("a string token").to_owned()
}

/// Polls `/health/ready` until it answers `status` (at most 30 s); the body it answered.
pub async fn until_ready_is(app: &parley_tests::TestApp, status: u16) -> Value {
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let reply = reqwest::get(app.http("/health/ready"))
                .await
                .expect("a reply");
            if reply.status().as_u16() == status {
                return reply.json().await.expect("JSON");
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("/health/ready did not answer {status}"))
}

/// An issuer `https://idp.test` of access tokens signed by `signer`, its key set written in
/// `dir`, as `[[access.issuers]]` names it (`audience` when given).
pub fn trusted_issuer(
    dir: &Path,
    signer: &parley_auth::testing::Signer,
    audience: Option<&str>,
) -> parley::config::issuers::IssuerSettings {
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [signer.jwk()]}).to_string()).expect("jwks");
    parley::config::issuers::IssuerSettings {
        issuer: "https://idp.test".into(),
        audience: audience.map(str::to_owned),
        jwks_file: Some(jwks),
        jwks_url: None,
        algorithms: Vec::new(),
        leeway_s: 0,
        refresh_interval_s: 60,
    }
}
