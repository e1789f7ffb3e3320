//! The peers the operator declares, on both backends: added with or without a key, found by
//! key id (revoked ones too), listed by id, revoked once; duplicates and malformed input refused.
//!
//! PostgreSQL is required: with no server the PostgreSQL test fails and says how to start one.

use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{NewPeer, Store, StoreError, StoreOptions, connect, sha256_hex};
use serde_json::json;

#[tokio::test]
async fn peers_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    peers(&url).await;
}

#[tokio::test]
async fn peers_postgres() {
    let (url, database) = fresh_postgres_url().await;
    peers(&url).await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}

fn keyed(id: &str, key_id: &str) -> NewPeer {
    NewPeer {
        id: id.into(),
        key_id: Some(key_id.into()),
        key_digest: Some(sha256_hex(id.as_bytes())),
        grants: json!({"negotiate": true, "capabilities": ["weather"]}),
    }
}

async fn peers(url: &str) {
    let store = connect(url, StoreOptions::default())
        .await
        .expect("connect and migrate");
    assert_eq!(store.list_peers().await.expect("list"), []);

    let bob = store
        .add_peer(keyed("bob", "00112233445566aa"))
        .await
        .expect("add bob");
    assert_eq!(bob.id, "bob");
    assert_eq!(bob.key_id.as_deref(), Some("00112233445566aa"));
    assert_eq!(bob.key_digest, Some(sha256_hex(b"bob")));
    assert_eq!(bob.grants["capabilities"], json!(["weather"]));
    assert_eq!(bob.revoked_at, None);
    let alice = store
        .add_peer(NewPeer {
            id: "alice".into(),
            key_id: None,
            key_digest: None,
            grants: json!({}),
        })
        .await
        .expect("a peer without a key");
    assert_eq!(alice.key_id, None);

    let found = store
        .peer_by_key_id("00112233445566aa")
        .await
        .expect("lookup");
    assert_eq!(found.as_ref(), Some(&bob));
    for absent in ["ffffffffffffffff", "", "a\u{0}b"] {
        assert_eq!(store.peer_by_key_id(absent).await.expect("lookup"), None);
    }
    let listed = store.list_peers().await.expect("list");
    assert_eq!(listed, [alice.clone(), bob.clone()], "by id");

    refusals(store.as_ref()).await;

    let revoked = store.revoke_peer("bob").await.expect("revoke");
    let at = revoked.revoked_at.expect("revoked now");
    assert!(at >= bob.created_at);
    let again = store.revoke_peer("bob").await.expect("revoke again");
    assert_eq!(again.revoked_at, Some(at), "the first time stays");
    let found = store
        .peer_by_key_id("00112233445566aa")
        .await
        .expect("lookup")
        .expect("a revoked peer is still found");
    assert_eq!(found.revoked_at, Some(at));
    for unknown in ["carol", ""] {
        assert!(
            matches!(
                store.revoke_peer(unknown).await,
                Err(StoreError::NotFound { .. })
            ),
            "{unknown:?}"
        );
    }
    // A revoked peer's id and key id are not given out again.
    let reused = store.add_peer(keyed("bob", "0000000000000001")).await;
    assert!(
        matches!(reused, Err(StoreError::Conflict { .. })),
        "{reused:?}"
    );
    drop(store);

    // Still there after a reconnect.
    let store = connect(url, StoreOptions::default())
        .await
        .expect("reconnect");
    let listed = store.list_peers().await.expect("list");
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].revoked_at, Some(at));
}

/// Duplicates are conflicts that say which key is taken; malformed input is invalid.
async fn refusals(store: &dyn Store) {
    match store.add_peer(keyed("bob", "0123456789abcdef")).await {
        Err(StoreError::Conflict { what }) => assert!(what.contains("peer bob"), "{what}"),
        other => panic!("a second bob: {other:?}"),
    }
    match store.add_peer(keyed("carol", "00112233445566aa")).await {
        Err(StoreError::Conflict { what }) => {
            assert!(what.contains("key id 00112233445566aa"), "{what}")
        }
        other => panic!("bob's key id again: {other:?}"),
    }
    let bad = [
        NewPeer {
            id: String::new(),
            ..keyed("x", "k1")
        },
        NewPeer {
            key_digest: None,
            ..keyed("carol", "k2")
        },
        NewPeer {
            key_id: None,
            ..keyed("carol", "k3")
        },
        NewPeer {
            key_digest: Some("ABC".into()),
            ..keyed("carol", "k4")
        },
        NewPeer {
            grants: json!(["negotiate"]),
            ..keyed("carol", "k5")
        },
        NewPeer {
            grants: json!({"capabilities": ["a\u{0}"]}),
            ..keyed("carol", "k6")
        },
        keyed("carol\u{0}", "k7"),
    ];
    for peer in bad {
        let refused = store.add_peer(peer.clone()).await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{peer:?}: {refused:?}"
        );
    }
    assert_eq!(store.list_peers().await.expect("list").len(), 2);
}
