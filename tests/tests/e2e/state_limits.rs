//! What a peer can reach of the server's state is its own and bounded: a conversation belongs
//! to the address that created it, a hello's offered hashes are looked up only up to a limit,
//! conversation logs keep their newest messages, uploads have a quota and a cap on how many
//! arrive at once, and negotiations a stopped server left in the middle of a turn end as failed.
//! Each test is a finding of a hostile trial against the server.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use parley_anp::messages::MetaProtocolInfo;
use parley_anp::{MetaMessage, ProtocolHash};
use parley_nlip::{ErrorInfo, Format, Message, Submessage, TokenKind};
use parley_store::{Direction, NegotiationStatus, NewConversation, NewNegotiation, Role};
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use crate::support::{OTHER, client_from, connect_from, new_requester, product_protocol};

const HERE: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// POSTs `body` from `from`; status and JSON reply.
async fn post_from(from: IpAddr, url: &str, body: &Value) -> (u16, Value) {
    let reply = client_from(from)
        .post(url)
        .json(body)
        .send()
        .await
        .expect("reply");
    let status = reply.status().as_u16();
    (status, reply.json().await.expect("JSON"))
}

fn error_code(reply: &Value) -> String {
    let m = parley_nlip::from_json_value(reply).expect("an NLIP message");
    ErrorInfo::from_message(&m).expect("an error part").code
}

/// The server's conversation token in a reply (`conversation_parley`; a client's own is echoed
/// beside it).
fn conversation_token(reply: &Value) -> Submessage {
    parley_nlip::from_json_value(reply)
        .expect("an NLIP message")
        .tokens()
        .find(|t| {
            t.token_kind() == Some(TokenKind::Conversation) && t.subformat == "conversation_parley"
        })
        .expect("the server's conversation token")
        .clone()
}

fn text_with(token: Submessage) -> Value {
    let message = Message::text("english", "help").with_submessage(token);
    parley_nlip::to_json_value(&message)
}

#[tokio::test]
async fn a_conversation_belongs_to_the_address_that_created_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let client_token = Submessage::new(Format::Token, "conversation_client", "c-1");

    // The same client-chosen token from two addresses: two conversations.
    let (status, a) = post_from(HERE, &app.url(), &text_with(client_token.clone())).await;
    assert_eq!(status, 200, "{a}");
    let (status, b) = post_from(OTHER, &app.url(), &text_with(client_token)).await;
    assert_eq!(status, 200, "{b}");
    let ours = conversation_token(&a);
    assert_ne!(ours.content, conversation_token(&b).content);

    // The server's own token names a conversation only for the address that created it.
    let (status, reply) = post_from(OTHER, &app.url(), &text_with(ours.clone())).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (422, "unknown_conversation")
    );
    let (status, _) = post_from(HERE, &app.url(), &text_with(ours)).await;
    assert_eq!(status, 200);

    // A negotiation's conversation too: another address cannot send into it.
    let hello = MetaMessage::source_hello(MetaProtocolInfo::parley([])).to_value();
    let (status, reply) = post_from(HERE, &app.url(), &control(&[hello], None)).await;
    assert_eq!(status, 200, "{reply}");
    let negotiation = conversation_token(&reply);
    let failure = json!({"action": "codeGeneration", "status": "error"});
    let (status, reply) =
        post_from(OTHER, &app.url(), &control(&[failure], Some(&negotiation))).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (422, "unknown_conversation")
    );
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

/// The protocol a `destinationHello` in `reply` selected.
fn selected(reply: &Value) -> Option<ProtocolHash> {
    let reply = parley_nlip::from_json_value(reply).expect("an NLIP message");
    reply
        .submessages
        .iter()
        .filter(|s| s.label.as_deref() == Some("anp"))
        .find_map(|s| match MetaMessage::from_value(s.content.to_json()) {
            Ok(MetaMessage::DestinationHello(hello)) => Some(hello.meta_protocol.selected_hash()),
            _ => None,
        })
        .expect("a destinationHello")
}

#[tokio::test]
async fn a_hello_offering_thousands_of_hashes_is_looked_up_only_up_to_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let known = requester
        .negotiate(&app.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiated")
        .hash;

    let unknown: Vec<ProtocolHash> = (0..14_000)
        .map(|i| ProtocolHash::of(&format!("not a protocol {i}")))
        .collect();
    let hello = |hashes: Vec<ProtocolHash>| {
        let hello = MetaMessage::source_hello(MetaProtocolInfo::parley(hashes)).to_value();
        control(&[hello], None)
    };
    // Among the first 64 offered, the known protocol is found (0-RTT).
    let first = std::iter::once(known)
        .chain(unknown.iter().copied())
        .collect();
    let (status, reply) = post_from(HERE, &app.url(), &hello(first)).await;
    assert_eq!(status, 200);
    assert_eq!(selected(&reply), Some(known));
    // After 14,000 others, it is not looked up: the hello costs 64 lookups, not 14,001.
    let last = unknown
        .iter()
        .copied()
        .chain(std::iter::once(known))
        .collect();
    let (status, reply) = post_from(HERE, &app.url(), &hello(last)).await;
    assert_eq!(status, 200);
    assert_eq!(selected(&reply), None);
    app.stop().await;
}

