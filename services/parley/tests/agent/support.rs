//! What the tests of the `parley` executable share: where it is, the example files, and
//! `parley serve` started as a child process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `parley` executable Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_parley");

/// The repository's `examples/` directory.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Starts `parley serve` on ephemeral ports, with its data in `dir`, the example capabilities
/// and logging at info, after `configure` has added what the test needs to the command; returns
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
