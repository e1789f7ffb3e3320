//! Clients present their token: `--token` or `PARLEY_TOKEN` goes as `Authorization: Bearer` on
//! every request the `parley` commands make (`send` over HTTP and WebSocket, `call` and
//! `negotiate` over NLIP and over `/anp`), and an `agent` binding's `token` on every request the
//! server makes to that peer. The peer here is a small axum server that records the header of
//! each request (the upgrade request, for a WebSocket) and answers in plain NLIP text.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::json;

use crate::support::{BIN, examples, utf8};

/// What the peer saw: one (path, Authorization header) per request.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

const KEY: &str = "parley_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn nlip_text(text: &str) -> String {
    json!({"format": "text", "subformat": "english", "content": text}).to_string()
}

fn record(seen: &Seen, path: &str, headers: &HeaderMap) {
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().expect("ASCII").to_owned());
    seen.lock()
        .expect("not poisoned")
        .push((path.to_owned(), auth));
}

/// A peer on an ephemeral port that speaks just enough NLIP: every POST and every WebSocket
/// message is answered with a text message; `/anp` closes its WebSocket at once.
async fn peer() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route(
            "/nlip",
            post(|State(seen): State<Seen>, headers: HeaderMap| async move {
                record(&seen, "/nlip", &headers);
                (
                    [("content-type", "application/json")],
                    nlip_text("no protocols here"),
                )
            }),
        )
        .route("/{*path}", any(websocket))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

async fn websocket(
    State(seen): State<Seen>,
    UrlPath(path): UrlPath<String>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let path = format!("/{path}");
    record(&seen, &path, &headers);
    ws.on_upgrade(move |mut socket| async move {
        if path == "/anp" {
            return;
        }
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, WsMessage::Text(_) | WsMessage::Binary(_)) {
                let reply = WsMessage::Text(nlip_text("hello").into());
                if socket.send(reply).await.is_err() {
                    return;
                }
            }
        }
    })
    .into_response()
}

/// Runs `parley ARGS` with `env` and returns (success, stdout, stderr).
async fn parley(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("PARLEY_TOKEN")
        .env_remove("PARLEY_DATABASE_URL")
        .env_remove("PARLEY_DATA_DIR")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("parley runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Takes what the peer saw so far.
fn taken(seen: &Seen) -> Vec<(String, Option<String>)> {
    std::mem::take(&mut *seen.lock().expect("not poisoned"))
}

fn bearer() -> Option<String> {
    Some(format!("Bearer {KEY}"))
}

#[tokio::test]
async fn every_command_presents_its_token_over_http_and_websocket() {
    let (addr, seen) = peer().await;
    let http = format!("http://{addr}");

    let (ok, out, err) = parley(&["send", &http, "hi", "--token", KEY], &[]).await;
    assert!(ok && out.contains("no protocols here"), "{out} {err}");
    assert_eq!(taken(&seen), [("/nlip".to_owned(), bearer())]);

    let ws = format!("ws://{addr}/nlip/ws/text");
    let (ok, out, err) = parley(&["send", &ws, "hi"], &[("PARLEY_TOKEN", KEY)]).await;
    assert!(ok && out.contains("hello"), "{out} {err}");
    assert_eq!(taken(&seen), [("/nlip/ws/text".to_owned(), bearer())]);

    // Without a token, no header.
    let (ok, _, err) = parley(&["send", &http, "hi"], &[]).await;
    assert!(ok, "{err}");
    assert_eq!(taken(&seen), [("/nlip".to_owned(), None)]);

    // `call`: a hello the peer does not understand, then the request in natural language.
    let dir = tempfile::tempdir().expect("tempdir");
    let protocol = examples().join("protocols/product-info.md");
    let request = r#"{"messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#;
    let data = utf8(dir.path());
    let (ok, out, err) = parley(
        &[
            "call",
            &http,
            "--protocol",
            utf8(&protocol),
            "--json",
            request,
            "--data-dir",
            data,
        ],
        &[("PARLEY_TOKEN", KEY)],
    )
    .await;
    assert!(ok && out.contains("no protocols here"), "{out} {err}");
    let calls = taken(&seen);
    assert!(calls.len() >= 2, "{calls:?}");
    assert!(
        calls.iter().all(|c| c == &("/nlip".to_owned(), bearer())),
        "{calls:?}"
    );

    // `negotiate --wire anp`: the upgrade request carries it (the peer then hangs up).
    let (ok, _, _) = parley(
        &[
            "negotiate",
            &http,
            "--wire",
            "anp",
            "--protocol",
            utf8(&protocol),
            "--data-dir",
            data,
            "--token",
            KEY,
        ],
        &[],
    )
    .await;
    assert!(!ok, "the peer closed the connection");
    assert_eq!(taken(&seen), [("/anp".to_owned(), bearer())]);
}

#[tokio::test]
async fn a_token_that_cannot_be_a_header_is_refused_before_connecting() {
    let (addr, seen) = peer().await;
    let http = format!("http://{addr}");
    for bad in ["two words", "a\r\nX-Injected: 1", ""] {
        let (ok, _, err) = parley(&["send", &http, "hi", "--token", bad], &[]).await;
        assert!(!ok, "{bad:?}");
        assert!(
            err.contains("--token") && err.contains("bearer token"),
            "{err}"
        );
        assert!(!err.contains("X-Injected"), "{err}");
    }
    assert_eq!(taken(&seen), []);
}

#[tokio::test]
async fn an_agent_binding_presents_its_token_to_its_peer() {
    let (addr, seen) = peer().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let protocol = examples().join("protocols/product-info.md");
    let text = format!(
        r#"
[agent]
name = "front desk"
description = "Asks the product desk."

[[capabilities]]
name = "getProductInfo"
description = "A product by id, from the product desk."
read_only = true
input_schema = {{ type = "object", properties = {{ productId = {{ type = "string" }} }} }}
output_schema = {{}}
binding = {{ type = "agent", url = "http://{addr}", protocol = {protocol:?}, request = {{ type = "REQUEST", action = "getProductInfo" }}, message_id = "/messageId", token = "${{DESK_KEY}}" }}
"#,
        protocol = utf8(&protocol)
    );
    let capabilities = parley_capabilities::Capabilities::parse(
        &text,
        parley_capabilities::FileFormat::Toml,
        dir.path(),
        "front.toml",
        |name| (name == "DESK_KEY").then(|| KEY.to_owned()),
    )
    .expect("capabilities");
    let url = format!("sqlite://{}?mode=rwc", utf8(&dir.path().join("front.db")));
    let store = parley_store::connect(&url, Default::default())
        .await
        .expect("store");
    let requester = parley::negotiation::requester::Requester::new(store);
    capabilities.connect_agents(Arc::new(
        parley::negotiation::requester::BindingRequester::new(requester),
    ));
    let result = capabilities
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("answered in natural language");
    assert_eq!(result["fallback"]["text"], "no protocols here", "{result}");
    let calls = taken(&seen);
    assert!(calls.len() >= 2, "{calls:?}");
    assert!(
        calls.iter().all(|c| c == &("/nlip".to_owned(), bearer())),
        "{calls:?}"
    );
}
