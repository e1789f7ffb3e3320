//! The agent as a user meets it over real NLIP: simple requests answered by the built-in
//! reasoner with structured results, failed calls as NLIP errors, liveness and readiness, the
//! `openai` reasoner's start-up checks and failure logs, and the provider's log of each
//! negotiation.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use parley::config::{ReasonerKind, Settings};
use parley::negotiation::requester::Outcome;
use parley::startup::{Bound, StartupError};
use parley_nlip::{ErrorInfo, Format, Message, Submessage};
use parley_tests::{TestApp, post_json, test_settings};
use serde_json::{Value, json};
use tracing::Dispatch;
use tracing::subscriber::{DefaultGuard, NoSubscriber};

use crate::support::{MODEL, new_requester, product_protocol};

// --- captured logs ---------------------------------------------------------------------------

thread_local! {
    /// This thread's captured log and the guard that keeps the capturing subscriber its
    /// default until the thread ends.
    static LOGS: (Arc<Mutex<Vec<u8>>>, DefaultGuard) = {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        keep_a_second_dispatch();
        (buffer, tracing::subscriber::set_default(subscriber))
    };
}

/// Every log line (info and above) of the calling test, for the tests that check what an
/// operator sees; the first call starts the capture. Each test has a thread of its own and a
/// current-thread runtime on it, which runs the servers the test starts, so the capture holds
/// their lines and none of the other tests of this binary (which run in parallel, some
/// negotiating the same protocols).
pub(crate) fn logs() -> Arc<Mutex<Vec<u8>>> {
    LOGS.with(|(buffer, _)| buffer.clone())
}

/// Registers a second tracing `Dispatch`, alive as long as the process, before a test installs
/// its capturing subscriber. While exactly one dispatch is registered, tracing-core asks only the
/// default subscriber of whichever thread first reaches a callsite (tokio-rs/tracing#3611): a
/// test of this binary without a subscriber would switch that span or event off for the
/// capturing test too. With two registered, every registered one is asked.
pub(crate) fn keep_a_second_dispatch() {
    static SECOND: OnceLock<Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| Dispatch::new(NoSubscriber::default()));
}

/// A log writer into a shared buffer.
pub(crate) struct Sink(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .expect("not poisoned")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured lines that contain every one of `needles`.
fn lines_with(needles: &[&str]) -> Vec<String> {
    let text = String::from_utf8_lossy(&logs().lock().expect("not poisoned")).into_owned();
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_owned)
        .collect()
}

// --- helpers ---------------------------------------------------------------------------------

async fn send_text(app: &TestApp, text: &str) -> (u16, Message) {
    let (status, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": text}),
    )
    .await;
    let message = parley_nlip::from_json_value(&reply).expect("an NLIP reply");
    (status, message)
}

/// The `structured`/`json` submessages of a reply that are not error parts: `(label, content)`.
fn structured(message: &Message) -> Vec<(String, Value)> {
    message
        .submessages
        .iter()
        .filter(|s| s.format == Format::Structured && s.subformat.eq_ignore_ascii_case("json"))
        .filter(|s| s.label.as_deref() != Some(parley_nlip::ERROR_LABEL))
        .map(|s| (s.label.clone().unwrap_or_default(), s.content.to_json()))
        .collect()
}

async fn get_json(url: &str) -> (u16, Value) {
    let resp = reqwest::get(url).await.expect("GET");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON body"))
}

fn openai_settings(dir: &Path, base_url: &str, key: Option<&str>) -> Settings {
    let mut settings = test_settings(dir);
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = base_url.to_owned();
    settings.openai.model = "scripted-model".to_owned();
    settings.openai.api_key = key.map(str::to_owned);
    settings.openai.timeout_secs = 5;
    settings
}

// --- natural-language requests -----------------------------------------------------------------

