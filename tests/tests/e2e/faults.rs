//! Faults of what the server depends on, each ending in a clear NLIP error and each recovered
//! from on its own, without a restart: PostgreSQL going away and coming back (cut by a TCP proxy
//! of the test's own, so the one shared PostgreSQL keeps running for the other tests), a model
//! endpoint that hangs or answers garbage, an HTTP capability that is slow, fails or refuses
//! connections, and a peer that leaves `/nlip/ws` in the middle of a negotiation. Full disks and
//! deleted database files are `storage_faults`'; a peer leaving `/anp` mid-negotiation is `anp`'s;
//! an MCP server that fails is `mcp`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use parley::config::ReasonerKind;
use parley_nlip::{Format, Message, Submessage};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_store::{Direction, NegotiationStatus};
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::{MODEL, conversation_of, post_coded, until_ready_is};

/// Long enough for anything that is not stuck; the tests assert what happens, not how fast.
const PATIENCE: Duration = Duration::from_secs(30);

/// POSTs an NLIP message; the status, the reply and its error code (empty on success).
async fn post(app: &TestApp, message: &Message) -> (u16, Value, String) {
    post_coded(app, &parley_nlip::to_json_value(message)).await
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

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends `message` on a `/nlip/ws/text` session and reads the reply.
async fn exchange(socket: &mut Socket, message: &Message) -> Message {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message as Ws;
    let text = parley_nlip::to_json_value(message).to_string();
    socket.send(Ws::Text(text.into())).await.expect("send");
    loop {
        match socket.next().await.expect("a frame").expect("no error") {
            Ws::Text(text) => {
                return parley_nlip::from_json_slice(text.as_bytes()).expect("an NLIP reply");
            }
            Ws::Ping(_) | Ws::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

/// A meta-protocol message in conversation `client`, as an NLIP control message.
fn meta(client: &str, value: Value) -> Message {
    let mut message = Message::json(value).with_submessage(Submessage::new(
        Format::Token,
        "conversation_client",
        client,
    ));
    message.messagetype = Some("control".to_owned());
    message
}

/// The meta-protocol messages of a reply.
pub(crate) fn meta_of(reply: &Message) -> Vec<Value> {
    reply
        .submessages
        .iter()
        .filter(|s| s.label.as_deref() == Some("anp"))
        .filter_map(|s| match &s.content {
            parley_nlip::Content::Json(value) => Some(value.clone()),
            parley_nlip::Content::Bytes(_) => None,
        })
        .collect()
}

/// Over `/nlip/ws` a negotiation is one NLIP conversation, which outlives the connection it
/// began on (`/anp`, whose negotiation is its connection, ends it instead: see `anp`). A peer
/// that leaves after the provider's turn, or in the middle of it (the turn is finished all the
/// same), leaves the negotiation waiting for it: the server negotiates with others meanwhile,
/// and the peer finishes it later over HTTP in the same conversation.
#[tokio::test]
async fn a_peer_that_leaves_nlip_ws_mid_negotiation_can_finish_it_later_and_others_negotiate_meanwhile()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");
    let text = crate::support::product_protocol();
    let hash = parley_anp::ProtocolHash::of(&text);

    let (mut socket, _) = tokio_tungstenite::connect_async(app.ws("/nlip/ws/text"))
        .await
        .expect("a WebSocket session");
    let proposal = json!({"action": "protocolNegotiation", "sequenceId": 0,
                          "candidateProtocols": text, "status": "negotiating"});
    let reply = exchange(&mut socket, &meta("leaver", proposal)).await;
    let turn = meta_of(&reply);
    assert_eq!(turn.len(), 2, "{reply:?}");
    assert_eq!(turn[0]["status"], "accepted", "{reply:?}");
    assert_eq!(turn[1]["action"], "codeGeneration", "{reply:?}");
    socket.close(None).await.expect("close");
    drop(socket);

    // Another leaves in the middle of the provider's turn: it sends its proposal and closes
    // without waiting for the answer. The turn is finished all the same.
    let vanished = variant(&text, "Vanished");
    let (mut socket, _) = tokio_tungstenite::connect_async(app.ws("/nlip/ws/text"))
        .await
        .expect("a WebSocket session");
    let proposal = json!({"action": "protocolNegotiation", "sequenceId": 0,
                          "candidateProtocols": vanished, "status": "negotiating"});
    let frame = parley_nlip::to_json_value(&meta("vanisher", proposal)).to_string();
    futures::SinkExt::send(
        &mut socket,
        tokio_tungstenite::tungstenite::Message::Text(frame.into()),
    )
    .await
    .expect("send");
    drop(socket);

    // Another peer negotiates another protocol over a new session meanwhile, to the end.
    let other = variant(&text, "Faults");
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = crate::support::new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate(&app.ws("/nlip/ws"), &other, |_| {})
        .await
        .expect("a negotiation while the other waits");
    assert_eq!(
        negotiated.outcome,
        parley::negotiation::requester::Outcome::Agreed
    );

    let status_of = async |hash: &parley_anp::ProtocolHash| {
        let negotiations = store
            .negotiations_for_protocol(&hash.to_string())
            .await
            .expect("negotiations");
        negotiations.iter().map(|n| n.status).collect::<Vec<_>>()
    };
    // Not agreed while the peer is away: the provider waits for its codeGeneration.
    assert!(
        !status_of(&hash)
            .await
            .contains(&NegotiationStatus::Accepted),
        "{:?}",
        status_of(&hash).await
    );

    // The peers that left come back over HTTP in their conversations and finish.
    for (client, hash) in [
        ("leaver", hash),
        ("vanisher", parley_anp::ProtocolHash::of(&vanished)),
    ] {
        // A turn still running answers `conflict` (on a slow machine the vanisher's may be).
        let generated = meta(
            client,
            json!({"action": "codeGeneration", "status": "generated"}),
        );
        let (status, reply, code) = tokio::time::timeout(PATIENCE, async {
            loop {
                let answer = post(&app, &generated).await;
                if answer.2 != "conflict" {
                    return answer;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the turn ends");
        assert_eq!((status, code.as_str()), (200, ""), "{client}: {reply}");
        let request = Message::json(crate::support::request("back", "P12345"))
            .with_submessage(Submessage::new(Format::Token, "protocol", hash.to_hex()))
            .with_submessage(Submessage::new(
                Format::Token,
                "conversation_client",
                client,
            ));
        let (status, reply, _) = post(&app, &request).await;
        assert_eq!(status, 200, "{client}: {reply}");
        assert_eq!(reply["content"]["status"]["code"], 200, "{client}: {reply}");
        assert_eq!(
            status_of(&hash).await,
            [NegotiationStatus::Accepted],
            "{client}"
        );
    }
    app.stop().await;
}

/// The product protocol with a text (so a hash) of its own.
fn variant(text: &str, shelf: &str) -> String {
    let variant = text.replacen(
        "The product name may be sent as a hint",
        &format!("{shelf} shelf. The product name may be sent as a hint"),
        1,
    );
    assert_ne!(variant, text, "the variant differs");
    variant
}
