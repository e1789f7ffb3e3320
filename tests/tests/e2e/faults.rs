//! Faults of what the server depends on, each ending in a clear NLIP error and each recovered
//! from on its own, without a restart: PostgreSQL going away and coming back (cut by a TCP proxy
//! of the test's own, so the one shared PostgreSQL keeps running for the other tests), a model
//! endpoint that hangs or answers garbage, and an HTTP capability that is slow, fails or
//! refuses connections. Full disks and deleted database files are `storage_faults`'.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use parley::config::ReasonerKind;
use parley_nlip::{ErrorInfo, Format, Message, Submessage};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_store::Direction;
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::MODEL;

/// Long enough for anything that is not stuck; the tests assert what happens, not how fast.
const PATIENCE: Duration = Duration::from_secs(30);

/// POSTs an NLIP message; the status, the reply and its error code (empty on success).
async fn post(app: &TestApp, message: &Message) -> (u16, Value, String) {
    let reply = reqwest::Client::new()
        .post(app.url())
        .json(&parley_nlip::to_json_value(message))
        .send()
        .await
        .expect("a reply");
    let status = reply.status().as_u16();
    let body: Value = reply.json().await.expect("JSON");
    let message = parley_nlip::from_json_value(&body).expect("an NLIP message");
    let code = ErrorInfo::from_message(&message)
        .map(|e| e.code)
        .unwrap_or_default();
    (status, body, code)
}

/// Polls `/health/ready` until it answers `status`.
async fn until_ready_is(app: &TestApp, status: u16) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let reply = reqwest::get(app.http("/health/ready"))
                .await
                .expect("a reply");
            if reply.status().as_u16() == status {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("/health/ready did not answer {status}"));
}

/// A TCP forwarder to `upstream` that can be cut (every forwarded connection dropped, new
/// ones closed as soon as they are accepted) and restored.
struct Proxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    /// Bumped on every cut; a forwarded connection ends when it changes.
    cuts: watch::Sender<u64>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let open = Arc::new(AtomicBool::new(true));
        let (cuts, _) = watch::channel(0u64);
        let (accepting, cut) = (open.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue;
                }
                let mut cut = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy { addr, open, cuts }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// A message in the conversation `client` names (so it is stored), saying `text`.
fn logged(client: &str, text: &str) -> Message {
    Message::text("english", text).with_submessage(Submessage::new(
        Format::Token,
        "conversation_client",
        client,
    ))
}

/// The id of the conversation a reply belongs to.
fn conversation_of(reply: &Value) -> String {
    let reply = parley_nlip::from_json_value(reply).expect("an NLIP message");
    let token = reply
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .expect("the conversation's token");
    token.content.as_str().expect("a string token").to_owned()
}