#[tokio::test]
async fn a_simple_request_is_answered_with_a_structured_result_and_the_capability_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let (status, reply) = send_text(&app, "Hi, how much does P45678 cost?").await;
    assert_eq!(status, 200);
    let text = reply.text_content().expect("a text part");
    assert!(
        text.starts_with("getProductInfo (productId P45678): price 119"),
        "{text}"
    );
    assert!(
        !text.contains('{') && !text.contains('\n'),
        "no JSON in the text: {text}"
    );
    let results = structured(&reply);
    assert_eq!(results.len(), 1, "{reply:?}");
    assert_eq!(results[0].0, "getProductInfo");
    assert_eq!(results[0].1["productName"], "Mechanical Keyboard");
    assert_eq!(results[0].1["currency"], "EUR");
    assert!(ErrorInfo::from_message(&reply).is_none());

    // The explicit form answers the same way.
    let (_, reply) = send_text(&app, r#"getOrderStatus {"orderId": "O-1002"}"#).await;
    assert_eq!(structured(&reply)[0].1["status"], "delivered");
    app.stop().await;
}

#[tokio::test]
async fn a_failed_call_is_an_nlip_error_with_the_capability_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;

    let (status, reply) = send_text(&app, "where is order O-4040?").await;
    assert_eq!(status, 404);
    assert_eq!(reply.messagetype.as_deref(), Some("error"));
    let error = ErrorInfo::from_message(&reply).expect("an error part");
    assert_eq!(error.code, "not_found");
    assert!(
        error
            .message
            .starts_with("getOrderStatus (orderId O-4040) failed"),
        "{}",
        error.message
    );

    let (status, reply) = send_text(&app, r#"getOrderStatus {"orderId": 1001}"#).await;
    assert_eq!(status, 422);
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("error").code,
        "invalid_arguments"
    );

    let (status, reply) = send_text(&app, r#"getOderStatus {"orderId": "O-1001"}"#).await;
    assert_eq!(status, 422);
    let error = ErrorInfo::from_message(&reply).expect("error");
    assert_eq!(error.code, "unknown_capability");
    assert!(
        error.message.contains("Did you mean getOrderStatus?"),
        "{}",
        error.message
    );

    // What the reasoner cannot tell is an answer, not an error.
    let (status, reply) = send_text(&app, "Can you recommend a good book?").await;
    assert_eq!(status, 200);
    assert!(ErrorInfo::from_message(&reply).is_none());
    app.stop().await;
}

#[tokio::test]
async fn a_conversation_is_shown_the_capability_list_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let mut texts = Vec::new();
    for question in ["Tell me something funny", "And a riddle?"] {
        let message = Message::text("english", question).with_submessage(Submessage::new(
            Format::Token,
            "conversation",
            "chat-7",
        ));
        let (_, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&message)).await;
        texts.push(reply["content"].as_str().expect("text").to_owned());
    }
    assert!(texts[0].contains("I can: getOrderStatus"), "{}", texts[0]);
    assert!(!texts[1].contains("I can: "), "{}", texts[1]);
    app.stop().await;
}

#[tokio::test]
async fn an_agent_without_capabilities_does_not_offer_to_call_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.capabilities = None;
    let app = TestApp::spawn(&settings).await;
    for text in ["hello", "status of order O-1001"] {
        let (status, reply) = send_text(&app, text).await;
        assert_eq!(status, 200);
        let answer = reply.text_content().expect("text");
        assert!(!answer.contains("help"), "{text}: {answer}");
        assert!(answer.contains("o capabilities"), "{text}: {answer}");
    }
    app.stop().await;
}

// --- the ethics statement -------------------------------------------------------------------------

