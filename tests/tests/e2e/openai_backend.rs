//! The `openai` reasoner behind a real Parley server, against a scripted
//! OpenAI-compatible server over real HTTP: capabilities are offered as tools and really
//! called, conversation history reaches the model, and model failures become NLIP errors.

use parley::config::ReasonerKind;
use parley_nlip::{ErrorInfo, Format, Message, Submessage};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_tests::{TestApp, post_json, test_settings};
use serde_json::json;

use crate::support::MODEL;

#[tokio::test]
async fn natural_language_goes_through_the_model_and_its_tool_calls() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::tool_call(
        "getProductInfo",
        json!({"productId": "P12345"}),
    ));
    model.push(ScriptedReply::text(
        "The High-performance Laptop costs 1299.99 USD.",
    ));
    model.push(ScriptedReply::text("You asked about the laptop."));

    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.openai.model = "scripted-model".into();
    settings.openai.api_key = Some("sk-test-secret".into());
    let app = TestApp::spawn(&settings).await;

    let first = Message::text("english", "How much is product P12345?").with_submessage(
        Submessage::new(Format::Token, "conversation_client", "conv-9"),
    );
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&first)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["content"],
        "The High-performance Laptop costs 1299.99 USD."
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one tool round, then the answer");
    assert_eq!(
        requests[0].authorization.as_deref(),
        Some("Bearer sk-test-secret")
    );
    assert_eq!(requests[0].body["model"], "scripted-model");
    let tools = requests[0].body["tools"].as_array().expect("tools offered");
    assert!(
        tools
            .iter()
            .any(|t| t["function"]["name"] == "getProductInfo")
    );
    // The tool result the model saw came from the real dataset binding.
    let tool_msg = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent back")
        .clone();
    assert!(
        tool_msg["content"]
            .as_str()
            .expect("tool content")
            .contains("High-performance Laptop"),
        "{tool_msg}"
    );

    // Second turn of the same conversation: the model sees the first exchange.
    let own = parley_nlip::from_json_value(&reply)
        .expect("valid")
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .expect("own conversation token")
        .clone();
    let second = Message::text("english", "What did I ask?").with_submessage(own);
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&second)).await;
    assert_eq!(status, 200, "{reply}");
    let third = &model.requests()[2].body["messages"];
    let transcript = third.to_string();
    assert!(
        transcript.contains("How much is product P12345?"),
        "{transcript}"
    );
    assert!(transcript.contains("1299.99 USD"), "{transcript}");
    app.stop().await;
}

#[tokio::test]
async fn a_failing_model_is_an_nlip_error_not_an_empty_answer() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.set_fallback(ScriptedReply::raw("this is not json"));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    let app = TestApp::spawn(&settings).await;
    let (status, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": "hello"}),
    )
    .await;
    assert_eq!(status, 502, "{reply}");
    let info = ErrorInfo::from_message(&parley_nlip::from_json_value(&reply).expect("nlip"))
        .expect("error part");
    assert!(!info.code.is_empty());
    assert_ne!(info.code, "internal");
    app.stop().await;
}

#[tokio::test]
async fn a_slow_model_hits_the_request_timeout() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.set_fallback(ScriptedReply::text("too late").delayed(std::time::Duration::from_secs(5)));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.limits.request_timeout_ms = 300;
    let app = TestApp::spawn(&settings).await;
    let started = std::time::Instant::now();
    let (status, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": "hello",
                "submessages": [{"format": "token", "subformat": "authentication", "content": "k"}]}),
    )
    .await;
    assert_eq!(status, 503, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("nlip");
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("error").code,
        "timeout"
    );
    assert_eq!(
        reply.tokens().count(),
        1,
        "tokens are echoed on timeouts too"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    app.stop().await;
}
