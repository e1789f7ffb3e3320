//! ECMA-431 over real sockets: POST /nlip with JSON and CBOR, over HTTP/1.1 and HTTP/2, every
//! error as an NLIP message with its status, the mandatory exchanges, uploads on the second
//! port, and conversations that survive a restart.

use parley_nlip::{ErrorInfo, Format, Message, Submessage, TokenKind};
use parley_tests::{TestApp, post_json, post_raw, test_settings};
use serde_json::{Value, json};

fn error_code(reply: &Value) -> String {
    let m = parley_nlip::from_json_value(reply).expect("error replies are NLIP messages");
    ErrorInfo::from_message(&m).expect("error part").code
}

#[tokio::test]
async fn text_message_on_both_paths_gets_a_text_reply_in_the_same_language() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    for path in ["/nlip", "/nlip/"] {
        let (status, reply) = post_json(
            &app.http(path),
            &json!({"format": "text", "subformat": "english", "content": "What can you do?"}),
        )
        .await;
        assert_eq!(status, 200, "{path}: {reply}");
        assert_eq!(reply["format"], "text");
        assert_eq!(reply["subformat"], "english");
        let text = reply["content"].as_str().expect("text content");
        assert!(text.contains("getProductInfo"), "{text}");
        // Canonical output: lowercase keys only, no nulls, no empty submessages.
        let keys: Vec<_> = reply.as_object().expect("object").keys().cloned().collect();
        assert_eq!(keys, ["format", "subformat", "content"]);
    }
    let (_, reply) = post_json(
        &app.url(),
        &json!({"Format": "TEXT", "SubFormat": "English", "Content": "help"}),
    )
    .await;
    assert_eq!(reply["subformat"], "English");
    app.stop().await;
}

#[tokio::test]
async fn cbor_bodies_are_answered_in_cbor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let msg = Message::text("english", "help").with_submessage(Submessage::new(
        Format::Binary,
        "image/png",
        parley_nlip::Content::Bytes(vec![137, 80, 78, 71]),
    ));
    let (status, ct, body) = post_raw(
        &app.url(),
        Some("application/cbor"),
        parley_nlip::to_cbor_vec(&msg),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ct, "application/cbor");
    let reply = parley_nlip::from_cbor_slice(&body).expect("CBOR reply");
    assert_eq!(reply.format, Format::Text);

    let (status, ct, body) = post_raw(&app.url(), Some("application/cbor"), vec![0xff, 0x13]).await;
    assert_eq!((status, ct.as_str()), (400, "application/cbor"));
    let reply = parley_nlip::from_cbor_slice(&body).expect("CBOR error reply");
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("error").code,
        "malformed_cbor"
    );
    app.stop().await;
}

#[tokio::test]
async fn every_error_is_an_nlip_message_with_a_fitting_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_message_bytes = 4096;
    let app = TestApp::spawn(&settings).await;

    let cases: Vec<(Option<&str>, Vec<u8>, u16, &str)> = vec![
        (
            Some("application/json"),
            b"{not json".to_vec(),
            400,
            "malformed_json",
        ),
        (
            Some("application/json"),
            br#"{"format":"text","subformat":"english"}"#.to_vec(),
            422,
            "invalid_message",
        ),
        (
            Some("application/json"),
            br#"{"format":"movie","subformat":"x","content":1}"#.to_vec(),
            422,
            "invalid_message",
        ),
        (
            Some("application/xml"),
            b"<nlip/>".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            Some("application/json"),
            format!(
                r#"{{"format":"text","subformat":"english","content":"{}"}}"#,
                "x".repeat(5000)
            )
            .into_bytes(),
            413,
            "message_too_large",
        ),
    ];
    for (ct, body, status, code) in cases {
        let (got, got_ct, bytes) = post_raw(&app.url(), ct, body).await;
        assert_eq!(got, status, "{code}");
        assert_eq!(got_ct, "application/json", "{code}");
        let reply: Value = serde_json::from_slice(&bytes).expect("JSON error");
        assert_eq!(error_code(&reply), code);
        assert_eq!(reply["format"], "text", "{code}: readable text part");
    }
    // The invalid-message error names the field.
    let (_, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english"}),
    )
    .await;
    let info = ErrorInfo::from_message(&parley_nlip::from_json_value(&reply).expect("nlip"))
        .expect("error");
    assert_eq!(info.field.as_deref(), Some("content"));

    let resp = reqwest::get(app.http("/nlip")).await.expect("GET");
    assert_eq!(resp.status().as_u16(), 405);
    let reply: Value = resp.json().await.expect("json");
    assert_eq!(error_code(&reply), "method_not_allowed");
    let resp = reqwest::get(app.http("/elsewhere")).await.expect("GET");
    assert_eq!(resp.status().as_u16(), 404);
    assert_eq!(error_code(&resp.json().await.expect("json")), "not_found");

    let health: Value = reqwest::get(app.http("/health"))
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["store"], "sqlite");
    app.stop().await;
}

