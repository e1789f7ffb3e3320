//! The `parley` binary end to end: `serve` refuses bad configuration before listening,
//! serves, and shuts down gracefully on SIGTERM; `send` talks HTTP and WebSocket;
//! `sandbox run` prints a handler's output or its typed error.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::support::{BIN, examples, spawn_serve};

/// Starts `parley serve` on ephemeral ports and returns the child and its NLIP URL.
fn serve(dir: &std::path::Path) -> (Child, String) {
    serve_with(dir, None)
}

/// [`serve`] with an explicit database URL (PostgreSQL).
fn serve_with(dir: &std::path::Path, database_url: Option<&str>) -> (Child, String) {
    spawn_serve(dir, |command| {
        if let Some(url) = database_url {
            command.env("PARLEY_DATABASE_URL", url);
        } else {
            command.env_remove("PARLEY_DATABASE_URL");
        }
        command.env_remove("PARLEY_CONFIG");
    })
}

/// The hash line `parley negotiate` prints.
pub(crate) fn printed_hash(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("hash     "))
        .expect("hash line")
        .to_owned()
}

pub(crate) fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().expect("parley runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_send_and_graceful_shutdown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, url) = serve(dir.path());
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let (ok, out, err) = run(&["send", &url, "What can you do?"]);
    assert!(ok, "{err}");
    assert!(out.contains("getProductInfo"), "{out}");

    let (ok, out, err) = run(&["send", "--json", "--control", &url, "status"]);
    assert!(ok, "{err}");
    let reply: serde_json::Value = serde_json::from_str(&out).expect("--json prints NLIP JSON");
    assert_eq!(reply["messagetype"], "control");

    let ws = url.replace("http://", "ws://") + "/ws";
    let (ok, out, err) = run(&["send", &ws, "getProductInfo {\"productId\": \"P12345\"}"]);
    assert!(ok, "{err}");
    assert!(out.contains("P12345"), "{out}");

    // The requester side: negotiate, call, list, show — with its own local store.
    let local = tempfile::tempdir().expect("tempdir");
    let local_dir = local.path().to_str().expect("utf-8 path");
    let protocol = examples().join("protocols/product-info.md");
    let (ok, out, err) = run(&[
        "negotiate",
        &url,
        "--protocol",
        protocol.to_str().expect("utf-8"),
        "--data-dir",
        local_dir,
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("status   agreed"), "{out}");
    assert!(
        err.contains("hello") && err.contains("round"),
        "progress is shown: {err}"
    );
    assert!(out.contains("→ protocolNegotiation negotiating"), "{out}");
    let hash = printed_hash(&out);
    let (ok, out, err) = run(&[
        "call",
        &url,
        "--protocol",
        &hash,
        "--data-dir",
        local_dir,
        "--json",
        r#"{"messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#,
    ]);
    assert!(ok, "{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("JSON answer");
    assert_eq!(answer["productInfo"]["productId"], "P12345");
    let (ok, out, _) = run(&["protocols", "list", "--data-dir", local_dir]);
    assert!(
        ok && out.contains(&hash) && out.contains("requester"),
        "{out}"
    );
    let (ok, out, _) = run(&["protocols", "show", &hash, "--data-dir", local_dir]);
    assert!(
        ok && out.contains("# Requirements") && out.contains("accepted"),
        "{out}"
    );
    // The provider's side: a verified handler, served in its compiled form.
    let provider_dir = dir.path().to_str().expect("utf-8 path");
    let (ok, out, err) = run(&["protocols", "show", &hash, "--data-dir", provider_dir]);
    assert!(ok, "{err}");
    assert!(
        out.contains("by builtin") && out.contains("verification passed"),
        "{out}"
    );
    assert!(out.contains("serves   its compiled form"), "{out}");
    // Again: the provider knows it, so no negotiation happens.
    let (ok, out, _) = run(&[
        "negotiate",
        &url,
        "--protocol",
        protocol.to_str().expect("utf-8"),
        "--data-dir",
        local_dir,
    ]);
    assert!(ok && out.contains("0-RTT"), "{out}");

    stop(child);
}

#[test]
fn bad_configuration_is_refused_before_listening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("caps.toml");
    std::fs::write(
        &bad,
        "[agent]\nname = \"x\"\ndescription = \"y\"\n[[capabilities]]\nname = \"a\"\n",
    )
    .expect("write");
    let (ok, _, err) = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upload-listen",
        "127.0.0.1:0",
        "--capabilities",
        bad.to_str().expect("utf-8 path"),
    ]);
    assert!(!ok);
    assert!(err.contains("capabilit"), "{err}");

    let (ok, _, err) = run(&["serve", "--database-url", "mysql://nope"]);
    assert!(!ok);
    assert!(err.contains("database_url"), "{err}");
}

