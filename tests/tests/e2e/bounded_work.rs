//! The work one proposal may cost the provider is bounded, over real NLIP: a proposal with
//! thousands of patterned properties is rejected, with the reason, before its schemas compile,
//! and a protocol cannot ask for regular expressions that need backtracking. Findings of a
//! hostile trial (a 2,000-property proposal cost seconds of CPU and hundreds of megabytes).

use parley_anp::messages::MetaProtocolInfo;
use parley_anp::{MetaMessage, MetaStatus};
use parley_nlip::{Format, Message, Submessage, TokenKind};
use parley_tests::{TestApp, post_json, test_settings};
use serde_json::{Value, json};

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

/// Proposes `text` after a hello, and returns the provider's answer to the proposal.
async fn propose(app: &TestApp, text: &str) -> MetaMessage {
    let hello = MetaMessage::source_hello(MetaProtocolInfo::parley([])).to_value();
    let (status, reply) = post_json(&app.url(), &control(&[hello], None)).await;
    assert_eq!(status, 200, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("NLIP reply");
    let token = reply
        .tokens()
        .find(|t| t.token_kind() == Some(TokenKind::Conversation))
        .expect("a conversation token")
        .clone();
    let proposal = json!({"action": "protocolNegotiation", "sequenceId": 0,
        "candidateProtocols": text, "status": "negotiating"});
    let (status, reply) = post_json(&app.url(), &control(&[proposal], Some(&token))).await;
    assert_eq!(status, 200, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("NLIP reply");
    reply
        .submessages
        .iter()
        .rev()
        .filter(|s| s.label.as_deref() == Some("anp"))
        .find_map(|s| MetaMessage::from_value(s.content.to_json()).ok())
        .expect("a meta-protocol answer")
}

/// A protocol document with this request schema and an object response.
fn document(request: &Value) -> String {
    format!(
        "# Requirements\nLook a product up.\n\n# Data Format\nRequest JSON schema:\n```json\n{request}\n```\n\n\
         Response JSON schema:\n```json\n{{\"type\": \"object\"}}\n```\n"
    )
}

/// The reason a rejecting `protocolNegotiation` gives.
fn rejection(answer: &MetaMessage) -> String {
    let MetaMessage::ProtocolNegotiation(n) = answer else {
        panic!("expected a protocolNegotiation, got {answer:?}");
    };
    assert_eq!(n.status, MetaStatus::Rejected, "{n:?}");
    n.modification_summary.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_proposal_with_thousands_of_patterned_properties_is_rejected_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let properties: serde_json::Map<String, Value> = (0..2_000)
        .map(|i| {
            let pattern = format!("^(a|b{{1,{i}}})+x$");
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": pattern}),
            )
        })
        .collect();
    let request = json!({"type": "object", "properties": properties});
    let reason = rejection(&propose(&app, &document(&request)).await);
    assert!(
        reason.contains("2000 regular expressions in the schemas; at most 64"),
        "{reason}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_proposal_whose_patterns_need_backtracking_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let request = json!({"type": "object",
        "properties": {"productId": {"type": "string", "pattern": "^(?=P)P[0-9]{5}$"}}});
    let reason = rejection(&propose(&app, &document(&request)).await);
    assert!(reason.contains("not a valid JSON Schema"), "{reason}");
    app.stop().await;
}

#[tokio::test]
async fn the_bounds_are_the_operators_to_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.negotiation.max_schema_nodes = 10;
    let app = TestApp::spawn(&settings).await;
    let properties: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    let request = json!({"type": "object", "properties": properties});
    let reason = rejection(&propose(&app, &document(&request)).await);
    assert!(
        reason.contains("JSON values in the schemas; at most 10"),
        "{reason}"
    );
    app.stop().await;
}