#[tokio::test]
async fn tokens_are_echoed_and_control_is_answered_with_control() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let request = json!({
        "messagetype": "control", "format": "text", "subformat": "english", "content": "status?",
        "submessages": [
            {"format": "token", "subformat": "conversation", "content": "client-conv-1"},
            {"format": "token", "subformat": "authorization", "content": "Bearer abc"},
            {"format": "token", "subformat": "group_42", "content": {"opaque": [1, 2]}},
            {"format": "structured", "subformat": "JSON", "content": {"k": "v"}}
        ]
    });
    let (status, reply) = post_json(&app.url(), &request).await;
    assert_eq!(status, 200, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("valid reply");
    assert!(reply.is_control(), "control in, control out");
    let tokens: Vec<_> = reply.tokens().cloned().collect();
    for sent in request["submessages"]
        .as_array()
        .expect("array")
        .iter()
        .take(3)
    {
        let sent = parley_nlip::from_json_value(&json!({"format": "text", "subformat": "english", "content": "", "submessages": [sent]}))
            .expect("valid")
            .submessages[0]
            .clone();
        assert_eq!(
            tokens.iter().filter(|t| t.same_token(&sent)).count(),
            1,
            "{sent:?} echoed once"
        );
    }
    let own = reply
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .expect("Parley adds its own conversation token");
    assert_eq!(own.token_kind(), Some(TokenKind::Conversation));

    // The Python SDK's legacy form of a control message.
    let (_, reply) = post_json(
        &app.url(),
        &json!({"control": true, "format": "text", "subformat": "english", "content": "hello"}),
    )
    .await;
    assert_eq!(reply["messagetype"], "control");
    app.stop().await;
}