#[tokio::test]
async fn the_ethics_statement_is_published_and_the_operator_can_replace_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let response = reqwest::get(app.http("/ethics"))
        .await
        .expect("GET /ethics");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/markdown; charset=utf-8"
    );
    let published = response.text().await.expect("body");
    let own = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ETHICS.md"))
        .expect("ETHICS.md");
    assert_eq!(published, own, "Parley's own statement by default");
    app.stop().await;

    let statement = dir.path().join("ethics.md");
    std::fs::write(
        &statement,
        "# Ethics\nThis agent answers stock questions for Acme.\n",
    )
    .expect("write");
    let mut settings = test_settings(dir.path());
    settings.ethics_statement = Some(statement);
    let app = TestApp::spawn(&settings).await;
    let published = reqwest::get(app.http("/ethics"))
        .await
        .expect("GET /ethics")
        .text()
        .await
        .expect("body");
    assert_eq!(
        published,
        "# Ethics\nThis agent answers stock questions for Acme.\n"
    );
    app.stop().await;
}

// --- liveness and readiness ----------------------------------------------------------------------

#[tokio::test]
async fn readiness_waits_for_the_sandbox_warm_up_and_liveness_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.sandbox.warm_up = true;
    let started = Instant::now();
    let app = TestApp::spawn(&settings).await;

    let (status, live) = get_json(&app.http("/health/live")).await;
    assert_eq!((status, live["status"].as_str()), (200, Some("live")));
    let (status, ready) = get_json(&app.http("/health/ready")).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["sandbox"], "warming");
    assert_eq!(ready["store"], "ok");
    let (status, _) = get_json(&app.http("/health")).await;
    assert_eq!(
        status, 200,
        "/health keeps its meaning: the database answers"
    );
    assert!(
        !healthcheck(&app).await,
        "the image's healthcheck waits for readiness"
    );

    let ready = loop {
        let (status, ready) = get_json(&app.http("/health/ready")).await;
        if status == 200 {
            break ready;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "{ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        ready,
        json!({"status": "ready", "sandbox": "warm", "store": "ok", "reasoner": "builtin", "model_endpoint": "none"})
    );
    eprintln!("ready after {:?}", started.elapsed());
    assert!(healthcheck(&app).await);
    app.stop().await;
}

/// Whether the image's healthcheck (`docker/healthcheck.sh`) passes against `app`.
async fn healthcheck(app: &TestApp) -> bool {
    let script = parley_tests::repo_root().join("docker/healthcheck.sh");
    let listen = app.addr.to_string();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(script)
            .env("PARLEY_LISTEN", listen)
            .status()
            .expect("bash runs")
            .success()
    })
    .await
    .expect("joined")
}

#[tokio::test]
async fn without_warm_up_there_is_nothing_to_wait_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let (status, ready) = get_json(&app.http("/health/ready")).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["sandbox"], "off");
    app.stop().await;
}

// --- the openai reasoner ------------------------------------------------------------------------

#[tokio::test]
async fn a_hosted_model_end_point_without_a_key_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = openai_settings(dir.path(), "https://api.openai.com/v1", None);
    let error = Bound::new(&settings).await.expect_err("refused");
    let StartupError::Config(e) = &error else {
        panic!("a configuration error: {error:?}");
    };
    let text = e.to_string();
    assert!(text.contains("openai.api_key"), "{text}");
    assert!(text.contains("needs an API key"), "{text}");
    // With a key, or on a local end-point, it starts.
    for settings in [
        openai_settings(dir.path(), "https://api.openai.com/v1", Some("sk-x")),
        openai_settings(dir.path(), "http://127.0.0.1:9/v1", None),
        openai_settings(dir.path(), "http://ollama:11434/v1", None),
    ] {
        let bound = Bound::new(&settings).await.expect("starts");
        drop(bound);
    }
}

