//! The OpenAI-compatible protocol reasoner and the hybrid one, against the scripted
//! OpenAI-compatible server over real HTTP on loopback: decisions, JSON mode, every way a model
//! answer can be unusable (each a typed error), HTTP failures, the fix prompt, and model-call
//! counts (zero for the product protocol under the hybrid).

use std::sync::Arc;
use std::time::Duration;

use parley_anp::{ProtocolDoc, Verdict};
use parley_reasoner::testing::{RecordedRequest, ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{
    BuiltinProtocolReasoner, Evaluation, GeneratedHandler, HybridProtocolReasoner,
    ModelAnswerError, OpenAiConfig, OpenAiProtocolReasoner, ProtocolReasoner,
    ProtocolReasonerError, ReasonerConfig, ReasonerError, build_protocol_reasoner,
};
use serde_json::{Value, json};

use crate::support::{declared_capabilities, product, product_text};

/// A product lookup in words the built-in reasoner cannot match (`sku`, `title`, `cost`): it
/// rejects, a model could map it onto `getProductInfo`.
fn sku() -> ProtocolDoc {
    let request = json!({"type": "object", "properties": {"sku": {"type": "string", "description": "Catalogue code such as P12345"}}, "required": ["sku"]});
    let response = json!({"type": "object", "properties": {"title": {"type": "string"}, "cost": {"type": "number"}}, "required": ["title", "cost"]});
    ProtocolDoc::parse(format!(
        "# Requirements\nPrice of a catalogue item.\n\n# Data Format\n## Request\n```json\n{request:#}\n```\n## Response\n```json\n{response:#}\n```\n\n# Error Handling\n- 404 when nothing is found.\n"
    ))
    .expect("the sku protocol parses")
}

fn config(server: &ScriptedOpenAi) -> OpenAiConfig {
    OpenAiConfig {
        timeout_ms: 5_000,
        // No retries: a scripted 500 must surface at once, and counts stay exact.
        max_retries: 0,
        ..OpenAiConfig::new(server.base_url(), "scripted-model")
    }
}

fn model(server: &ScriptedOpenAi) -> OpenAiProtocolReasoner {
    OpenAiProtocolReasoner::new(config(server)).expect("valid config")
}

/// A completion whose content is `value` as JSON text.
fn answer(value: Value) -> ScriptedReply {
    ScriptedReply::text(value.to_string())
}

/// The user message (the second one) of a recorded request.
fn user_message(request: &RecordedRequest) -> String {
    request.body["messages"][1]["content"]
        .as_str()
        .expect("a text user message")
        .to_owned()
}

fn handler_source() -> &'static str {
    "function handle(request) {\n  const p = host.call(\"getProductInfo\", { productId: request.sku });\n  return { title: p.productName, cost: p.price };\n}\n"
}

/// The model error inside `err`, or a panic naming what came instead.
fn model_error(err: &ProtocolReasonerError) -> &ModelAnswerError {
    match err {
        ProtocolReasonerError::ModelAnswer(e) => e,
        other => panic!("expected a model-answer error, got {other:?}"),
    }
}

// --- evaluate ---------------------------------------------------------------------------------

#[tokio::test]
async fn evaluate_accept_in_json_mode() {
    let server = ScriptedOpenAi::start().await;
    server.push(answer(json!({
        "decision": "accept",
        "reason": "sku is the product id; title and cost are name and price.",
        "capability": "getProductInfo"
    })));
    let reasoner = model(&server);
    let doc = sku();
    let evaluation = reasoner
        .evaluate(&doc, &declared_capabilities())
        .await
        .expect("accepted");
    let Evaluation::Accept { mapping } = evaluation else {
        panic!("expected accept, got {evaluation:?}");
    };
    assert_eq!(mapping.capability, "getProductInfo");
    assert_eq!(reasoner.model_calls(), 1);
    assert_eq!(ProtocolReasoner::model_calls(&reasoner), 1);

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(body["model"], "scripted-model");
    assert!(
        body.get("tools").is_none(),
        "no tools offered for evaluation"
    );
    assert_eq!(body["messages"][0]["role"], "system");
    let system = body["messages"][0]["content"]
        .as_str()
        .expect("system text");
    assert!(system.contains("\"decision\""), "{system}");
    let user = user_message(&requests[0]);
    assert!(user.contains(doc.text()), "the whole protocol is sent");
    assert!(
        user.contains("getOrderStatus") && user.contains("\"inputSchema\""),
        "capabilities with schemas are sent: {user}"
    );
}

