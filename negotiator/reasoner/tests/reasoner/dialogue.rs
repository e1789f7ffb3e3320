//! Reasoner backends: the built-in one over the example capabilities, and the OpenAI one
//! against the scripted OpenAI-compatible server over real HTTP on loopback.

use std::sync::Arc;
use std::time::Duration;

use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{
    ApiKey, DialogueTurn, NlRequest, OpenAiConfig, Reasoner, ReasonerConfig, ReasonerError, build,
};
use serde_json::{Value, json};

use crate::support::capabilities;

fn builtin() -> Arc<dyn Reasoner> {
    build(ReasonerConfig::Builtin, capabilities()).expect("builtin always builds")
}

/// The built-in reasoner's answer to one English message.
async fn ask(reasoner: &Arc<dyn Reasoner>, text: &str) -> parley_reasoner::NlAnswer {
    reasoner
        .answer(NlRequest::english(text))
        .await
        .expect("builtin answers")
}

// --- built-in -----------------------------------------------------------------------------

#[tokio::test]
async fn builtin_help_lists_capabilities() {
    let reasoner = builtin();
    assert_eq!(reasoner.backend(), "builtin");
    for question in ["help", "What can you do?", "capabilities", ""] {
        let answer = ask(&reasoner, question).await;
        assert!(
            answer.text.contains("getProductInfo"),
            "{question}: {}",
            answer.text
        );
        assert!(
            answer.text.contains("getOrderStatus"),
            "{question}: {}",
            answer.text
        );
        assert!(
            answer
                .text
                .contains(r#"getOrderStatus {"orderId":"O-1001"}"#),
            "an invocation example from the schema's examples: {}",
            answer.text
        );
        assert!(answer.capability_calls.is_empty());
        assert_eq!(answer.model_calls, 0);
    }
}

#[tokio::test]
async fn builtin_answers_a_greeting_briefly_and_free_text_with_what_it_cannot_do() {
    let reasoner = builtin();
    for greeting in ["Hello", "hi!", "  Good morning. "] {
        let answer = ask(&reasoner, greeting).await;
        assert!(
            answer.text.starts_with("Hello, this is "),
            "{}",
            answer.text
        );
        assert!(
            answer
                .text
                .contains("I can: getOrderStatus (look up a customer order by its id); getProductInfo (look up a product by its id)."),
            "{}",
            answer.text
        );
        assert!(answer.text.contains("\"help\""), "{}", answer.text);
        assert!(answer.text.len() < 200, "a greeting, not the manual");
    }
    // A greeting with a question is a request: read as one, not greeted.
    let answer = ask(&reasoner, "Hello! Where is my parcel?").await;
    assert!(
        answer.text.starts_with("That sounds like getOrderStatus"),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn builtin_explicit_invocation_calls_the_dataset() {
    let reasoner = builtin();
    let answer = ask(&reasoner, r#"getProductInfo {"productId": "P12345"}"#).await;
    assert!(
        answer.text.contains("High-performance Laptop"),
        "{}",
        answer.text
    );
    assert_eq!(answer.capability_calls.len(), 1);
    let call = &answer.capability_calls[0];
    assert_eq!(call.capability, "getProductInfo");
    assert_eq!(call.arguments, json!({"productId": "P12345"}));
    assert_eq!(
        call.result.as_ref().expect("found")["price"],
        json!(1299.99)
    );

    // Errors are reported with their code, not hidden.
    let answer = ask(&reasoner, r#"getOrderStatus {"orderId": "O-404"}"#).await;
    assert!(answer.text.contains("not_found"), "{}", answer.text);
    assert_eq!(answer.failure.as_ref().map(|f| f.code()), Some("not_found"));
    assert_eq!(
        answer.capability_calls[0]
            .result
            .as_ref()
            .expect_err("unknown order")
            .code(),
        "not_found"
    );

    // A capability name without arguments describes it; bad JSON explains the format.
    let answer = ask(&reasoner, "getproductinfo").await;
    assert!(answer.text.contains("Input schema"), "{}", answer.text);
    let answer = ask(&reasoner, "getProductInfo {\"productId\": ").await;
    assert!(answer.text.contains("one JSON object"), "{}", answer.text);
    assert!(answer.capability_calls.is_empty());
}

#[tokio::test]
async fn builtin_says_plainly_when_it_cannot_tell() {
    let answer = ask(
        &builtin(),
        "How much is the laptop, and can you ship it to Paris?",
    )
    .await;
    assert!(
        answer
            .text
            .starts_with("I cannot tell what you are asking for."),
        "{}",
        answer.text
    );
    assert!(
        answer.capability_calls.is_empty(),
        "it never guesses a call"
    );
}

// --- openai ---------------------------------------------------------------------------------

fn openai_config(server: &ScriptedOpenAi) -> OpenAiConfig {
    OpenAiConfig {
        api_key: Some(ApiKey::new("sk-test-secret")),
        timeout_ms: 5_000,
        max_tool_rounds: 3,
        temperature: Some(0.0),
        max_retries: 0,
        ..OpenAiConfig::new(server.base_url(), "scripted-model")
    }
}

fn openai(server: &ScriptedOpenAi, config: OpenAiConfig) -> Arc<dyn Reasoner> {
    let _ = server;
    build(ReasonerConfig::OpenAi(config), capabilities()).expect("valid openai config")
}

#[tokio::test]
async fn openai_plain_answer() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::text(
        "Hello! I can look up products and orders.",
    ));
    let reasoner = openai(&server, openai_config(&server));
    assert_eq!(reasoner.backend(), "openai");
    let request = NlRequest {
        text: "Hi, who are you?".into(),
        language: "english".into(),
        history: vec![
            DialogueTurn::peer("earlier question"),
            DialogueTurn::agent("earlier answer"),
        ],
    };
    let answer = reasoner.answer(request).await.expect("a plain answer");
    assert_eq!(answer.text, "Hello! I can look up products and orders.");
    assert_eq!(answer.model_calls, 1);
    assert!(answer.capability_calls.is_empty());

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["model"], "scripted-model");
    assert_eq!(body["temperature"], json!(0.0));
    assert_eq!(
        requests[0].authorization.as_deref(),
        Some("Bearer sk-test-secret")
    );
    let messages = body["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    let system = messages[0]["content"].as_str().expect("system text");
    assert!(system.contains("Acme product desk"), "{system}");
    // What the peer sent, its language included, comes as data in the user messages.
    let data = |i: usize| -> Value {
        serde_json::from_str(messages[i]["content"].as_str().expect("text")).expect("JSON")
    };
    assert_eq!(
        data(3),
        json!({"untrusted_peer_message": {"text": "Hi, who are you?", "reply_language": "english"}})
    );
    assert_eq!(
        data(1)["untrusted_peer_message"]["text"],
        "earlier question"
    );
    assert_eq!(messages[2]["content"], "earlier answer");
}

#[tokio::test]
async fn openai_tool_call_really_invokes_the_capability() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::tool_call(
        "getProductInfo",
        json!({"productId": "P12345"}),
    ));
    server.push(ScriptedReply::text(
        "The High-performance Laptop (P12345) costs 1299.99 USD.",
    ));
    let reasoner = openai(&server, openai_config(&server));
    let answer = reasoner
        .answer(NlRequest::english("How much is product P12345?"))
        .await
        .expect("answer after one tool round");
    assert_eq!(
        answer.text,
        "The High-performance Laptop (P12345) costs 1299.99 USD."
    );
    assert_eq!(answer.model_calls, 2);
    assert_eq!(answer.capability_calls.len(), 1);
    let call = &answer.capability_calls[0];
    assert_eq!(call.capability, "getProductInfo");
    let product = call
        .result
        .as_ref()
        .expect("the dataset was really queried");
    assert_eq!(product["productName"], "High-performance Laptop");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Tools were offered in the first request, with the capability's input schema.
    let tools = requests[0].body["tools"].as_array().expect("tools offered");
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(names, ["getOrderStatus", "getProductInfo"]);
    assert_eq!(tools[1]["type"], "function");
    assert_eq!(
        tools[1]["function"]["parameters"]["required"],
        json!(["productId"])
    );
    // The second request carries the assistant tool call and the real tool result.
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_0");
    let tool = &messages[messages.len() - 1];
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_call_id"], "call_0");
    let sent: Value = serde_json::from_str(tool["content"].as_str().expect("tool content is text"))
        .expect("tool content is JSON");
    assert_eq!(
        sent["untrusted_capability_output"]["capability"],
        "getProductInfo"
    );
    assert_eq!(&sent["untrusted_capability_output"]["result"], product);
}

#[tokio::test]
async fn openai_tool_errors_are_sent_back_to_the_model() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::tool_calls(&[
        ("getOrderStatus", json!({"orderId": "O-404"})),
        ("getProductInfo", Value::String("{not json".into())),
    ]));
    server.push(ScriptedReply::text("I could not find that order."));
    let answer = openai(&server, openai_config(&server))
        .answer(NlRequest::english("Where is order O-404?"))
        .await
        .expect("an answer");
    let codes: Vec<&str> = answer
        .capability_calls
        .iter()
        .map(|c| c.result.as_ref().expect_err("both fail").code())
        .collect();
    assert_eq!(codes, ["not_found", "invalid_arguments"]);
    let messages = server.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let tool_results: Vec<Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().expect("text")).expect("json"))
        .collect();
    let code = |i: usize| tool_results[i]["untrusted_capability_output"]["error"]["code"].clone();
    assert_eq!(code(0), "not_found");
    assert_eq!(code(1), "invalid_arguments");
}