#[tokio::test]
async fn postgres_going_away_and_coming_back_is_survived_without_a_restart() {
    let (direct, guard) = parley_store::testing::fresh_postgres_url().await;
    // postgres://user@HOST:PORT/db: the same database through the proxy.
    let (head, rest) = direct.split_once('@').expect("user@host");
    let (upstream, db) = rest.split_once('/').expect("host/db");
    let upstream: SocketAddr = upstream.parse().expect("a literal address and port");
    let proxy = Proxy::start(upstream).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(format!("{head}@{}/{db}", proxy.addr));
    let app = TestApp::spawn(&settings).await;

    let (status, reply, _) = post(&app, &logged("pg-faults", "before the cut")).await;
    assert_eq!(status, 200, "{reply}");
    let conversation = conversation_of(&reply);
    until_ready_is(&app, 200).await;

    proxy.cut();
    let (status, reply, code) = post(&app, &logged("pg-faults", "during the cut")).await;
    assert_eq!(
        (status, code.as_str()),
        (503, "store_unavailable"),
        "{reply}"
    );
    until_ready_is(&app, 503).await;

    proxy.restore();
    until_ready_is(&app, 200).await;
    let (status, reply, _) = post(&app, &logged("pg-faults", "after the cut")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        conversation_of(&reply),
        conversation,
        "the same conversation"
    );
    app.stop().await;

    // Everything acknowledged is stored; what was refused is not.
    let store = parley_store::connect(&direct, Default::default())
        .await
        .expect("the database directly");
    let inbound: Vec<String> = store
        .list_messages(&conversation, 0, 100)
        .await
        .expect("the log")
        .into_iter()
        .filter(|m| m.direction == Direction::Inbound)
        .filter_map(|m| m.message["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(inbound, ["before the cut", "after the cut"]);
    drop(store);
    guard.drop_database().await.expect("test database dropped");
}

/// A server with the openai reasoner on `model`, whose calls give up after a second.
async fn with_model(dir: &std::path::Path, model: &ScriptedOpenAi) -> TestApp {
    let mut settings = test_settings(dir);
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.openai.timeout_secs = 1;
    settings.limits.request_timeout_ms = 20_000;
    TestApp::spawn(&settings).await
}

#[tokio::test]
async fn a_hanging_then_garbled_model_gives_nlip_errors_and_the_next_message_after_it_is_fixed_is_answered()
 {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let app = with_model(dir.path(), &model).await;
    let question = Message::text("english", "Tell me about product P12345");

    // Accepts, never answers (within the test).
    model.set_fallback(ScriptedReply::text("too late").delayed(Duration::from_secs(120)));
    let started = std::time::Instant::now();
    let (status, reply, code) = post(&app, &question).await;
    eprintln!(
        "faults: a hanging model answered {status} {code} after {:?}",
        started.elapsed()
    );
    assert_eq!((status, code.as_str()), (502, "model_timeout"), "{reply}");

    for garbage in [
        ScriptedReply::raw("this is not json"),
        ScriptedReply::raw(r#"{"id": "x", "object": "chat.completion"}"#),
    ] {
        model.set_fallback(garbage);
        let (status, reply, code) = post(&app, &question).await;
        assert_eq!(status, 502, "{reply}");
        assert_eq!(code, "model_malformed_response", "{reply}");
    }

    model.set_fallback(ScriptedReply::text("P12345 is a laptop."));
    let (status, reply, code) = post(&app, &question).await;
    assert_eq!((status, code.as_str()), (200, ""), "{reply}");
    assert_eq!(reply["content"], "P12345 is a laptop.");
    app.stop().await;
}

/// What the test's product API does.
const SERVE: u8 = 0;
const SLOW: u8 = 1;
const FAIL: u8 = 2;

/// The product API on `listener`, doing what `mode` says.
async fn product_api(listener: TcpListener, mode: Arc<AtomicU8>) {
    let app = axum::Router::new().route(
        "/products/{id}",
        axum::routing::get(move || {
            let mode = mode.load(Ordering::SeqCst);
            async move {
                use axum::response::IntoResponse as _;
                match mode {
                    SLOW => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        axum::Json(json!({})).into_response()
                    }
                    FAIL => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
                    _ => axum::Json(json!({"name": "Laptop", "price": 1299.99})).into_response(),
                }
            }
        }),
    );
    axum::serve(listener, app).await.expect("serve");
}

fn capabilities(base: &str) -> Arc<parley_capabilities::Capabilities> {
    let file = format!(
        r#"
[agent]
name = "faults"
description = "a product API that misbehaves"
[[capabilities]]
name = "lookup"
description = "a product by id"
input_schema = {{ type = "object", properties = {{ id = {{ type = "string" }} }}, required = ["id"] }}
output_schema = {{ type = "object", required = ["name"] }}
binding = {{ type = "http", url = "{base}/products/{{id}}", timeout_ms = 500 }}
"#
    );
    let capabilities = parley_capabilities::Capabilities::parse(
        &file,
        parley_capabilities::FileFormat::Toml,
        std::path::Path::new("."),
        "faults.toml",
        |_| None,
    )
    .expect("valid capabilities");
    Arc::new(capabilities)
}

#[tokio::test]
async fn a_capability_endpoint_that_is_slow_fails_or_refuses_gives_its_code_and_recovers() {
    // The API's port is known before it listens: first it refuses connections.
    let port = parley_tests::free_port().expect("a free port");
    let base = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn_with(&test_settings(dir.path()), capabilities(&base)).await;
    let call = Message::json(json!({"tool": "lookup", "arguments": {"id": "P1"}}));
    let answered = |reply: &Value| reply["submessages"].to_string().contains("Laptop");

    let (status, reply, code) = post(&app, &call).await;
    eprintln!("faults: a refused capability answered {status} {code}");
    assert_eq!(code, "binding_failed", "{reply}");

    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the API's port");
    let mode = Arc::new(AtomicU8::new(SERVE));
    tokio::spawn(product_api(listener, mode.clone()));
    let (status, reply, _) = post(&app, &call).await;
    assert!(status == 200 && answered(&reply), "{reply}");

    mode.store(SLOW, Ordering::SeqCst);
    let (status, reply, code) = post(&app, &call).await;
    eprintln!("faults: a slow capability answered {status} {code}");
    assert_eq!(code, "timeout", "{reply}");

    mode.store(FAIL, Ordering::SeqCst);
    let (status, reply, code) = post(&app, &call).await;
    eprintln!("faults: a failing capability answered {status} {code}");
    assert_eq!(code, "binding_failed", "{reply}");

    mode.store(SERVE, Ordering::SeqCst);
    let (status, reply, _) = post(&app, &call).await;
    assert!(status == 200 && answered(&reply), "{reply}");
    app.stop().await;
}
