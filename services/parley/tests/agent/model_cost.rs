//! What the model cost, as the `parley` binary shows it: `protocols show HASH` prints the model
//! calls and tokens of the negotiation that agreed the protocol, and `conversations show ID` those
//! of a conversation's natural-language answers and its turns, above its log. The provider runs as `parley
//! serve` with every decision made by a scripted OpenAI-compatible server that reports usage.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{BuiltinProtocolReasoner, DeclaredCapability};
use serde_json::json;

use crate::support::{BIN, examples, spawn_serve};

/// Runs the CLI off the async workers (the scripted model answers on them meanwhile).
async fn run(args: &[&str]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(BIN)
            .args(&args)
            .env_remove("PARLEY_DATABASE_URL")
            .env_remove("PARLEY_CONFIG")
            .output()
            .expect("parley runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("the CLI task did not panic")
}

/// `parley serve --config CONFIG` on ephemeral ports; its NLIP URL, read from the start-up log.
fn serve(dir: &Path, config: &Path) -> (Child, String) {
    spawn_serve(dir, |command| {
        command
            .arg("--config")
            .arg(config)
            .env_remove("PARLEY_DATABASE_URL");
    })
}

fn stop(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "parley did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The scripted model's answers: accept the product protocol, write its handler (the built-in
/// generator's), then one natural-language answer through a tool call.
async fn script(model: &ScriptedOpenAi, protocol: &str) {
    let doc = parley_anp::ProtocolDoc::parse(protocol.to_owned()).expect("doc");
    let capabilities =
        parley::startup::load_capabilities(Some(&examples().join("capabilities.toml")))
            .await
            .expect("capabilities");
    let handler = BuiltinProtocolReasoner
        .generate_sync(&doc, &DeclaredCapability::all(&capabilities), None)
        .expect("built-in handler");
    let accept = json!({"decision": "accept", "reason": "getProductInfo serves it", "capability": "getProductInfo"});
    model.push(ScriptedReply::text(accept.to_string()).with_usage(Some((1200, 40))));
    let source = json!({"source": handler.source, "grants": ["getProductInfo"]});
    model.push(ScriptedReply::text(source.to_string()).with_usage(Some((1500, 600))));
    model.push(
        ScriptedReply::tool_call("getProductInfo", json!({"productId": "P12345"}))
            .with_usage(Some((400, 20))),
    );
    model.push(
        ScriptedReply::text("The High-performance Laptop costs 1299.99 USD.")
            .with_usage(Some((450, 15))),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocols_show_prints_the_agreement_s_cost_and_conversations_show_their_own() {
    let protocol_path = examples().join("protocols/product-info.md");
    let protocol = std::fs::read_to_string(&protocol_path).expect("example protocol");
    let model = ScriptedOpenAi::start().await;
    script(&model, &protocol).await;

    let provider = tempfile::tempdir().expect("tempdir");
    let config = provider.path().join("parley.toml");
    std::fs::write(
        &config,
        format!(
            "reasoner = \"openai\"\n\n[openai]\nbase_url = \"{}\"\nmodel = \"scripted-model\"\n\n[negotiation]\nbackend = \"openai\"\n",
            model.base_url()
        ),
    )
    .expect("config written");
    let (child, url) = serve(provider.path(), &config);
    let provider_dir = provider.path().to_str().expect("utf-8 path");
    let local = tempfile::tempdir().expect("tempdir");
    let local_dir = local.path().to_str().expect("utf-8 path");

    let (ok, out, err) = run(&[
        "negotiate",
        &url,
        "--protocol",
        protocol_path.to_str().expect("utf-8"),
        "--data-dir",
        local_dir,
    ])
    .await;
    assert!(ok && out.contains("status   agreed"), "{out}\n{err}");
    let hash = out
        .lines()
        .find_map(|l| l.strip_prefix("hash     "))
        .expect("hash line")
        .to_owned();

    let (ok, out, err) = run(&["protocols", "show", &hash, "--data-dir", provider_dir]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "cost     2 model calls, 3340 tokens (2700 prompt, 640 completion) on this side to agree it (the negotiation)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "evaluate: 1 model call, 1240 tokens (1200 prompt, 40 completion); generate_handler: 1 model call, 2100 tokens (1500 prompt, 600 completion)"
        ),
        "{out}"
    );
    // The requester asked no model.
    let (ok, out, err) = run(&["protocols", "show", &hash, "--data-dir", local_dir]).await;
    assert!(ok, "{err}");
    assert!(
        !out.contains("model call,") && !out.contains("model calls,"),
        "{out}"
    );

    let (ok, out, err) = run(&[
        "send",
        "--json",
        &url,
        "How much is product P12345?",
        "--nlip-token",
        "conversation_client=cost-test",
    ])
    .await;
    assert!(ok, "{err}");
    let reply: serde_json::Value = serde_json::from_str(&out).expect("--json prints NLIP JSON");
    let conversation = reply["submessages"]
        .as_array()
        .expect("submessages")
        .iter()
        .find(|s| s["subformat"] == "conversation_parley")
        .and_then(|s| s["content"].as_str())
        .expect("the provider's conversation token")
        .to_owned();
    let (ok, out, err) = run(&[
        "conversations",
        "show",
        &conversation,
        "--data-dir",
        provider_dir,
    ])
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("cost     2 model calls, 885 tokens (850 prompt, 35 completion)"),
        "{out}"
    );
    assert!(out.contains("answer: 2 model calls"), "{out}");
    assert!(out.contains("messages 2"), "{out}");
    assert!(out.contains("turns    1 (messages from the peer)"), "{out}");
    assert!(
        out.contains("→") && out.contains("How much is product P12345?"),
        "{out}"
    );
    assert!(out.contains("←") && out.contains("1299.99 USD"), "{out}");

    let (ok, _, err) = run(&["conversations", "show", "nope", "--data-dir", provider_dir]).await;
    assert!(!ok && err.contains("not in the store"), "{err}");
    stop(child);
}
