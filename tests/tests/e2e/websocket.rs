//! ECMA-432 over a real WebSocket: CBOR binary frames on /nlip/ws, JSON text frames on
//! /nlip/ws/text, decoding failures answered with NLIP errors on a connection that stays
//! usable, and the message size limit.

use futures::{SinkExt, StreamExt};
use parley::client::NlipClient;
use parley_nlip::{ErrorInfo, Message};
use parley_tests::{TestApp, test_settings};
use tokio_tungstenite::tungstenite::Message as Ws;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A server with the test settings (its data in `dir`) and a WebSocket session at `path`.
async fn app_and_socket(dir: &std::path::Path, path: &str) -> (TestApp, Socket) {
    let app = TestApp::spawn(&test_settings(dir)).await;
    let (socket, _) = tokio_tungstenite::connect_async(app.ws(path))
        .await
        .expect("connect");
    (app, socket)
}

async fn next_data(socket: &mut Socket) -> Ws {
    loop {
        match socket
            .next()
            .await
            .expect("a frame")
            .expect("no socket error")
        {
            Ws::Ping(_) | Ws::Pong(_) => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn cbor_socket_answers_in_cbor_and_survives_garbage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, mut socket) = app_and_socket(dir.path(), "/nlip/ws").await;

    socket
        .send(Ws::Binary(vec![0xff, 0x00, 0x13].into()))
        .await
        .expect("send");
    let Ws::Binary(bytes) = next_data(&mut socket).await else {
        panic!("expected a binary frame")
    };
    let err = parley_nlip::from_cbor_slice(&bytes).expect("an NLIP error in CBOR");
    assert_eq!(
        ErrorInfo::from_message(&err).expect("error").code,
        "malformed_cbor"
    );
    assert_eq!(err.messagetype.as_deref(), Some("error"));

    for i in 0..3 {
        let msg = Message::text("english", format!("help {i}"));
        socket
            .send(Ws::Binary(parley_nlip::to_cbor_vec(&msg).into()))
            .await
            .expect("send");
        let Ws::Binary(bytes) = next_data(&mut socket).await else {
            panic!("expected binary")
        };
        let reply = parley_nlip::from_cbor_slice(&bytes).expect("CBOR reply");
        assert!(
            reply
                .text_content()
                .expect("text")
                .contains("getProductInfo")
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn text_socket_speaks_json_and_refuses_binary_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, mut socket) = app_and_socket(dir.path(), "/nlip/ws/text").await;
    socket
        .send(Ws::Binary(vec![1, 2, 3].into()))
        .await
        .expect("send");
    let Ws::Text(text) = next_data(&mut socket).await else {
        panic!("expected text")
    };
    let err = parley_nlip::from_json_slice(text.as_bytes()).expect("NLIP error");
    assert_eq!(
        ErrorInfo::from_message(&err).expect("error").code,
        "unsupported_media_type"
    );

    socket
        .send(Ws::Text(
            r#"{"Format":"text","Subformat":"english","Content":"help"}"#.into(),
        ))
        .await
        .expect("send");
    let Ws::Text(text) = next_data(&mut socket).await else {
        panic!("expected text")
    };
    let reply: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(reply["format"], "text");
    app.stop().await;
}

#[tokio::test]
async fn client_reuses_one_socket_and_oversized_messages_close_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_message_bytes = 2048;
    let app = TestApp::spawn(&settings).await;
    let mut client = NlipClient::connect(&app.ws("/nlip/ws"), true)
        .await
        .expect("connect");
    for _ in 0..3 {
        let reply = client
            .send(&Message::text("english", "help"))
            .await
            .expect("reply");
        assert_eq!(reply.status, 200);
    }
    let big = Message::text("english", "x".repeat(4096));
    assert!(
        client.send(&big).await.is_err(),
        "an oversized message ends the connection"
    );

    // The server itself is fine.
    let mut again = NlipClient::connect(&app.ws("/nlip/ws/text"), false)
        .await
        .expect("connect");
    assert!(again.send(&Message::text("english", "help")).await.is_ok());
    app.stop().await;
}

/// Messages many times the size of one read (`server::WS_READ_CHUNK`) arrive whole, both ways:
/// the request's keyword sits at its very end, and the reply echoes the request's large token.
#[tokio::test]
async fn messages_larger_than_one_read_arrive_whole_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let size = 40 * parley::server::WS_READ_CHUNK;
    let token = "t".repeat(size);
    let request = Message::text("english", format!("{} help", "x".repeat(size))).with_submessage(
        parley_nlip::Submessage::new(
            parley_nlip::Format::Token,
            "bench-correlation",
            token.clone(),
        ),
    );
    for (path, cbor) in [("/nlip/ws", true), ("/nlip/ws/text", false)] {
        let mut client = NlipClient::connect(&app.ws(path), cbor)
            .await
            .expect("connect");
        for _ in 0..2 {
            let reply = client.send(&request).await.expect("reply");
            assert_eq!(reply.status, 200, "{path}");
            assert!(
                reply
                    .message
                    .text_content()
                    .expect("a text reply")
                    .contains("getProductInfo"),
                "{path}: the keyword at the end of the request was read: {:?}",
                reply.message.text_content()
            );
            let echoed = reply
                .message
                .tokens()
                .find(|t| t.subformat == "bench-correlation")
                .expect("the token echoed");
            assert_eq!(echoed.content.as_str(), Some(token.as_str()), "{path}");
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn the_server_sends_heartbeat_pings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.ws_ping_interval_ms = 150;
    let app = TestApp::spawn(&settings).await;
    let (mut socket, _) = tokio_tungstenite::connect_async(app.ws("/nlip/ws"))
        .await
        .expect("connect");
    let ping = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        loop {
            match socket
                .next()
                .await
                .expect("a frame")
                .expect("no socket error")
            {
                Ws::Ping(_) => return true,
                _ => continue,
            }
        }
    })
    .await;
    assert_eq!(ping, Ok(true), "a ping arrives within a few intervals");
    app.stop().await;
}

/// A peer may send several messages without waiting; each is answered, in order. (These answers
/// used to be held back by Nagle's algorithm, about 40 ms each after the first; the server's
/// sockets now send without delay: see `server::prepare_socket`.)
#[tokio::test]
async fn messages_sent_without_waiting_are_all_answered_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, mut socket) = app_and_socket(dir.path(), "/nlip/ws").await;
    // Text messages with a control message every third: their answers tell them apart.
    let sent: Vec<bool> = (0..20).map(|i| i % 3 == 0).collect();
    for &control in &sent {
        let mut msg = Message::text("english", "hello");
        if control {
            msg = msg.into_control();
        }
        socket
            .send(Ws::Binary(parley_nlip::to_cbor_vec(&msg).into()))
            .await
            .expect("send");
    }
    for (i, &control) in sent.iter().enumerate() {
        let Ws::Binary(bytes) = next_data(&mut socket).await else {
            panic!("expected a binary frame")
        };
        let reply = parley_nlip::from_cbor_slice(&bytes).expect("a CBOR reply");
        let describes_the_agent = reply
            .submessages
            .iter()
            .any(|s| s.label.as_deref() == Some("agent"));
        assert_eq!(describes_the_agent, control, "answer {i}: {reply:?}");
    }
    app.stop().await;
}
