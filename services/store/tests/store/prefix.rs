//! Resolving an abbreviated protocol hash: `protocols_with_prefix` on both backends.

use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{Store, StoreError, connect, sha256_hex};

async fn prefixes(store: &dyn Store) {
    let texts = ["# one", "# two", "# three", "# four"];
    let mut hashes: Vec<String> = texts.iter().map(|t| sha256_hex(t.as_bytes())).collect();
    for text in texts {
        store.put_protocol(text).await.expect("put");
    }
    hashes.sort();
    // Every full hash and every one-digit prefix resolves to what begins with it, in order.
    for hash in &hashes {
        assert_eq!(
            store.protocols_with_prefix(hash, 10).await.expect("query"),
            std::slice::from_ref(hash)
        );
        let first = &hash[..1];
        let expected: Vec<&String> = hashes.iter().filter(|h| h.starts_with(first)).collect();
        let got = store.protocols_with_prefix(first, 10).await.expect("query");
        assert_eq!(got.iter().collect::<Vec<_>>(), expected);
    }
    let all_first: Vec<String> = store
        .protocols_with_prefix(&hashes[0][..1], 1)
        .await
        .expect("query");
    assert_eq!(all_first, [hashes[0].clone()], "the limit holds");
    let unknown = if hashes.iter().any(|h| h.starts_with("0000")) {
        "ffff"
    } else {
        "0000"
    };
    assert!(
        store
            .protocols_with_prefix(unknown, 10)
            .await
            .expect("query")
            .is_empty()
    );
    // Not hex, upper case, a LIKE wildcard, too long, empty: refused before any query.
    for bad in ["", "ABC", "a%", "a_", "zz", &"a".repeat(65)] {
        assert!(
            matches!(
                store.protocols_with_prefix(bad, 10).await,
                Err(StoreError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn prefixes_resolve_on_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    let store = connect(&url, Default::default()).await.expect("connect");
    prefixes(store.as_ref()).await;
}

#[tokio::test]
async fn prefixes_resolve_on_postgres() {
    let (url, database) = fresh_postgres_url().await;
    let store = connect(&url, Default::default()).await.expect("connect");
    prefixes(store.as_ref()).await;
    drop(store);
    database.drop_database().await.expect("drop");
}
