//! `parley call` when the provider's answer breaks the agreed protocol: the call reports it to
//! the provider (`fixErrorNegotiation`), prints the fixed handler's answer with a note on stderr
//! when the provider fixed its handler, and fails with the provider's reasons when it refused.

use parley::config::{ProtocolBackend, ReasonerKind};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use serde_json::{Value, json};

use crate::support::{BIN, Provider, examples, utf8};

/// Runs `parley ARGS`: (success, stdout, stderr).
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

/// A handler's model answer.
fn handler(source: &str) -> ScriptedReply {
    ScriptedReply::text(json!({"source": source, "grants": ["getProductInfo"]}).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_reports_a_broken_answer_and_prints_the_fixed_one_or_the_refusal() {
    let file = examples().join("protocols/product-info.md");
    let doc = parley_anp::ProtocolDoc::parse(std::fs::read_to_string(&file).expect("protocol"))
        .expect("a protocol document");
    let capabilities =
        parley::startup::load_capabilities(Some(&examples().join("capabilities.toml")))
            .await
            .expect("capabilities");
    let right = parley_reasoner::BuiltinProtocolReasoner
        .generate_sync(
            &doc,
            &parley_reasoner::DeclaredCapability::all(&capabilities),
            None,
        )
        .expect("built-in handler")
        .source;
    // Passes every test case; answers P23456 (in no test case) with a status that is no object.
    let faulty = format!(
        "{}\nfunction handle(request) {{ if (request.productId === 'P23456') {{ return {{ \
         messageId: request.messageId, type: 'RESPONSE', status: 'ok' }}; }} return \
         correct(request); }}\n",
        right.replacen("function handle(request)", "function correct(request)", 1)
    );
    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::text(
        json!({"decision": "accept", "reason": "getProductInfo serves it", "capability": "getProductInfo"}).to_string(),
    ));
    model.push(handler(&faulty));
    // The first fix the model offers still answers P23456 out of schema; the second is right.
    model.push(handler(&format!("{faulty}\n// Checked again.\n")));
    model.push(handler(&right));
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = Provider::start_with(dir.path(), examples().join("capabilities.toml"), |s| {
        s.reasoner = ReasonerKind::Openai;
        s.openai.base_url = model.base_url();
        s.negotiation.backend = ProtocolBackend::Openai;
    })
    .await;
    let local = tempfile::tempdir().expect("tempdir");
    let base = format!("http://{}", provider.addr);
    let call = |id: &str| {
        let request = json!({"messageId": id, "type": "REQUEST", "action": "getProductInfo", "productId": "P23456"});
        let args = [
            "call".to_owned(),
            base.clone(),
            "--protocol".to_owned(),
            utf8(&file).to_owned(),
            "--json".to_owned(),
            request.to_string(),
            "--data-dir".to_owned(),
            utf8(local.path()).to_owned(),
        ];
        async move { parley(&args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };

    // Negotiated, called, reported; the provider's rebuild fails: the call fails with its reasons.
    let (ok, out, err) = call("c1").await;
    assert!(!ok, "{out}\n{err}");
    assert!(out.trim().is_empty(), "no answer printed: {out}");
    assert!(err.contains("refused to fix its handler"), "{err}");
    assert!(
        err.contains("does not answer the reported request"),
        "{err}"
    );

    // Called again: reported again, fixed this time; the fixed handler's answer is printed.
    let (ok, out, err) = call("c2").await;
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("fixed its handler"), "{err}");
    let answer: Value = serde_json::from_str(&out).expect("a JSON answer");
    assert_eq!(answer["status"]["code"], 200, "{answer}");
    assert_eq!(answer["productInfo"]["productId"], "P23456");
    assert_eq!(model.requests().len(), 4, "evaluate, generate, two fixes");
}
