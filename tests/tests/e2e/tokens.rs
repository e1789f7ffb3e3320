//! Token accounting behind a real Parley server, against the scripted OpenAI-compatible server:
//! the `usage` of every model response reaches `/metrics` (calls and tokens per purpose) and the
//! store (per conversation for natural-language answers, per negotiation for its reasoning), on
//! SQLite and on PostgreSQL; structured calls through the agreed protocol cost nothing more.
//!
//! The metrics recorder is one per process, so the tests of this binary that make a server call a
//! model take turns (`support::MODEL`), and these compare counters before and after.

use std::path::Path;

use parley::config::{ProtocolBackend, ReasonerKind, Settings};
use parley::negotiation::requester::{Outcome, Requester};
use parley_nlip::{Format, Message, Submessage};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_store::{ModelUsage, ModelUsageOwner, NegotiationStatus};
use parley_tests::{TestApp, post_json, test_settings};
use serde_json::json;

use crate::support::MODEL;

fn spent(purpose: &str, calls: i64, unmetered: i64, prompt: i64, completion: i64) -> ModelUsage {
    ModelUsage {
        purpose: purpose.into(),
        calls,
        unmetered_calls: unmetered,
        prompt_tokens: prompt,
        completion_tokens: completion,
    }
}

/// The value of the series `name` whose labels include every pair of `labels` (0 when absent).
async fn metric(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = reqwest::get(app.http("/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Calls, unmetered calls, prompt and completion tokens of `purpose` in `/metrics`.
async fn counters(app: &TestApp, purpose: &str) -> [f64; 4] {
    [
        metric(app, "parley_model_calls_total", &[("purpose", purpose)]).await,
        metric(
            app,
            "parley_model_unmetered_calls_total",
            &[("purpose", purpose)],
        )
        .await,
        metric(
            app,
            "parley_model_tokens_total",
            &[("purpose", purpose), ("kind", "prompt")],
        )
        .await,
        metric(
            app,
            "parley_model_tokens_total",
            &[("purpose", purpose), ("kind", "completion")],
        )
        .await,
    ]
}

fn delta(after: [f64; 4], before: [f64; 4]) -> [f64; 4] {
    [0, 1, 2, 3].map(|i| after[i] - before[i])
}

fn openai_settings(dir: &Path, model: &ScriptedOpenAi) -> Settings {
    let mut settings = test_settings(dir);
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.openai.model = "scripted-model".into();
    settings
}

#[tokio::test]
async fn a_natural_language_answer_s_tokens_reach_the_metrics_and_its_conversation() {
    let model = ScriptedOpenAi::start().await;
    model.push(
        ScriptedReply::tool_call("getProductInfo", json!({"productId": "P12345"}))
            .with_usage(Some((400, 20))),
    );
    model.push(
        ScriptedReply::text("The High-performance Laptop costs 1299.99 USD.")
            .with_usage(Some((450, 15))),
    );
    // The second answer's model reports no usage: a call with unknown tokens.
    model.push(ScriptedReply::text("You asked about the laptop.").with_usage(None));
    // A stateless message: counted in the metrics, stored nowhere.
    model.push(ScriptedReply::text("Hello.").with_usage(Some((300, 2))));

    let dir = tempfile::tempdir().expect("tempdir");
    let settings = openai_settings(dir.path(), &model);
    let app = TestApp::spawn(&settings).await;
    let _turn = MODEL.lock().await;
    let before = counters(&app, "answer").await;

    let first = Message::text("english", "How much is product P12345?").with_submessage(
        Submessage::new(Format::Token, "conversation_client", "conv-tokens"),
    );
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&first)).await;
    assert_eq!(status, 200, "{reply}");
    let own = parley_nlip::from_json_value(&reply)
        .expect("valid")
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .expect("own conversation token")
        .clone();
    let conversation = own.content.as_str().expect("an id").to_owned();
    let second = Message::text("english", "What did I ask?").with_submessage(own);
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&second)).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": "hello"}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");

    assert_eq!(
        delta(counters(&app, "answer").await, before),
        [4.0, 1.0, 1150.0, 37.0],
        "calls, unmetered calls, prompt and completion tokens"
    );
    app.stop().await;

    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("store");
    assert_eq!(
        store
            .model_usage(&ModelUsageOwner::Conversation(conversation))
            .await
            .expect("read"),
        [spent("answer", 3, 1, 850, 35)],
        "the conversation's two answers; the stateless one is not stored"
    );
}

