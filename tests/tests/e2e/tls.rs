//! TLS on the listeners and in the NLIP client, over real sockets, with certificates made at
//! test time (`parley_tests::pki`): `https://` and `wss://` with a private CA, the refusal of
//! plaintext and of untrusted certificates, reloading the certificate, mutual TLS and the
//! identity a client certificate gives, and the configuration checked before a socket opens.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley::client::{ClientError, NlipClient};
use parley::config::{ClientAuth, ClientTlsSettings, Settings};
use parley::startup::{Bound, StartupError};
use parley::tls::ClientTls;
use parley_nlip::{ErrorInfo, Message};
use parley_tests::pki::{CertFiles, TestCa};
use parley_tests::{TestApp, test_settings};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tracing::subscriber::DefaultGuard;

/// Long enough for anything that does happen on loopback; reaching it fails the test.
const GUARD: Duration = Duration::from_secs(20);

/// A CA, a server certificate it signed, the CA's PEM file, in `dir`.
struct Pki {
    ca: TestCa,
    ca_file: std::path::PathBuf,
    server: CertFiles,
}

fn pki(dir: &Path) -> Pki {
    let ca = TestCa::new("Parley test CA");
    let ca_file = ca.write_cert(dir, "ca.pem");
    let server = ca.server(dir, "server", "parley-one", 1);
    Pki {
        ca,
        ca_file,
        server,
    }
}

fn tls_settings(dir: &Path, pki: &Pki) -> Settings {
    let mut settings = test_settings(dir);
    settings.tls.cert = Some(pki.server.cert.clone());
    settings.tls.key = Some(pki.server.key.clone());
    settings
}

fn trusting(ca: &Path) -> ClientTls {
    ClientTls::new(&ClientTlsSettings {
        ca_cert: Some(ca.to_owned()),
        ..Default::default()
    })
    .expect("the client's TLS configuration loads")
}

fn hello() -> Message {
    Message::text(parley_nlip::DEFAULT_LANGUAGE, "hello")
}

/// A reply that is not an NLIP error.
fn assert_answered(reply: &parley::client::Received) {
    assert_eq!(reply.status, 200);
    assert!(
        ErrorInfo::from_message(&reply.message).is_none(),
        "{:?}",
        reply.message
    );
}

/// A reqwest client that trusts `ca` (and the platform's roots) and reports what the server
/// presented.
fn reqwest_trusting(ca: &Path) -> reqwest::ClientBuilder {
    let pem = std::fs::read(ca).expect("read the CA");
    let ca = reqwest::Certificate::from_pem(&pem).expect("a PEM certificate");
    reqwest::Client::builder()
        .tls_certs_merge([ca])
        .tls_info(true)
}

/// The certificate the server at `addr` presents on a new connection.
async fn presented(addr: std::net::SocketAddr, ca: &Path) -> Vec<u8> {
    let client = reqwest_trusting(ca).build().expect("client");
    let response = client
        .get(format!("https://127.0.0.1:{}/health/live", addr.port()))
        .send()
        .await
        .expect("a TLS exchange");
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the server's certificate")
        .to_vec()
}

