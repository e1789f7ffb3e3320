//! `parley send` against a real server: a request the agent answers exits 0 and prints the
//! answer; a request whose capability call fails is an NLIP error, and `send` exits 1 with the
//! error's code on stderr.

use std::process::Command;

use parley::config::Settings;
use parley::startup::Bound;

use crate::support::{BIN, examples};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_exits_nonzero_when_the_answer_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().expect("address"),
        upload_listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: dir.path().to_owned(),
        capabilities: Some(examples().join("capabilities.toml")),
        ..Settings::default()
    };
    settings.sandbox.warm_up = false;
    settings.access.anonymous = parley::config::AnonymousAccess::All.grants();
    let bound = Bound::new(&settings).await.expect("the server starts");
    let url = format!("http://{}/nlip", bound.addr);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.run(async {
        let _ = stopped.await;
    }));

    let send = |text: &'static str| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(BIN)
                .args(["send", &url, text])
                .output()
                .expect("parley runs")
        })
    };
    let found = send("status of order O-1001").await.expect("joined");
    let out = String::from_utf8_lossy(&found.stdout);
    assert!(found.status.success(), "{out}");
    assert!(
        out.starts_with("getOrderStatus (orderId O-1001): "),
        "{out}"
    );

    let missing = send("status of order O-9999").await.expect("joined");
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("error not_found"), "{err}");

    let _ = stop.send(());
    server
        .await
        .expect("server task")
        .expect("the server stops cleanly");
}