#[tokio::test]
async fn evaluate_counter_with_a_valid_protocol() {
    let server = ScriptedOpenAi::start().await;
    server.push(answer(json!({
        "decision": "counter",
        "reason": "The provider looks products up by productId.",
        "capability": "getProductInfo",
        "counterProtocol": product_text(),
        "modificationSummary": "- Request: `sku` is now `productId`."
    })));
    let reasoner = model(&server);
    let evaluation = reasoner
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect("countered");
    assert_eq!(
        evaluation,
        Evaluation::Counter {
            text: product_text(),
            summary: "- Request: `sku` is now `productId`.".into()
        }
    );
    assert!(matches!(evaluation.verdict(), Verdict::Counter { .. }));
    assert_eq!(reasoner.model_calls(), 1);
}

#[tokio::test]
async fn evaluate_reject() {
    let server = ScriptedOpenAi::start().await;
    server.push(answer(
        json!({"decision": "reject", "reason": "No capability knows about weather."}),
    ));
    let evaluation = model(&server)
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect("rejected");
    assert_eq!(
        evaluation,
        Evaluation::Reject {
            reason: "No capability knows about weather.".into()
        }
    );
}

#[tokio::test]
async fn evaluate_accepts_a_fenced_answer() {
    // Servers that ignore response_format often fence the JSON; one fence is unwrapped.
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::text(
        "```json\n{\"decision\": \"accept\", \"reason\": \"ok\", \"capability\": \"getProductInfo\"}\n```",
    ));
    let evaluation = model(&server)
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect("accepted");
    assert!(matches!(evaluation, Evaluation::Accept { .. }));
}

/// Evaluates `sku()` against one scripted reply; returns the error and the calls counted.
async fn evaluate_failing(reply: ScriptedReply) -> (ProtocolReasonerError, u64) {
    let server = ScriptedOpenAi::start().await;
    server.push(reply);
    let reasoner = model(&server);
    let err = reasoner
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect_err("the answer is unusable");
    assert_eq!(server.requests().len(), 1);
    (err, reasoner.model_calls())
}

#[tokio::test]
async fn unusable_evaluations_are_typed_errors() {
    // Garbage prose.
    let (err, calls) = evaluate_failing(ScriptedReply::text(
        "I think the provider could probably accept this.",
    ))
    .await;
    assert_eq!(err.code(), "model_invalid_json");
    assert!(matches!(
        model_error(&err),
        ModelAnswerError::InvalidJson { .. }
    ));
    assert_eq!(calls, 1, "a failed answer still counts as a call");
    assert!(err.is_backend_failure());

    // Broken JSON.
    let (err, _) = evaluate_failing(ScriptedReply::text("{\"decision\": \"accept\", ")).await;
    assert_eq!(err.code(), "model_invalid_json");

    // JSON, but not an object.
    let (err, _) = evaluate_failing(answer(json!(["accept"]))).await;
    assert_eq!(err.code(), "model_invalid_json");

    // Missing fields.
    let (err, _) = evaluate_failing(answer(json!({"reason": "fine"}))).await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField { field: "decision" }
    );
    let (err, _) = evaluate_failing(answer(json!({"decision": "accept", "reason": "ok"}))).await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField {
            field: "capability"
        }
    );
    let (err, _) = evaluate_failing(answer(json!({"decision": "reject"}))).await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField { field: "reason" }
    );
    let (err, _) = evaluate_failing(answer(
        json!({"decision": "counter", "reason": "x", "modificationSummary": "y"}),
    ))
    .await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField {
            field: "counterProtocol"
        }
    );
    assert_eq!(err.code(), "model_missing_field");

    // Wrong values and types.
    let (err, _) = evaluate_failing(answer(json!({"decision": "maybe", "reason": "hmm"}))).await;
    assert_eq!(err.code(), "model_invalid_field");
    let (err, _) = evaluate_failing(answer(
        json!({"decision": "accept", "capability": 7, "reason": "x"}),
    ))
    .await;
    assert_eq!(err.code(), "model_invalid_field");

    // Accept naming a capability the provider does not have.
    let (err, _) = evaluate_failing(answer(
        json!({"decision": "accept", "reason": "ok", "capability": "getWeather"}),
    ))
    .await;
    assert_eq!(err.code(), "model_unknown_capability");
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::UnknownCapability {
            name: "getWeather".into()
        }
    );
}

