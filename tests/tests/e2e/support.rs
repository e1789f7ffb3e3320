//! What the modules share: the lock on the process's model counters, the example product
//! protocol, a request for it, a requester with a store of its own, and connections from a
//! second loopback address.

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
