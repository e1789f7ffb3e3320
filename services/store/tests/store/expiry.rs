//! Conversation state on both backends: turns counted per peer message, and idle conversations
//! expired with everything that hangs on them, while what was agreed in them stays.
//!
//! PostgreSQL is required: with no server the PostgreSQL test fails and says how to start one.

use std::time::Duration;

use chrono::Utc;
use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{
    Direction, ModelUsage, ModelUsageOwner, NegotiationOutcome, NegotiationStatus, NewAgreement,
    NewConversation, NewHandler, NewNegotiation, Role, Store, StoreError, StoreOptions, connect,
};
use serde_json::json;

#[tokio::test]
async fn conversation_state_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    conversation_state(&url).await;
}

#[tokio::test]
async fn conversation_state_postgres() {
    let (url, database) = fresh_postgres_url().await;
    conversation_state(&url).await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}

async fn conversation_state(url: &str) {
    let options = StoreOptions {
        max_log_messages: Some(2),
        ..StoreOptions::default()
    };
    let store = connect(url, options).await.expect("connect and migrate");
    turns(store.as_ref()).await;
    expiry(store.as_ref()).await;
}

async fn open(store: &dyn Store, id: &str) {
    store
        .create_conversation(NewConversation {
            id: id.into(),
            peer: Some("127.0.0.1".into()),
            state: json!({"negotiation": {"phase": "hello"}}),
        })
        .await
        .expect("create");
}

/// One turn per inbound message, still counted once the log has trimmed them.
async fn turns(store: &dyn Store) {
    open(store, "turns").await;
    for direction in [
        Direction::Inbound,
        Direction::Outbound,
        Direction::Inbound,
        Direction::Outbound,
        Direction::Inbound,
    ] {
        store
            .append_message("turns", direction, &json!({"format": "text"}))
            .await
            .expect("append");
    }
    let c = store.get_conversation("turns").await.expect("read");
    let c = c.expect("the conversation");
    assert_eq!((c.turns, c.message_count), (3, 5));
    // The log keeps its newest two; the turns stay what they were.
    let kept = store.list_messages("turns", 0, 10).await.expect("list");
    assert_eq!(kept.len(), 2);
}

/// What an agreement reached in a conversation is recorded under.
struct Populated {
    negotiation: uuid::Uuid,
    handler: uuid::Uuid,
    hash: String,
}

/// Everything a conversation holds, and what an agreement reached in it leaves behind.
async fn populate(store: &dyn Store, id: &str, protocol: &str) -> Populated {
    open(store, id).await;
    store
        .append_message(id, Direction::Inbound, &json!({"format": "text"}))
        .await
        .expect("append");
    let owner = ModelUsageOwner::Conversation(id.into());
    let spent = ModelUsage {
        purpose: "answer".into(),
        calls: 1,
        unmetered_calls: 0,
        prompt_tokens: 10,
        completion_tokens: 2,
    };
    store
        .record_model_usage(&owner, std::slice::from_ref(&spent))
        .await
        .expect("usage");
    let negotiation = store
        .start_negotiation(NewNegotiation {
            conversation_id: id.into(),
            role: Role::Provider,
            peer: "127.0.0.1".into(),
        })
        .await
        .expect("negotiation");
    store
        .append_transcript(negotiation.id, Direction::Inbound, &json!({"action": "x"}))
        .await
        .expect("transcript");
    store
        .record_model_usage(&ModelUsageOwner::Negotiation(negotiation.id), &[spent])
        .await
        .expect("usage");
    let hash = store.put_protocol(protocol).await.expect("protocol").hash;
    store
        .finish_negotiation(
            negotiation.id,
            NegotiationOutcome {
                status: NegotiationStatus::Accepted,
                protocol_hash: Some(hash.clone()),
                rounds: 1,
                reason: None,
            },
        )
        .await
        .expect("finish");
    store
        .record_agreement(NewAgreement {
            peer: "127.0.0.1".into(),
            peer_url: None,
            protocol_hash: hash.clone(),
            role: Role::Provider,
        })
        .await
        .expect("agreement");
    let handler = store
        .insert_handler_candidate(NewHandler {
            protocol_hash: hash.clone(),
            source: "export function handle(r) { return r; }".into(),
            backend: "builtin".into(),
            capabilities: vec![],
        })
        .await
        .expect("handler");
    store
        .record_usage("127.0.0.1", &hash, 1, 0)
        .await
        .expect("protocol usage");
    Populated {
        negotiation: negotiation.id,
        handler: handler.id,
        hash,
    }
}