#[tokio::test]
async fn invalid_counter_proposals_are_typed_errors() {
    // Not a protocol document (no data format section, no schemas).
    let (err, _) = evaluate_failing(answer(json!({
        "decision": "counter",
        "reason": "different shape",
        "capability": "getProductInfo",
        "counterProtocol": "# Requirements\nJust send the sku and trust me.",
        "modificationSummary": "- simpler"
    })))
    .await;
    assert_eq!(err.code(), "model_invalid_counter");
    assert!(err.to_string().contains("missing_section"), "{err}");

    // The proposal itself is no counter-proposal.
    let (err, _) = evaluate_failing(answer(json!({
        "decision": "counter",
        "reason": "same",
        "counterProtocol": sku().text(),
        "modificationSummary": "- nothing"
    })))
    .await;
    assert_eq!(err.code(), "model_invalid_counter");

    // A counter without its summary.
    let (err, _) = evaluate_failing(answer(json!({
        "decision": "counter",
        "reason": "x",
        "counterProtocol": product_text()
    })))
    .await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField {
            field: "modificationSummary"
        }
    );
}

#[tokio::test]
async fn http_and_transport_failures_are_typed_errors() {
    let (err, calls) = evaluate_failing(ScriptedReply::error(500, "upstream exploded")).await;
    assert_eq!(err.code(), "reasoner_unavailable");
    assert!(
        matches!(
            err,
            ProtocolReasonerError::Backend(ReasonerError::Http {
                status: Some(500),
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(calls, 1);
    assert!(err.is_backend_failure());

    // The endpoint itself answers garbage (not a chat completion).
    let (err, _) = evaluate_failing(ScriptedReply::raw("<html>bad gateway</html>")).await;
    assert!(
        matches!(
            err,
            ProtocolReasonerError::Backend(ReasonerError::MalformedResponse(_))
        ),
        "{err:?}"
    );

    let (err, _) = evaluate_failing(ScriptedReply::no_choices()).await;
    assert!(
        matches!(
            err,
            ProtocolReasonerError::Backend(ReasonerError::MalformedResponse(_))
        ),
        "{err:?}"
    );

    let (err, _) = evaluate_failing(ScriptedReply::text("  ")).await;
    assert!(
        matches!(
            err,
            ProtocolReasonerError::Backend(ReasonerError::EmptyAnswer)
        ),
        "{err:?}"
    );

    // A refusal is the model's, typed as such.
    let refusal = ScriptedReply::Json {
        status: 200,
        body: json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 1_700_000_000,
            "model": "scripted-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}]
        }),
    };
    let (err, _) = evaluate_failing(refusal).await;
    assert_eq!(err.code(), "model_refused");
}

#[tokio::test]
async fn a_slow_model_times_out() {
    let server = ScriptedOpenAi::start().await;
    server.push(
        answer(json!({"decision": "reject", "reason": "late"})).delayed(Duration::from_secs(3)),
    );
    let reasoner = OpenAiProtocolReasoner::new(OpenAiConfig {
        timeout_ms: 200,
        ..config(&server)
    })
    .expect("valid config");
    let err = reasoner
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect_err("too slow");
    assert!(
        matches!(
            err,
            ProtocolReasonerError::Backend(ReasonerError::Timeout { .. })
        ),
        "{err:?}"
    );
}

// --- handlers ---------------------------------------------------------------------------------

#[tokio::test]
async fn generates_a_handler_in_json_mode() {
    let server = ScriptedOpenAi::start().await;
    server.push(answer(json!({
        "source": handler_source(),
        "grants": ["getProductInfo", "getProductInfo"]
    })));
    let reasoner = model(&server);
    let doc = sku();
    let mapping = match BuiltinProtocolReasoner.evaluate_sync(&product(), &declared_capabilities())
    {
        Evaluation::Accept { mapping } => mapping,
        other => panic!("the product protocol is accepted, got {other:?}"),
    };
    let handler = reasoner
        .generate_handler(&doc, &declared_capabilities(), Some(&mapping))
        .await
        .expect("a handler");
    assert_eq!(
        handler,
        GeneratedHandler {
            source: handler_source().into(),
            grants: vec!["getProductInfo".into()], // deduplicated
            compiled: None,
        }
    );
    let requests = server.requests();
    assert_eq!(requests[0].body["response_format"]["type"], "json_object");
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system text");
    assert!(
        system.contains("function handle(request)") && system.contains("host.call(name, args)"),
        "the ABI is in the prompt: {system}"
    );
    let user = user_message(&requests[0]);
    assert!(user.contains(doc.text()));
    assert!(
        user.contains("accepted for the capability `getProductInfo`"),
        "{user}"
    );
    assert_eq!(reasoner.model_calls(), 1);
}

async fn generate_failing(reply: ScriptedReply) -> ProtocolReasonerError {
    let server = ScriptedOpenAi::start().await;
    server.push(reply);
    model(&server)
        .generate_handler(&sku(), &declared_capabilities(), None)
        .await
        .expect_err("the handler is unusable")
}

#[tokio::test]
async fn unusable_handlers_are_typed_errors() {
    // No `handle` function.
    let err = generate_failing(answer(json!({
        "source": "function process(request) { return {}; }",
        "grants": ["getProductInfo"]
    })))
    .await;
    assert_eq!(err.code(), "model_invalid_handler");

    // An arrow function is not the global `handle` the sandbox looks up.
    let err = generate_failing(answer(json!({
        "source": "const handle = (request) => ({});",
        "grants": []
    })))
    .await;
    assert_eq!(err.code(), "model_invalid_handler");

    // Empty source.
    let err = generate_failing(answer(json!({"source": "  ", "grants": []}))).await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField { field: "source" }
    );

    // Grants naming undeclared capabilities.
    let err = generate_failing(answer(json!({
        "source": handler_source(),
        "grants": ["getProductInfo", "deleteEverything"]
    })))
    .await;
    assert_eq!(err.code(), "model_undeclared_grant");
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::UndeclaredGrant {
            names: vec!["deleteEverything".into()]
        }
    );

    // Grants missing or of the wrong shape.
    let err = generate_failing(answer(json!({"source": handler_source()}))).await;
    assert_eq!(
        model_error(&err),
        &ModelAnswerError::MissingField { field: "grants" }
    );
    let err = generate_failing(answer(
        json!({"source": handler_source(), "grants": "getProductInfo"}),
    ))
    .await;
    assert_eq!(err.code(), "model_invalid_field");

    // Garbage and HTTP errors, as for evaluation.
    let err = generate_failing(ScriptedReply::text(
        "Here is your handler: function handle() {}",
    ))
    .await;
    assert_eq!(err.code(), "model_invalid_json");
    let err = generate_failing(ScriptedReply::error(503, "overloaded")).await;
    assert_eq!(err.code(), "reasoner_unavailable");
}

