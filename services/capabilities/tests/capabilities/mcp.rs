//! The `mcp` binding against real MCP servers nobody here wrote the protocol side of: a server
//! written with the Python `mcp` SDK (`tests/mcp/catalogue_server.py`, on stdio and on Streamable
//! HTTP) and the MCP "everything" reference server from npm (stdio and Streamable HTTP).
//!
//! Needs `scripts/setup-python.sh` (the `mcp` package in `.venv`) and `scripts/setup-node.sh`
//! (`tests/mcp/node_modules`); `scripts/setup.sh` runs both.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_capabilities::{Capabilities, CapabilityError, FileFormat};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> String {
    let python = repo().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-python.sh",
        python.display()
    );
    python.display().to_string()
}

fn catalogue_server() -> String {
    repo()
        .join("tests/mcp/catalogue_server.py")
        .display()
        .to_string()
}

fn everything_server() -> String {
    let server =
        repo().join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        server.exists(),
        "{} is missing: run scripts/setup-node.sh",
        server.display()
    );
    server.display().to_string()
}

const AGENT: &str = "[agent]\nname = \"Test agent\"\ndescription = \"For tests.\"\n";

/// Loads `servers_and_capabilities` (TOML after the agent table) and starts its servers.
async fn started(text: &str) -> Capabilities {
    let caps = load(text, |_| None);
    caps.start().await.expect("the MCP servers start");
    caps
}

fn load(text: &str, env: impl Fn(&str) -> Option<String>) -> Capabilities {
    Capabilities::parse(
        &format!("{AGENT}{text}"),
        FileFormat::Toml,
        &repo(),
        "test capabilities",
        env,
    )
    .expect("the capabilities load")
}

/// A `[[mcp_servers]]` entry running the Python catalogue server on stdio, with `extra` lines.
fn catalogue(extra: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"catalogue\"\ncommand = [{:?}, {:?}]\n{extra}\n",
        python(),
        catalogue_server()
    )
}

/// Waits, a bounded number of times, until `check` holds (a server restarting, a tool list
/// being read again); panics with `what` when it never does.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..300 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 30 s");
}

#[tokio::test]
async fn a_python_servers_tools_become_capabilities() {
    let caps = started(&catalogue("prefix = \"cat_\"")).await;
    let forecast = caps
        .get("cat_forecast")
        .expect("the forecast tool is a capability");
    assert_eq!(forecast.binding_kind(), "mcp");
    assert_eq!(forecast.description(), "Tomorrow's forecast for a city.");
    assert!(forecast.read_only(), "readOnlyHint: true");
    assert_eq!(forecast.input_schema()["required"], json!(["city"]));
    assert_eq!(
        forecast.output_schema()["required"],
        json!(["city", "temperature", "conditions"])
    );
    let crash = caps.get("cat_crash").expect("crash");
    assert!(!crash.read_only(), "no readOnlyHint: not read-only");
    assert!(caps.get("forecast").is_none(), "names carry the prefix");

    // Structured content is the result.
    let answer = caps
        .invoke("cat_forecast", json!({"city": "Oslo"}))
        .await
        .expect("forecast");
    assert_eq!(
        answer,
        json!({"city": "Oslo", "temperature": 21.5, "conditions": "sunny"})
    );
    // A tool without an output schema: its text, parsed as JSON when it is JSON.
    let lookup = caps.get("cat_lookup_product").expect("lookup");
    assert_eq!(lookup.output_schema(), &json!({}));
    let product = caps
        .invoke("cat_lookup_product", json!({"productId": "P12345"}))
        .await
        .expect("lookup");
    assert_eq!(product["productName"], "Laptop served over MCP");
    // Arguments are checked against the tool's input schema before the server sees them.
    let refused = caps
        .invoke("cat_forecast", json!({"town": "Oslo"}))
        .await
        .expect_err("no city");
    assert_eq!(refused.code(), "invalid_arguments", "{refused}");
    caps.shutdown().await;
}

#[tokio::test]
async fn tools_selects_the_tools_that_become_capabilities() {
    let caps = started(&catalogue("tools = [\"forecast\", \"server_pid\"]")).await;
    assert_eq!(caps.names(), vec!["forecast", "server_pid"]);
    caps.shutdown().await;

    let caps = load(
        &catalogue("tools = [\"forecast\", \"weather_radar\"]"),
        |_| None,
    );
    let error = caps
        .start()
        .await
        .expect_err("a tool the server does not list");
    assert!(error.to_string().contains("weather_radar"), "{error}");
}

#[tokio::test]
async fn a_tool_error_is_a_capability_error_not_data() {
    let caps = started(&catalogue("")).await;
    let error = caps
        .invoke("forecast", json!({"city": "Atlantis"}))
        .await
        .expect_err("isError: true");
    assert_eq!(error.code(), "tool_error", "{error}");
    assert!(error.to_string().contains("under water"), "{error}");
    caps.shutdown().await;
}