#[tokio::test]
async fn an_unreachable_model_is_reported_by_readiness_and_every_failure_is_logged() {
    logs();
    let _turn = MODEL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A port that was free a moment ago: nothing answers there.
    let port = parley_tests::free_port().expect("port");
    let base = format!("http://127.0.0.1:{port}/v1");
    let app = TestApp::spawn(&openai_settings(dir.path(), &base, None)).await;

    let ready = probed(&app).await;
    assert_eq!(
        ready["status"], "ready",
        "the model does not gate readiness"
    );
    assert_eq!(ready["model_endpoint"], "unreachable");
    assert_eq!(ready["reasoner"], "openai");
    let warned = lines_with(&["WARN", "model end-point does not answer", &port.to_string()]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("error="),
        "with its cause: {}",
        warned[0]
    );

    let (status, reply) = send_text(&app, "How much is product P12345?").await;
    assert_eq!(status, 502);
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("error").code,
        "model_http_error"
    );
    let failed = lines_with(&["WARN", "the reasoner could not answer", "model_http_error"]);
    assert!(
        failed
            .iter()
            .any(|l| l.contains("backend=\"openai\"") || l.contains("backend=openai")),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|l| l.contains(&port.to_string()) || l.contains("onnect")),
        "the cause is logged: {failed:?}"
    );
    app.stop().await;
}

/// Waits until the start-up probe of the model end-point is done; returns `/health/ready`.
async fn probed(app: &TestApp) -> Value {
    let started = Instant::now();
    loop {
        let (_, ready) = get_json(&app.http("/health/ready")).await;
        if ready["model_endpoint"] != "probing" {
            return ready;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{ready}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_model_end_point_that_refuses_the_key_is_reported_and_logged() {
    logs();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let refusing = axum::Router::new().route(
        "/v1/models",
        axum::routing::get(|| async { axum::http::StatusCode::UNAUTHORIZED }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, refusing).await });
    let dir = tempfile::tempdir().expect("tempdir");
    let base = format!("http://{addr}/v1");
    let app = TestApp::spawn(&openai_settings(dir.path(), &base, Some("sk-wrong"))).await;
    assert_eq!(probed(&app).await["model_endpoint"], "unauthorized");
    let warned = lines_with(&["WARN", "refuses the API key", &addr.port().to_string()]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        !lines_with(&["sk-wrong"]).iter().any(|l| !l.is_empty()),
        "the key is never logged"
    );
    app.stop().await;
    server.abort();

    // An end-point that answers (here without `/models`) is reachable.
    let scripted = parley_reasoner::testing::ScriptedOpenAi::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&openai_settings(dir.path(), &scripted.base_url(), None)).await;
    assert_eq!(probed(&app).await["model_endpoint"], "reachable");
    app.stop().await;
}

// --- negotiation logs ---------------------------------------------------------------------------

#[tokio::test]
async fn the_provider_logs_each_negotiation_start_and_end() {
    logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;

    let negotiated = requester
        .negotiate(&provider.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiates");
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    let hash = negotiated.hash.to_string();
    let ended = lines_with(&["INFO", "negotiation ended", &hash[..12]]);
    assert_eq!(ended.len(), 1, "{ended:?}");
    let line = &ended[0];
    for field in [
        "outcome=\"accepted\"",
        "rounds=1",
        "elapsed_ms=",
        "peer=127.0.0.1",
    ] {
        let bare = field.replace('"', "");
        assert!(
            line.contains(field) || line.contains(&bare),
            "{field}: {line}"
        );
    }
    let id = line
        .split("negotiation=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the negotiation id");
    let started = lines_with(&["INFO", "negotiation started", id]);
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(started[0].contains("peer=127.0.0.1") || started[0].contains("peer=\"127.0.0.1"));

    // A protocol no capability serves ends rejected, with the proposal's hash.
    let unservable = product_protocol().replace("productId", "flightNumber");
    let negotiated = requester
        .negotiate(&provider.url(), &unservable, |_| {})
        .await
        .expect("negotiates");
    assert!(
        matches!(negotiated.outcome, Outcome::Rejected { .. }),
        "{:?}",
        negotiated.outcome
    );
    let hash = negotiated.hash.to_string();
    let ended = lines_with(&["INFO", "negotiation ended", &hash[..12]]);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(
        ended[0].contains("outcome=\"rejected\"") || ended[0].contains("outcome=rejected"),
        "{}",
        ended[0]
    );
    provider.stop().await;
}
