//! What the tests of the `parley` executable share: where it is, the example files, `parley
//! serve` started as a child process, and a provider in the test's own process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parley::config::Settings;
use parley::startup::Bound;
use parley_anp::ProtocolHash;
use parley_store::Store;
use tokio::sync::oneshot;

/// The `parley` executable Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_parley");

/// The repository's `examples/` directory.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A path as the `&str` a command line takes.
pub fn utf8(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Starts `parley serve` on ephemeral ports, with its data in `dir`, the example capabilities,
/// anonymous peers allowed everything and logging at info, after `configure` has added what the test needs to the command; returns
/// the child and its NLIP URL, read from the start-up log line. The caller waits for the child;
/// when start-up fails the test fails with it.
#[allow(clippy::zombie_processes)]
pub fn spawn_serve(dir: &Path, configure: impl FnOnce(&mut Command)) -> (Child, String) {
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upload-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir)
        .arg("--capabilities")
        .arg(examples().join("capabilities.toml"))
        .args(["--anonymous-access", "all"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    configure(&mut command);
    let mut child = command.spawn().expect("parley starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let line = lines
            .next()
            .expect("parley logs before it exits")
            .expect("utf-8 log");
        if let Some(rest) = line.split("nlip=").nth(1) {
            let url = rest
                .split_whitespace()
                .next()
                .expect("url")
                .trim_matches('"')
                .to_owned();
            // Keep draining stderr so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return (child, url);
        }
    }
    panic!("parley did not report its address in time");
}

/// A provider serving `capabilities` in this process, with its own SQLite database in `dir`.
pub struct Provider {
    pub addr: SocketAddr,
    settings: Settings,
    stop: Option<oneshot::Sender<()>>,
}

impl Provider {
    pub async fn start(dir: &Path, capabilities: PathBuf) -> Provider {
        Provider::start_with(dir, capabilities, |_| {}).await
    }

    /// [`Provider::start`], with what `configure` changes in its settings.
    pub async fn start_with(
        dir: &Path,
        capabilities: PathBuf,
        configure: impl FnOnce(&mut Settings),
    ) -> Provider {
        let mut settings = Settings {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            upload_listen: "127.0.0.1:0".parse().expect("literal address"),
            data_dir: dir.to_owned(),
            capabilities: Some(capabilities),
            ..Settings::default()
        };
        settings.sandbox.warm_up = false;
        settings.access.anonymous = parley::config::AnonymousAccess::All.grants();
        // The first negotiation compiles the sandbox's runtime; on a loaded CI machine that can
        // take longer than the default request time limit, which is not what these tests test.
        settings.limits.request_timeout_ms = 180_000;
        configure(&mut settings);
        let bound = Bound::new(&settings).await.expect("the provider starts");
        let addr = bound.addr;
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(bound.run(async {
            let _ = stopped.await;
        }));
        Provider {
            addr,
            settings,
            stop: Some(stop),
        }
    }

    /// Its NLIP URL, `http://…/nlip`.
    pub fn url(&self) -> String {
        format!("http://{}/nlip", self.addr)
    }

    /// Its store, through a connection of the test's own.
    pub async fn store(&self) -> Arc<dyn Store> {
        parley_store::connect(&self.settings.database_url(), Default::default())
            .await
            .expect("provider store")
    }

    /// How many negotiations of protocol `hash` it has on record.
    pub async fn negotiations(&self, hash: &ProtocolHash) -> usize {
        self.store()
            .await
            .negotiations_for_protocol(&hash.to_string())
            .await
            .expect("negotiations")
            .len()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