/// Asks for the presented certificate until it is `want`, within [`GUARD`].
async fn wait_for_certificate(addr: std::net::SocketAddr, ca: &Path, want: &[u8]) {
    let waited = tokio::time::timeout(GUARD, async {
        while presented(addr, ca).await != want {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    waited
        .await
        .expect("the server presents the new certificate");
}

#[tokio::test]
async fn https_with_the_private_ca_is_answered_and_without_it_fails_on_the_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let app = TestApp::spawn(&tls_settings(dir.path(), &pki)).await;
    let url = format!("https://127.0.0.1:{}/nlip", app.addr.port());

    let tls = trusting(&pki.ca_file);
    for cbor in [false, true] {
        let mut client = NlipClient::connect_with(&url, cbor, &tls)
            .await
            .expect("connect");
        assert_answered(&client.send(&hello()).await.expect("an answer over https"));
    }

    let mut untrusting = NlipClient::connect(&url, false).await.expect("prepare");
    match untrusting.send(&hello()).await {
        Err(e @ ClientError::Tls { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("certificate") && text.contains("--ca-cert"),
                "{text}"
            );
        }
        other => panic!("an untrusted certificate must fail the handshake: {other:?}"),
    }

    // ALPN: HTTP/2 for a client that offers it, HTTP/1.1 for one that does not.
    for (builder, version) in [
        (reqwest_trusting(&pki.ca_file), reqwest::Version::HTTP_2),
        (
            reqwest_trusting(&pki.ca_file).http1_only(),
            reqwest::Version::HTTP_11,
        ),
    ] {
        let response = builder
            .build()
            .expect("client")
            .post(&url)
            .header("content-type", "application/json")
            .body(r#"{"format":"text","subformat":"english","content":"hello"}"#)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), version);
    }

    // TLS 1.3 only, by default.
    let old = reqwest_trusting(&pki.ca_file)
        .tls_version_max(reqwest::tls::Version::TLS_1_2)
        .build()
        .expect("client")
        .get(format!("https://127.0.0.1:{}/health/live", app.addr.port()))
        .send()
        .await;
    assert!(old.is_err(), "a TLS 1.2 client is refused: {old:?}");

    // The upload listener speaks TLS too, and names itself with https.
    let uploaded = reqwest_trusting(&pki.ca_file)
        .build()
        .expect("client")
        .post(format!(
            "https://127.0.0.1:{}/upload",
            app.upload_addr.port()
        ))
        .body("some bytes")
        .send()
        .await
        .expect("an upload over https");
    assert_eq!(uploaded.status(), 201);
    let body = uploaded.text().await.expect("body");
    assert!(body.contains("https://127.0.0.1:"), "{body}");
    app.stop().await;
}

#[tokio::test]
async fn plaintext_to_the_tls_port_is_refused_and_its_slot_freed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let mut settings = tls_settings(dir.path(), &pki);
    // One connection slot: a plaintext connection that kept it would stall the next client.
    settings.limits.max_connections = 1;
    settings.limits.max_connections_per_address = 1;
    let app = TestApp::spawn(&settings).await;

    let mut plain = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    plain
        .write_all(b"POST /nlip HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(GUARD, plain.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server closes a plaintext connection");
    assert!(
        !String::from_utf8_lossy(&answer).contains("HTTP/1.1"),
        "no HTTP answer over plaintext: {answer:?}"
    );

    let url = format!("https://127.0.0.1:{}/nlip", app.addr.port());
    let mut client = NlipClient::connect_with(&url, false, &trusting(&pki.ca_file))
        .await
        .expect("prepare");
    let reply = tokio::time::timeout(GUARD, client.send(&hello()))
        .await
        .expect("the slot was freed")
        .expect("an answer");
    assert_answered(&reply);
    app.stop().await;
}

#[tokio::test]
async fn wss_carries_nlip_from_parleys_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let app = TestApp::spawn(&tls_settings(dir.path(), &pki)).await;
    let tls = trusting(&pki.ca_file);
    for path in ["/nlip/ws", "/nlip/ws/text"] {
        let url = format!("wss://localhost:{}{path}", app.addr.port());
        let mut client = NlipClient::connect_with(&url, false, &tls)
            .await
            .expect("a wss connection");
        for _ in 0..2 {
            assert_answered(&client.send(&hello()).await.expect("an answer over wss"));
        }
    }
    let url = format!("wss://localhost:{}/nlip/ws", app.addr.port());
    let refused = NlipClient::connect(&url, false)
        .await
        .expect_err("an untrusted certificate");
    assert!(matches!(refused, ClientError::Tls { .. }), "{refused:?}");
    app.stop().await;
}

#[tokio::test]
async fn the_anp_link_reaches_a_provider_over_wss() {
    use parley::negotiation::anp::{AnpLink, AnpOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let app = TestApp::spawn(&tls_settings(dir.path(), &pki)).await;
    // An https:// URL is reached over wss:// on /anp.
    let url = format!("https://localhost:{}", app.addr.port());
    let mut link = AnpLink::connect(&url, AnpOptions::default(), &trusting(&pki.ca_file))
        .await
        .expect("a wss connection to /anp");
    let answer = link
        .natural_language("hello")
        .await
        .expect("a natural-language answer");
    assert!(!answer.is_empty());
    link.close().await.expect("closed");
    let refused = AnpLink::connect(&url, AnpOptions::default(), &ClientTls::default())
        .await
        .expect_err("an untrusted certificate");
    assert!(refused.to_string().contains("TLS with wss://"), "{refused}");
    app.stop().await;
}

/// The front desk (examples/front-desk), its capability bound to a product desk that requires
/// client certificates, asked `text`; the front desk trusts `ca` and presents `client`.
async fn ask_the_front_desk(
    desk: &TestApp,
    ca: Option<&Path>,
    client: Option<&CertFiles>,
    text: &str,
) -> Message {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.capabilities = None;
    settings.sandbox.deadline_ms = 10_000;
    settings.tls.client.ca_cert = ca.map(Path::to_owned);
    settings.tls.client.client_cert = client.map(|c| c.cert.clone());
    settings.tls.client.client_key = client.map(|c| c.key.clone());
    let file = parley_tests::repo_root().join("examples/front-desk/capabilities.toml");
    let base = format!("https://localhost:{}", desk.addr.port());
    let capabilities = parley_tests::capabilities_with(&file, &[("PRODUCT_DESK_URL", &base)]);
    let front = TestApp::spawn_with(&settings, capabilities).await;
    let mut client = NlipClient::connect(&front.url(), false)
        .await
        .expect("connect");
    let reply = client
        .send(&Message::text("english", text))
        .await
        .expect("a reply")
        .message;
    front.stop().await;
    reply
}

#[tokio::test]
async fn an_agent_binding_reaches_its_peer_over_mutual_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let mut settings = tls_settings(dir.path(), &pki);
    settings.tls.client_ca = Some(pki.ca_file.clone());
    let logs = capture_logs();
    let desk = TestApp::spawn(&settings).await;
    let front_desk = pki.ca.client(dir.path(), "front", "front-desk");

    let question = "How much is product P12345?";
    let answered = ask_the_front_desk(&desk, Some(&pki.ca_file), Some(&front_desk), question).await;
    assert!(ErrorInfo::from_message(&answered).is_none(), "{answered:?}");
    let data: Vec<_> = answered
        .payload_submessages()
        .filter_map(|s| match &s.content {
            parley_nlip::Content::Json(value) => Some(value.clone()),
            parley_nlip::Content::Bytes(_) => None,
        })
        .collect();
    assert_eq!(
        data[0]["productName"], "High-performance Laptop",
        "{data:?}"
    );
    assert!(logs.contains(&["TLS client certificate verified", "identity=front-desk"]));

    // Without the CA, or without a client certificate, the call fails, and says why.
    for (ca, client, why) in [
        (None, Some(&front_desk), "UnknownIssuer"),
        (Some(pki.ca_file.as_path()), None, "CertificateRequired"),
    ] {
        let refused = ask_the_front_desk(&desk, ca, client, question).await;
        let error = ErrorInfo::from_message(&refused).expect("an error");
        assert_eq!(error.code, "binding_failed");
        assert!(error.message.contains(why), "{why}: {}", error.message);
    }
    desk.stop().await;
}

#[tokio::test]
async fn a_changed_certificate_is_served_to_new_connections_and_a_bad_one_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let mut settings = tls_settings(dir.path(), &pki);
    settings.tls.reload_interval_ms = 100;
    let logs = capture_logs();
    let app = TestApp::spawn(&settings).await;
    assert_eq!(presented(app.addr, &pki.ca_file).await, pki.server.der);

    let renewed = pki.ca.server(dir.path(), "server", "parley-two", 2);
    assert_ne!(renewed.der, pki.server.der);
    wait_for_certificate(app.addr, &pki.ca_file, &renewed.der).await;

    std::fs::write(&renewed.cert, "not a certificate").expect("spoil the certificate");
    let waited = tokio::time::timeout(GUARD, async {
        while !logs.contains(&["TLS certificate not reloaded"]) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    waited.await.expect("the failed reload is logged");
    assert_eq!(
        presented(app.addr, &pki.ca_file).await,
        renewed.der,
        "the certificate in force is kept"
    );
    app.stop().await;
}

#[tokio::test]
async fn sighup_reloads_the_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let mut settings = tls_settings(dir.path(), &pki);
    // An hour: only the signal can explain a reload within the test.
    settings.tls.reload_interval_ms = 3_600_000;
    let app = TestApp::spawn(&settings).await;
    let renewed = pki.ca.server(dir.path(), "server", "parley-two", 2);
    assert_eq!(presented(app.addr, &pki.ca_file).await, pki.server.der);
    // The server's SIGHUP handler is in place once it started; the signal goes to this process.
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    wait_for_certificate(app.addr, &pki.ca_file, &renewed.der).await;
    app.stop().await;
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_trusted_certificate_and_names_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let mut settings = tls_settings(dir.path(), &pki);
    settings.tls.client_ca = Some(pki.ca_file.clone());
    let logs = capture_logs();
    let app = TestApp::spawn(&settings).await;
    let url = format!("https://127.0.0.1:{}/nlip", app.addr.port());

    let anonymous = trusting(&pki.ca_file);
    let mut client = NlipClient::connect_with(&url, false, &anonymous)
        .await
        .expect("prepare");
    client
        .send(&hello())
        .await
        .expect_err("no client certificate, no answer");

    let stranger_ca = TestCa::new("Another CA");
    let stranger = stranger_ca.client(dir.path(), "stranger", "stranger-agent");
    let alice = pki.ca.client(dir.path(), "alice", "alice-agent");
    let with_cert = |files: &CertFiles| {
        ClientTls::new(&ClientTlsSettings {
            ca_cert: Some(pki.ca_file.clone()),
            client_cert: Some(files.cert.clone()),
            client_key: Some(files.key.clone()),
        })
        .expect("loads")
    };
    let mut client = NlipClient::connect_with(&url, false, &with_cert(&stranger))
        .await
        .expect("prepare");
    client
        .send(&hello())
        .await
        .expect_err("a certificate of another CA, no answer");

    let mut client = NlipClient::connect_with(&url, false, &with_cert(&alice))
        .await
        .expect("prepare");
    assert_answered(&client.send(&hello()).await.expect("answered"));
    let ws = format!("wss://localhost:{}/nlip/ws", app.addr.port());
    let mut client = NlipClient::connect_with(&ws, false, &with_cert(&alice))
        .await
        .expect("a wss connection with a client certificate");
    assert_answered(&client.send(&hello()).await.expect("answered"));
    assert!(
        logs.contains(&["TLS client certificate verified", "identity=alice-agent"]),
        "{}",
        logs.text()
    );
    assert!(!logs.contains(&["identity=stranger-agent"]));
    app.stop().await;

    // Optional (and TLS 1.2 allowed): a client without a certificate is served, one with an
    // untrusted one is not.
    settings.tls.client_auth = ClientAuth::Optional;
    settings.tls.min_version = parley::config::TlsVersion::V1_2;
    let app = TestApp::spawn(&settings).await;
    let url = format!("https://127.0.0.1:{}/nlip", app.addr.port());
    let tls12 = reqwest_trusting(&pki.ca_file)
        .tls_version_max(reqwest::tls::Version::TLS_1_2)
        .build()
        .expect("client")
        .get(format!("https://127.0.0.1:{}/health/live", app.addr.port()))
        .send()
        .await
        .expect("with min_version 1.2, a TLS 1.2 client is served");
    assert_eq!(tls12.status(), 200);
    let mut client = NlipClient::connect_with(&url, false, &anonymous)
        .await
        .expect("prepare");
    assert_answered(&client.send(&hello()).await.expect("answered"));
    let mut client = NlipClient::connect_with(&url, false, &with_cert(&stranger))
        .await
        .expect("prepare");
    client.send(&hello()).await.expect_err("untrusted");
    app.stop().await;
}

#[tokio::test]
async fn tls_settings_are_checked_before_a_socket_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let other = pki.ca.server(dir.path(), "other", "other", 3);
    let port = parley_tests::free_port().expect("a free port");
    let refused = |configure: &dyn Fn(&mut Settings)| {
        let mut settings = tls_settings(dir.path(), &pki);
        settings.listen = format!("127.0.0.1:{port}").parse().expect("address");
        configure(&mut settings);
        settings
    };
    let cases: Vec<(Settings, &[&str])> = vec![
        (
            refused(&|s| s.tls.key = None),
            &["tls.key", "needs its key"],
        ),
        (
            refused(&|s| s.tls.key = Some(other.key.clone())),
            &["tls.key", "is not the key of the certificate"],
        ),
        (
            refused(&|s| s.tls.cert = Some(dir.path().join("missing.pem"))),
            &["tls.cert", "cannot read", "missing.pem"],
        ),
        (
            refused(&|s| s.tls.cert = Some(pki.server.key.clone())),
            &["tls.cert", "holds no PEM certificate"],
        ),
        (
            refused(&|s| s.tls.client.ca_cert = Some(dir.path().join("nowhere.pem"))),
            &["tls.client.ca_cert", "nowhere.pem"],
        ),
        (
            refused(&|s| {
                s.tls.cert = None;
                s.tls.key = None;
                s.tls.client_ca = Some(pki.ca_file.clone());
            }),
            &["tls.client_ca", "need TLS"],
        ),
    ];
    for (settings, needles) in cases {
        let err = Bound::new(&settings).await.expect_err("refused");
        assert!(matches!(err, StartupError::Config(_)), "{err:?}");
        let text = err.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{needle:?} in {text}");
        }
        // Nothing was bound: the port is still free.
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    }
}

// --- captured logs ---------------------------------------------------------------------------

/// This test's log lines of the listener and of TLS, debug level included (the identity a client
/// certificate gives is logged per connection, at debug).
struct Logs {
    lines: Arc<Mutex<Vec<u8>>>,
    _capturing: DefaultGuard,
}

/// Starts capturing the calling thread's log (its current-thread runtime runs the servers the
/// test starts); the capture lasts as long as the returned value.
fn capture_logs() -> Logs {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("parley::server::listener=debug,parley::tls=info")
        .with_ansi(false)
        .with_writer(move || crate::agent::Sink(sink.clone()))
        .finish();
    crate::agent::keep_a_second_dispatch();
    Logs {
        lines: buffer,
        _capturing: tracing::subscriber::set_default(subscriber),
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().expect("not poisoned")).into_owned()
    }

    /// Whether a line contains every one of `needles`.
    fn contains(&self, needles: &[&str]) -> bool {
        self.text()
            .lines()
            .any(|line| needles.iter().all(|n| line.contains(n)))
    }
}
