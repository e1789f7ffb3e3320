//! What model calls cost, counted through metered views against the scripted OpenAI-compatible
//! server: calls and the tokens each response reported, per purpose; a response without `usage`
//! and a failed request counted as calls with unknown tokens; concurrent meters on one shared
//! backend kept apart; nothing counted for backends that call no model.

use std::sync::Arc;

use parley_anp::ProtocolDoc;
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{
    BuiltinReasoner, DeclaredCapability, HybridProtocolReasoner, ModelPurpose, NlRequest,
    OpenAiConfig, OpenAiProtocolReasoner, OpenAiReasoner, ProtocolReasoner, Reasoner, UsageMeter,
    UsageTally, metered, metered_protocol,
};
use serde_json::json;

use crate::support::{capabilities, product};

fn config(server: &ScriptedOpenAi) -> OpenAiConfig {
    OpenAiConfig {
        timeout_ms: 5_000,
        max_retries: 0,
        ..OpenAiConfig::new(server.base_url(), "scripted-model")
    }
}

/// A product lookup the built-in reasoner cannot map (`sku`, `title`, `cost`).
fn sku() -> ProtocolDoc {
    let request =
        json!({"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]});
    let response = json!({"type": "object", "properties": {"title": {"type": "string"}, "cost": {"type": "number"}}, "required": ["title", "cost"]});
    ProtocolDoc::parse(format!(
        "# Requirements\nPrice of a catalogue item.\n\n# Data Format\n## Request\n```json\n{request:#}\n```\n## Response\n```json\n{response:#}\n```\n"
    ))
    .expect("the sku protocol parses")
}

fn tally(calls: u64, unmetered: u64, prompt: u64, completion: u64) -> UsageTally {
    UsageTally {
        calls,
        unmetered_calls: unmetered,
        prompt_tokens: prompt,
        completion_tokens: completion,
    }
}

fn accept() -> ScriptedReply {
    ScriptedReply::text(
        json!({"decision": "accept", "reason": "sku is the product id", "capability": "getProductInfo"})
            .to_string(),
    )
}

const HANDLER: &str = "function handle(request) {\n  const p = host.call(\"getProductInfo\", { productId: request.sku });\n  return { title: p.productName, cost: p.price };\n}\n";

#[tokio::test]
async fn a_natural_language_answer_counts_each_request_of_its_tool_loop() {
    let server = ScriptedOpenAi::start().await;
    server.push(
        ScriptedReply::tool_call("getProductInfo", json!({"productId": "P12345"}))
            .with_usage(Some((412, 18))),
    );
    server.push(ScriptedReply::text("The laptop costs 1299.99 USD.").with_usage(Some((498, 11))));
    // The next answer's model reports no usage.
    server.push(ScriptedReply::text("Hello.").with_usage(None));
    let reasoner: Arc<dyn Reasoner> =
        Arc::new(OpenAiReasoner::new(config(&server), capabilities()).expect("valid config"));

    let meter = UsageMeter::new();
    let answer = metered(&reasoner, &meter)
        .answer(NlRequest::english("How much is product P12345?"))
        .await
        .expect("answered");
    assert_eq!(answer.model_calls, 2);
    assert_eq!(meter.take(), [(ModelPurpose::Answer, tally(2, 0, 910, 29))]);

    metered(&reasoner, &meter)
        .answer(NlRequest::english("Hi"))
        .await
        .expect("answered");
    assert_eq!(
        meter.take(),
        [(ModelPurpose::Answer, tally(1, 1, 0, 0))],
        "a response without usage is a call with unknown tokens"
    );

    // A failed request is still a call (the script is exhausted: 500), and still unmetered.
    let failed = metered(&reasoner, &meter)
        .answer(NlRequest::english("And now?"))
        .await;
    assert!(failed.is_err());
    assert_eq!(meter.take(), [(ModelPurpose::Answer, tally(1, 1, 0, 0))]);
}

#[tokio::test]
async fn a_negotiation_counts_evaluation_generation_and_fix_apart() {
    let server = ScriptedOpenAi::start().await;
    server.push(accept().with_usage(Some((1200, 40))));
    server.push(
        ScriptedReply::text(json!({"source": HANDLER, "grants": ["getProductInfo"]}).to_string())
            .with_usage(Some((1500, 90))),
    );
    let fixed = HANDLER.replace("p.price", "Number(p.price)");
    server.push(
        ScriptedReply::text(json!({"source": fixed, "grants": ["getProductInfo"]}).to_string())
            .with_usage(Some((1700, 95))),
    );
    let backend: Arc<dyn ProtocolReasoner> =
        Arc::new(OpenAiProtocolReasoner::new(config(&server)).expect("valid config"));
    let specs = DeclaredCapability::all(&capabilities());
    let doc = sku();

    let meter = UsageMeter::new();
    let reasoner = metered_protocol(&backend, &meter);
    reasoner.evaluate(&doc, &specs).await.expect("accepted");
    let handler = reasoner
        .generate_handler(&doc, &specs, None)
        .await
        .expect("generated");
    reasoner
        .fix_handler(&doc, &specs, &handler, "the price was a string")
        .await
        .expect("fixed");
    assert_eq!(
        meter.snapshot(),
        [
            (ModelPurpose::Evaluate, tally(1, 0, 1200, 40)),
            (ModelPurpose::GenerateHandler, tally(1, 0, 1500, 90)),
            (ModelPurpose::FixHandler, tally(1, 0, 1700, 95)),
        ]
    );
    assert_eq!(meter.total(), tally(3, 0, 4400, 225));
    // The backend's own count includes what its views sent.
    assert_eq!(backend.model_calls(), 3);
}

#[tokio::test]
async fn concurrent_meters_on_one_backend_each_see_their_own_calls() {
    let server = ScriptedOpenAi::start().await;
    server.set_fallback(accept().with_usage(Some((100, 5))));
    let backend: Arc<dyn ProtocolReasoner> =
        Arc::new(OpenAiProtocolReasoner::new(config(&server)).expect("valid config"));
    let specs = DeclaredCapability::all(&capabilities());
    let doc = sku();
    let meters: Vec<UsageMeter> = (0..3).map(|_| UsageMeter::new()).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, meter) in meters.iter().enumerate() {
        let reasoner = metered_protocol(&backend, meter);
        let (specs, doc) = (specs.clone(), doc.clone());
        tasks.spawn(async move {
            for _ in 0..=i {
                reasoner.evaluate(&doc, &specs).await.expect("accepted");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("no task panicked");
    }
    for (i, meter) in meters.iter().enumerate() {
        let calls = i as u64 + 1;
        assert_eq!(
            meter.snapshot(),
            [(
                ModelPurpose::Evaluate,
                tally(calls, 0, 100 * calls, 5 * calls)
            )]
        );
    }
    assert_eq!(backend.model_calls(), 6);
}

#[tokio::test]
async fn backends_without_a_model_spend_nothing() {
    let server = ScriptedOpenAi::start().await;
    let meter = UsageMeter::new();
    let builtin: Arc<dyn Reasoner> = Arc::new(BuiltinReasoner::new(capabilities()));
    assert!(builtin.metered(&meter).is_none());
    metered(&builtin, &meter)
        .answer(NlRequest::english("help"))
        .await
        .expect("answered");

    // The hybrid decides the product protocol on its own: its metered view asks nothing.
    let model: Arc<dyn ProtocolReasoner> =
        Arc::new(OpenAiProtocolReasoner::new(config(&server)).expect("valid config"));
    let hybrid: Arc<dyn ProtocolReasoner> = Arc::new(HybridProtocolReasoner::new(model));
    let product = product();
    let specs = DeclaredCapability::all(&capabilities());
    let reasoner = metered_protocol(&hybrid, &meter);
    reasoner.evaluate(&product, &specs).await.expect("decided");
    reasoner
        .generate_handler(&product, &specs, None)
        .await
        .expect("generated");
    assert!(meter.snapshot().is_empty(), "{:?}", meter.snapshot());
    assert!(server.requests().is_empty());

    // Where it cannot decide, the model's calls reach the hybrid's meter.
    server.push(accept().with_usage(Some((300, 9))));
    reasoner.evaluate(&sku(), &specs).await.expect("decided");
    assert_eq!(
        meter.snapshot(),
        [(ModelPurpose::Evaluate, tally(1, 0, 300, 9))]
    );
}