async fn failing(reply: ScriptedReply) -> (ReasonerError, usize) {
    let server = ScriptedOpenAi::start().await;
    server.push(reply);
    let err = openai(&server, openai_config(&server))
        .answer(NlRequest::english("hello"))
        .await
        .expect_err("must fail");
    (err, server.requests().len())
}

#[tokio::test]
async fn openai_backend_failures_are_typed_errors() {
    let (err, _) = failing(ScriptedReply::error(500, "upstream exploded")).await;
    assert_eq!(err.code(), "model_http_error");
    assert!(
        matches!(
            err,
            ReasonerError::Http {
                status: Some(500),
                ..
            }
        ),
        "{err:?}"
    );

    let (err, _) = failing(ScriptedReply::error(401, "bad key")).await;
    assert!(
        matches!(
            err,
            ReasonerError::Http {
                status: Some(401),
                ..
            }
        ),
        "{err:?}"
    );

    let (err, _) = failing(ScriptedReply::raw("this is { not json")).await;
    assert_eq!(err.code(), "model_malformed_response");

    let (err, _) = failing(ScriptedReply::no_choices()).await;
    assert_eq!(err.code(), "model_malformed_response");
    assert!(err.to_string().contains("no choices"), "{err}");

    let (err, _) = failing(ScriptedReply::text("   ")).await;
    assert_eq!(err.code(), "model_empty_answer");
}

