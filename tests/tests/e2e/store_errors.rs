//! What the store decides reaches a peer as an NLIP error with its own code and status, never as
//! a 500: an upload that does not exist is a 404 `unknown_upload`; content the store refuses is a
//! 422 `invalid_content`; meta-protocol messages of one conversation racing each other give one
//! success and 409 `conflict`s — on SQLite and on PostgreSQL.

use parley_nlip::{ErrorInfo, Format, Message, Submessage, TokenKind};
use parley_tests::{TestApp, post_json, post_raw, test_settings};
use serde_json::{Value, json};

/// The NLIP error code of a reply body.
fn error_code(body: &[u8]) -> String {
    let reply = parley_nlip::from_json_slice(body).expect("error replies are NLIP messages");
    ErrorInfo::from_message(&reply).expect("an error part").code
}

#[tokio::test]
async fn an_upload_that_does_not_exist_is_a_404_nlip_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let unknown = "0".repeat(64);
    for id in [unknown.as_str(), "not-a-sha256", "ABC"] {
        let response = reqwest::get(format!("http://{}/uploads/{id}", app.upload_addr))
            .await
            .expect("GET");
        assert_eq!(response.status().as_u16(), 404, "{id}");
        let body = response.bytes().await.expect("body");
        assert_eq!(error_code(&body), "unknown_upload", "{id}");
    }

    // A reference to one in a message is a message that cannot be processed, whatever the id.
    for id in [unknown.as_str(), "not-a-sha256"] {
        let reference = format!("http://{}/uploads/{id}", app.upload_addr);
        let (status, reply) = post_json(
            &app.url(),
            &json!({"format": "text", "subformat": "english", "content": "help",
                "submessages": [{"format": "structured", "subformat": "uri", "content": reference}]}),
        )
        .await;
        assert_eq!(status, 422, "{id}: {reply}");
        assert_eq!(error_code(reply.to_string().as_bytes()), "unknown_upload");
    }
    app.stop().await;
}

#[tokio::test]
async fn content_the_store_refuses_is_a_422_nlip_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;

    // U+0000 in a filename: the store keeps no text with U+0000 on either backend.
    let upload = format!("http://{}/upload?filename=a%00b", app.upload_addr);
    let (status, _, body) = post_raw(&upload, Some("text/plain"), b"bytes".to_vec()).await;
    assert_eq!(status, 422);
    assert_eq!(error_code(&body), "invalid_content");

    // U+0000 in a message of a conversation, which is logged.
    let conversation =
        json!({"format": "token", "subformat": "conversation_client", "content": "c-1"});
    let (status, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": "a\u{0}b",
            "submessages": [conversation]}),
    )
    .await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(error_code(reply.to_string().as_bytes()), "invalid_content");
    app.stop().await;
}

/// A control message carrying meta-protocol messages, in the conversation `token` if given.
fn control(metas: &[Value], token: Option<&Submessage>) -> Value {
    let mut message = Message::text("english", "negotiation").into_control();
    for meta in metas {
        message
            .submessages
            .push(Submessage::new(Format::Structured, "json", meta.clone()).with_label("anp"));
    }
    message.submessages.extend(token.cloned());
    parley_nlip::to_json_value(&message)
}

/// A hello opens a conversation; then `n` proposals in it, all sent at once, race for its state.
async fn concurrent_proposals(settings: parley::config::Settings, n: usize) {
    let app = TestApp::spawn(&settings).await;
    let hello =
        parley_anp::MetaMessage::source_hello(parley_anp::messages::MetaProtocolInfo::parley([]))
            .to_value();
    let (status, reply) = post_json(&app.url(), &control(&[hello], None)).await;
    assert_eq!(status, 200, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("NLIP reply");
    let token = reply
        .tokens()
        .find(|t| t.token_kind() == Some(TokenKind::Conversation))
        .expect("a conversation token")
        .clone();

    let text = std::fs::read_to_string(
        parley_tests::repo_root().join("examples/protocols/product-info.md"),
    )
    .expect("example protocol");
    let proposal = json!({"action": "protocolNegotiation", "sequenceId": 0,
        "candidateProtocols": text, "status": "negotiating"});
    let body = control(&[proposal], Some(&token));
    let url = app.url();
    let replies = futures::future::join_all((0..n).map(|_| post_json(&url, &body))).await;

    let mut outcomes: Vec<(u16, String)> = replies
        .iter()
        .map(|(status, reply)| {
            let code = if *status == 200 {
                String::new()
            } else {
                error_code(reply.to_string().as_bytes())
            };
            (*status, code)
        })
        .collect();
    outcomes.sort();
    let mut expected = vec![(200, String::new())];
    expected.extend(std::iter::repeat_n((409, "conflict".to_owned()), n - 1));
    assert_eq!(outcomes, expected, "{replies:?}");
    app.stop().await;
}

#[tokio::test]
async fn racing_meta_protocol_messages_give_one_success_and_409s_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    concurrent_proposals(test_settings(dir.path()), 10).await;
}

#[tokio::test]
async fn racing_meta_protocol_messages_give_one_success_and_409s_on_postgres() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, database) = parley_store::testing::fresh_postgres_url().await;
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(url);
    concurrent_proposals(settings, 10).await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}