#[tokio::test]
async fn fix_sends_the_failure_and_the_previous_source() {
    let server = ScriptedOpenAi::start().await;
    let fixed = "function handle(request) {\n  if (typeof request.sku !== \"string\") return { title: \"\", cost: 0 };\n  const p = host.call(\"getProductInfo\", { productId: request.sku });\n  return { title: p.productName, cost: p.price };\n}\n";
    server.push(answer(
        json!({"source": fixed, "grants": ["getProductInfo"]}),
    ));
    let reasoner = model(&server);
    let previous = GeneratedHandler {
        source: handler_source().into(),
        grants: vec!["getProductInfo".into()],
        compiled: None,
    };
    let failure = "test case `missing sku`: handler_threw: TypeError: cannot read property 'productName' of null";
    let handler = reasoner
        .fix_handler(&sku(), &declared_capabilities(), &previous, failure)
        .await
        .expect("fixed");
    assert_eq!(handler.source, fixed);
    assert_eq!(handler.grants, vec!["getProductInfo".to_owned()]);

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["response_format"]["type"], "json_object");
    let user = user_message(&requests[0]);
    assert!(user.contains(failure), "the failure is sent: {user}");
    assert!(
        user.contains(handler_source()),
        "the previous source is sent: {user}"
    );
    assert!(user.contains(sku().text()), "the protocol is sent");
    assert_eq!(reasoner.model_calls(), 1);
}

