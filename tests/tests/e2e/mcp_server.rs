//! Parley as an MCP server, spoken to by MCP clients nobody here wrote: the Python `mcp` SDK's
//! client (`tests/mcp/parley_client.py`, from the `.venv` of `scripts/setup-python.sh`) in the
//! current MCP revision and the one before it, and the MCP Inspector's CLI mode
//! (`@modelcontextprotocol/inspector`, pinned in `tests/mcp/package.json`, installed by
//! `scripts/setup-node.sh`); `/mcp` when it is not configured, and its per-address admission.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use parley::negotiation::requester::Outcome;
use parley_tests::{TestApp, repo_root, test_settings};
use serde_json::{Value, json};

use crate::support::{new_requester, product_protocol, request};

/// A provider with the example capabilities that serves `/mcp`.
async fn serving(dir: &Path) -> TestApp {
    let mut settings = test_settings(dir);
    settings.mcp.serve = true;
    TestApp::spawn(&settings).await
}

/// Runs `tests/mcp/parley_client.py` against `app` in `mode` with these calls (name,
/// arguments) and, when given, a call of an unknown tool; returns its report.
async fn python_client(
    app: &TestApp,
    mode: &str,
    calls: &[(&str, Value)],
    unknown: Option<&str>,
) -> Value {
    let root = repo_root();
    let python = parley_tests::venv_python();
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(root.join("tests/mcp/parley_client.py"))
        .arg(app.http("/mcp"))
        .args(["--mode", mode]);
    for (name, arguments) in calls {
        command.arg("--call").arg(name).arg(arguments.to_string());
    }
    if let Some(name) = unknown {
        command.args(["--unknown", name]);
    }
    let run = command
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finished within 120 s")
        .expect("the Python client starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python MCP client failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The listed tool named `name`.
fn tool<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {}", report["tools"]))
}

/// The result of the report's `i`th call, and its text block read as JSON.
fn call(report: &Value, i: usize) -> (&Value, Value) {
    let result = &report["calls"][i]["result"];
    let text = result["content"][0]["text"].as_str().expect("a text block");
    (
        result,
        serde_json::from_str(text).expect("the text is JSON"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mcp_sdk_lists_and_calls_capabilities_and_negotiated_protocols() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = serving(dir.path()).await;

    // The revision before the current one (initialize handshake), before any negotiation.
    let calls = [
        ("getProductInfo", json!({"productId": "P12345"})),
        ("getProductInfo", json!({"productId": "P99999"})),
        ("getProductInfo", json!({"productId": 12345})),
        ("getOrderStatus", json!({"orderId": "O-0000"})),
    ];
    let report = python_client(&app, "legacy", &calls, Some("noSuchTool")).await;
    assert_eq!(report["protocolVersion"], "2025-11-25");
    let info = tool(&report, "getProductInfo");
    assert_eq!(info["annotations"]["readOnlyHint"], true);
    assert_eq!(info["inputSchema"]["required"], json!(["productId"]));
    // The capability may answer null: its output travels in `result`.
    assert_eq!(
        info["outputSchema"]["properties"]["result"]["type"],
        json!(["object", "null"])
    );
    assert!(
        !report.to_string().contains("\"protocol_"),
        "no protocol is agreed yet"
    );

    let (found, text) = call(&report, 0);
    assert_eq!(found["isError"], false, "{found}");
    let product = &found["structuredContent"]["result"];
    assert_eq!(product["productName"], "High-performance Laptop");
    assert_eq!(product["price"], 1299.99);
    assert_eq!(
        text, found["structuredContent"],
        "the text block is the JSON"
    );
    let (missing, _) = call(&report, 1);
    assert_eq!(missing["structuredContent"], json!({"result": null}));

    // Capability errors are tool results with isError, their code and message.
    // Their JSON is the text block only: `structuredContent` would have to match the output
    // schema.
    let (bad, text) = call(&report, 2);
    assert_eq!(bad["isError"], true, "{bad}");
    assert_eq!(text["error"]["code"], "invalid_arguments", "{text}");
    assert!(bad.get("structuredContent").is_none(), "{bad}");
    let (not_found, text) = call(&report, 3);
    assert_eq!(not_found["isError"], true, "{not_found}");
    assert_eq!(text["error"]["code"], "not_found", "{text}");
    // An unknown tool is MCP's JSON-RPC error for it (invalid params).
    assert_eq!(report["unknown"]["code"], -32602, "{}", report["unknown"]);
    assert!(
        report["unknown"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("noSuchTool")),
        "{}",
        report["unknown"]
    );

    // A protocol agreed through the requester becomes a tool, seen by the next listing.
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate(&app.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiation runs");
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    let hex = negotiated.hash.to_string();
    let name = format!("protocol_{}", &hex[..12]);

    // The current revision (no handshake) calls it through the provider's serving.
    let calls = [
        (name.as_str(), request("m1", "P12345")),
        (name.as_str(), json!({"messageId": "m2", "type": "REQUEST"})),
    ];
    let report = python_client(&app, "2026-07-28", &calls, None).await;
    assert_eq!(report["protocolVersion"], "2026-07-28");
    let listed = tool(&report, &name);
    assert!(
        listed["description"]
            .as_str()
            .is_some_and(|d| d.contains(&hex)),
        "{listed}"
    );
    assert_eq!(
        listed["inputSchema"]["properties"]["productId"]["type"],
        "string"
    );
    assert!(listed["outputSchema"]["properties"]["productInfo"].is_object());
    let (answer, _) = call(&report, 0);
    assert_eq!(answer["isError"], false, "{answer}");
    let content = &answer["structuredContent"];
    assert_eq!(content["messageId"], "m1");
    assert_eq!(content["status"]["code"], 200);
    assert_eq!(
        content["productInfo"]["productName"],
        "High-performance Laptop"
    );
    // A request the protocol's schema refuses is refused as an NLIP message would be.
    let (refused, text) = call(&report, 1);
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(text["error"]["code"], "invalid_request", "{text}");

    let metrics = reqwest::get(app.http("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("parley_mcp_tool_calls_total{kind=\"protocol\",outcome=\"ok\"}"),
        "{metrics}"
    );
    app.stop().await;
}

/// Runs the MCP Inspector's CLI (what `npx @modelcontextprotocol/inspector --cli` runs) with
/// `args` after the server's URL; returns the answer it prints (`--format json`: the JSON-RPC
/// result in `result`). Its catalogue and client config go to `home`, not the user's.
async fn inspector(app: &TestApp, home: &Path, args: &[&str]) -> Value {
    let (output, printed) = run_inspector(app, home, args).await;
    assert!(
        output.status.success(),
        "the Inspector failed ({}):\n{printed}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    printed["result"].clone()
}

/// Runs the Inspector's CLI; its exit status and the first JSON document it printed.
async fn run_inspector(app: &TestApp, home: &Path, args: &[&str]) -> (std::process::Output, Value) {
    let cli = repo_root().join(
        "tests/mcp/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
    );
    assert!(
        cli.exists(),
        "{} is missing: run scripts/setup-node.sh",
        cli.display()
    );
    let run = tokio::process::Command::new("node")
        .arg(cli)
        .arg("--cli")
        .arg(app.http("/mcp"))
        .args(["--transport", "http", "--format", "json", "--quiet"])
        .args(args)
        .env("HOME", home)
        .env("MCP_CATALOG_PATH", home.join("mcp.json"))
        .env("MCP_CLIENT_CONFIG_PATH", home.join("client.json"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Inspector finished within 120 s")
        .expect("node runs the Inspector");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let first = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .next();
    let printed = match first {
        Some(Ok(printed)) => printed,
        _ => panic!("no JSON from the Inspector ({}): {stdout}", output.status),
    };
    (output, printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_inspector_cli_lists_and_calls_parley_tools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = serving(dir.path()).await;
    let home = tempfile::tempdir().expect("tempdir");

    let listed = inspector(
        &app,
        home.path(),
        &["--protocol-era", "legacy", "--method", "tools/list"],
    )
    .await;
    let tools = listed["tools"].as_array().expect("tools");
    let info = tools
        .iter()
        .find(|t| t["name"] == "getProductInfo")
        .unwrap_or_else(|| panic!("getProductInfo in {listed}"));
    assert_eq!(info["annotations"]["readOnlyHint"], true);

    let called = inspector(
        &app,
        home.path(),
        &[
            "--protocol-era",
            "modern",
            "--method",
            "tools/call",
            "--tool-name",
            "getProductInfo",
            "--tool-arg",
            "productId=P23456",
        ],
    )
    .await;
    assert_eq!(called["isError"], false, "{called}");
    assert_eq!(
        called["structuredContent"]["result"]["productName"], "Wireless Ergonomic Mouse",
        "{called}"
    );
    // A call the capability refuses is an error result the Inspector takes (it checks any
    // `structuredContent` against the tool's output schema, errors included), prints, and
    // reports in its exit status.
    let (output, printed) = run_inspector(
        &app,
        home.path(),
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "getProductInfo",
            "--tool-arg",
            "productId=NOPE",
        ],
    )
    .await;
    assert!(!output.status.success(), "{printed}");
    let refused = &printed["result"];
    assert_eq!(refused["isError"], true, "{printed}");
    let text = refused["content"][0]["text"]
        .as_str()
        .expect("a text block");
    let error: Value = serde_json::from_str(text).expect("the error as JSON");
    assert_eq!(error["error"]["code"], "invalid_arguments", "{refused}");
    app.stop().await;
}

#[tokio::test]
async fn mcp_is_not_found_unless_configured_and_answers_only_its_hosts_within_the_limits() {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "probe", "version": "1"}}
    });
    let post = |url: String| {
        reqwest::Client::new()
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let off = TestApp::spawn(&test_settings(dir.path())).await;
    let answer = post(off.http("/mcp")).send().await.expect("an answer");
    assert_eq!(answer.status(), 404);
    let body: Value = answer.json().await.expect("an NLIP error");
    assert!(body.to_string().contains("not_found"), "{body}");
    off.stop().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let on = serving(dir.path()).await;
    let answer = post(on.http("/mcp")).send().await.expect("an answer");
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.expect("JSON-RPC");
    assert_eq!(body["result"]["serverInfo"]["name"], "parley", "{body}");
    // A page that rebinds its own name to this address is not answered.
    let rebound = post(on.http("/mcp"))
        .header("host", "attacker.example")
        .send()
        .await
        .expect("an answer");
    assert_eq!(rebound.status(), 403);
    // A body over the NLIP message limit is refused as an NLIP message would be.
    let limit = parley::config::Limits::default().max_message_bytes;
    let large = reqwest::Client::new()
        .post(on.http("/mcp"))
        .header("content-type", "application/json")
        .body(vec![b' '; limit + 1])
        .send()
        .await
        .expect("an answer");
    assert_eq!(large.status(), 413);
    on.stop().await;
}

#[tokio::test]
async fn mcp_requests_count_toward_their_address_rate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.mcp.serve = true;
    settings.limits.rate_limit_per_second = 1;
    settings.limits.rate_limit_burst = 1;
    let app = TestApp::spawn(&settings).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let answer = reqwest::Client::new()
            .post(app.http("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&list)
            .send()
            .await
            .expect("an answer");
        let status = answer.status().as_u16();
        if status == 429 {
            assert!(answer.headers().contains_key("retry-after"));
            let body: Value = answer.json().await.expect("an NLIP error");
            assert!(body.to_string().contains("rate_limited"), "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(statuses[0], 200, "the burst passes");
    assert!(statuses[1..].contains(&429), "{statuses:?}");
    app.stop().await;
}
