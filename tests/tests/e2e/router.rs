//! The NLIP router over a real socket: a `structured/json` tool call, in the `{"tool", "arguments"}`
//! shape or MCP's `{"name", "arguments"}`, is answered by that capability through the path a
//! handler's `host.call` takes; its failures are NLIP errors with the capability's code (an
//! unknown tool, arguments the input schema refuses, a lookup that finds nothing, an MCP tool
//! reporting `isError`); an application message of a negotiated protocol keeps its own path
//! whatever its payload looks like; and a tool call in a conversation is one turn of it.

use parley_nlip::{Content, ErrorInfo, Format, Message, Submessage, TokenKind};
use parley_tests::{
    TestApp, capabilities_with, example_capabilities, post_json, repo_root, test_settings,
};
use serde_json::{Value, json};

/// POSTs `payload` as a data message whose first part is `structured/json`, with `tokens`.
async fn send(app: &TestApp, payload: Value, tokens: &[Submessage]) -> (u16, Message) {
    let mut message = Message::json(payload);
    message.submessages.extend(tokens.iter().cloned());
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&message)).await;
    let reply = parley_nlip::from_json_value(&reply).expect("the reply is an NLIP message");
    (status, reply)
}

/// The capability result a tool call's reply carries: the `structured/json` submessage
/// labelled with the capability's name.
fn result(reply: &Message, capability: &str) -> Value {
    assert_eq!(reply.format, Format::Text, "a short text comes first");
    let part = reply
        .submessages
        .iter()
        .find(|s| s.label.as_deref() == Some(capability))
        .unwrap_or_else(|| panic!("no result labelled {capability}: {reply:?}"));
    assert_eq!(
        (part.format, part.subformat.as_str()),
        (Format::Structured, "json")
    );
    match &part.content {
        Content::Json(value) => value.clone(),
        Content::Bytes(_) => panic!("a JSON result"),
    }
}

fn code(status: u16, reply: &Message) -> (u16, String) {
    let info = ErrorInfo::from_message(reply).expect("an NLIP error");
    (status, info.code)
}

#[tokio::test]
async fn a_tool_call_in_either_shape_is_answered_by_its_capability() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    // What the capability itself answers, invoked directly.
    let expected = capabilities_with(&example_capabilities(), &[])
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("the capability answers");
    assert_eq!(expected["productName"], "High-performance Laptop");

    for key in ["tool", "name"] {
        let call = json!({key: "getProductInfo", "arguments": {"productId": "P12345"}});
        let (status, reply) = send(&app, call, &[]).await;
        assert_eq!(status, 200, "{key}: {reply:?}");
        assert_eq!(result(&reply, "getProductInfo"), expected, "{key}");
    }
    // A product the dataset does not hold is the capability's `null`, not an error.
    let call = json!({"name": "getProductInfo", "arguments": {"productId": "P99999"}});
    let (status, reply) = send(&app, call, &[]).await;
    assert_eq!(status, 200, "{reply:?}");
    assert_eq!(result(&reply, "getProductInfo"), Value::Null);

    // In a conversation a tool call is a turn like any other, logged both ways.
    let client = Submessage::new(Format::Token, "conversation_client", "router-1");
    let call = json!({"tool": "getProductInfo", "arguments": {"productId": "P12345"}});
    for _ in 0..2 {
        let (status, reply) = send(&app, call.clone(), std::slice::from_ref(&client)).await;
        assert_eq!(status, 200, "{reply:?}");
        assert!(
            reply.tokens().any(|t| *t == client),
            "the peer's token is echoed"
        );
    }
    let (_, reply) = send(&app, call, std::slice::from_ref(&client)).await;
    let id = reply
        .tokens()
        .find(|t| {
            t.token_kind() == Some(TokenKind::Conversation) && t.subformat == "conversation_parley"
        })
        .and_then(|t| t.content.as_str())
        .expect("the server's conversation token")
        .to_owned();
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");
    let conversation = store.get_conversation(&id).await.expect("read");
    let conversation = conversation.expect("the conversation");
    assert_eq!((conversation.turns, conversation.message_count), (3, 6));
    app.stop().await;
}

#[tokio::test]
async fn tool_call_failures_are_nlip_errors_with_stable_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let cases = [
        (
            json!({"tool": "noSuchTool", "arguments": {}}),
            (422, "unknown_capability"),
        ),
        // The input schema's pattern refuses the id.
        (
            json!({"name": "getProductInfo", "arguments": {"productId": "laptop"}}),
            (422, "invalid_arguments"),
        ),
        // Arguments left out are `{}`, which lacks the required productId.
        (
            json!({"tool": "getProductInfo"}),
            (422, "invalid_arguments"),
        ),
        (
            json!({"tool": "getProductInfo", "arguments": ["P12345"]}),
            (422, "invalid_arguments"),
        ),
        (
            json!({"name": 7, "arguments": {}}),
            (422, "invalid_arguments"),
        ),
        // The order lookup is configured to report an unknown id as an error.
        (
            json!({"tool": "getOrderStatus", "arguments": {"orderId": "O-0000"}}),
            (404, "not_found"),
        ),
    ];
    for (call, (status, expected)) in cases {
        let (got_status, reply) = send(&app, call.clone(), &[]).await;
        assert_eq!(
            code(got_status, &reply),
            (status, expected.to_owned()),
            "{call}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn a_negotiated_protocol_keeps_its_path_whatever_its_payload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    // Shaped like a tool call, but naming a protocol: served (here refused) as the protocol's.
    let protocol = Submessage::new(Format::Token, "protocol", "ab".repeat(32));
    let call = json!({"tool": "getProductInfo", "arguments": {"productId": "P12345"}});
    let (status, reply) = send(&app, call, &[protocol]).await;
    assert_eq!(code(status, &reply), (404, "unknown_protocol".to_owned()));
    // Natural language still reaches the reasoner, which calls the same capability.
    let question = Message::text("english", "How much is product P12345?");
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&question)).await;
    assert_eq!(status, 200, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("NLIP");
    assert_eq!(result(&reply, "getProductInfo")["price"], 1299.99);
    app.stop().await;
}

#[tokio::test]
async fn an_mcp_tool_that_reports_an_error_is_a_tool_error() {
    let python = parley_tests::venv_python();
    let server = repo_root().join("tests/mcp/catalogue_server.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("capabilities.toml");
    std::fs::write(
        &file,
        format!(
            r#"[agent]
name = "Forecast desk"
description = "Tomorrow's weather, from an MCP server."

[[mcp_servers]]
name = "catalogue"
command = [{python:?}, {server:?}]
tools = ["forecast"]
"#
        ),
    )
    .expect("write the capabilities file");
    let mut settings = test_settings(dir.path());
    settings.capabilities = Some(file);
    let app = TestApp::spawn(&settings).await;

    let call = json!({"name": "forecast", "arguments": {"city": "Paris"}});
    let (status, reply) = send(&app, call, &[]).await;
    assert_eq!(status, 200, "{reply:?}");
    assert_eq!(
        result(&reply, "forecast"),
        json!({"city": "Paris", "temperature": 21.5, "conditions": "sunny"})
    );
    let call = json!({"name": "forecast", "arguments": {"city": "Atlantis"}});
    let (status, reply) = send(&app, call, &[]).await;
    assert_eq!(code(status, &reply), (502, "tool_error".to_owned()));
    let info = ErrorInfo::from_message(&reply).expect("an NLIP error");
    assert!(info.message.contains("under water"), "{}", info.message);
    app.stop().await;
}