#[tokio::test]
async fn a_fix_that_changes_nothing_cannot_fix() {
    let server = ScriptedOpenAi::start().await;
    server.push(answer(
        json!({"source": handler_source(), "grants": ["getProductInfo"]}),
    ));
    let previous = GeneratedHandler {
        source: handler_source().into(),
        grants: vec!["getProductInfo".into()],
        compiled: None,
    };
    let err = model(&server)
        .fix_handler(&sku(), &declared_capabilities(), &previous, "it failed")
        .await
        .expect_err("the same handler is no fix");
    assert_eq!(err.code(), "cannot_fix");
    assert!(!err.is_backend_failure());
}

// --- draft and test cases -------------------------------------------------------------------

#[tokio::test]
async fn drafts_are_validated() {
    let server = ScriptedOpenAi::start().await;
    server.push(answer(json!({"protocol": product_text()})));
    server.push(answer(json!({"protocol": "# Requirements\nSomething."})));
    let reasoner = model(&server);
    let input = json!({"type": "object", "properties": {"productId": {"type": "string"}}, "required": ["productId"]});
    let output = json!({"type": "object", "properties": {"price": {"type": "number"}}});
    let text = reasoner
        .draft("Get a product's price by its id.", &input, &output)
        .await
        .expect("a draft");
    assert_eq!(text, product_text());
    let user = user_message(&server.requests()[0]);
    assert!(user.contains("Get a product's price by its id."), "{user}");
    assert!(user.contains("\"productId\""), "{user}");

    let err = reasoner
        .draft("Get a product's price by its id.", &input, &output)
        .await
        .expect_err("not a protocol document");
    assert_eq!(err.code(), "model_invalid_draft");
    assert_eq!(reasoner.model_calls(), 2);
}

