//! What keeps the database from growing or staying wrong without bound, on both backends: a
//! conversation log keeps its newest messages (`StoreOptions::max_log_messages`), the uploads'
//! total size is known (the server's upload quota), the write check readiness uses passes on a
//! healthy database, and negotiations whose last turn never
//! finished (the server stopped in it) are ended as failed, `interrupted`.

use std::sync::Arc;

use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{
    Direction, NegotiationStatus, NewConversation, NewNegotiation, Role, Store, StoreOptions,
    connect,
};
use serde_json::json;

async fn bounded(url: &str) {
    let options = StoreOptions {
        max_log_messages: Some(3),
        ..StoreOptions::default()
    };
    let store = connect(url, options).await.expect("connect");
    store
        .check_writable()
        .await
        .expect("a fresh database takes writes");
    store
        .check_writable()
        .await
        .expect("and again: the probe row is rewritten");
    conversation_logs_keep_their_newest_messages(&store).await;
    uploads_have_a_total_size(&store).await;
    interrupted_negotiations_are_failed(&store).await;
}

async fn conversation(store: &Arc<dyn Store>, id: &str) {
    store
        .create_conversation(NewConversation {
            id: id.into(),
            peer: None,
            state: json!({}),
        })
        .await
        .expect("create");
}

async fn conversation_logs_keep_their_newest_messages(store: &Arc<dyn Store>) {
    conversation(store, "log").await;
    for n in 1..=5 {
        store
            .append_message("log", Direction::Inbound, &json!({ "n": n }))
            .await
            .expect("append");
    }
    let kept = store.list_messages("log", 0, 100).await.expect("list");
    let seqs: Vec<i64> = kept.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!(kept[0].message, json!({ "n": 3 }));
    let log = store
        .get_conversation("log")
        .await
        .expect("get")
        .expect("there");
    assert_eq!(log.message_count, 5, "sequence numbers are not reused");
}

async fn uploads_have_a_total_size(store: &Arc<dyn Store>) {
    assert_eq!(store.uploads_size().await.expect("size"), 0);
    for bytes in [&b"abc"[..], b"hello", b"abc"] {
        store
            .put_upload(bytes, "text/plain", None)
            .await
            .expect("upload");
    }
    assert_eq!(
        store.uploads_size().await.expect("size"),
        8,
        "stored once each"
    );
}

async fn interrupted_negotiations_are_failed(store: &Arc<dyn Store>) {
    conversation(store, "negotiations").await;
    let start = || async {
        store
            .start_negotiation(NewNegotiation {
                conversation_id: "negotiations".into(),
                role: Role::Provider,
                peer: "peer".into(),
            })
            .await
            .expect("start")
            .id
    };
    // The peer's message came, no answer was recorded: the turn never finished.
    let interrupted = start().await;
    store
        .append_transcript(
            interrupted,
            Direction::Inbound,
            &json!({"action": "protocolNegotiation"}),
        )
        .await
        .expect("transcript");
    // Started, nothing recorded yet.
    let empty = start().await;
    // Answered: waiting for the peer, which may still come.
    let waiting = start().await;
    for direction in [Direction::Inbound, Direction::Outbound] {
        store
            .append_transcript(
                waiting,
                direction,
                &json!({"action": "protocolNegotiation"}),
            )
            .await
            .expect("transcript");
    }

    let long_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    assert_eq!(
        store
            .fail_interrupted_negotiations(long_ago)
            .await
            .expect("sweep"),
        0,
        "a turn younger than the cut-off may still be running"
    );
    let later = chrono::Utc::now() + chrono::Duration::seconds(1);
    assert_eq!(
        store
            .fail_interrupted_negotiations(later)
            .await
            .expect("sweep"),
        2
    );
    for (id, status) in [
        (interrupted, NegotiationStatus::Failed),
        (empty, NegotiationStatus::Failed),
        (waiting, NegotiationStatus::Negotiating),
    ] {
        let record = store
            .get_negotiation(id)
            .await
            .expect("get")
            .expect("there");
        assert_eq!(record.negotiation.status, status, "{id}");
        if status == NegotiationStatus::Failed {
            let reason = record.negotiation.reason.unwrap_or_default();
            assert!(reason.starts_with("interrupted"), "{reason}");
        }
    }
}

#[tokio::test]
async fn bounded_on_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    bounded(&url).await;
}

#[tokio::test]
async fn bounded_on_postgres() {
    let (url, database) = fresh_postgres_url().await;
    bounded(&url).await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}
