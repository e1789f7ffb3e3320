//! Shared helpers for Parley's integration tests: start a real server on loopback ports
//! chosen by the OS, with its own database, and stop it again.

pub mod pki;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use parley::config::Settings;
use parley::startup::Bound;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The project's Python (`.venv`, with the pinned packages of `tests/interop/requirements.txt`:
/// the NLIP SDK, AgentConnect, the MCP SDK). Panics, saying how to make it, when it is missing.
pub fn venv_python() -> PathBuf {
    let python = repo_root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-python.sh first (it creates .venv with the pinned \
         packages of tests/interop/requirements.txt)",
        python.display()
    );
    python
}

/// Loads a capabilities file with `${VAR}` references resolved from `vars`, not the
/// environment.
pub fn capabilities_with(
    path: &Path,
    vars: &[(&str, &str)],
) -> std::sync::Arc<parley_capabilities::Capabilities> {
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    let capabilities = parley_capabilities::Capabilities::load(path, lookup)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::sync::Arc::new(capabilities)
}

/// The repository's example capabilities file (product catalogue and more).
pub fn example_capabilities() -> PathBuf {
    repo_root().join("examples/capabilities.toml")
}

/// A loopback port that was free when asked (the OS picks it).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `parley serve` in a child process as the benchmarks run it: the running binary re-executed
/// with `role_env=parley` (its `main` then calls `parley::cli::main`), NLIP on `listen`, uploads
/// on another free loopback port, SQLite in `data_dir`, the example capabilities, the
/// per-address limits and the throttles lifted (see [`lift_per_address_limits`]; a config file
/// in `data_dir` says so), anonymous peers allowed everything, run from the repository root. The
/// caller adds stdio and spawns it.
pub fn parley_serve_command(
    role_env: &str,
    listen: SocketAddr,
    data_dir: &Path,
) -> std::io::Result<std::process::Command> {
    let mut limits = parley::config::Limits::default();
    lift_per_address_limits(&mut limits);
    std::fs::create_dir_all(data_dir)?;
    let config = data_dir.join("bench-limits.toml");
    std::fs::write(
        &config,
        format!(
            "[limits]\nrate_limit_per_second = {}\nmax_connections_per_address = {}\n\
             max_concurrent_requests_per_address = {}\n{THROTTLES_OFF}",
            limits.rate_limit_per_second,
            limits.max_connections_per_address,
            limits.max_concurrent_requests_per_address
        ),
    )?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .env(role_env, "parley")
        .arg("serve")
        .arg("--config")
        .arg(config)
        .arg("--listen")
        .arg(listen.to_string())
        .arg("--upload-listen")
        .arg(format!("127.0.0.1:{}", free_port()?))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--capabilities")
        .arg(example_capabilities())
        .args(["--anonymous-access", "all"])
        .current_dir(repo_root());
    Ok(command)
}

/// Settings for a test server: ephemeral loopback ports, SQLite in `dir`, the example
/// capabilities, the built-in reasoner, and anonymous peers allowed everything (the tests of
/// access control say otherwise).
pub fn test_settings(dir: &Path) -> Settings {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().expect("literal address"),
        upload_listen: "127.0.0.1:0".parse().expect("literal address"),
        data_dir: dir.to_owned(),
        capabilities: Some(example_capabilities()),
        ..Settings::default()
    };
    // Dozens of test servers share two cores: compile handlers only when a test needs them.
    settings.sandbox.warm_up = false;
    settings.access.anonymous = parley::config::AnonymousAccess::All.grants();
    settings
}

/// A benchmark drives its server from one loopback address, and measures the server, not the
/// limits that keep one address from taking all of it: no rate limit, and one address may hold
/// every connection and every request permit.
pub fn lift_per_address_limits(limits: &mut parley::config::Limits) {
    limits.rate_limit_per_second = 0;
    limits.max_connections_per_address = limits.max_connections;
    limits.max_concurrent_requests_per_address = limits.max_concurrent_requests;
}

/// [`test_settings`] for a benchmark: the per-address limits and the throttles lifted.
pub fn bench_settings(dir: &Path) -> Settings {
    let mut settings = test_settings(dir);
    lift_per_address_limits(&mut settings.limits);
    settings.throttle = parley::config::Throttle::off();
    settings
}

/// A config file's `[throttle]` tables with every throttle off (the file form of
/// `Throttle::off`), for a server that one address drives as hard as it can.
pub const THROTTLES_OFF: &str = "[throttle.messages]\nper_peer = { per_minute = 0, burst = 0 }\n\
    [throttle.negotiations]\nper_address = { per_minute = 0, burst = 0 }\n\
    per_peer = { per_minute = 0, burst = 0 }\n\
    [throttle.model_calls]\nper_address = { per_minute = 0, burst = 0 }\n\
    per_peer = { per_minute = 0, burst = 0 }\n\
    [throttle.uploads]\nper_address = { per_minute = 0, burst = 0 }\n\
    per_peer = { per_minute = 0, burst = 0 }\n";

/// A running server. Dropping it without [`TestApp::stop`] aborts it.
#[derive(Debug)]
pub struct TestApp {
    pub addr: SocketAddr,
    pub upload_addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), parley::startup::StartupError>>>,
}

impl TestApp {
    /// Binds, builds and starts a server with these settings.
    pub async fn spawn(settings: &Settings) -> TestApp {
        TestApp::start(Bound::new(settings).await.expect("test server starts"))
    }

    /// [`TestApp::spawn`] with these capabilities instead of the settings' file: the test
    /// loads them, resolving the file's `${VAR}` references from its own values (a test gives
    /// environment variables only to the child processes it starts).
    pub async fn spawn_with(
        settings: &Settings,
        capabilities: std::sync::Arc<parley_capabilities::Capabilities>,
    ) -> TestApp {
        let bound = Bound::with_capabilities(settings, capabilities)
            .await
            .expect("test server starts");
        TestApp::start(bound)
    }

    fn start(bound: Bound) -> TestApp {
        let (addr, upload_addr) = (bound.addr, bound.upload_addr);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(bound.run(async {
            let _ = rx.await;
        }));
        TestApp {
            addr,
            upload_addr,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// `http://…/nlip`
    pub fn url(&self) -> String {
        format!("http://{}/nlip", self.addr)
    }

    pub fn http(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn ws(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }

    /// Graceful shutdown; waits until the server has stopped.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task did not panic")
                .expect("server stopped cleanly");
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// POSTs raw bytes to a URL and returns status, content type and body.
pub async fn post_raw(
    url: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (u16, String, Vec<u8>) {
    let client = reqwest::Client::new();
    let mut req = client.post(url).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = req.send().await.expect("request is sent");
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, ct, resp.bytes().await.expect("body").to_vec())
}

/// POSTs a JSON value and decodes the reply as JSON.
pub async fn post_json(url: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let (status, _, bytes) = post_raw(
        url,
        Some("application/json"),
        serde_json::to_vec(body).expect("json"),
    )
    .await;
    (
        status,
        serde_json::from_slice(&bytes).expect("reply is JSON"),
    )
}
