//! What the modules share: the lock on the process's model counters, the example product
//! protocol, a request for it, and a requester with a store of its own.

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
