//! The throttles by kind of work, over real sockets: a small configured limit of each kind is
//! met with a 429 `rate_limited` NLIP error carrying `Retry-After` (HTTP) and `retry_after_ms`
//! (every transport), honouring the wait lets the next one pass, another kind from the same
//! address and the same kind from another address (127.0.0.2) are still served, and a
//! WebSocket session outlives a throttled message.

use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use parley::config::Rate;
use parley_nlip::ErrorInfo;
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::support::{OTHER, client_from, connect_from};

/// One a second, none saved up beyond the one at hand: the second in a row is refused, and the
/// next passes a second later.
const ONE_A_SECOND: Rate = Rate::new(60, 1);

/// A message the reasoner answers.
fn talk() -> Value {
    json!({"format": "text", "subformat": "english", "content": "help"})
}

/// NLIP's own control exchange: no negotiation, no reasoner.
fn describe() -> Value {
    json!({"messagetype": "control", "format": "text", "subformat": "english",
           "content": "describe yourself"})
}

/// A meta-protocol hello, the start of a negotiation.
fn hello() -> Value {
    json!({"version": "1.0", "type": "sourceHello",
           "metaProtocol": {"version": "1.0", "supportedCapabilities": ["naturalLanguageNegotiation"]}})
}

/// [`hello`] in an NLIP control message.
fn nlip_hello() -> Value {
    json!({"messagetype": "control", "format": "text", "subformat": "english",
           "content": "hello", "submessages": [{"format": "structured", "subformat": "json",
           "label": "anp", "content": hello()}]})
}

fn error_of(body: &[u8]) -> Option<ErrorInfo> {
    let message = parley_nlip::from_json_slice(body).expect("an NLIP message");
    ErrorInfo::from_message(&message)
}

/// POSTs `body` from `client`: the status, the `Retry-After` header and the NLIP error, if any.
async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> (u16, Option<u64>, Option<ErrorInfo>) {
    let reply = client.post(url).json(body).send().await.expect("reply");
    let status = reply.status().as_u16();
    let retry_after = reply.headers().get("retry-after").map(|v| {
        v.to_str()
            .expect("ASCII")
            .parse()
            .expect("Retry-After in whole seconds")
    });
    let body = reply.bytes().await.expect("body");
    (status, retry_after, error_of(&body))
}

/// A refusal of `kind`'s throttle: 429, `rate_limited`, a `Retry-After` of one second (the
/// rate's interval, rounded up) and a `retry_after_ms` within it. The seconds to wait.
fn assert_throttled(
    (status, retry_after, error): (u16, Option<u64>, Option<ErrorInfo>),
    what: &str,
) -> u64 {
    assert_eq!(status, 429, "{error:?}");
    let error = error.expect("an NLIP error");
    assert_eq!(error.code, "rate_limited");
    assert!(error.message.contains(what), "{}", error.message);
    let ms = error.retry_after_ms.expect("retry_after_ms");
    assert!(ms > 0 && ms <= 1_000, "{ms}");
    let seconds = retry_after.expect("a Retry-After header");
    assert_eq!(seconds, 1);
    seconds
}

#[tokio::test]
async fn model_calls_are_throttled_per_address_until_the_retry_after_has_passed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.throttle.model_calls.per_address = ONE_A_SECOND;
    let app = TestApp::spawn(&settings).await;
    let client = reqwest::Client::new();
    let url = app.url();

    assert_eq!(post(&client, &url, &talk()).await.0, 200);
    let wait = assert_throttled(post(&client, &url, &talk()).await, "reasoner");

    // Other kinds of work from the same address, and the same kind from another, are served.
    let (status, _, error) = post(&client, &url, &describe()).await;
    assert_eq!((status, error), (200, None));
    let (status, _, error) = post(&client_from(OTHER), &url, &talk()).await;
    assert_eq!((status, error), (200, None));

    tokio::time::sleep(Duration::from_secs(wait)).await;
    let (status, _, error) = post(&client, &url, &talk()).await;
    assert_eq!(
        (status, error),
        (200, None),
        "served again after Retry-After"
    );

    let metrics = client
        .get(app.http("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"parley_throttled_total{kind="model_calls",scope="address"}"#),
        "{metrics}"
    );
    app.stop().await;
}

#[tokio::test]
async fn negotiations_are_throttled_over_nlip_and_on_anp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.throttle.negotiations.per_address = ONE_A_SECOND;
    let app = TestApp::spawn(&settings).await;
    let client = reqwest::Client::new();
    let url = app.url();

    let (status, _, error) = post(&client, &url, &nlip_hello()).await;
    assert_eq!((status, error), (200, None));
    let wait = assert_throttled(post(&client, &url, &nlip_hello()).await, "negotiation");

    // The same address's bucket is empty on /anp too: its meta frame gets an error frame.
    let mut anp = Anp::connect(&app, None).await;
    let refused = anp.exchange(&hello()).await;
    assert_eq!(refused["error"]["code"], "rate_limited", "{refused}");
    let ms = refused["error"]["retry_after_ms"].as_u64().expect("ms");
    assert!(ms > 0 && ms <= 1_000, "{ms}");

    // Another address negotiates meanwhile.
    let mut other = Anp::connect(&app, Some(OTHER)).await;
    assert_eq!(other.exchange(&hello()).await["type"], "destinationHello");

    // After the wait, the same connection goes on.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(anp.exchange(&hello()).await["type"], "destinationHello");
    app.stop().await;
}