#[tokio::test]
async fn uploads_go_to_the_second_port_and_can_be_referred_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_upload_bytes = 1 << 16;
    let app = TestApp::spawn(&settings).await;

    let (_, reply) = post_json(
        &app.url(),
        &json!({"messagetype": "control", "format": "text", "subformat": "english",
                "content": "Please give me an end-point for large uploads"}),
    )
    .await;
    let reply = parley_nlip::from_json_value(&reply).expect("valid");
    assert!(reply.is_control());
    let uri_part = reply
        .submessages
        .iter()
        .find(|s| s.format == Format::Structured && s.subformat == "uri")
        .expect("structured/uri submessage");
    let upload_uri = uri_part.content.as_str().expect("uri string").to_owned();
    assert_eq!(upload_uri, format!("http://{}/upload", app.upload_addr));
    assert_ne!(app.upload_addr.port(), app.addr.port());

    let blob: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let (status, _, body) = post_raw(
        &format!("{upload_uri}?filename=data.bin"),
        Some("application/octet-stream"),
        blob.clone(),
    )
    .await;
    assert_eq!(status, 201);
    let stored = parley_nlip::from_json_slice(&body).expect("NLIP reply");
    let reference = stored
        .submessages
        .iter()
        .find(|s| s.subformat == "uri")
        .and_then(|s| s.content.as_str())
        .expect("reference uri")
        .to_owned();
    // Content-addressed: the same bytes again give the same reference.
    let (_, _, again) = post_raw(&upload_uri, None, blob.clone()).await;
    assert!(String::from_utf8_lossy(&again).contains(&reference));
    let fetched = reqwest::get(&reference).await.expect("GET");
    let header = |name: &str| {
        fetched
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    // Served as a download, never rendered: a peer's upload must not become a page of this origin.
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
    assert_eq!(
        header("content-disposition").as_deref(),
        Some("attachment; filename=\"data.bin\"")
    );
    assert_eq!(
        header("content-security-policy").as_deref(),
        Some("sandbox")
    );
    let fetched = fetched.bytes().await.expect("bytes");
    assert_eq!(fetched.as_ref(), blob.as_slice());

    let with_ref = json!({"format": "text", "subformat": "english", "content": "help",
        "submessages": [{"format": "structured", "subformat": "uri", "content": reference}]});
    let (status, _) = post_json(&app.url(), &with_ref).await;
    assert_eq!(status, 200);
    let bogus = format!("http://{}/uploads/{}", app.upload_addr, "0".repeat(64));
    let (status, reply) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": "help",
        "submessages": [{"format": "structured", "subformat": "uri", "content": bogus}]}),
    )
    .await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (422, "unknown_upload")
    );

    let (status, _, body) = post_raw(&upload_uri, None, vec![0u8; (1 << 16) + 1]).await;
    assert_eq!(status, 413);
    assert_eq!(
        error_code(&serde_json::from_slice(&body).expect("json")),
        "message_too_large"
    );
    app.stop().await;
}

#[tokio::test]
async fn conversations_survive_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    conversations_survive_a_restart(test_settings(dir.path())).await;
}

#[tokio::test]
async fn conversations_survive_a_restart_on_postgres() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, guard) = parley_store::testing::fresh_postgres_url().await;
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(url);
    conversations_survive_a_restart(settings).await;
    guard.drop_database().await.expect("test database dropped");
}

async fn conversations_survive_a_restart(settings: parley::config::Settings) {
    let app = TestApp::spawn(&settings).await;
    let (_, reply) = post_json(&app.url(), &json!({"format": "text", "subformat": "english", "content": "help",
        "submessages": [{"format": "token", "subformat": "conversation_client", "content": "c-77"}]})).await;
    let reply = parley_nlip::from_json_value(&reply).expect("valid");
    let own = reply
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .expect("own token")
        .clone();
    let conversation_id = own.content.as_str().expect("string id").to_owned();
    app.stop().await;

    let app = TestApp::spawn(&settings).await;
    let msg = Message::text("english", "help again").with_submessage(own.clone());
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&msg)).await;
    assert_eq!(status, 200, "{reply}");
    let reply = parley_nlip::from_json_value(&reply).expect("valid");
    assert_eq!(
        reply.tokens().filter(|t| t.same_token(&own)).count(),
        1,
        "own token once, not echoed twice"
    );
    app.stop().await;

    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("store");
    let log = store
        .list_messages(&conversation_id, 0, 100)
        .await
        .expect("log");
    assert_eq!(
        log.len(),
        4,
        "two exchanges, both directions, across the restart"
    );
    assert_eq!(log[2].message["content"], "help again");

    let app = TestApp::spawn(&settings).await;
    let forged = Message::text("english", "hi").with_submessage(Submessage::new(
        Format::Token,
        "conversation_parley",
        "no-such-id",
    ));
    let (status, reply) = post_json(&app.url(), &parley_nlip::to_json_value(&forged)).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (422, "unknown_conversation")
    );
    app.stop().await;
}