#[test]
fn sandbox_run_prints_output_or_typed_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.js");
    std::fs::write(
        &good,
        "function handle(r) { return { id: r.productId, info: host.call('getProductInfo', { productId: r.productId }) }; }",
    )
    .expect("write");
    let caps = examples().join("capabilities.toml");
    let caps = caps.to_str().expect("utf-8 path");
    let (ok, out, err) = run(&[
        "sandbox",
        "run",
        "--handler",
        good.to_str().expect("utf-8"),
        "--input",
        r#"{"productId": "P12345"}"#,
        "--grant",
        "getProductInfo",
        "--capabilities",
        caps,
    ]);
    assert!(ok, "{err}");
    let output: serde_json::Value = serde_json::from_str(&out).expect("JSON output");
    assert_eq!(output["id"], "P12345");
    assert_eq!(output["info"]["productId"], "P12345");

    // Not granted: the typed error, exit 1.
    let (ok, _, err) = run(&[
        "sandbox",
        "run",
        "--handler",
        good.to_str().expect("utf-8"),
        "--input",
        r#"{"productId": "P12345"}"#,
        "--capabilities",
        caps,
    ]);
    assert!(!ok);
    assert!(err.contains("capability_refused"), "{err}");

    let looping = dir.path().join("loop.js");
    std::fs::write(&looping, "function handle(r) { for (;;) {} }").expect("write");
    let (ok, _, err) = run(&[
        "sandbox",
        "run",
        "--handler",
        looping.to_str().expect("utf-8"),
        "--input",
        "{}",
    ]);
    assert!(!ok);
    assert!(err.contains("timeout"), "{err}");
}

/// Stops a served child with SIGTERM and waits for a clean exit.
/// SIGTERM, and a graceful shutdown's exit 0 within 20 s.
pub(crate) fn stop(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "graceful shutdown exits 0, got {status}");
            return;
        }
        assert!(Instant::now() < deadline, "parley did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two Parley processes: a provider (`parley serve`) and a requester (the CLI with its own
/// store). They negotiate, the requester calls, both restart, and the next call needs no
/// negotiation.
fn two_processes_negotiate_call_restart(database_url: Option<&str>) {
    let provider_dir = tempfile::tempdir().expect("tempdir");
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let local = requester_dir.path().to_str().expect("utf-8 path");
    let protocol = examples().join("protocols/product-info.md");
    let request = r#"{"messageId": "p1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#;

    let (provider, url) = serve_with(provider_dir.path(), database_url);
    let (ok, out, err) = run(&[
        "negotiate",
        &url,
        "--protocol",
        protocol.to_str().expect("utf-8"),
        "--data-dir",
        local,
    ]);
    assert!(ok && out.contains("status   agreed"), "{out}\n{err}");
    let hash = printed_hash(&out);
    let call_product = |url: &str| {
        let (ok, out, err) = run(&[
            "call",
            url,
            "--protocol",
            &hash,
            "--data-dir",
            local,
            "--json",
            request,
        ]);
        assert!(
            ok && out.contains("High-performance Laptop"),
            "{out}\n{err}"
        );
        err
    };
    call_product(&url);
    // The provider counted every message of the exchange: three in (hello, proposal, the
    // requester's codeGeneration) and three out (hello, acceptance, its codeGeneration).
    let metrics = get_metrics(&url);
    for (series, expected) in [
        (
            "parley_negotiation_messages_total{direction=\"inbound\"}",
            3.0,
        ),
        (
            "parley_negotiation_messages_total{direction=\"outbound\"}",
            3.0,
        ),
        ("parley_negotiations_total{outcome=\"accepted\"}", 1.0),
        ("parley_handler_calls_total{outcome=\"ok\"}", 1.0),
    ] {
        assert_eq!(
            metric(&metrics, series),
            Some(expected),
            "{series}:\n{metrics}"
        );
    }
    stop(provider);

    // Both restart: a new provider process on the same database (new port), and every
    // requester command is a new process on the same local store.
    let (provider, url) = serve_with(provider_dir.path(), database_url);
    let err = call_product(&url);
    assert!(
        !err.contains("negotiated it again"),
        "0-RTT after restart: {err}"
    );
    let metrics = get_metrics(&url);
    assert!(metrics.contains("parley_handler_calls_total"), "{metrics}");
    assert!(
        !metrics.contains("parley_negotiation_messages_total"),
        "no negotiation message after the restart:\n{metrics}"
    );
    stop(provider);
}

/// The provider's `GET /metrics` text; `url` is its `/nlip` address.
fn get_metrics(url: &str) -> String {
    let metrics_url = url.replace("/nlip", "/metrics");
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async { reqwest::get(&metrics_url).await?.text().await })
        .expect("GET /metrics")
}

/// The value of one series (`name{labels}` exactly as rendered) in a Prometheus text exposition.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn two_processes_on_sqlite() {
    two_processes_negotiate_call_restart(None);
}

#[test]
fn two_processes_on_postgres() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (url, guard) = runtime.block_on(parley_store::testing::fresh_postgres_url());
    two_processes_negotiate_call_restart(Some(&url));
    runtime
        .block_on(guard.drop_database())
        .expect("test database dropped");
}
