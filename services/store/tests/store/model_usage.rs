//! Language-model calls and tokens per conversation and per negotiation, on both backends: added
//! up per purpose, kept apart per owner, refused when they cannot be right, and still there after
//! a reconnect.
//!
//! PostgreSQL is required: with no server the PostgreSQL test fails and says how to start one.

use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{
    ModelUsage, ModelUsageOwner, NewConversation, NewNegotiation, Role, Store, StoreError,
    StoreOptions, connect,
};
use serde_json::json;
use uuid::Uuid;

#[tokio::test]
async fn model_usage_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    model_usage(&url).await;
}

#[tokio::test]
async fn model_usage_postgres() {
    let (url, database) = fresh_postgres_url().await;
    model_usage(&url).await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}

fn spent(purpose: &str, calls: i64, unmetered: i64, prompt: i64, completion: i64) -> ModelUsage {
    ModelUsage {
        purpose: purpose.into(),
        calls,
        unmetered_calls: unmetered,
        prompt_tokens: prompt,
        completion_tokens: completion,
    }
}

async fn model_usage(url: &str) {
    let store = connect(url, StoreOptions::default())
        .await
        .expect("connect and migrate");
    let conversation = store
        .create_conversation(NewConversation {
            id: "conv-tokens".into(),
            peer: Some("127.0.0.1:9".into()),
            state: json!({}),
        })
        .await
        .expect("conversation");
    let negotiation = store
        .start_negotiation(NewNegotiation {
            conversation_id: conversation.id.clone(),
            role: Role::Provider,
            peer: "127.0.0.1:9".into(),
        })
        .await
        .expect("negotiation");
    let in_conversation = ModelUsageOwner::Conversation(conversation.id.clone());
    let in_negotiation = ModelUsageOwner::Negotiation(negotiation.id);

    // Nothing spent yet: an empty answer, not an error.
    assert_eq!(store.model_usage(&in_conversation).await.expect("read"), []);

    // Two answers in the conversation: the second's model reported no usage for one call.
    let first = store
        .record_model_usage(&in_conversation, &[spent("answer", 2, 0, 812, 37)])
        .await
        .expect("record");
    assert_eq!(first, [spent("answer", 2, 0, 812, 37)]);
    let second = store
        .record_model_usage(&in_conversation, &[spent("answer", 2, 1, 430, 21)])
        .await
        .expect("record");
    assert_eq!(second, [spent("answer", 4, 1, 1242, 58)]);
    assert_eq!(second[0].tokens(), 1300);

    // A negotiation's purposes, in two turns; the totals come back in the order given, the
    // listing by purpose name.
    let turn = store
        .record_model_usage(
            &in_negotiation,
            &[
                spent("generate_handler", 1, 0, 1500, 420),
                spent("evaluate", 1, 0, 1100, 60),
            ],
        )
        .await
        .expect("record");
    assert_eq!(
        turn.iter().map(|u| u.purpose.as_str()).collect::<Vec<_>>(),
        ["generate_handler", "evaluate"]
    );
    store
        .record_model_usage(&in_negotiation, &[spent("fix_handler", 1, 0, 1700, 400)])
        .await
        .expect("record");
    let negotiation_usage = vec![
        spent("evaluate", 1, 0, 1100, 60),
        spent("fix_handler", 1, 0, 1700, 400),
        spent("generate_handler", 1, 0, 1500, 420),
    ];
    assert_eq!(
        store.model_usage(&in_negotiation).await.expect("read"),
        negotiation_usage
    );
    // Each owner keeps its own: the negotiation's calls are not the conversation's.
    let conversation_usage = vec![spent("answer", 4, 1, 1242, 58)];
    assert_eq!(
        store.model_usage(&in_conversation).await.expect("read"),
        conversation_usage
    );

    refusals(store.as_ref(), &in_conversation).await;
    assert_eq!(
        store.model_usage(&in_conversation).await.expect("read"),
        conversation_usage,
        "a refused call adds nothing"
    );

    // Reconnect: migrations are no-ops, and every count is still there.
    drop(store);
    let store = connect(url, StoreOptions::default())
        .await
        .expect("reconnect");
    assert_eq!(
        store.model_usage(&in_conversation).await.expect("read"),
        conversation_usage
    );
    assert_eq!(
        store.model_usage(&in_negotiation).await.expect("read"),
        negotiation_usage
    );
}

async fn refusals(store: &dyn Store, in_conversation: &ModelUsageOwner) {
    let unknown_conversation = ModelUsageOwner::Conversation("no-such-conversation".into());
    let unknown_negotiation = ModelUsageOwner::Negotiation(Uuid::new_v4());
    for owner in [&unknown_conversation, &unknown_negotiation] {
        let err = store
            .record_model_usage(owner, &[spent("answer", 1, 0, 10, 1)])
            .await
            .expect_err("no such owner");
        assert!(
            matches!(err, StoreError::NotFound { .. }),
            "{owner}: {err:?}"
        );
        assert_eq!(store.model_usage(owner).await.expect("read"), []);
    }
    let empty_key = ModelUsageOwner::Conversation(String::new());
    assert!(matches!(
        store
            .record_model_usage(&empty_key, &[spent("answer", 1, 0, 1, 1)])
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.model_usage(&empty_key).await.expect("read"), []);

    for bad in [
        spent("", 1, 0, 1, 1),
        spent("answer", -1, 0, 1, 1),
        spent("answer", 1, 0, -5, 1),
        spent("answer", 1, 0, 1, -5),
        spent("answer", 1, 2, 1, 1),
        spent("ans\0wer", 1, 0, 1, 1),
    ] {
        // A good entry before the bad one: the whole call is refused, nothing is added.
        let err = store
            .record_model_usage(in_conversation, &[spent("answer", 1, 0, 1, 1), bad.clone()])
            .await
            .expect_err("refused");
        assert!(matches!(err, StoreError::Invalid(_)), "{bad:?}: {err:?}");
    }
    assert_eq!(
        store
            .record_model_usage(in_conversation, &[])
            .await
            .expect("nothing to add"),
        []
    );
}