#[tokio::test]
async fn the_rate_limit_answers_429_in_nlip_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.rate_limit_per_second = 1;
    settings.limits.rate_limit_burst = 2;
    let app = TestApp::spawn(&settings).await;
    let body = json!({"format": "text", "subformat": "english", "content": "help"});
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (status, reply) = post_json(&app.url(), &body).await;
        if status == 429 {
            assert_eq!(error_code(&reply), "rate_limited");
        }
        statuses.push(status);
    }
    assert_eq!(&statuses[..2], &[200, 200], "the burst passes");
    assert!(statuses[2..].contains(&429), "{statuses:?}");
    app.stop().await;
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_wait_for_a_permit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_concurrent_requests = 1;
    let app = TestApp::spawn(&settings).await;
    let host = app.addr;
    // The first request takes the only permit and holds it: its body is only half sent.
    let body = br#"{"format":"text","subformat":"english","content":"help"}"#;
    let mut slow = connect(host).await;
    let head = post_head(body.len(), false);
    slow.write_all(head.as_bytes()).await.expect("write head");
    slow.write_all(&body[..10]).await.expect("write part");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    let second = tokio::spawn({
        let url = app.url();
        async move {
            post_json(
                &url,
                &json!({"format": "text", "subformat": "english", "content": "help"}),
            )
            .await
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second request must wait for the permit"
    );

    slow.write_all(&body[10..]).await.expect("write rest");
    let mut first = Vec::new();
    let mut buf = [0u8; 4096];
    while !first.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = slow.read(&mut buf).await.expect("read");
        assert!(n > 0, "connection closed before the reply");
        first.extend_from_slice(&buf[..n]);
    }
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    let (status, _) = tokio::time::timeout(std::time::Duration::from_secs(10), second)
        .await
        .expect("the second request is answered once the permit is free")
        .expect("join");
    assert_eq!(status, 200);
    app.stop().await;
}

/// The head of a raw `POST /nlip` whose JSON body is `len` bytes; with `close`, it asks the
/// server to close the connection after its reply.
fn post_head(len: usize, close: bool) -> String {
    let connection = if close { "connection: close\r\n" } else { "" };
    format!(
        "POST /nlip HTTP/1.1\r\nhost: parley\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n{connection}\r\n"
    )
}

async fn connect(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(addr).await.expect("connect")
}

/// Everything the server sends until it closes the connection (at most 10 s).
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut reply = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut reply),
    )
    .await
    .expect("the reply arrives and the connection closes")
    .expect("read");
    reply
}

/// Writes raw HTTP/1.1 `pieces` to the server, pausing between them so that each arrives as
/// its own read, and returns the reply's head and body (the request asks for
/// `connection: close`, so the reply ends with the connection).
async fn raw_exchange(addr: std::net::SocketAddr, pieces: &[&[u8]]) -> (String, Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let mut stream = connect(addr).await;
    stream.set_nodelay(true).expect("nodelay");
    for piece in pieces {
        stream.write_all(piece).await.expect("write");
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let reply = read_until_closed(&mut stream).await;
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&reply[..split]).into_owned();
    (head, reply[split + 4..].to_vec())
}

/// The body of a chunked reply, de-chunked.
fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).expect("hex"), 16)
            .expect("chunk size");
        rest = &rest[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A reply body as sent: with a content-length, or chunked.
fn reply_body(head: &str, body: Vec<u8>) -> Vec<u8> {
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    }
}

