//! One address cannot lock the others out: its connections, its requests in flight and its rate
//! are capped per address, and a WebSocket peer that never reads is disconnected. Each test is a
//! finding of a hostile trial against the server; "others" connect from 127.0.0.2, a second
//! loopback address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use parley_nlip::ErrorInfo;
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::{OTHER, client_from, connect_from};

/// Long enough for anything that is not stuck; the tests assert what happens, not how fast.
const PATIENCE: Duration = Duration::from_secs(20);

fn help() -> Value {
    json!({"format": "text", "subformat": "english", "content": "help"})
}

/// What the server sends before it closes the connection; panics if it does not close.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut reply = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut reply))
        .await
        .expect("the server closes the connection")
        .expect("read");
    reply
}

fn error_code(body: &[u8]) -> String {
    let reply = parley_nlip::from_json_slice(body).expect("an NLIP message");
    ErrorInfo::from_message(&reply).expect("an error part").code
}

#[tokio::test]
async fn silent_connections_from_one_address_leave_slots_for_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_connections = 8;
    settings.limits.max_connections_per_address = 4;
    let app = TestApp::spawn(&settings).await;

    // As many silent connections from one address as the server has slots: the address's share
    // is held (until the head timeout, 30 s), every one beyond it is closed at once.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(Ipv4Addr::LOCALHOST.into(), app.addr).await);
    }
    for _ in 0..4 {
        let mut refused = connect_from(Ipv4Addr::LOCALHOST.into(), app.addr).await;
        assert!(until_closed(&mut refused).await.is_empty());
    }

    // Another address is served while they are held.
    let reply = tokio::time::timeout(
        PATIENCE,
        client_from(OTHER).post(app.url()).json(&help()).send(),
    )
    .await
    .expect("another address is served")
    .expect("a reply");
    assert_eq!(reply.status(), 200);
    drop(held);
    app.stop().await;
}

/// A request head and the first bytes of its body; the rest never comes.
async fn trickle(from: IpAddr, server: SocketAddr) -> TcpStream {
    let body = serde_json::to_vec(&help()).expect("json");
    let mut stream = connect_from(from, server).await;
    let head = format!(
        "POST /nlip HTTP/1.1\r\nhost: parley\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
        .write_all(&body[..10])
        .await
        .expect("part of the body");
    stream
}

/// The head and body of the one reply on `stream`.
async fn reply_on(mut stream: TcpStream) -> (String, Vec<u8>) {
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = reply.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&reply[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let l = l.to_ascii_lowercase();
                    l.strip_prefix("content-length: ").map(str::to_owned)
                })
                .and_then(|v| v.trim().parse().ok())
                .expect("a content length");
            if reply.len() >= end + 4 + length {
                return (head, reply[end + 4..end + 4 + length].to_vec());
            }
        }
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed before the reply");
        reply.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn trickled_bodies_from_one_address_leave_request_permits_for_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_concurrent_requests = 4;
    settings.limits.max_concurrent_requests_per_address = 2;
    let app = TestApp::spawn(&settings).await;

    // Four bodies trickled from one address, as many as the server has permits: two are in
    // flight (waiting for the rest of their body), the other two are refused at once.
    let mut replies = futures::stream::FuturesUnordered::new();
    for _ in 0..4 {
        let stream = trickle(Ipv4Addr::LOCALHOST.into(), app.addr).await;
        replies.push(reply_on(stream));
    }
    for _ in 0..2 {
        use futures::StreamExt as _;
        let (head, body) = tokio::time::timeout(PATIENCE, replies.next())
            .await
            .expect("two requests are refused at once")
            .expect("a reply");
        assert!(head.starts_with("HTTP/1.1 429"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("retry-after: 1"),
            "{head}"
        );
        assert_eq!(error_code(&body), "too_many_in_flight");
    }

    // Another address is served while the two are held.
    let reply = tokio::time::timeout(
        PATIENCE,
        client_from(OTHER).post(app.url()).json(&help()).send(),
    )
    .await
    .expect("another address is served")
    .expect("a reply");
    assert_eq!(reply.status(), 200);
    drop(replies);
    app.stop().await;
}

