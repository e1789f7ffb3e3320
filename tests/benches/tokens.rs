//! Token benchmark: what one negotiated protocol saves over natural language.
//!
//! Run: `cargo bench -p parley-tests --bench tokens` (see tests/benches/README.md).
//!
//! The same product requests (default 1,000, cycling through the example catalogue's products)
//! answered by one Parley provider (`parley_tests::TestApp`, in this process, SQLite in a temp
//! dir, the example capabilities) whose natural-language reasoner *and* protocol reasoner are the
//! `openai` backend:
//!
//! - **(a) natural language**: each request is an NLIP text message ("How much is product
//!   P23456?"); the model asks for the `getProductInfo` tool, Parley runs it, the model answers
//!   from its result: two chat completions per message, the capability descriptions and tools in
//!   every prompt.
//! - **(b) one negotiation, then structured calls**: a requester negotiates the example product
//!   protocol with the provider (the model evaluates it and writes its handler: two chat
//!   completions), then sends every request as a structured application message through the
//!   agreed protocol, answered by the verified handler in the sandbox with no model at all.
//!
//! The model is an OpenAI-compatible chat-completions server inside this bench (axum on
//! loopback). It answers each request from what it is asked (a tool call naming the product, a
//! sentence from the tool's result, an acceptance, the handler the built-in generator writes), and
//! reports `usage` proportional to the real sizes: one token per `BENCH_CHARS_PER_TOKEN` (default
//! 4) characters of the request's messages and tools as JSON (prompt) and of the reply's content
//! or tool calls (completion). It answers at once unless `BENCH_MODEL_LATENCY_MS` says otherwise,
//! so wall times leave out the inference time a real model adds to every (a) message and to the
//! two calls of (b).
//!
//! Before either, one negotiation of a variant of the protocol and one call through it warm the
//! provider up (the sandbox compiles its runtime once per process); nothing of it is counted.
//!
//! The figures printed are Parley's own accounting (`/metrics`: `parley_model_calls_total`,
//! `parley_model_tokens_total`), checked against what the model server reported, and, for (b),
//! the negotiation's record in the provider's store (what `parley protocols show` prints).
//!
//! Knobs (environment): `BENCH_MESSAGES` (default 1000), `BENCH_CHARS_PER_TOKEN` (default 4),
//! `BENCH_MODEL_LATENCY_MS` (default 0).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use parley::client::NlipClient;
use parley::config::{ProtocolBackend, ReasonerKind};
use parley::negotiation::nlip::application_message;
use parley::negotiation::requester::{Outcome, Requester};
use parley_anp::ProtocolDoc;
use parley_nlip::{Content, Format, Message};
use parley_reasoner::{BuiltinProtocolReasoner, DeclaredCapability};
use parley_store::{ModelUsageOwner, NegotiationStatus};
use parley_tests::{TestApp, bench_settings, example_capabilities, repo_root};
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, String>;

/// The example catalogue's products; the requests cycle through them.
const PRODUCTS: [&str; 5] = ["P12345", "P23456", "P34567", "P45678", "P56789"];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

// --- the model ------------------------------------------------------------------------------

/// What the simulated model reported, all requests together.
#[derive(Debug, Default)]
struct Reported {
    calls: AtomicU64,
    prompt: AtomicU64,
    completion: AtomicU64,
}

impl Reported {
    fn snapshot(&self) -> Spent {
        Spent {
            calls: self.calls.load(Ordering::Relaxed),
            prompt: self.prompt.load(Ordering::Relaxed),
            completion: self.completion.load(Ordering::Relaxed),
        }
    }
}

struct Model {
    reported: Reported,
    /// The handler the model "writes": the built-in generator's, as `{"source", "grants"}`.
    handler: Value,
    chars_per_token: u64,
    latency: Duration,
}

/// Starts the simulated model on loopback; its `base_url`.
async fn start_model(model: Arc<Model>) -> Result<String> {
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(model);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind the model: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}/v1"))
}