#[tokio::test]
async fn a_throttled_websocket_message_leaves_the_session_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.throttle.model_calls.per_address = ONE_A_SECOND;
    let app = TestApp::spawn(&settings).await;
    let (mut socket, _) = tokio_tungstenite::connect_async(app.ws("/nlip/ws/text"))
        .await
        .expect("websocket");
    let mut exchange = async |body: Value| {
        socket.send(Ws::text(body.to_string())).await.expect("send");
        loop {
            match socket.next().await.expect("a reply").expect("no error") {
                Ws::Text(text) => return error_of(text.as_bytes()),
                Ws::Ping(_) | Ws::Pong(_) => continue,
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    };

    assert_eq!(exchange(talk()).await, None);
    let refused = exchange(talk()).await.expect("an error");
    assert_eq!(refused.code, "rate_limited");
    let ms = refused.retry_after_ms.expect("retry_after_ms");
    assert!(ms > 0 && ms <= 1_000, "{ms}");
    assert_eq!(exchange(describe()).await, None, "the session goes on");
    tokio::time::sleep(Duration::from_millis(ms)).await;
    assert_eq!(exchange(talk()).await, None, "served again after the wait");
    app.stop().await;
}

#[tokio::test]
async fn uploads_are_throttled_per_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.throttle.uploads.per_address = ONE_A_SECOND;
    let app = TestApp::spawn(&settings).await;
    let upload = format!("http://{}/upload", app.upload_addr);
    let send = async |client: &reqwest::Client, content: &str| {
        let reply = client
            .post(&upload)
            .header("content-type", "text/plain")
            .body(content.to_owned())
            .send()
            .await
            .expect("reply");
        let status = reply.status().as_u16();
        let retry_after = reply
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let body = reply.bytes().await.expect("body");
        (status, retry_after, error_of(&body))
    };
    let client = reqwest::Client::new();

    assert_eq!(send(&client, "one").await.0, 201);
    let wait = assert_throttled(send(&client, "two").await, "uploads");
    assert_eq!(send(&client_from(OTHER), "three").await.0, 201);
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(send(&client, "four").await.0, 201, "after Retry-After");
    app.stop().await;
}

/// A seed-002 connection to `/anp`, from 127.0.0.1 or `from`.
struct Anp(
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
);

impl Anp {
    async fn connect(app: &TestApp, from: Option<std::net::IpAddr>) -> Anp {
        let url = app.ws("/anp");
        let (socket, _) = match from {
            None => tokio_tungstenite::connect_async(url).await,
            Some(from) => {
                let stream = connect_from(from, app.addr).await;
                let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
                tokio_tungstenite::client_async(url, stream).await
            }
        }
        .expect("connect to /anp");
        Anp(socket)
    }

    /// Sends `value` in a meta frame; the JSON of the first frame that comes back.
    async fn exchange(&mut self, value: &Value) -> Value {
        let mut bytes = vec![0x00];
        bytes.extend(serde_json::to_vec(value).expect("json"));
        self.0.send(Ws::Binary(bytes.into())).await.expect("send");
        loop {
            match self.0.next().await.expect("a frame").expect("no error") {
                Ws::Binary(bytes) => {
                    assert_eq!(bytes[0], 0x00, "a meta frame");
                    return serde_json::from_slice(&bytes[1..]).expect("JSON");
                }
                Ws::Ping(_) | Ws::Pong(_) => continue,
                other => panic!("expected a binary frame, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn the_json_rpc_end_point_says_when_to_retry_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.limits.rate_limit_per_second = 1;
    settings.limits.rate_limit_burst = 1;
    let app = TestApp::spawn(&settings).await;
    let client = reqwest::Client::new();
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "anp.get_capabilities"});
    let first = client
        .post(app.http("/anp/rpc"))
        .json(&call)
        .send()
        .await
        .expect("a reply");
    assert_eq!(first.status().as_u16(), 200);
    let second = client
        .post(app.http("/anp/rpc"))
        .json(&call)
        .send()
        .await
        .expect("a reply");
    assert_eq!(second.status().as_u16(), 429);
    assert_eq!(
        second
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: serde_json::Value = second.json().await.expect("JSON-RPC");
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body["error"]["code"].is_i64(), "{body}");
    app.stop().await;
}
