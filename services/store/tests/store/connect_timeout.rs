//! `StoreOptions::connect_timeout` bounds how long `connect` waits for PostgreSQL's first
//! connection, whatever the pool's acquire timeout.

use std::time::{Duration, Instant};

use parley_store::{StoreOptions, connect};

#[tokio::test]
async fn a_silent_postgres_server_is_given_up_on_after_the_connect_timeout() {
    // Accepts connections (the kernel's backlog does) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = silent.local_addr().expect("its address");
    let options = StoreOptions {
        acquire_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_millis(300),
        ..StoreOptions::default()
    };
    let started = Instant::now();
    let err = connect(&format!("postgres://postgres@{addr}/test"), options)
        .await
        .expect_err("nobody answers");
    assert!(err.is_transient(), "{err:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}
