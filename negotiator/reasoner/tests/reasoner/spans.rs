//! The spans of model calls and evaluations: `model.call` with its purpose and model,
//! `reasoner.evaluate` with the backend, the protocol's hash and the decision, nested as the
//! calls are; and never a prompt, a protocol text or an API key in any field.

use std::sync::{Arc, Mutex, OnceLock};

use parley_anp::ProtocolDoc;
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{
    ApiKey, HybridProtocolReasoner, NlRequest, OpenAiConfig, OpenAiProtocolReasoner,
    OpenAiReasoner, ProtocolReasoner, Reasoner,
};
use serde_json::json;
use tracing::Dispatch;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, NoSubscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::support::{capabilities, declared_capabilities, product};

/// One span as the layer saw it: its name, its parent's name, and every field recorded on it.
#[derive(Debug, Clone)]
struct SeenSpan {
    name: String,
    parent: Option<String>,
    fields: Vec<(String, String)>,
}

impl SeenSpan {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Records every span created while it is the default subscriber.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SeenSpan>>>);

/// The index of a span's entry, kept in the span's extensions.
struct SpanIndex(usize);

struct FieldRecorder<'a>(&'a mut Vec<(String, String)>);

impl Visit for FieldRecorder<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Vec::new();
        attrs.record(&mut FieldRecorder(&mut fields));
        let span = ctx.span(id).expect("a new span is registered");
        let parent = span.parent().map(|p| p.name().to_owned());
        let mut seen = self.0.lock().expect("not poisoned");
        seen.push(SeenSpan {
            name: attrs.metadata().name().to_owned(),
            parent,
            fields,
        });
        span.extensions_mut().insert(SpanIndex(seen.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span is registered");
        let extensions = span.extensions();
        let Some(SpanIndex(index)) = extensions.get::<SpanIndex>() else {
            return;
        };
        let mut seen = self.0.lock().expect("not poisoned");
        values.record(&mut FieldRecorder(&mut seen[*index].fields));
    }
}

impl Spans {
    /// Captures spans on this thread (the tests run on a current-thread runtime) until the guard
    /// drops.
    fn capture() -> (Self, DefaultGuard) {
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry().with(spans.clone());
        keep_a_second_dispatch();
        (spans, tracing::subscriber::set_default(subscriber))
    }

    fn named(&self, name: &str) -> Vec<SeenSpan> {
        self.0
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// Every field value of every span, for "never logged" checks.
    fn all_values(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("not poisoned")
            .iter()
            .flat_map(|s| s.fields.iter().map(|(_, v)| v.clone()))
            .collect()
    }
}

/// Registers a second tracing `Dispatch`, alive as long as the process, before a test installs
/// its capturing subscriber. While exactly one dispatch is registered, tracing-core asks only the
/// default subscriber of whichever thread first reaches a callsite (tokio-rs/tracing#3611): a
/// test of this binary without a subscriber would switch that span or event off for the
/// capturing test too. With two registered, every registered one is asked.
fn keep_a_second_dispatch() {
    static SECOND: OnceLock<Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| Dispatch::new(NoSubscriber::default()));
}

const KEY: &str = "sk-span-test-secret";

fn config(server: &ScriptedOpenAi) -> OpenAiConfig {
    OpenAiConfig {
        timeout_ms: 5_000,
        max_retries: 0,
        api_key: Some(ApiKey::new(KEY)),
        ..OpenAiConfig::new(server.base_url(), "scripted-model")
    }
}