#[tokio::test]
async fn openai_retries_server_errors_then_answers() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::error(503, "busy"));
    server.push(ScriptedReply::text("ok now"));
    let config = OpenAiConfig {
        max_retries: 1,
        ..openai_config(&server)
    };
    let answer = openai(&server, config)
        .answer(NlRequest::english("hello"))
        .await
        .expect("second attempt succeeds");
    assert_eq!(answer.text, "ok now");
    assert_eq!(server.requests().len(), 2, "one retry");
}

#[tokio::test]
async fn openai_timeout_is_typed() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::text("too late").delayed(Duration::from_secs(5)));
    let config = OpenAiConfig {
        timeout_ms: 300,
        ..openai_config(&server)
    };
    let started = std::time::Instant::now();
    let err = openai(&server, config)
        .answer(NlRequest::english("hello"))
        .await
        .expect_err("times out");
    assert_eq!(err.code(), "model_timeout");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn openai_endless_tool_calls_are_bounded() {
    let server = ScriptedOpenAi::start().await;
    server.set_fallback(ScriptedReply::tool_call(
        "getProductInfo",
        json!({"productId": "P12345"}),
    ));
    let err = openai(&server, openai_config(&server))
        .answer(NlRequest::english("loop forever"))
        .await
        .expect_err("bounded");
    assert_eq!(err.code(), "too_many_tool_rounds");
    assert!(matches!(err, ReasonerError::TooManyToolRounds { limit: 3 }));
    // Three tool rounds were executed, and the fourth request for tools ended it.
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn openai_config_is_validated_and_secret_redacted() {
    let caps = capabilities();
    let bad = |config: OpenAiConfig| {
        build(ReasonerConfig::OpenAi(config), caps.clone())
            .expect_err("invalid config")
            .code()
    };
    assert_eq!(
        bad(OpenAiConfig::new("http://127.0.0.1:1/v1", " ")),
        "invalid_config"
    );
    assert_eq!(bad(OpenAiConfig::new("not a url", "m")), "invalid_config");
    assert_eq!(
        bad(OpenAiConfig {
            temperature: Some(7.0),
            ..OpenAiConfig::new("http://127.0.0.1:1/v1", "m")
        }),
        "invalid_config"
    );

    let config = OpenAiConfig {
        api_key: Some(ApiKey::new("sk-very-secret")),
        ..OpenAiConfig::new("http://127.0.0.1:1/v1", "m")
    };
    assert!(!format!("{config:?}").contains("sk-very-secret"));
    let reasoner = build(ReasonerConfig::OpenAi(config), caps).expect("valid");
    assert!(!format!("{reasoner:?}").contains("sk-very-secret"));

    // The serde form used in server configuration files.
    let parsed: ReasonerConfig = serde_json::from_value(json!({
        "backend": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "k"
    }))
    .expect("openai config parses");
    let ReasonerConfig::OpenAi(parsed) = parsed else {
        panic!("expected the openai backend");
    };
    assert_eq!(parsed.max_tool_rounds, 4);
    assert_eq!(parsed.api_key.as_ref().map(ApiKey::expose), Some("k"));
    let builtin: ReasonerConfig =
        serde_json::from_value(json!({"backend": "builtin"})).expect("builtin parses");
    assert!(matches!(builtin, ReasonerConfig::Builtin));
}