#[tokio::test]
async fn test_case_review() {
    let server = ScriptedOpenAi::start().await;
    let corrected = json!([{
        "name": "known product",
        "request": {"sku": "P12345"},
        "expectedResponse": {"title": "High-performance Laptop", "cost": 1299.99},
        "fixtures": {"getProductInfo": [{"args": {"productId": "P12345"}, "result": {"productName": "High-performance Laptop", "price": 1299.99}}]}
    }]);
    server.push(answer(json!({
        "decision": "counter",
        "reason": "The price was wrong.",
        "testCases": corrected,
        "modificationSummary": "- known product: cost is 1299.99"
    })));
    server.push(answer(json!({"decision": "accept", "reason": "fine"})));
    let reasoner = model(&server);
    let proposed = "```json\n[{\"name\": \"known product\", \"request\": {\"sku\": \"P12345\"}, \"expectedResponse\": {\"cost\": 1}}]\n```";
    let verdict = reasoner
        .evaluate_test_cases(&sku(), proposed)
        .await
        .expect("reviewed");
    let Verdict::Counter { text, summary } = verdict else {
        panic!("expected a counter, got {verdict:?}");
    };
    let cases = parley_anp::parse_test_cases(&text).expect("the counter parses");
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0].expected_response["cost"], json!(1299.99));
    assert!(summary.contains("1299.99"));
    assert!(user_message(&server.requests()[0]).contains(proposed));

    assert_eq!(
        reasoner
            .evaluate_test_cases(&sku(), proposed)
            .await
            .expect("reviewed"),
        Verdict::Accept
    );
    // Text that does not parse as test cases is rejected without asking.
    let verdict = reasoner
        .evaluate_test_cases(&sku(), "no json here")
        .await
        .expect("reviewed");
    assert!(matches!(verdict, Verdict::Reject { .. }), "{verdict:?}");
    assert_eq!(reasoner.model_calls(), 2);
}

// --- hybrid -----------------------------------------------------------------------------------

fn hybrid(server: &ScriptedOpenAi) -> HybridProtocolReasoner {
    HybridProtocolReasoner::new(Arc::new(model(server)))
}

#[tokio::test]
async fn hybrid_negotiates_the_product_protocol_without_the_model() {
    let server = ScriptedOpenAi::start().await;
    let reasoner = hybrid(&server);
    assert_eq!(reasoner.backend(), "hybrid");
    let doc = product();
    let caps = declared_capabilities();
    let evaluation = reasoner.evaluate(&doc, &caps).await.expect("decided");
    let Evaluation::Accept { mapping } = evaluation else {
        panic!("the built-in reasoner accepts the product protocol, got {evaluation:?}");
    };
    let handler = reasoner
        .generate_handler(&doc, &caps, Some(&mapping))
        .await
        .expect("generated");
    assert_eq!(
        handler,
        BuiltinProtocolReasoner
            .generate_sync(&doc, &caps, Some(&mapping))
            .expect("built-in handler"),
        "the built-in handler"
    );
    // The built-in draft and test-case review, too.
    let product_cap = caps
        .iter()
        .find(|c| c.name == "getProductInfo")
        .expect("example");
    reasoner
        .draft(
            "Get a product by id.",
            &json!({"type": "object", "properties": {"productId": {"type": "string"}}, "required": ["productId"]}),
            &product_cap.output_schema,
        )
        .await
        .expect("drafted");
    let cases = doc
        .sections()
        .test_cases
        .clone()
        .expect("the example has test cases");
    assert_eq!(
        reasoner
            .evaluate_test_cases(&doc, &cases)
            .await
            .expect("reviewed"),
        Verdict::Accept
    );

    assert_eq!(reasoner.model_calls(), 0);
    assert!(server.requests().is_empty(), "no request reached the model");
}

