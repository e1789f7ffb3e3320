//! MCP benchmark: the latency of one MCP tool call made directly to the MCP server, against the
//! same call through Parley.
//!
//! Run: `cargo bench -p parley-tests --bench mcp` (see tests/benches/README.md). Needs
//! `scripts/setup-python.sh` (the Python `mcp` SDK in `.venv`).
//!
//! The tool is `lookup_product` of `tests/mcp/catalogue_server.py` (the Python `mcp` SDK, stdio),
//! asked for product P12345 each time, one call after the other. Three ways:
//!
//! - **direct**: an MCP client (`rmcp`, in this process) calls the tool on a server process of
//!   its own: the floor, what any MCP client pays;
//! - **capability**: `Capabilities::invoke` of a `getProductInfo` capability bound to the tool
//!   (`binding = { type = "mcp", … }`), in this process: the direct call plus Parley's schema
//!   checks;
//! - **negotiated protocol**: a requester agent sends seed 002's product request to a Parley
//!   provider (in this process, HTTP on loopback) over the protocol the two negotiated before the
//!   timing; the provider's generated handler runs in the sandbox and calls the tool through
//!   `host.call`: what an agent pays to reach the MCP tool through Parley; the same protocol
//!   served from the example catalogue's dataset binding is printed beside it, to tell the
//!   protocol's own cost from the MCP call's.
//!
//! Printed: mean, p50, p99 and max per call, after a warm-up. Nothing is asserted.
//!
//! Knobs (environment): `BENCH_CALLS` (default 500), `BENCH_WARMUP` (calls, default 50).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use parley::negotiation::requester::{Outcome, Requester};
use parley_tests::{TestApp, repo_root, test_settings};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value, json};

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!("mcp benchmark skipped: run it with `cargo bench -p parley-tests --bench mcp`");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn python() -> Result<String> {
    let python = repo_root().join(".venv/bin/python");
    if !python.exists() {
        return Err(format!(
            "{} is missing: run scripts/setup-python.sh",
            python.display()
        ));
    }
    Ok(python.display().to_string())
}

fn server_script() -> String {
    repo_root()
        .join("tests/mcp/catalogue_server.py")
        .display()
        .to_string()
}

/// The provider's capabilities: the catalogue server, and `getProductInfo` bound to its
/// `lookup_product` tool with the example catalogue's schemas.
fn capabilities_file(dir: &Path) -> Result<std::path::PathBuf> {
    let example = std::fs::read_to_string(repo_root().join("examples/capabilities.toml"))
        .map_err(|e| e.to_string())?;
    // The example's getProductInfo, its dataset binding replaced by the MCP tool.
    let start = example
        .find("[[capabilities]]")
        .ok_or("the example has a capability")?;
    let end = example
        .find("# --- getOrderStatus")
        .ok_or("the example has getOrderStatus")?;
    let product = example[start..end]
        .replace("type = \"dataset\"", "type = \"mcp\"")
        .replace("file = \"data/products.json\"", "server = \"catalogue\"")
        .replace("key = \"productId\"", "tool = \"lookup_product\"")
        .replace("project = true", "")
        .replace("not_found = \"null\"", "");
    let text = format!(
        "[agent]\nname = \"MCP bench\"\ndescription = \"The product catalogue over MCP.\"\n\n\
         [[mcp_servers]]\nname = \"catalogue\"\ncommand = [{:?}, {:?}]\ntools = []\n\n{product}",
        python()?,
        server_script()
    );
    let path = dir.join("capabilities.toml");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Mean, p50, p99 and max of `samples`, in µs.
fn row(name: &str, mut samples: Vec<Duration>) -> String {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    let mean = samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64;
    format!(
        "{name:<22} {mean:>9.0} {:>9.0} {:>9.0} {:>9.0}",
        at(0.5),
        at(0.99),
        us(*samples.last().unwrap_or(&Duration::ZERO))
    )
}

/// Times `calls` runs of `call` after `warmup` untimed ones.
async fn timed<F, Fut>(warmup: u64, calls: u64, mut call: F) -> Result<Vec<Duration>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    for _ in 0..warmup {
        call().await?;
    }
    let mut samples = Vec::with_capacity(calls as usize);
    for _ in 0..calls {
        let began = Instant::now();
        call().await?;
        samples.push(began.elapsed());
    }
    Ok(samples)
}