const GET_PRODUCT: &str = r#"
[[capabilities]]
name = "getProductInfo"
description = "A product by id, from the MCP catalogue."
read_only = true
input_schema = { type = "object", properties = { productId = { type = "string" } }, required = ["productId"] }
output_schema = { type = ["object", "null"], required = ["productId", "productName", "price"] }
binding = { type = "mcp", server = "catalogue", tool = "lookup_product" }
"#;

#[tokio::test]
async fn an_explicit_binding_calls_one_tool_with_its_own_schemas() {
    let caps = started(&format!("{}{GET_PRODUCT}", catalogue("tools = []"))).await;
    assert_eq!(
        caps.names(),
        vec!["getProductInfo"],
        "tools = [] offers none itself"
    );
    let found = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("found");
    assert_eq!(found["price"], 1099.5);
    let missing = caps
        .invoke("getProductInfo", json!({"productId": "P0"}))
        .await
        .expect("not found");
    assert_eq!(missing, Value::Null, "the tool's text `null` is JSON null");
    caps.shutdown().await;

    // The capability's output schema holds: a result that does not match is refused.
    let strict = GET_PRODUCT.replace("type = [\"object\", \"null\"]", "type = \"object\"");
    let caps = started(&format!("{}{strict}", catalogue("tools = []"))).await;
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P0"}))
        .await
        .expect_err("null is not an object");
    assert_eq!(error.code(), "invalid_result", "{error}");
    caps.shutdown().await;
}

#[tokio::test]
async fn calls_obey_the_time_limit() {
    let caps = started(&catalogue("timeout_ms = 300")).await;
    let error = caps
        .invoke("slow", json!({"seconds": 30}))
        .await
        .expect_err("too slow");
    assert!(matches!(error, CapabilityError::Timeout { .. }), "{error}");
    // The server is still there for the next call.
    let pid = caps.invoke("server_pid", json!({})).await.expect("pid");
    assert!(pid.get("result").is_some(), "{pid}");
    caps.shutdown().await;
}

#[tokio::test]
async fn a_dying_stdio_server_is_restarted_and_unavailable_meanwhile() {
    // A long first backoff keeps the server down long enough to be seen down.
    let caps = started(&catalogue(
        "restart_backoff_ms = 3000\nrestart_backoff_max_ms = 6000",
    ))
    .await;
    let first = caps.invoke("server_pid", json!({})).await.expect("pid");
    let crashed = caps
        .invoke("crash", json!({"code": 7}))
        .await
        .expect_err("the server died during the call");
    assert_eq!(crashed.code(), "capability_unavailable", "{crashed}");
    let meanwhile = caps
        .invoke("forecast", json!({"city": "Oslo"}))
        .await
        .expect_err("down");
    assert_eq!(meanwhile.code(), "capability_unavailable", "{meanwhile}");

    let mut second = Value::Null;
    eventually("the restart", async || {
        match caps.invoke("server_pid", json!({})).await {
            Ok(pid) => {
                second = pid;
                true
            }
            Err(e) => {
                assert_eq!(e.code(), "capability_unavailable", "{e}");
                false
            }
        }
    })
    .await;
    assert_ne!(first, second, "a new process answers");
    caps.invoke("forecast", json!({"city": "Oslo"}))
        .await
        .expect("its capabilities answer again");
    caps.shutdown().await;
}

#[tokio::test]
async fn a_changed_tool_list_is_picked_up() {
    let caps = started(&catalogue("")).await;
    let before = caps.generation();
    assert!(caps.get("shout").is_none());
    caps.invoke("grow", json!({"name": "shout"}))
        .await
        .expect("grow");
    eventually("the new tool", async || caps.get("shout").is_some()).await;
    assert!(caps.generation() > before);
    let answer = caps
        .invoke("shout", json!({"text": "hello"}))
        .await
        .expect("the new tool answers");
    assert_eq!(answer, json!("shout: hello"));
    caps.shutdown().await;
}

#[tokio::test]
async fn a_failing_required_server_is_reported_with_its_stderr() {
    let caps = load(
        &catalogue("env = { CATALOGUE = \"x\" }").replace(
            &format!("{:?}]", catalogue_server()),
            &format!("{:?}, \"--fail-at-start\"]", catalogue_server()),
        ),
        |_| None,
    );
    let error = caps.start().await.expect_err("required");
    let text = error.to_string();
    assert!(
        text.contains("MCP server `catalogue` did not start"),
        "{text}"
    );
    assert!(
        text.contains("cannot open catalogue.db"),
        "its stderr: {text}"
    );
    assert_eq!(error.failures[0].server, "catalogue");
}

#[tokio::test]
async fn a_failing_optional_server_leaves_its_capabilities_unavailable() {
    let failing =
        catalogue("optional = true\nrestart_backoff_ms = 60000\nrestart_backoff_max_ms = 60000")
            .replace(
                &format!("{:?}]", catalogue_server()),
                &format!("{:?}, \"--fail-at-start\"]", catalogue_server()),
            );
    let caps = load(&format!("{failing}{GET_PRODUCT}"), |_| None);
    caps.start().await.expect("optional: starts anyway");
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("down");
    assert_eq!(error.code(), "capability_unavailable", "{error}");
    caps.shutdown().await;
}