#[tokio::test]
async fn a_body_sent_in_chunks_is_read_whole_and_still_limited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_message_bytes = 4096;
    let app = TestApp::spawn(&settings).await;
    let head = "POST /nlip HTTP/1.1\r\nhost: parley\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    // One message in three chunks, each written separately.
    let (status, body) = raw_exchange(
        app.addr,
        &[
            head.as_bytes(),
            b"10\r\n{\"format\":\"text\"\r\n",
            b"16\r\n,\"subformat\":\"english\"\r\n",
            b"12\r\n,\"content\":\"help\"}\r\n0\r\n\r\n",
        ],
    )
    .await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let reply: Value = serde_json::from_slice(&reply_body(&status, body)).expect("JSON reply");
    assert!(
        reply["content"]
            .as_str()
            .is_some_and(|t| t.contains("getProductInfo")),
        "{reply}"
    );

    // Chunks that add up to more than the limit, with no content-length to refuse up front.
    let chunk = format!("800\r\n{}\r\n", "x".repeat(0x800));
    let (status, body) = raw_exchange(
        app.addr,
        &[
            head.as_bytes(),
            chunk.as_bytes(),
            chunk.as_bytes(),
            chunk.as_bytes(),
        ],
    )
    .await;
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    let reply: Value = serde_json::from_slice(&reply_body(&status, body)).expect("JSON error");
    assert_eq!(error_code(&reply), "message_too_large");
    app.stop().await;
}

#[tokio::test]
async fn shutdown_answers_the_request_in_flight_and_accepts_no_new_connection() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let addr = app.addr;
    let body = br#"{"format":"text","subformat":"english","content":"help"}"#;
    let mut in_flight = connect(addr).await;
    let head = post_head(body.len(), false);
    in_flight
        .write_all(head.as_bytes())
        .await
        .expect("write head");
    in_flight.write_all(&body[..10]).await.expect("write part");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    let stopping = tokio::spawn(app.stop());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !stopping.is_finished(),
        "the server waits for the request in flight"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "a stopping server accepts no new connection"
    );

    in_flight.write_all(&body[10..]).await.expect("write rest");
    let reply = read_until_closed(&mut in_flight).await;
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    tokio::time::timeout(std::time::Duration::from_secs(10), stopping)
        .await
        .expect("the server stops once the request is answered")
        .expect("join");
}

#[tokio::test]
async fn a_body_that_stops_half_way_is_answered_with_a_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.request_timeout_ms = 300;
    let app = TestApp::spawn(&settings).await;
    let body = br#"{"format":"text","subformat":"english","content":"help"}"#;
    let head = post_head(body.len(), true);
    // The rest of the body never comes; the server answers anyway.
    let (status, reply) = raw_exchange(app.addr, &[head.as_bytes(), &body[..10]]).await;
    assert!(status.starts_with("HTTP/1.1 408"), "{status}");
    let reply: Value = serde_json::from_slice(&reply_body(&status, reply)).expect("an NLIP error");
    assert_eq!(error_code(&reply), "request_timeout");
    app.stop().await;
}

#[tokio::test]
async fn a_peer_that_trickles_or_withholds_its_request_head_is_disconnected() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.header_read_timeout_ms = 300;
    let app = TestApp::spawn(&settings).await;

    // Half a request head, then nothing: the server closes the connection.
    let mut trickle = connect(app.addr).await;
    trickle
        .write_all(b"POST /nlip HTTP/1.1\r\nhost: parley\r\n")
        .await
        .expect("write");
    let reply = read_until_closed(&mut trickle).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 408"),
        "{reply}"
    );

    // A kept-alive connection that goes quiet after its answer is closed too.
    let mut idle = connect(app.addr).await;
    let body = br#"{"format":"text","subformat":"english","content":"help"}"#;
    let head = post_head(body.len(), false);
    idle.write_all(head.as_bytes()).await.expect("write head");
    idle.write_all(body).await.expect("write body");
    let reply = read_until_closed(&mut idle).await;
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );

    // A connection that never sends a byte is closed as well.
    let mut silent = connect(app.addr).await;
    assert!(read_until_closed(&mut silent).await.is_empty());

    // The server itself is unaffected.
    let (status, _) = post_json(
        &app.url(),
        &json!({"format": "text", "subformat": "english", "content": "help"}),
    )
    .await;
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes_websockets_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.max_connections = 1;
    let app = TestApp::spawn(&settings).await;
    let text = json!({"format": "text", "subformat": "english", "content": "help"});

    // A WebSocket session holds the only slot for as long as it is open.
    let (mut socket, _) = tokio_tungstenite::connect_async(app.ws("/nlip/ws/text"))
        .await
        .expect("websocket");
    let waiting = tokio::spawn({
        let url = app.url();
        let text = text.clone();
        async move { post_json(&url, &text).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a second connection is not served while the session holds the slot"
    );

    socket.close(None).await.expect("close");
    drop(socket);
    let (status, _) = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("served once the session closed")
        .expect("join");
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_head_timeout_and_frees_its_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    // One connection slot; pings far apart, so only idleness can close the connection.
    settings.limits.max_connections = 1;
    settings.limits.header_read_timeout_ms = 300;
    let app = TestApp::spawn(&settings).await;
    let body = json!({"format": "text", "subformat": "english", "content": "help"});

    // An HTTP/2 client answers pings and keeps its connection for reuse after its request.
    let pooled = reqwest::Client::builder()
        .http2_prior_knowledge()
        .pool_idle_timeout(None)
        .build()
        .expect("client");
    let reply = pooled
        .post(app.url())
        .json(&body)
        .send()
        .await
        .expect("HTTP/2 request");
    assert_eq!(reply.version(), reqwest::Version::HTTP_2);
    assert_eq!(reply.status(), 200);

    // Another client gets the slot once that connection has been idle for the head timeout.
    let (status, _) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        post_json(&app.url(), &body),
    )
    .await
    .expect("the idle HTTP/2 connection gave its slot up");
    assert_eq!(status, 200);
    drop(pooled);
    app.stop().await;
}

