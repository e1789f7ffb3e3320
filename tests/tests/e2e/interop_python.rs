//! Interoperability with the Python reference SDK: starts a real Parley on loopback and
//! runs the pytest suite in `tests/interop` against it with `PARLEY_URL` set.
//!
//! Needs the virtual environment made by `scripts/setup-python.sh` (CI runs it first).

use std::process::Stdio;
use std::time::Duration;

use parley_tests::{TestApp, repo_root, test_settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_reference_sdk_interoperates_with_parley() {
    let root = repo_root();
    let python = parley_tests::venv_python();

    let dir = tempfile::tempdir().expect("temp dir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;

    // pytest runs as a child process; the server keeps serving on this runtime meanwhile.
    let run = tokio::process::Command::new(&python)
        .args([
            "-m",
            "pytest",
            "tests/interop",
            "-q",
            "-p",
            "no:cacheprovider",
        ])
        .current_dir(&root)
        .env("PARLEY_URL", app.url())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("pytest finished within 300 s")
        .expect("pytest could be started");
    app.stop().await;

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python interop suite failed ({}); if imports fail, rerun scripts/setup-python.sh\n\
         --- pytest stdout ---\n{stdout}\n--- pytest stderr ---\n{stderr}",
        output.status
    );
    // Echo pytest's summary so a green run still shows what ran.
    println!("{}", stdout.trim_end());
}