#[tokio::test]
async fn the_everything_server_over_stdio() {
    let caps = started(&format!(
        "[[mcp_servers]]\nname = \"everything\"\ncommand = [\"node\", {:?}, \"stdio\"]\n",
        everything_server()
    ))
    .await;
    let echo = caps.get("echo").expect("echo");
    assert!(echo.read_only());
    assert_eq!(
        caps.invoke("echo", json!({"message": "hi"}))
            .await
            .expect("echo"),
        json!("Echo: hi")
    );
    let sum = caps
        .invoke("get-sum", json!({"a": 2, "b": 3}))
        .await
        .expect("sum");
    assert_eq!(sum, json!("The sum of 2 and 3 is 5."));
    let weather = caps
        .invoke("get-structured-content", json!({"location": "Chicago"}))
        .await
        .expect("structured");
    assert!(weather["temperature"].is_number(), "{weather}");
    caps.shutdown().await;
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Runs `command` until dropped, and waits until it accepts connections on `port`.
async fn serve_http(mut command: tokio::process::Command, port: u16) -> tokio::process::Child {
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the server starts");
    eventually("the HTTP server listening", async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    child
}

#[tokio::test]
async fn the_everything_server_over_streamable_http() {
    let port = free_port();
    let mut command = tokio::process::Command::new("node");
    command
        .args([everything_server(), "streamableHttp".to_owned()])
        .env("PORT", port.to_string());
    let _server = serve_http(command, port).await;
    let caps = started(&format!(
        "[[mcp_servers]]\nname = \"everything\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nprefix = \"ev_\"\n"
    ))
    .await;
    assert_eq!(
        caps.invoke("ev_echo", json!({"message": "over http"}))
            .await
            .expect("echo"),
        json!("Echo: over http")
    );
    caps.shutdown().await;
}

#[tokio::test]
async fn http_headers_take_their_values_from_the_environment() {
    let port = free_port();
    let mut command = tokio::process::Command::new(python());
    command.args([catalogue_server(), "--http".to_owned(), port.to_string()]);
    let _server = serve_http(command, port).await;
    let caps = load(
        &format!(
            "[[mcp_servers]]\nname = \"catalogue\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
             headers = {{ X-Catalogue-Key = \"key ${{CATALOGUE_KEY}}\" }}\n"
        ),
        |name| (name == "CATALOGUE_KEY").then(|| "s3cret".to_owned()),
    );
    caps.start().await.expect("starts");
    let sent = caps
        .invoke("header", json!({"name": "x-catalogue-key"}))
        .await
        .expect("header");
    assert_eq!(sent, json!({"result": "key s3cret"}));
    caps.shutdown().await;
}

#[test]
fn server_entries_are_checked_at_load() {
    let refused = |text: &str| {
        Capabilities::parse(
            &format!("{AGENT}{text}"),
            FileFormat::Toml,
            &repo(),
            "caps.toml",
            |_| None,
        )
        .expect_err("refused")
        .to_string()
    };
    let both = refused(
        "[[mcp_servers]]\nname = \"s\"\ncommand = [\"x\"]\nurl = \"http://127.0.0.1:1/mcp\"\n",
    );
    assert!(both.contains("exactly one of `command`"), "{both}");
    let secret = refused(
        "[[mcp_servers]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }\n",
    );
    assert!(secret.contains("`TOKEN` is not set"), "{secret}");
    let backoff = refused(
        "[[mcp_servers]]\nname = \"s\"\ncommand = [\"x\"]\nrestart_backoff_ms = 5000\nrestart_backoff_max_ms = 1000\n",
    );
    assert!(backoff.contains("restart_backoff_max_ms"), "{backoff}");
    let unknown = refused(
        "[[capabilities]]\nname = \"c\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\noutput_schema = {}\nbinding = { type = \"mcp\", server = \"nowhere\", tool = \"t\" }\n",
    );
    assert!(
        unknown.contains("no [[mcp_servers]] entry is named `nowhere`"),
        "{unknown}"
    );
}

#[tokio::test]
async fn a_relative_command_runs_from_the_capabilities_files_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("bin/catalogue.sh");
    std::fs::create_dir(dir.path().join("bin")).expect("bin");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec {:?} {:?} \"$@\"\n",
            python(),
            catalogue_server()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let file = dir.path().join("caps.toml");
    std::fs::write(
        &file,
        format!("{AGENT}[[mcp_servers]]\nname = \"catalogue\"\ncommand = [\"bin/catalogue.sh\"]\ntools = [\"forecast\"]\n"),
    )
    .expect("caps");
    let caps = Capabilities::load(&file, |_| None).expect("loads");
    caps.start()
        .await
        .expect("starts from the file's directory");
    assert_eq!(caps.names(), vec!["forecast"]);
    caps.shutdown().await;
}
