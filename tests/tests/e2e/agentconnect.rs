//! AgentConnect, the reference implementation of the ANP meta-protocol (agent-connect 0.3.7,
//! installed by `scripts/setup-python.sh`), against Parley over `/anp`: its real
//! `MetaProtocol` negotiator, run by `tests/agentconnect/*.py` in a child process, with its
//! model answered by a scripted OpenAI-compatible server (`tests/agentconnect/model/`).
//!
//! - AgentConnect as requester, Parley as provider: AgentConnect proposes the product protocol,
//!   Parley accepts it, verifies its handler and swaps `codeGeneration`; AgentConnect then sends
//!   a request through the requester class it generated (bare JSON) and Parley's verified
//!   handler answers it.
//! - The same with a protocol Parley's provider cannot serve as written (a warranty its catalogue
//!   does not have): Parley counter-proposes, AgentConnect's model accepts, and the request is
//!   answered by the handler of the counter-proposal.
//! - AgentConnect proposing to a provider with no product capability: Parley rejects, and
//!   AgentConnect's echo of the rejection is taken quietly.
//! - AgentConnect stopped in the middle (while it generates its code, before its
//!   `codeGeneration`): Parley ends the negotiation it left open.
//! - Parley as requester, AgentConnect as provider: Parley proposes the product protocol,
//!   AgentConnect's model consults its capability tool and counter-proposes, Parley accepts the
//!   counter-proposal, AgentConnect echoes the acceptance, both sides generate code, and Parley's
//!   request is answered by the provider class AgentConnect generated.

use std::process::Stdio;
use std::time::Duration;

use parley::negotiation::anp::AnpOptions;
use parley::negotiation::requester::{Outcome, ProtocolRef, Requested, Requester, Wire};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use parley_anp::ProtocolHash;
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_store::NegotiationStatus;
use parley_tests::{TestApp, repo_root, test_settings};
use serde_json::{Value, json};

use crate::requester::{negotiations, orders_only_settings, store_of};
use crate::support::{new_requester, product_protocol, request};