#[tokio::test]
async fn hybrid_asks_the_model_what_the_builtin_cannot_map() {
    let server = ScriptedOpenAi::start().await;
    let reasoner = hybrid(&server);
    let doc = sku();
    let caps = declared_capabilities();
    assert!(
        matches!(
            BuiltinProtocolReasoner.evaluate_sync(&doc, &caps),
            Evaluation::Reject { .. }
        ),
        "premise: the built-in reasoner cannot map `sku`"
    );

    server.push(answer(json!({
        "decision": "accept",
        "reason": "sku is the product id.",
        "capability": "getProductInfo"
    })));
    server.push(answer(
        json!({"source": handler_source(), "grants": ["getProductInfo"]}),
    ));
    let fixed = handler_source().replace(
        "return {",
        "return p === null ? { title: \"\", cost: 0 } : {",
    );
    server.push(answer(
        json!({"source": fixed, "grants": ["getProductInfo"]}),
    ));

    let Evaluation::Accept { mapping } = reasoner.evaluate(&doc, &caps).await.expect("decided")
    else {
        panic!("the model accepts");
    };
    assert_eq!(reasoner.model_calls(), 1);
    let handler = reasoner
        .generate_handler(&doc, &caps, Some(&mapping))
        .await
        .expect("generated");
    assert_eq!(handler.source, handler_source());
    // A successful negotiation: one evaluation and one generation.
    assert_eq!(reasoner.model_calls(), 2);

    // Verification failed once: the built-in reasoner cannot serve the protocol, so the fix
    // goes to the model, with the failure.
    let failure = "test case `unknown`: handler_threw: TypeError: p is null";
    let again = reasoner
        .fix_handler(&doc, &caps, &handler, failure)
        .await
        .expect("fixed");
    assert_eq!(again.source, fixed);
    assert_eq!(reasoner.model_calls(), 3);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(user_message(&requests[2]).contains(failure));
}

#[tokio::test]
async fn hybrid_fixes_a_builtin_handler_through_the_model() {
    // The built-in generator reproduces its own handler, so it cannot fix it; the model can.
    let server = ScriptedOpenAi::start().await;
    let reasoner = hybrid(&server);
    let doc = product();
    let caps = declared_capabilities();
    let handler = reasoner
        .generate_handler(&doc, &caps, None)
        .await
        .expect("built-in handler");
    assert_eq!(reasoner.model_calls(), 0);
    let fixed = format!("// fixed\n{}", handler.source);
    server.push(answer(
        json!({"source": fixed, "grants": ["getProductInfo"]}),
    ));
    let again = reasoner
        .fix_handler(&doc, &caps, &handler, "status 500 instead of 404")
        .await
        .expect("fixed by the model");
    assert_eq!(again.source, fixed);
    assert_eq!(reasoner.model_calls(), 1);
}

#[tokio::test]
async fn hybrid_reports_a_model_failure_instead_of_the_builtin_reject() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::error(500, "down"));
    let reasoner = hybrid(&server);
    let err = reasoner
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect_err("the model is down");
    assert_eq!(err.code(), "reasoner_unavailable");
    assert_eq!(reasoner.model_calls(), 1);
}

// --- construction -----------------------------------------------------------------------------

#[tokio::test]
async fn build_from_config() {
    let builtin = build_protocol_reasoner(&ReasonerConfig::Builtin).expect("builtin builds");
    assert_eq!(builtin.backend(), "builtin");
    assert_eq!(builtin.model_calls(), 0);

    let server = ScriptedOpenAi::start().await;
    let configured =
        build_protocol_reasoner(&ReasonerConfig::OpenAi(config(&server))).expect("openai builds");
    assert_eq!(configured.backend(), "hybrid");
    // Built without touching the endpoint, and the product protocol costs nothing.
    configured
        .evaluate(&product(), &declared_capabilities())
        .await
        .expect("decided");
    assert_eq!(configured.model_calls(), 0);
    assert!(server.requests().is_empty());

    // The counter of the Arc<dyn> the server holds moves with the model's calls.
    server.push(answer(json!({"decision": "reject", "reason": "no"})));
    configured
        .evaluate(&sku(), &declared_capabilities())
        .await
        .expect("decided");
    assert_eq!(configured.model_calls(), 1);

    let err = build_protocol_reasoner(&ReasonerConfig::OpenAi(OpenAiConfig::new("not a url", "m")))
        .expect_err("bad base_url");
    assert_eq!(err.code(), "invalid_config");
    let err = build_protocol_reasoner(&ReasonerConfig::OpenAi(OpenAiConfig::new(
        "http://127.0.0.1:1/v1",
        " ",
    )))
    .expect_err("empty model");
    assert_eq!(err.code(), "invalid_config");
}
