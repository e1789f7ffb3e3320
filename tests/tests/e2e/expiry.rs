//! Idle conversations expire: with a short `limits.conversation_idle_timeout_ms`, the server's
//! background sweep deletes a conversation nobody writes to, with its log; afterwards the
//! server's own token for it is `unknown_conversation`, and the peer's own token starts a fresh
//! conversation at turn 1.

use std::time::{Duration, Instant};

use parley_nlip::{ErrorInfo, Format, Message, Submessage, TokenKind};
use parley_store::Store;
use parley_tests::{TestApp, post_json, test_settings};

/// POSTs a text message with `token`; status and decoded reply.
async fn say(app: &TestApp, token: &Submessage) -> (u16, Message) {
    let message = Message::text("english", "help").with_submessage(token.clone());
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&message)).await;
    (status, parley_nlip::from_json_value(&reply).expect("NLIP"))
}

fn server_token(reply: &Message) -> Submessage {
    reply
        .tokens()
        .find(|t| {
            t.token_kind() == Some(TokenKind::Conversation) && t.subformat == "conversation_parley"
        })
        .expect("the server's conversation token")
        .clone()
}

fn id_of(token: &Submessage) -> String {
    token.content.as_str().expect("a text token").to_owned()
}

/// Waits (polling, up to a generous deadline) until the conversation is gone from the store.
async fn gone(store: &dyn Store, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.get_conversation(id).await.expect("read").is_some() {
        assert!(
            Instant::now() < deadline,
            "the sweep did not remove the idle conversation {id}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_sweep_removes_an_idle_conversation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.request_timeout_ms = 1_000;
    settings.limits.conversation_idle_timeout_ms = 1_000;
    settings.limits.conversation_sweep_interval_ms = 100;
    let app = TestApp::spawn(&settings).await;
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");

    let client = Submessage::new(Format::Token, "conversation_client", "expiring");
    let (status, first) = say(&app, &client).await;
    assert_eq!(status, 200);
    let ours = server_token(&first);
    let id = id_of(&ours);
    let logged = store.get_conversation(&id).await.expect("read");
    assert_eq!(logged.map(|c| (c.turns, c.message_count)), Some((1, 2)));

    gone(store.as_ref(), &id).await;
    assert!(matches!(
        store.list_messages(&id, 0, 10).await,
        Err(parley_store::StoreError::NotFound { .. })
    ));

    // The server's own token names nothing any more.
    let (status, reply) = say(&app, &ours).await;
    let code = ErrorInfo::from_message(&reply).map(|e| e.code);
    assert_eq!(
        (status, code.as_deref()),
        (422, Some("unknown_conversation"))
    );
    // The peer's own token starts afresh: the same id (derived from the token), turn 1.
    let (status, again) = say(&app, &client).await;
    assert_eq!(status, 200);
    assert_eq!(id_of(&server_token(&again)), id);
    let fresh = store.get_conversation(&id).await.expect("read");
    assert_eq!(fresh.map(|c| c.turns), Some(1));
    app.stop().await;
}

/// An idle timeout of 0 turns expiry off: a sweep then would take every conversation at once.
#[tokio::test]
async fn expiry_off_keeps_conversations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.conversation_idle_timeout_ms = 0;
    settings.limits.conversation_sweep_interval_ms = 1;
    let app = TestApp::spawn(&settings).await;
    let client = Submessage::new(Format::Token, "conversation_client", "kept");
    let (status, reply) = say(&app, &client).await;
    assert_eq!(status, 200);
    let id = id_of(&server_token(&reply));
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");
    // Idle for longer than a sweep period many times over, yet kept: no sweep runs.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store.get_conversation(&id).await.expect("read").is_some());
    app.stop().await;
}