/// The product protocol negotiated with the model for every decision (evaluate, then generate
/// the handler), then called through the agreed protocol: what the store and the metrics say.
async fn negotiation_cost(settings: Settings, model: &ScriptedOpenAi) {
    let text = crate::support::product_protocol();
    let handler = crate::support::builtin_handler().await;
    model.push(
        ScriptedReply::text(
            json!({"decision": "accept", "reason": "getProductInfo serves it", "capability": "getProductInfo"})
                .to_string(),
        )
        .with_usage(Some((1200, 40))),
    );
    model.push(
        ScriptedReply::text(
            json!({"source": handler.source, "grants": ["getProductInfo"]}).to_string(),
        )
        .with_usage(Some((1500, 600))),
    );

    let provider = TestApp::spawn(&settings).await;
    let _turn = MODEL.lock().await;
    let before = [
        counters(&provider, "evaluate").await,
        counters(&provider, "generate_handler").await,
    ];
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = Requester::new(
        parley_store::connect(
            &format!(
                "sqlite://{}/requester.db?mode=rwc",
                requester_dir.path().display()
            ),
            Default::default(),
        )
        .await
        .expect("requester store"),
    );
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiate");
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    for i in 0..10 {
        let request = json!({"messageId": format!("m{i}"), "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"});
        let called = requester
            .call(&provider.url(), &negotiated.hash, request)
            .await
            .expect("call");
        assert_eq!(called.answer["status"]["code"], 200, "{}", called.answer);
    }
    assert_eq!(model.requests().len(), 2, "structured calls ask no model");
    assert_eq!(
        delta(counters(&provider, "evaluate").await, before[0]),
        [1.0, 0.0, 1200.0, 40.0]
    );
    assert_eq!(
        delta(counters(&provider, "generate_handler").await, before[1]),
        [1.0, 0.0, 1500.0, 600.0]
    );
    provider.stop().await;

    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("store");
    let hash = negotiated.hash.to_string();
    let negotiations = store
        .negotiations_for_protocol(&hash)
        .await
        .expect("negotiations");
    assert_eq!(negotiations.len(), 1, "{negotiations:?}");
    assert_eq!(negotiations[0].status, NegotiationStatus::Accepted);
    let usage = store
        .model_usage(&ModelUsageOwner::Negotiation(negotiations[0].id))
        .await
        .expect("read");
    assert_eq!(
        usage,
        [
            spent("evaluate", 1, 0, 1200, 40),
            spent("generate_handler", 1, 0, 1500, 600)
        ]
    );
    // The conversation that carried the negotiation answered no natural language.
    let conversation = ModelUsageOwner::Conversation(negotiations[0].conversation_id.clone());
    assert_eq!(store.model_usage(&conversation).await.expect("read"), []);
    // The requester's side made no model call of its own.
    let mine = requester
        .store
        .negotiations_for_protocol(&hash)
        .await
        .expect("negotiations");
    for n in mine {
        let owner = ModelUsageOwner::Negotiation(n.id);
        assert_eq!(requester.store.model_usage(&owner).await.expect("read"), []);
    }
}

fn model_negotiation_settings(dir: &Path, model: &ScriptedOpenAi) -> Settings {
    let mut settings = openai_settings(dir, model);
    settings.negotiation.backend = ProtocolBackend::Openai;
    settings
}

#[tokio::test]
async fn a_negotiation_s_cost_is_recorded_with_it_on_sqlite() {
    let model = ScriptedOpenAi::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    negotiation_cost(model_negotiation_settings(dir.path(), &model), &model).await;
}

#[tokio::test]
async fn a_negotiation_s_cost_is_recorded_with_it_on_postgres() {
    let model = ScriptedOpenAi::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, database) = parley_store::testing::fresh_postgres_url().await;
    let mut settings = model_negotiation_settings(dir.path(), &model);
    settings.database_url = Some(url);
    negotiation_cost(settings, &model).await;
    database
        .drop_database()
        .await
        .expect("drop the test database");
}