#[tokio::test]
async fn http2_peers_are_answered_and_pinged_and_a_silent_one_is_dropped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.ws_ping_interval_ms = 200;
    let app = TestApp::spawn(&settings).await;

    // An NLIP exchange over HTTP/2 (cleartext, prior knowledge).
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let reply = client
        .post(app.url())
        .header("content-type", "application/json")
        .body(r#"{"format":"text","subformat":"english","content":"help"}"#)
        .send()
        .await
        .expect("HTTP/2 request");
    assert_eq!(reply.version(), reqwest::Version::HTTP_2);
    assert_eq!(reply.status(), 200);
    let body: Value = reply.json().await.expect("JSON reply");
    assert_eq!(body["format"], "text", "{body}");

    // A raw HTTP/2 peer: the connection preface and empty SETTINGS, then frame by frame.
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const ACK: u8 = 0x1;
    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len())
            .expect("small frame")
            .to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 0];
        out.extend_from_slice(payload);
        out
    }
    async fn next_frame(stream: &mut tokio::net::TcpStream) -> Option<(u8, u8, Vec<u8>)> {
        let mut head = [0u8; 9];
        stream.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).await.ok()?;
        Some((head[3], head[4], payload))
    }
    let mut peer = connect(app.addr).await;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, &[]));
    peer.write_all(&hello).await.expect("preface");

    // For six ping intervals the peer acknowledges the server's settings and answers its pings:
    // the connection stays open, and the server pings at least twice.
    let mut pings = 0;
    let answering = tokio::time::Instant::now() + std::time::Duration::from_millis(1200);
    while let Ok(read) = tokio::time::timeout_at(answering, next_frame(&mut peer)).await {
        let (kind, flags, payload) = read.expect("the server keeps an answering peer");
        let answer = match (kind, flags & ACK) {
            (SETTINGS, 0) => frame(SETTINGS, ACK, &[]),
            (PING, 0) => {
                pings += 1;
                frame(PING, ACK, &payload)
            }
            _ => continue,
        };
        peer.write_all(&answer).await.expect("answer");
    }
    assert!(
        pings >= 2,
        "the server pinged {pings} times in six intervals"
    );

    // Then the peer goes silent: the server closes the connection after its ping goes
    // unanswered (after a GOAWAY, or at once).
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while next_frame(&mut peer).await.is_some() {}
    })
    .await;
    assert!(closed.is_ok(), "a silent HTTP/2 peer is disconnected");
    app.stop().await;
}