async fn expiry(store: &dyn Store) {
    let idle = populate(store, "idle", "# A protocol agreed in an idle conversation").await;
    // Timestamps have microsecond precision: a pause puts the cut-off strictly between.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cut_off = Utc::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let active = populate(
        store,
        "active",
        "# A protocol agreed in an active conversation",
    )
    .await;

    assert_eq!(
        store
            .expire_conversations(cut_off, 100)
            .await
            .expect("expire"),
        // "turns" was last active before the cut-off too.
        2
    );
    // The idle conversation is gone with its log, usage, negotiation and transcript.
    assert_eq!(store.get_conversation("idle").await.expect("read"), None);
    assert!(matches!(
        store.list_messages("idle", 0, 10).await,
        Err(StoreError::NotFound { .. })
    ));
    let owner = ModelUsageOwner::Conversation("idle".into());
    assert_eq!(store.model_usage(&owner).await.expect("usage"), []);
    assert_eq!(
        store.get_negotiation(idle.negotiation).await.expect("read"),
        None
    );
    let negotiation_usage = ModelUsageOwner::Negotiation(idle.negotiation);
    assert_eq!(
        store.model_usage(&negotiation_usage).await.expect("usage"),
        []
    );
    // What was agreed in it stays: the protocol, the agreement, the handler, the usage counts.
    let hash = idle.hash;
    assert!(store.get_protocol(&hash).await.expect("read").is_some());
    assert!(
        store
            .get_handler(idle.handler)
            .await
            .expect("read")
            .is_some()
    );
    assert_eq!(
        store
            .agreements_for_protocol(&hash)
            .await
            .expect("read")
            .len(),
        1
    );
    let usage = store.usage("127.0.0.1", &hash).await.expect("read");
    assert_eq!(usage.map(|u| u.ok_count), Some(1));
    // The active conversation keeps everything.
    let kept = store.get_conversation("active").await.expect("read");
    assert_eq!(kept.map(|c| c.turns), Some(1));
    let owner = ModelUsageOwner::Conversation("active".into());
    assert_eq!(store.model_usage(&owner).await.expect("usage").len(), 1);
    let negotiations = store
        .negotiations_for_protocol(&active.hash)
        .await
        .expect("read");
    assert_eq!(negotiations.len(), 1);
    assert_eq!(
        (negotiations[0].id, negotiations[0].status),
        (active.negotiation, NegotiationStatus::Accepted)
    );
    assert!(
        store
            .get_handler(active.handler)
            .await
            .expect("read")
            .is_some()
    );

    // Oldest first, a batch at a time: "active" is now the oldest.
    for id in ["old-1", "old-2"] {
        tokio::time::sleep(Duration::from_millis(2)).await;
        open(store, id).await;
    }
    let now = Utc::now();
    assert_eq!(store.expire_conversations(now, 2).await.expect("expire"), 2);
    assert_eq!(store.get_conversation("active").await.expect("read"), None);
    assert_eq!(store.get_conversation("old-1").await.expect("read"), None);
    assert!(
        store
            .get_conversation("old-2")
            .await
            .expect("read")
            .is_some()
    );
    assert_eq!(store.expire_conversations(now, 2).await.expect("expire"), 1);
    assert_eq!(store.get_conversation("old-2").await.expect("read"), None);
    // The active conversation's agreement outlives it too.
    let agreements = store.agreements_for_protocol(&active.hash).await;
    assert_eq!(agreements.expect("read").len(), 1);

    // Nothing is idle since a cut-off that long ago.
    open(store, "new").await;
    let long_ago = Utc::now() - chrono::Duration::days(1);
    assert_eq!(
        store
            .expire_conversations(long_ago, 10)
            .await
            .expect("expire"),
        0
    );
    // A cut-off in the future would take conversations active now.
    let future = Utc::now() + chrono::Duration::hours(1);
    assert!(matches!(
        store.expire_conversations(future, 10).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(store.get_conversation("new").await.expect("read").is_some());
}