/// A protocol the built-in reasoner cannot map (`sku`, `title`, `cost`), so the hybrid asks the
/// model.
fn sku_protocol() -> ProtocolDoc {
    let request =
        json!({"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]});
    let response = json!({"type": "object", "properties": {"title": {"type": "string"}, "cost": {"type": "number"}}, "required": ["title", "cost"]});
    ProtocolDoc::parse(format!(
        "# Requirements\nPrice of a catalogue item.\n\n# Data Format\n## Request\n```json\n{request:#}\n```\n## Response\n```json\n{response:#}\n```\n"
    ))
    .expect("the sku protocol parses")
}

#[tokio::test]
async fn a_model_evaluation_is_a_model_call_inside_the_evaluation() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::text(
        json!({"decision": "accept", "reason": "sku is the product id", "capability": "getProductInfo"})
            .to_string(),
    ));
    let model = OpenAiProtocolReasoner::new(config(&server)).expect("valid config");
    let hybrid = HybridProtocolReasoner::new(Arc::new(model));
    let doc = sku_protocol();
    let caps = declared_capabilities();

    let (spans, _guard) = Spans::capture();
    let evaluation = hybrid.evaluate(&doc, &caps).await.expect("evaluates");
    assert_eq!(evaluation.decision(), "accept");

    let evaluations = spans.named("reasoner.evaluate");
    let backends: Vec<Option<&str>> = evaluations.iter().map(|s| s.field("backend")).collect();
    assert_eq!(backends, [Some("hybrid"), Some("openai")]);
    assert_eq!(evaluations[1].parent.as_deref(), Some("reasoner.evaluate"));
    let hash = doc.hash().to_string();
    for evaluation in &evaluations {
        assert_eq!(evaluation.field("protocol"), Some(hash.as_str()));
        assert_eq!(evaluation.field("decision"), Some("accept"));
    }

    let calls = spans.named("model.call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].field("purpose"), Some("evaluate"));
    assert_eq!(calls[0].field("model"), Some("scripted-model"));
    assert_eq!(calls[0].field("code"), None);
    assert_eq!(calls[0].parent.as_deref(), Some("reasoner.evaluate"));

    for value in spans.all_values() {
        assert!(!value.contains(KEY), "the API key in a span: {value}");
        assert!(
            !value.contains("Price of a catalogue item"),
            "protocol text in a span: {value}"
        );
    }
}

#[tokio::test]
async fn the_builtin_evaluation_makes_no_model_call() {
    let server = ScriptedOpenAi::start().await;
    let model = OpenAiProtocolReasoner::new(config(&server)).expect("valid config");
    let hybrid = HybridProtocolReasoner::new(Arc::new(model));
    let doc = product();

    let (spans, _guard) = Spans::capture();
    let evaluation = hybrid
        .evaluate(&doc, &declared_capabilities())
        .await
        .expect("evaluates");
    assert_eq!(evaluation.decision(), "accept");
    let evaluations = spans.named("reasoner.evaluate");
    assert_eq!(evaluations.len(), 1);
    assert_eq!(evaluations[0].field("backend"), Some("hybrid"));
    assert!(spans.named("model.call").is_empty());
}

#[tokio::test]
async fn natural_language_answers_are_model_calls_and_failures_carry_their_code() {
    let server = ScriptedOpenAi::start().await;
    server.push(ScriptedReply::text("The laptop costs 1299.99 USD."));
    server.push(ScriptedReply::error(503, "overloaded"));
    let reasoner = OpenAiReasoner::new(config(&server), capabilities()).expect("valid config");

    let (spans, _guard) = Spans::capture();
    let prompt = "How much is the secret-prompt laptop?";
    reasoner
        .answer(NlRequest::english(prompt))
        .await
        .expect("answers");
    let error = reasoner
        .answer(NlRequest::english(prompt))
        .await
        .expect_err("the endpoint fails");

    let calls = spans.named("model.call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        assert_eq!(call.field("purpose"), Some("answer"));
        assert_eq!(call.field("model"), Some("scripted-model"));
    }
    assert_eq!(calls[0].field("code"), None);
    assert_eq!(calls[1].field("code"), Some(error.code()));
    for value in spans.all_values() {
        assert!(!value.contains(KEY), "the API key in a span: {value}");
        assert!(
            !value.contains("secret-prompt"),
            "the prompt in a span: {value}"
        );
    }
}
