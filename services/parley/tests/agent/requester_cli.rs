//! The requester's commands through the `parley` binary, against Parley providers started in
//! this process: `call` negotiates then calls in one command, answers the next call at 0-RTT
//! by a short hash over the WebSocket base URL, and falls back to natural language when the
//! provider rejects the protocol or does not speak the meta-protocol (`--no-fallback` makes that
//! an error); URLs without a path work in every command, a wrong WebSocket path gets a hint.

use std::path::{Path, PathBuf};

use parley::config::Settings;
use parley_anp::ProtocolHash;

use crate::support::{BIN, Provider, examples, utf8};

fn protocol_file() -> PathBuf {
    examples().join("protocols/product-info.md")
}

const REQUEST: &str =
    r#"{"messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#;

/// Runs `parley ARGS` and returns (success, stdout, stderr).
async fn parley(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("PARLEY_DATABASE_URL")
        .env_remove("PARLEY_DATA_DIR")
        .output()
        .await
        .expect("parley runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A capabilities file with only the order-status lookup: it cannot serve the product protocol.
fn orders_only(dir: &Path) -> PathBuf {
    let path = dir.join("orders-only.toml");
    let orders = examples().join("data/orders.json");
    std::fs::write(
        &path,
        format!(
            r#"[agent]
name = "Order desk"
description = "Tells the status of customer orders."

[[capabilities]]
name = "getOrderStatus"
description = "Look up a customer order by its id (e.g. O-1001) and return its status."
read_only = true
input_schema = {{ type = "object", required = ["orderId"], properties = {{ orderId = {{ type = "string" }} }} }}
output_schema = {{ type = "object", required = ["orderId", "status"], properties = {{ orderId = {{ type = "string" }}, status = {{ type = "string" }} }} }}
binding = {{ type = "dataset", file = {orders:?}, key = "orderId", not_found = "error" }}
"#
        ),
    )
    .expect("capabilities file");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_negotiates_then_answers_at_zero_rtt_by_a_short_hash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = Provider::start(dir.path(), examples().join("capabilities.toml")).await;
    let local = tempfile::tempdir().expect("tempdir");
    let file = protocol_file();
    let hash = ProtocolHash::of(&std::fs::read_to_string(&file).expect("protocol"));
    let base = format!("http://{}", provider.addr);

    // One command: negotiate (nothing agreed yet), then call.
    let (ok, out, err) = parley(&[
        "call",
        &base,
        "--protocol",
        utf8(&file),
        "--json",
        REQUEST,
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("agreed in"), "{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("a JSON answer");
    assert_eq!(
        answer["productInfo"]["productName"],
        "High-performance Laptop"
    );
    assert_eq!(provider.negotiations(&hash).await, 1);

    // The next call names the protocol by a short hash and goes over the WebSocket base URL:
    // agreed already, so no negotiation, not even a hello.
    let short = &hash.to_string()[..8];
    let (ok, out, err) = parley(&[
        "call",
        &format!("ws://{}", provider.addr),
        "--protocol",
        short,
        "--json",
        &REQUEST.replace("P12345", "P99999"),
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(err.trim().is_empty(), "nothing negotiated: {err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("a JSON answer");
    assert_eq!(answer["status"]["code"], 404);
    assert_eq!(provider.negotiations(&hash).await, 1, "no new negotiation");

    // A prefix nothing in the local store begins with, and a word that is not a hash.
    let unknown = if hash.to_string().starts_with("ffff") {
        "0000"
    } else {
        "ffff"
    };
    let (ok, _, err) = parley(&[
        "call",
        &base,
        "--protocol",
        unknown,
        "--json",
        REQUEST,
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("not in the local store"), "{err}");
    let (ok, _, err) = parley(&[
        "call",
        &base,
        "--protocol",
        "nonsense",
        "--json",
        REQUEST,
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("neither a file nor a protocol hash"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_prefix_is_an_error_naming_the_candidates() {
    let local = tempfile::tempdir().expect("tempdir");
    let settings = Settings {
        data_dir: local.path().to_owned(),
        ..Settings::default()
    };
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("local store");
    let mut hashes = Vec::new();
    for i in 0..17 {
        let text = format!("# Requirements\n\nProtocol {i}.\n");
        hashes.push(store.put_protocol(&text).await.expect("put").hash);
    }
    drop(store);
    let shared = hashes
        .iter()
        .map(|h| &h[..1])
        .find(|p| hashes.iter().filter(|h| h.starts_with(*p)).count() > 1)
        .expect("seventeen hashes share a first digit");
    let (ok, _, err) = parley(&[
        "call",
        "http://127.0.0.1:9",
        "--protocol",
        shared,
        "--json",
        "{}",
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("more than one protocol"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_falls_back_to_natural_language_when_the_provider_rejects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = Provider::start(dir.path(), orders_only(dir.path())).await;
    let local = tempfile::tempdir().expect("tempdir");
    let url = format!("http://{}/nlip", provider.addr);
    let args = |extra: &'static [&'static str]| {
        let mut args = vec![
            "call".to_owned(),
            url.clone(),
            "--protocol".to_owned(),
            utf8(&protocol_file()).to_owned(),
            "--json".to_owned(),
            REQUEST.to_owned(),
            "--data-dir".to_owned(),
            utf8(local.path()).to_owned(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        parley(&args).await
    };

    let (ok, out, err) = run(args(&[])).await;
    assert!(ok, "a fallback is an answer: {out}\n{err}");
    assert!(
        err.contains("fell back to natural language: the negotiation ended without agreement"),
        "{err}"
    );
    assert!(!out.trim().is_empty(), "the provider's answer is printed");

    let (ok, out, err) = run(args(&["--no-fallback"])).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("no protocol could be agreed")
            && err.contains("natural language is not allowed"),
        "{err}"
    );
    assert!(out.trim().is_empty(), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_falls_back_for_a_peer_without_the_meta_protocol() {
    // An NLIP peer that knows nothing of ANP: it echoes every message.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let addr = listener.local_addr().expect("addr");
    let echo = axum::Router::new().route(
        "/nlip",
        axum::routing::post(|body: axum::body::Bytes| async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, echo).await });
    let local = tempfile::tempdir().expect("tempdir");
    let (ok, out, err) = parley(&[
        "call",
        &format!("http://{addr}/"),
        "--protocol",
        utf8(&protocol_file()),
        "--json",
        REQUEST,
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("does not speak the meta-protocol"), "{err}");
    // The echo shows the natural-language request: the requirement, then the request.
    assert!(out.starts_with("Look up one product"), "{out}");
    assert!(out.contains(r#""productId":"P12345""#), "{out}");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_without_a_path_work_in_every_command_and_a_wrong_path_gets_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = Provider::start(dir.path(), examples().join("capabilities.toml")).await;
    let local = tempfile::tempdir().expect("tempdir");
    let http = format!("http://{}", provider.addr);
    let ws = format!("ws://{}", provider.addr);

    for url in [&http, &format!("{http}/"), &ws] {
        let (ok, out, err) = parley(&["send", url, "What can you do?"]).await;
        assert!(ok, "{url}: {out}\n{err}");
        assert!(out.contains("getProductInfo"), "{url}: {out}");
    }
    let (ok, out, err) = parley(&[
        "negotiate",
        &format!("{http}/"),
        "--protocol",
        utf8(&protocol_file()),
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("status   agreed"), "{out}");

    // The HTTP path over a WebSocket URL: the error names the WebSocket end-point.
    let (ok, _, err) = parley(&["send", &format!("{ws}/nlip"), "hello"]).await;
    assert!(!ok);
    assert!(
        err.contains("405") && err.contains(&format!("{ws}/nlip/ws")),
        "{err}"
    );
    // And the WebSocket path over HTTP: the error names the HTTP end-point.
    let (ok, _, err) = parley(&["send", &format!("{http}/nlip/ws"), "hello"]).await;
    assert!(!ok);
    assert!(err.contains(&format!("{http}/nlip (POST)")), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negotiate_and_call_speak_seed_002_frames_with_wire_anp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = Provider::start(dir.path(), examples().join("capabilities.toml")).await;
    let local = tempfile::tempdir().expect("tempdir");
    let file = protocol_file();
    let hash = ProtocolHash::of(&std::fs::read_to_string(&file).expect("protocol"));
    let base = format!("http://{}", provider.addr);

    let (ok, out, err) = parley(&[
        "negotiate",
        &base,
        "--wire",
        "anp",
        "--protocol",
        utf8(&file),
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("status   agreed"), "{out}");
    assert!(out.contains("exchanges of seed-002 frames"), "{out}");
    assert_eq!(provider.negotiations(&hash).await, 1);

    // The call goes over a new connection, whose hello finds the protocol known.
    let (ok, out, err) = parley(&[
        "call",
        &format!("ws://{}/anp", provider.addr),
        "--wire",
        "anp",
        "--protocol",
        &hash.to_string()[..8],
        "--json",
        REQUEST,
        "--data-dir",
        utf8(local.path()),
    ])
    .await;
    assert!(ok, "{out}\n{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("a JSON answer");
    assert_eq!(answer["productInfo"]["productId"], "P12345");
    assert_eq!(provider.negotiations(&hash).await, 1, "no new negotiation");

    // `--wire` takes the two framings only.
    let (ok, _, err) = parley(&[
        "call",
        &base,
        "--wire",
        "smoke",
        "--protocol",
        "x",
        "--json",
        "{}",
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("nlip") && err.contains("anp"), "{err}");
}