#[tokio::test]
async fn the_rate_limit_is_per_address_and_says_when_to_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.rate_limit_per_second = 1;
    settings.limits.rate_limit_burst = 2;
    let app = TestApp::spawn(&settings).await;
    let client = reqwest::Client::new();
    let mut limited = None;
    for _ in 0..4 {
        let reply = client
            .post(app.url())
            .json(&help())
            .send()
            .await
            .expect("reply");
        if reply.status() == 429 {
            limited = Some(reply);
            break;
        }
    }
    let limited = limited.expect("the burst is used up within four requests");
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds");
    assert!(retry_after >= 1);
    let body = limited.bytes().await.expect("body");
    assert_eq!(error_code(&body), "rate_limited");

    // The same moment, another address still has its burst.
    let reply = client_from(OTHER)
        .post(app.url())
        .json(&help())
        .send()
        .await
        .expect("reply");
    assert_eq!(reply.status(), 200);
    app.stop().await;
}

#[tokio::test]
async fn a_websocket_peer_that_never_reads_is_disconnected() {
    use futures::SinkExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    // The session holds the only connection slot: another peer is served only once the server
    // has closed it.
    settings.limits.max_connections = 1;
    settings.limits.send_timeout_ms = 500;
    let app = TestApp::spawn(&settings).await;

    // Each message carries a large token, which every answer echoes: the answers fill the
    // socket buffers of a peer that sends and never reads.
    let (socket, _) = tokio_tungstenite::connect_async(app.ws("/nlip/ws/text"))
        .await
        .expect("websocket");
    let (mut sink, stream) = futures::StreamExt::split(socket);
    let big = json!({"format": "text", "subformat": "english", "content": "help",
        "submessages": [{"format": "token", "subformat": "trace", "content": "x".repeat(400_000)}]})
    .to_string();
    let sender = tokio::spawn(async move {
        // Ends when the server has dropped the connection (or after enough to fill any buffer).
        for _ in 0..200 {
            let frame = tokio_tungstenite::tungstenite::Message::text(big.clone());
            if sink.send(frame).await.is_err() {
                return true;
            }
        }
        false
    });

    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        reqwest::Client::new().post(app.url()).json(&help()).send(),
    )
    .await
    .expect("the slot is given back once the session is closed")
    .expect("a reply");
    assert_eq!(reply.status(), 200);
    let dropped = tokio::time::timeout(PATIENCE, sender)
        .await
        .expect("the sender stops")
        .expect("join");
    assert!(dropped, "the server dropped the session");
    drop(stream);
    app.stop().await;
}

#[tokio::test]
async fn an_http_peer_that_never_reads_its_answers_is_disconnected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_connections = 1;
    settings.limits.header_read_timeout_ms = 300;
    settings.limits.send_timeout_ms = 500;
    let app = TestApp::spawn(&settings).await;

    // Pipelined requests whose answers echo a large token, never read: the server's writes
    // block once the socket buffers are full, with no request in flight.
    let body = json!({"format": "text", "subformat": "english", "content": "help",
        "submessages": [{"format": "token", "subformat": "trace", "content": "x".repeat(800_000)}]})
    .to_string();
    let request = format!(
        "POST /nlip HTTP/1.1\r\nhost: parley\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stuck = connect_from(Ipv4Addr::LOCALHOST.into(), app.addr).await;
    let writer = tokio::spawn(async move {
        for _ in 0..40 {
            if stuck.write_all(request.as_bytes()).await.is_err() {
                return true;
            }
        }
        false
    });

    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        client_from(OTHER).post(app.url()).json(&help()).send(),
    )
    .await
    .expect("the slot is given back once the stuck connection is dropped")
    .expect("a reply");
    assert_eq!(reply.status(), 200);
    let dropped = tokio::time::timeout(PATIENCE, writer)
        .await
        .expect("the writer stops")
        .expect("join");
    assert!(dropped, "the server dropped the connection");
    app.stop().await;
}