async fn run() -> Result<()> {
    let calls = env_u64("BENCH_CALLS", 500).max(1);
    let warmup = env_u64("BENCH_WARMUP", 50);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = capabilities_file(dir.path())?;

    // Direct: an MCP client of its own, on a server process of its own.
    let mut command = tokio::process::Command::new(python()?);
    command.arg(server_script()).kill_on_drop(true);
    let transport = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the MCP server: {e}"))?
        .0;
    let client = ().serve(transport).await.map_err(|e| e.to_string())?;
    let mut arguments = Map::new();
    arguments.insert("productId".into(), json!("P12345"));
    let direct = timed(warmup, calls, || {
        let params = CallToolRequestParams::new("lookup_product").with_arguments(arguments.clone());
        let peer = client.peer().clone();
        async move {
            let result = peer.call_tool(params).await.map_err(|e| e.to_string())?;
            if result.is_error == Some(true) {
                return Err(format!("the tool failed: {result:?}"));
            }
            Ok(())
        }
    })
    .await?;
    let _ = client.cancel().await;

    // The capability, in this process.
    let capabilities = parley::startup::load_capabilities(Some(&file))
        .await
        .map_err(|e| format!("{e:#}"))?;
    let invoked = timed(warmup, calls, || {
        let capabilities = capabilities.clone();
        async move {
            let found = capabilities
                .invoke("getProductInfo", json!({"productId": "P12345"}))
                .await
                .map_err(|e| e.to_string())?;
            check_product(&found)
        }
    })
    .await?;
    capabilities.shutdown().await;

    // Through a negotiated protocol: the MCP tool, and the example's dataset for comparison.
    let through = through_protocol(dir.path(), "mcp", &file, warmup, calls, true).await?;
    let dataset = through_protocol(
        dir.path(),
        "dataset",
        &parley_tests::example_capabilities(),
        warmup,
        calls,
        false,
    )
    .await?;

    println!(
        "MCP tool call latency: lookup_product of tests/mcp/catalogue_server.py (Python mcp SDK, stdio), \
         {calls} sequential calls after {warmup} warm-up calls each; µs per call"
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9}",
        "path", "mean", "p50", "p99", "max"
    );
    println!("{}", row("direct (rmcp client)", direct));
    println!("{}", row("capability (invoke)", invoked));
    println!("{}", row("negotiated protocol", through));
    println!("{}", row("  same, dataset binding", dataset));
    Ok(())
}

/// A provider with `capabilities`, a requester that negotiates the product protocol with it,
/// then `calls` timed calls through the protocol.
async fn through_protocol(
    dir: &Path,
    name: &str,
    capabilities: &Path,
    warmup: u64,
    calls: u64,
    over_mcp: bool,
) -> Result<Vec<Duration>> {
    let mut settings = test_settings(&dir.join(format!("provider-{name}")));
    settings.capabilities = Some(capabilities.to_owned());
    // Every call comes from this one address, faster than a peer's default rate.
    parley_tests::lift_per_address_limits(&mut settings.limits);
    let provider = TestApp::spawn(&settings).await;
    let store = parley_store::connect(
        &format!("sqlite://{}/requester-{name}.db?mode=rwc", dir.display()),
        Default::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let requester = Requester::new(store);
    let protocol = std::fs::read_to_string(repo_root().join("examples/protocols/product-info.md"))
        .map_err(|e| e.to_string())?;
    let negotiated = requester
        .negotiate(&provider.url(), &protocol, |_| {})
        .await
        .map_err(|e| e.to_string())?;
    if negotiated.outcome != Outcome::Agreed {
        return Err(format!("no agreement: {:?}", negotiated.transcript));
    }
    let url = provider.url();
    let mut n = 0u64;
    let samples = timed(warmup, calls, || {
        n += 1;
        let request = json!({"messageId": format!("b{n}"), "type": "REQUEST",
                             "action": "getProductInfo", "productId": "P12345"});
        let (requester, url, hash) = (&requester, &url, &negotiated.hash);
        async move {
            let called = requester
                .call(url, hash, request)
                .await
                .map_err(|e| e.to_string())?;
            let product = &called.answer["productInfo"];
            if over_mcp {
                check_product(product)
            } else if product["productId"] == "P12345" {
                Ok(())
            } else {
                Err(format!("no product: {}", called.answer))
            }
        }
    })
    .await;
    provider.stop().await;
    samples
}

fn check_product(found: &Value) -> Result<()> {
    if found["productName"] == "Laptop served over MCP" {
        Ok(())
    } else {
        Err(format!("not the MCP server's product: {found}"))
    }
}