/// A file of the scripted model's answers to AgentConnect.
fn model_answer(name: &str) -> String {
    let path = repo_root().join("tests/agentconnect/model").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Queues AgentConnect's code generation (requester, then provider: description, then class).
fn script_code_generation(model: &ScriptedOpenAi) {
    for name in [
        "requester_description.json",
        "requester_code.md",
        "provider_description.json",
        "provider_code.md",
    ] {
        model.push(ScriptedReply::text(model_answer(name)));
    }
}

/// `tests/agentconnect/SCRIPT` under the project's Python, with `env`, writing AgentConnect's
/// generated code into `code`.
fn agentconnect(
    script: &str,
    env: &[(&str, String)],
    code: &std::path::Path,
) -> tokio::process::Command {
    let root = repo_root();
    let python = parley_tests::venv_python();
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(root.join("tests/agentconnect").join(script))
        .current_dir(code)
        .env("AC_CODE_DIR", code)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Runs `tests/agentconnect/SCRIPT` with `env` and returns its one-line JSON report.
async fn run_agentconnect(script: &str, env: &[(&str, String)]) -> Value {
    let code = tempfile::tempdir().expect("tempdir");
    let run = agentconnect(script, env, code.path()).output();
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("AgentConnect finished within 600 s")
        .expect("python could be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed ({}); if imports fail, rerun scripts/setup-python.sh\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}\n--- stderr ---\n{stderr}"))
}

/// The meta frames of a report's `sent` or `received` list, as (action, status, sequenceId).
fn meta_frames(frames: &Value) -> Vec<(String, String, Option<u64>)> {
    frames
        .as_array()
        .expect("a list of frames")
        .iter()
        .filter(|f| f["type"] == 0)
        .map(|f| {
            let m = &f["json"];
            (
                m["action"].as_str().unwrap_or("?").to_owned(),
                m["status"].as_str().unwrap_or("?").to_owned(),
                m["sequenceId"].as_u64(),
            )
        })
        .collect()
}

fn frame(action: &str, status: &str, seq: Option<u64>) -> (String, String, Option<u64>) {
    (action.to_owned(), status.to_owned(), seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentconnect_negotiates_with_a_parley_provider_and_its_request_is_answered() {
    let model = ScriptedOpenAi::start().await;
    let text = product_protocol();
    model.push(ScriptedReply::text(text.clone()));
    script_code_generation(&model);
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;

    let report = run_agentconnect(
        "requester.py",
        &[
            ("PARLEY_ANP_URL", provider.ws("/anp")),
            ("MODEL_BASE_URL", model.base_url()),
            ("AC_REQUEST", json!({"productId": "P12345"}).to_string()),
        ],
    )
    .await;
    assert_eq!(report["negotiated"], true, "{report:#}");
    assert_eq!(report["peer_generated"], true, "{report:#}");

    // AgentConnect counts from 1 and answers Parley's acceptance with an echo of its own id.
    assert_eq!(
        meta_frames(&report["sent"]),
        [
            frame("protocolNegotiation", "negotiating", Some(1)),
            frame("protocolNegotiation", "accepted", Some(1)),
            frame("codeGeneration", "generated", None),
        ],
        "{report:#}"
    );
    assert_eq!(
        meta_frames(&report["received"]),
        [
            frame("protocolNegotiation", "accepted", Some(2)),
            frame("codeGeneration", "generated", None),
        ],
        "{report:#}"
    );
    // The request went as bare JSON through the generated requester, and came back bare from
    // Parley's handler.
    let sent = report["sent"].as_array().expect("frames");
    let request = sent.last().expect("the request");
    assert_eq!(request["type"], "bare", "{report:#}");
    assert_eq!(request["json"]["productId"], "P12345");
    let answer = report["received"]
        .as_array()
        .expect("frames")
        .last()
        .cloned();
    assert_eq!(answer.expect("the answer")["type"], "bare", "{report:#}");
    let result = &report["result"];
    assert_eq!(result["code"], 200, "{report:#}");
    assert_eq!(
        result["productInfo"]["productName"],
        "High-performance Laptop"
    );
    assert_eq!(result["productInfo"]["currency"], "USD");

    // AgentConnect asked its model five times: the proposal, then its code.
    let asked = model.requests();
    assert_eq!(asked.len(), 5, "{asked:#?}");
    let system = asked[0].body["messages"][0]["content"].to_string();
    assert!(system.contains("protocol design expert"), "{system}");

    provider.stop().await;
    assert_agreed(&settings, &ProtocolHash::of(&text)).await;
}

/// Parley's side of an agreement on `hash`: one negotiation, agreed, with an active handler
/// that passed its verification.
async fn assert_agreed(settings: &parley::config::Settings, hash: &ProtocolHash) {
    let store = store_of(settings).await;
    assert_eq!(negotiations(&store, hash).await, 1);
    let recorded = store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("negotiations");
    assert_eq!(recorded[0].status, NegotiationStatus::Accepted);
    let handler = store
        .active_handler(&hash.to_string())
        .await
        .expect("query")
        .expect("an active handler");
    assert_eq!(handler.verification_passed, Some(true));
}

/// The product protocol as AgentConnect's (scripted) model counter-proposes it: the same
/// messages, a sentence more in the requirements.
fn counter_proposal() -> String {
    let text = product_protocol();
    let sentence = "The product name may be sent as a hint but the id decides.";
    assert!(text.contains(sentence));
    text.replacen(
        sentence,
        "The product name may be sent as a hint but the id decides; an unknown id is answered \
         with status 404 and no productInfo.",
        1,
    )
}

/// `tests/agentconnect/provider.py` running: AgentConnect's provider on a loopback port.
struct AgentConnectProvider {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    /// Its WebSocket, as a URL without a path.
    url: String,
}

impl AgentConnectProvider {
    /// Starts it, its model at `model`, its generated code in `code`, and waits until it listens.
    async fn start(model: &ScriptedOpenAi, code: &std::path::Path) -> AgentConnectProvider {
        let env = [("MODEL_BASE_URL", model.base_url())];
        let mut child = agentconnect("provider.py", &env, code)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python could be started");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("AgentConnect listens within 120 s")
            .expect("stdout")
            .expect("a first line");
        let listening: Value = serde_json::from_str(&first).expect("{\"listening\": PORT}");
        let url = format!("ws://127.0.0.1:{}", listening["listening"]);
        AgentConnectProvider { child, lines, url }
    }

    /// Its report, printed when the requester closed the connection.
    async fn report(mut self) -> Value {
        let last = tokio::time::timeout(Duration::from_secs(120), async {
            let mut last = String::new();
            while let Some(line) = self.lines.next_line().await.expect("stdout") {
                last = line;
            }
            last
        })
        .await
        .expect("AgentConnect reports when the connection closes");
        let status = self.child.wait().await.expect("exit status");
        assert!(status.success(), "provider.py failed: {status}");
        serde_json::from_str(&last).expect("a JSON report")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parley_negotiates_with_an_agentconnect_provider_through_a_counter_proposal() {
    let model = ScriptedOpenAi::start().await;
    // AgentConnect's provider asks its capability tool, then counter-proposes.
    model.push(ScriptedReply::tool_call(
        "get_capability_info",
        json!({"requirement": "product lookup", "input_description": "productId",
               "output_description": "product details"}),
    ));
    let counter = counter_proposal();
    let verdict = json!({"status": "negotiating", "candidate_protocol": counter,
                         "modification_summary": "Says what an unknown id gets."});
    model.push(ScriptedReply::text(verdict.to_string()));
    script_code_generation(&model);

    let code = tempfile::tempdir().expect("tempdir");
    let agentconnect = AgentConnectProvider::start(&model, code.path()).await;

    let local = tempfile::tempdir().expect("tempdir");
    // AgentConnect's MetaProtocol answers no hello: the requester waits a second for one.
    let options = AnpOptions {
        hello_timeout: Duration::from_secs(1),
        ..AnpOptions::default()
    };
    let requester = Requester {
        wire: Wire::Anp(options),
        ..new_requester(local.path()).await
    };
    let requested = requester
        .request(
            &agentconnect.url,
            ProtocolRef::Text(product_protocol()),
            request("ac-p1", "P12345"),
            false,
            |_| {},
        )
        .await
        .expect("negotiated and answered");
    drop(requester);
    let Requested::Protocol {
        hash,
        negotiated,
        called,
    } = requested
    else {
        panic!("answered through the protocol: {requested:?}");
    };
    let negotiated = negotiated.expect("negotiated by this request");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    assert_eq!(
        hash,
        ProtocolHash::of(&counter),
        "the counter-proposal is what was agreed"
    );
    assert_eq!(called.answer["messageId"], "ac-p1");
    assert_eq!(called.answer["status"]["code"], 200);
    assert_eq!(called.answer["productInfo"]["currency"], "USD");

    let report = agentconnect.report().await;
    assert_counter_proposal_exchanged(&report);
    // The model was asked for the verdict twice (the tool round) and for the code four times.
    assert_eq!(model.requests().len(), 6);
}

/// The product protocol asking for a warranty the example catalogue does not have.
fn warranty_protocol() -> String {
    let text = product_protocol();
    let from = r#"  "required": ["messageId", "type", "status"]"#;
    assert!(text.contains(from));
    text.replacen(
        from,
        r#"  "required": ["messageId", "type", "status", "warrantyYears"]"#,
        1,
    )
    .replacen(
        r#"    "productInfo": {
      "type": ["object", "null"],"#,
        r#"    "warrantyYears": { "type": "integer", "description": "Years of warranty" },
    "productInfo": {
      "type": ["object", "null"],"#,
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentconnect_accepts_a_parley_counter_proposal_and_is_served_by_it() {
    let model = ScriptedOpenAi::start().await;
    let text = warranty_protocol();
    assert_ne!(text, product_protocol());
    model.push(ScriptedReply::text(text.clone()));
    let verdict =
        json!({"status": "accepted", "candidate_protocol": "", "modification_summary": ""});
    model.push(ScriptedReply::text(verdict.to_string()));
    script_code_generation(&model);
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;

    let report = run_agentconnect(
        "requester.py",
        &[
            ("PARLEY_ANP_URL", provider.ws("/anp")),
            ("MODEL_BASE_URL", model.base_url()),
            ("AC_REQUEST", json!({"productId": "P12345"}).to_string()),
        ],
    )
    .await;
    assert_eq!(report["negotiated"], true, "{report:#}");
    assert_eq!(
        meta_frames(&report["received"]),
        [
            frame("protocolNegotiation", "negotiating", Some(2)),
            frame("codeGeneration", "generated", None),
        ],
        "{report:#}"
    );
    assert_eq!(
        meta_frames(&report["sent"]),
        [
            frame("protocolNegotiation", "negotiating", Some(1)),
            frame("protocolNegotiation", "accepted", Some(3)),
            frame("codeGeneration", "generated", None),
        ],
        "{report:#}"
    );
    let counter = report["received"][0]["json"]["candidateProtocols"]
        .as_str()
        .expect("the counter-proposal's text")
        .to_owned();
    assert!(!counter.contains("warrantyYears"), "{counter}");
    assert!(
        report["received"][0]["json"]["modificationSummary"]
            .as_str()
            .is_some_and(|s| s.contains("warrantyYears"))
    );
    // AgentConnect's model saw Parley's counter-proposal when it judged it.
    let judged = model.requests()[1].body["messages"][1]["content"].to_string();
    assert!(judged.contains("counterparty_latest_protocol"), "{judged}");
    assert_eq!(report["result"]["code"], 200, "{report:#}");
    assert_eq!(report["result"]["productInfo"]["price"], 1299.99);
    provider.stop().await;

    assert_agreed(&settings, &ProtocolHash::of(&counter)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentconnect_is_refused_by_a_provider_without_the_capability() {
    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::text(product_protocol()));
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = orders_only_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;

    let report = run_agentconnect(
        "requester.py",
        &[
            ("PARLEY_ANP_URL", provider.ws("/anp")),
            ("MODEL_BASE_URL", model.base_url()),
            ("AC_REQUEST", json!({"productId": "P12345"}).to_string()),
        ],
    )
    .await;
    assert_eq!(report["negotiated"], false, "{report:#}");
    let received = report["received"].as_array().expect("frames");
    assert_eq!(
        meta_frames(&report["received"]),
        [frame("protocolNegotiation", "rejected", Some(2))],
        "{report:#}"
    );
    let why = received[0]["json"]["modificationSummary"]
        .as_str()
        .unwrap_or_default();
    assert!(!why.is_empty(), "the rejection says why: {report:#}");
    // AgentConnect echoes the rejection with its own id.
    assert_eq!(
        meta_frames(&report["sent"]),
        [
            frame("protocolNegotiation", "negotiating", Some(1)),
            frame("protocolNegotiation", "rejected", Some(1)),
        ],
        "{report:#}"
    );
    provider.stop().await;
    // Nothing was agreed.
    let store = store_of(&settings).await;
    let hash = ProtocolHash::of(&product_protocol());
    let recorded = store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("negotiations");
    assert!(recorded.is_empty(), "nothing agreed: {recorded:?}");
}

/// Waits (within bounds) until a line of this test's log has every one of `parts` (the server
/// notices a closed connection on its own time), and returns the log.
pub(crate) async fn logged(parts: &[&str]) -> String {
    let logs = crate::agent::logs();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = String::from_utf8(logs.lock().expect("log").clone()).expect("UTF-8");
        if log.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
            return log;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never logged a line with {parts:?}:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// On the test's own thread (a current-thread runtime), so that its log holds its server's lines.
#[tokio::test]
async fn agentconnect_stopped_mid_negotiation_leaves_nothing_open() {
    crate::agent::logs();
    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::text(product_protocol()));
    // AgentConnect's code generation does not come back before it is stopped.
    model.set_fallback(ScriptedReply::text("{}").delayed(Duration::from_secs(600)));
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;

    let code = tempfile::tempdir().expect("tempdir");
    let env = [
        ("PARLEY_ANP_URL", provider.ws("/anp")),
        ("MODEL_BASE_URL", model.base_url()),
        ("AC_REQUEST", json!({"productId": "P12345"}).to_string()),
    ];
    let mut child = agentconnect("requester.py", &env, code.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python could be started");
    // Its second question to the model is for code: the protocol is agreed on both sides, and
    // Parley waits for AgentConnect's codeGeneration.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while model.requests().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "AgentConnect never reached its code generation"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().await.expect("stopped");

    // It is recorded as timed out, after the log says the peer left it.
    let log = logged(&["negotiation ended", "outcome=\"timeout\""]).await;
    assert!(log.contains("the peer left an open negotiation"), "{log}");
    provider.stop().await;
}

/// AgentConnect's report of the counter-proposal scenario, frame by frame.
fn assert_counter_proposal_exchanged(report: &Value) {
    assert_eq!(report["negotiated"], true, "{report:#}");
    assert_eq!(report["peer_generated"], true, "{report:#}");
    // Parley: its hello (which AgentConnect ignores), its proposal from 0, its acceptance of the
    // counter-proposal, its codeGeneration; AgentConnect: the counter-proposal as 2, the echo of
    // the acceptance repeating 2, its codeGeneration.
    let received = meta_frames(&report["received"]);
    assert_eq!(
        received[1..],
        [
            frame("protocolNegotiation", "negotiating", Some(0)),
            frame("protocolNegotiation", "accepted", Some(3)),
            frame("codeGeneration", "generated", None),
        ],
        "{report:#}"
    );
    assert_eq!(report["received"][0]["json"]["type"], "sourceHello");
    assert_eq!(
        meta_frames(&report["sent"]),
        [
            frame("protocolNegotiation", "negotiating", Some(2)),
            frame("protocolNegotiation", "accepted", Some(2)),
            frame("codeGeneration", "generated", None),
        ],
        "{report:#}"
    );
    // The request went bare, as AgentConnect's own code sends it.
    let request_frame = report["received"]
        .as_array()
        .expect("frames")
        .last()
        .cloned();
    assert_eq!(
        request_frame.expect("the request")["type"],
        "bare",
        "{report:#}"
    );
}