async fn complete(State(model): State<Arc<Model>>, body: String) -> axum::Json<Value> {
    if !model.latency.is_zero() {
        tokio::time::sleep(model.latency).await;
    }
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let (message, finish) = answer(&request, &model.handler);
    let prompt_chars = request["messages"].to_string().len()
        + request
            .get("tools")
            .map_or(0, |tools| tools.to_string().len());
    let completion_chars = match message.get("tool_calls") {
        Some(calls) => calls.to_string().len(),
        None => message["content"].as_str().unwrap_or_default().len(),
    };
    let tokens = |chars: usize| (chars as u64).div_ceil(model.chars_per_token);
    let (prompt, completion) = (tokens(prompt_chars), tokens(completion_chars));
    model.reported.calls.fetch_add(1, Ordering::Relaxed);
    model.reported.prompt.fetch_add(prompt, Ordering::Relaxed);
    model
        .reported
        .completion
        .fetch_add(completion, Ordering::Relaxed);
    axum::Json(json!({
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "bench-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    }))
}

/// The assistant message a sensible model would send, and its finish reason.
fn answer(request: &Value, handler: &Value) -> (Value, &'static str) {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let text = |content: String| json!({"role": "assistant", "content": content});
    if request.get("tools").is_some() {
        if last["role"] == "tool" {
            let result: Value = serde_json::from_str(last["content"].as_str().unwrap_or_default())
                .unwrap_or_default();
            let sentence = format!(
                "The {} ({}) costs {} {}.",
                result["productName"].as_str().unwrap_or("product"),
                result["productId"].as_str().unwrap_or("?"),
                result["price"],
                result["currency"].as_str().unwrap_or("")
            );
            return (text(sentence), "stop");
        }
        let asked = last["content"].as_str().unwrap_or_default();
        let id = asked
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find(|w| w.len() == 6 && w.starts_with('P'))
            .unwrap_or("P12345");
        let call = json!([{
            "id": "call_0",
            "type": "function",
            "function": {"name": "getProductInfo", "arguments": json!({"productId": id}).to_string()}
        }]);
        return (
            json!({"role": "assistant", "content": null, "tool_calls": call}),
            "tool_calls",
        );
    }
    if system.starts_with("You evaluate") {
        let decision = json!({
            "decision": "accept",
            "reason": "getProductInfo takes the product id and returns every field of the response.",
            "capability": "getProductInfo"
        });
        return (text(decision.to_string()), "stop");
    }
    if system.starts_with("You write protocol handlers") {
        return (text(handler.to_string()), "stop");
    }
    (text("I cannot help with that.".into()), "stop")
}

// --- Parley's accounting ----------------------------------------------------------------------

/// Model calls and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Spent {
    calls: u64,
    prompt: u64,
    completion: u64,
}

impl Spent {
    fn tokens(&self) -> u64 {
        self.prompt + self.completion
    }

    fn minus(self, before: Spent) -> Spent {
        Spent {
            calls: self.calls - before.calls,
            prompt: self.prompt - before.prompt,
            completion: self.completion - before.completion,
        }
    }
}

/// Every purpose together, from the provider's `/metrics`.
async fn accounted(app: &TestApp) -> Result<Spent> {
    let text = reqwest::get(app.http("/metrics"))
        .await
        .map_err(|e| format!("GET /metrics: {e}"))?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let sum = |prefix: &str, label: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(prefix) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    Ok(Spent {
        calls: sum("parley_model_calls_total{", ""),
        prompt: sum("parley_model_tokens_total{", "kind=\"prompt\""),
        completion: sum("parley_model_tokens_total{", "kind=\"completion\""),
    })
}

// --- the two ways ---------------------------------------------------------------------------

struct Measured {
    spent: Spent,
    reported: Spent,
    wall: Duration,
}

/// (a): every request in natural language.
async fn natural_language(app: &TestApp, model: &Model, messages: usize) -> Result<Measured> {
    let (before, reported) = (accounted(app).await?, model.reported.snapshot());
    let mut client = NlipClient::connect(&app.url(), false)
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    for i in 0..messages {
        let id = PRODUCTS[i % PRODUCTS.len()];
        let message = Message::text("english", format!("How much is product {id}?"));
        let reply = client.send(&message).await.map_err(|e| e.to_string())?;
        let text = reply.message.text_content().unwrap_or_default();
        if !text.contains(id) {
            return Err(format!(
                "natural-language answer {i} does not name {id}: {text}"
            ));
        }
    }
    let wall = started.elapsed();
    Ok(Measured {
        spent: accounted(app).await?.minus(before),
        reported: model.reported.snapshot().minus(reported),
        wall,
    })
}

/// (b): one negotiation, then every request through the agreed protocol. Also the negotiation's
/// own cost and wall time, as recorded.
async fn negotiated(
    app: &TestApp,
    model: &Model,
    messages: usize,
    store_url: &str,
) -> Result<(Measured, Spent, Duration)> {
    let (before, reported) = (accounted(app).await?, model.reported.snapshot());
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let requester = Requester::new(
        parley_store::connect(
            &format!("sqlite://{}/requester.db?mode=rwc", dir.path().display()),
            Default::default(),
        )
        .await
        .map_err(|e| e.to_string())?,
    );
    let text = std::fs::read_to_string(repo_root().join("examples/protocols/product-info.md"))
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let negotiation = requester
        .negotiate(&app.url(), &text, |_| {})
        .await
        .map_err(|e| format!("negotiate: {e}"))?;
    let negotiation_wall = started.elapsed();
    if negotiation.outcome != Outcome::Agreed {
        return Err(format!("the negotiation ended {:?}", negotiation.outcome));
    }
    let mut client = NlipClient::connect(&app.url(), false)
        .await
        .map_err(|e| e.to_string())?;
    for i in 0..messages {
        let id = PRODUCTS[i % PRODUCTS.len()];
        let request = json!({"messageId": format!("m{i}"), "type": "REQUEST", "action": "getProductInfo", "productId": id});
        let reply = client
            .send(&application_message(&negotiation.hash, request))
            .await
            .map_err(|e| e.to_string())?;
        let answered = matches!(
            (&reply.message.format, &reply.message.content),
            (Format::Structured, Content::Json(v)) if v["productInfo"]["productId"] == id
        );
        if !answered {
            return Err(format!(
                "structured answer {i} is not {id}'s: {:?}",
                reply.message
            ));
        }
    }
    let wall = started.elapsed();
    let measured = Measured {
        spent: accounted(app).await?.minus(before),
        reported: model.reported.snapshot().minus(reported),
        wall,
    };
    let recorded = recorded_cost(store_url, &negotiation.hash.to_string()).await?;
    Ok((measured, recorded, negotiation_wall))
}

/// What the provider's store says the accepted negotiation of `hash` cost.
async fn recorded_cost(store_url: &str, hash: &str) -> Result<Spent> {
    let store = parley_store::connect(store_url, Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut spent = Spent::default();
    for n in store
        .negotiations_for_protocol(hash)
        .await
        .map_err(|e| e.to_string())?
    {
        if n.status != NegotiationStatus::Accepted {
            continue;
        }
        for u in store
            .model_usage(&ModelUsageOwner::Negotiation(n.id))
            .await
            .map_err(|e| e.to_string())?
        {
            spent.calls += u.calls as u64;
            spent.prompt += u.prompt_tokens as u64;
            spent.completion += u.completion_tokens as u64;
        }
    }
    Ok(spent)
}

/// One negotiation of a variant of the protocol (a sentence more, so another hash) and one call
/// through it, not counted: the sandbox compiles its runtime once per process, and that is no
/// cost of the negotiation measured in (b).
async fn warm_up(app: &TestApp) -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let requester = Requester::new(
        parley_store::connect(
            &format!("sqlite://{}/warm-up.db?mode=rwc", dir.path().display()),
            Default::default(),
        )
        .await
        .map_err(|e| e.to_string())?,
    );
    let text = std::fs::read_to_string(repo_root().join("examples/protocols/product-info.md"))
        .map_err(|e| e.to_string())?
        .replacen(
            "# Requirements\n",
            "# Requirements\nThis variant only warms the provider up.\n",
            1,
        );
    let warm = requester
        .negotiate(&app.url(), &text, |_| {})
        .await
        .map_err(|e| format!("warm-up negotiation: {e}"))?;
    let request = json!({"messageId": "warm", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"});
    requester
        .call(&app.url(), &warm.hash, request)
        .await
        .map_err(|e| format!("warm-up call: {e}"))?;
    Ok(())
}

// --- the run --------------------------------------------------------------------------------

async fn run() -> Result<()> {
    let messages = env_u64("BENCH_MESSAGES", 1000).max(1) as usize;
    let chars_per_token = env_u64("BENCH_CHARS_PER_TOKEN", 4).max(1);
    let latency = Duration::from_millis(env_u64("BENCH_MODEL_LATENCY_MS", 0));

    let doc = ProtocolDoc::parse(
        std::fs::read_to_string(repo_root().join("examples/protocols/product-info.md"))
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let capabilities = parley::startup::load_capabilities(Some(&example_capabilities()))
        .await
        .map_err(|e| e.to_string())?;
    let generated = BuiltinProtocolReasoner
        .generate_sync(&doc, &DeclaredCapability::all(&capabilities), None)
        .map_err(|e| e.to_string())?;
    let model = Arc::new(Model {
        reported: Reported::default(),
        handler: json!({"source": generated.source, "grants": generated.grants}),
        chars_per_token,
        latency,
    });
    let base_url = start_model(model.clone()).await?;

    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut settings = bench_settings(dir.path());
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = base_url;
    settings.openai.model = "bench-model".into();
    settings.negotiation.backend = ProtocolBackend::Openai;
    settings.sandbox.warm_up = true;
    let app = TestApp::spawn(&settings).await;

    println!(
        "token benchmark: {messages} product requests, one provider with the openai backend for natural language and negotiation"
    );
    println!(
        "model: an OpenAI-compatible server in this bench; usage proportional to the real sizes, ~{chars_per_token} characters per token of the request's messages and tools (prompt) and of the reply (completion); {}",
        if latency.is_zero() {
            "answers at once (wall times leave out model inference)".to_owned()
        } else {
            format!("{} ms per completion", latency.as_millis())
        }
    );
    warm_up(&app).await?;
    let nl = natural_language(&app, &model, messages).await?;
    let (structured, negotiation_cost, negotiation_wall) =
        negotiated(&app, &model, messages, &settings.database_url()).await?;
    app.stop().await;
    report(
        messages,
        &nl,
        &structured,
        negotiation_cost,
        negotiation_wall,
    )
}

fn report(
    messages: usize,
    nl: &Measured,
    structured: &Measured,
    negotiation_cost: Spent,
    negotiation_wall: Duration,
) -> Result<()> {
    println!();
    println!(
        "{:<40} {:>11} {:>13} {:>17} {:>12} {:>10}",
        "", "model calls", "prompt tokens", "completion tokens", "tokens", "wall time"
    );
    let row = |name: &str, m: &Measured| {
        println!(
            "{:<40} {:>11} {:>13} {:>17} {:>12} {:>9.2}s",
            name,
            m.spent.calls,
            m.spent.prompt,
            m.spent.completion,
            m.spent.tokens(),
            m.wall.as_secs_f64()
        );
    };
    row("(a) natural language", nl);
    row(
        &format!("(b) 1 negotiation + {messages} structured calls"),
        structured,
    );
    println!(
        "{:<40} {:>11} {:>13} {:>17} {:>12} {:>9.2}s",
        "    of which the negotiation (store)",
        negotiation_cost.calls,
        negotiation_cost.prompt,
        negotiation_cost.completion,
        negotiation_cost.tokens(),
        negotiation_wall.as_secs_f64()
    );
    println!();
    let matches = nl.spent == nl.reported && structured.spent == structured.reported;
    println!(
        "Parley's accounting (/metrics) matches the usage the model reported: {}",
        if matches { "yes" } else { "NO" }
    );
    if !matches {
        return Err(format!(
            "accounting differs from the model's reports: (a) {:?} vs {:?}, (b) {:?} vs {:?}",
            nl.spent, nl.reported, structured.spent, structured.reported
        ));
    }
    if structured.spent != negotiation_cost {
        return Err(format!(
            "the structured calls cost model calls: {:?} in all, {:?} in the negotiation",
            structured.spent, negotiation_cost
        ));
    }
    let ratio = |a: u64, b: u64| {
        if b == 0 {
            f64::INFINITY
        } else {
            a as f64 / b as f64
        }
    };
    let token_ratio = ratio(nl.spent.tokens(), structured.spent.tokens());
    println!(
        "ratio (a)/(b): {token_ratio:.0}x the tokens, {:.0}x the model calls, {:.1}x the wall time",
        ratio(nl.spent.calls, structured.spent.calls),
        nl.wall.as_secs_f64() / structured.wall.as_secs_f64()
    );
    let per_message = nl.spent.tokens() as f64 / messages as f64;
    let paid_off = (negotiation_cost.tokens() as f64 / per_message).ceil();
    println!(
        "natural language costs {per_message:.0} tokens and {:.1} model calls per message; the negotiation cost {} tokens, so it paid off after {paid_off:.0} messages",
        nl.spent.calls as f64 / messages as f64,
        negotiation_cost.tokens()
    );
    let nl_per_message = nl.wall.as_secs_f64() / messages as f64;
    let call_per_message = (structured.wall - negotiation_wall).as_secs_f64() / messages as f64;
    if nl_per_message > call_per_message {
        let paid_off_time =
            (negotiation_wall.as_secs_f64() / (nl_per_message - call_per_message)).ceil();
        println!(
            "in wall time: {:.2} ms per natural-language message, {:.3} ms per structured call, a {:.0} ms negotiation: paid off after {paid_off_time:.0} messages",
            nl_per_message * 1e3,
            call_per_message * 1e3,
            negotiation_wall.as_secs_f64() * 1e3
        );
    }
    println!(
        "goal: >= 100x fewer tokens over {messages} messages: {}",
        if token_ratio >= 100.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(())
}