#[tokio::test]
async fn a_conversation_log_keeps_its_newest_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.history_messages = 2;
    settings.limits.max_conversation_messages = 4;
    let app = TestApp::spawn(&settings).await;
    let token = Submessage::new(Format::Token, "conversation_client", "long");
    let mut ours = None;
    for _ in 0..5 {
        let (status, reply) = post_from(HERE, &app.url(), &text_with(token.clone())).await;
        assert_eq!(status, 200, "{reply}");
        ours = Some(conversation_token(&reply));
    }
    let id = ours
        .expect("a conversation")
        .content
        .as_str()
        .expect("an id")
        .to_owned();
    app.stop().await;

    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");
    let log = store.list_messages(&id, 0, 100).await.expect("the log");
    let seqs: Vec<i64> = log.iter().map(|m| m.seq).collect();
    assert_eq!(
        seqs,
        [7, 8, 9, 10],
        "five exchanges, the newest four messages kept"
    );
}

#[tokio::test]
async fn uploads_have_a_quota() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_upload_bytes = 64;
    settings.limits.max_upload_storage_bytes = 100;
    let app = TestApp::spawn(&settings).await;
    let upload = format!("http://{}/upload", app.upload_addr);
    let client = reqwest::Client::new();
    let first = client
        .post(&upload)
        .body(vec![1u8; 60])
        .send()
        .await
        .expect("reply");
    assert_eq!(first.status(), 201);
    let second = client
        .post(&upload)
        .body(vec![2u8; 60])
        .send()
        .await
        .expect("reply");
    assert_eq!(second.status(), 507);
    let reply: Value = second.json().await.expect("an NLIP error");
    assert_eq!(error_code(&reply), "upload_quota_exceeded");
    app.stop().await;
}

#[tokio::test]
async fn uploads_arriving_at_once_are_capped_in_all_and_per_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_concurrent_uploads = 2;
    settings.limits.max_concurrent_uploads_per_address = 1;
    let app = TestApp::spawn(&settings).await;
    let upload = format!("http://{}/upload", app.upload_addr);

    // An upload that is still arriving (its body only begun) holds its slots.
    let mut arriving = connect_from(HERE, app.upload_addr).await;
    arriving
        .write_all(b"POST /upload HTTP/1.1\r\nhost: parley\r\ncontent-length: 1000\r\n\r\nabc")
        .await
        .expect("part of an upload");
    // Once it holds them, this address has none left. (Polled: the server takes the slot when
    // it reads the head.)
    let refused = loop {
        let reply = client_from(HERE)
            .post(&upload)
            .body("x")
            .send()
            .await
            .expect("reply");
        if reply.status() == 429 {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    let reply: Value = refused.json().await.expect("an NLIP error");
    assert_eq!(error_code(&reply), "too_many_uploads");
    // Another address still has the server's second slot.
    let other = client_from(OTHER)
        .post(&upload)
        .body("y")
        .send()
        .await
        .expect("reply");
    assert_eq!(other.status(), 201);
    drop(arriving);
    app.stop().await;
}

#[tokio::test]
async fn a_negotiation_left_in_the_middle_of_a_turn_ends_as_failed_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.request_timeout_ms = 100;
    // What a server that stopped in the middle of a turn leaves: the peer's message recorded,
    // no answer.
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");
    store
        .create_conversation(NewConversation {
            id: "c".into(),
            peer: None,
            state: json!({}),
        })
        .await
        .expect("a conversation");
    let id = store
        .start_negotiation(NewNegotiation {
            conversation_id: "c".into(),
            role: Role::Provider,
            peer: "127.0.0.1:1".into(),
        })
        .await
        .expect("a negotiation")
        .id;
    store
        .append_transcript(
            id,
            Direction::Inbound,
            &json!({"action": "protocolNegotiation"}),
        )
        .await
        .expect("the peer's message");
    // Older than a turn may run (the request timeout).
    tokio::time::sleep(Duration::from_millis(300)).await;

    let app = TestApp::spawn(&settings).await;
    let failed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let record = store
                .get_negotiation(id)
                .await
                .expect("read")
                .expect("there");
            if record.negotiation.status != NegotiationStatus::Negotiating {
                break record.negotiation;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the started server ends it");
    assert_eq!(failed.status, NegotiationStatus::Failed);
    assert!(
        failed.reason.unwrap_or_default().starts_with("interrupted"),
        "the reason says why"
    );
    app.stop().await;
}
