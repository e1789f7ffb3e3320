//! A bounded load on loopback: `parley serve` in a child process (so its memory is its own)
//! answers thousands of messages over many HTTP connections and WebSocket sessions, JSON and
//! CBOR, while negotiations of distinct protocol variants run, and then their 0-RTT calls join
//! the load. Every reply is a success, every negotiation agrees, and the server's memory stays
//! bounded: every message carries an attachment, so a server that kept the bodies it answered
//! would grow by far more than the bound on its growth between warm-up and the end. Throughput,
//! errors and peak memory are printed (`--nocapture`); no figure of time is asserted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use parley::negotiation::requester::{Outcome, Requester};
use parley_anp::ProtocolHash;
use parley_nlip::{Content, ErrorInfo, Format, Message, Submessage};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::support::{examples, spawn_serve};

/// HTTP connections, each sending its messages one after another.
const HTTP_CONNECTIONS: usize = 32;
/// WebSocket sessions on each of `/nlip/ws` (CBOR) and `/nlip/ws/text` (JSON).
const WS_SESSIONS: usize = 8;
/// Negotiations, each of its own variant of the product protocol.
const NEGOTIATIONS: usize = 4;
/// Messages per HTTP connection and per WebSocket session during warm-up.
const WARM_UP_MESSAGES: usize = 16;
/// Messages per HTTP connection and per WebSocket session during the load proper.
const LOAD_MESSAGES: usize = 100;
/// 0-RTT calls per negotiated protocol during the load proper.
const ZERO_RTT_CALLS: usize = 100;
/// Bytes attached to every message: with the load's 4,800 messages, 75 MiB that a server
/// keeping what it was sent would hold.
const ATTACHMENT: usize = 16 << 10;
/// Most the server's resident memory may grow from the end of warm-up to the end of the load.
const GROWTH_BOUND_KIB: u64 = 48 << 10;
/// Most the server's resident memory may ever reach.
const PEAK_BOUND_KIB: u64 = 1 << 20;

/// Successes and failures over the whole run.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    errors: AtomicU64,
}

impl Tally {
    fn record(&self, what: &str, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(why) => {
                eprintln!("load: {what}: {why}");
                self.errors.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_messages_with_negotiations_leave_no_errors_and_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("load.toml");
    // Everything comes from 127.0.0.1: the per-address limits and the throttles allow the
    // whole load (thousands of messages for the reasoner among it), and a request may take as
    // long as the first negotiation's compile of the sandbox on a slow machine.
    std::fs::write(
        &config,
        "[limits]\nrate_limit_per_second = 0\nmax_connections_per_address = 1024\n\
         max_concurrent_requests_per_address = 1024\nrequest_timeout_ms = 180000\n\
         [throttle.negotiations]\nper_address = { per_minute = 0, burst = 0 }\n\
         [throttle.model_calls]\nper_address = { per_minute = 0, burst = 0 }\n",
    )
    .expect("config");
    let data = dir.path().join("server");
    let (mut child, url) = spawn_serve(&data, |command| {
        command
            .env_remove("PARLEY_DATABASE_URL")
            .env("PARLEY_CONFIG", &config);
    });
    let pid = child.id();
    let base = url
        .trim_end_matches("/nlip")
        .replacen("http://", "ws://", 1);
    let tally = Arc::new(Tally::default());
    let started = Instant::now();

    // Warm-up: the load in small, while the negotiations run.
    let variants = protocol_variants(dir.path());
    let negotiations = variants
        .iter()
        .enumerate()
        .map(|(i, text)| negotiate(dir.path().join(format!("requester-{i}")), &url, text));
    let (agreed, warm) = tokio::join!(
        futures::future::join_all(negotiations),
        load(&url, &base, WARM_UP_MESSAGES, &tally)
    );
    let after_warm_up = memory(pid);
    let load_started = Instant::now();

    // The load proper, the 0-RTT calls of every agreed protocol among it.
    let calls = agreed
        .iter()
        .map(|(requester, hash)| zero_rtt(requester, &url, hash, &tally));
    let (_, sent) = tokio::join!(
        futures::future::join_all(calls),
        load(&url, &base, LOAD_MESSAGES, &tally)
    );
    let load_time = load_started.elapsed();
    let elapsed = started.elapsed();
    let after_load = memory(pid);

    let ok = tally.ok.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    eprintln!(
        "load: {ok} replies ({warm} warm-up and {sent} load messages, {} 0-RTT calls, {} \
         negotiations) in {:.1} s; the load proper {:.0} messages/s; {errors} errors; server RSS \
         after warm-up {} MiB, after the load {} MiB, peak {} MiB",
        NEGOTIATIONS * ZERO_RTT_CALLS,
        NEGOTIATIONS,
        elapsed.as_secs_f64(),
        (sent + NEGOTIATIONS * ZERO_RTT_CALLS) as f64 / load_time.as_secs_f64(),
        after_warm_up.rss_kib >> 10,
        after_load.rss_kib >> 10,
        after_load.peak_kib >> 10,
    );
    child.kill().expect("stop the server");
    child.wait().expect("reaped");

    assert_eq!(errors, 0, "every reply is a success");
    let expected = (warm + sent + NEGOTIATIONS * ZERO_RTT_CALLS) as u64;
    assert_eq!(ok, expected, "every message has its reply");
    assert!(
        after_load.peak_kib < PEAK_BOUND_KIB,
        "peak RSS {} KiB",
        after_load.peak_kib
    );
    let growth = after_load.rss_kib.saturating_sub(after_warm_up.rss_kib);
    assert!(
        growth < GROWTH_BOUND_KIB,
        "RSS grew by {growth} KiB over a load that sent {} KiB of attachments",
        (sent * ATTACHMENT) >> 10
    );
}

/// The server's resident memory now and at its peak, from `/proc/PID/status`.
struct Memory {
    rss_kib: u64,
    peak_kib: u64,
}

fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    Memory {
        rss_kib: field("VmRSS:"),
        peak_kib: field("VmHWM:"),
    }
}

/// Variants of the example product protocol, each with a text (so a hash) of its own.
fn protocol_variants(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(examples().join("protocols/product-info.md"))
        .expect("the example protocol");
    (0..NEGOTIATIONS)
        .map(|i| {
            let variant = text.replacen(
                "The product name may be sent as a hint",
                &format!("Load shelf {i}. The product name may be sent as a hint"),
                1,
            );
            assert_ne!(variant, text, "the variant differs");
            std::fs::write(dir.join(format!("product-{i}.md")), &variant).expect("variant");
            variant
        })
        .collect()
}

/// One negotiation by a requester with its own store in `dir`; it must agree.
async fn negotiate(dir: PathBuf, url: &str, text: &str) -> (Requester, ProtocolHash) {
    std::fs::create_dir_all(&dir).expect("requester dir");
    let store = parley_store::connect(
        &format!("sqlite://{}/requester.db?mode=rwc", dir.display()),
        Default::default(),
    )
    .await
    .expect("requester store");
    let requester = Requester::new(store);
    let negotiated = requester
        .negotiate(url, text, |_| {})
        .await
        .expect("the negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    (requester, negotiated.hash)
}

/// The 0-RTT calls of one agreed protocol, one after another.
async fn zero_rtt(requester: &Requester, url: &str, hash: &ProtocolHash, tally: &Tally) {
    for i in 0..ZERO_RTT_CALLS {
        let request = json!({
            "messageId": format!("load-{i}"), "type": "REQUEST",
            "action": "getProductInfo", "productId": "P12345",
        });
        let outcome = match requester.call(url, hash, request).await {
            Ok(found) if found.renegotiated.is_none() && found.answer["status"]["code"] == 200 => {
                Ok(())
            }
            Ok(found) => Err(format!("{:?} {}", found.renegotiated, found.answer)),
            Err(e) => Err(e.to_string()),
        };
        tally.record("0-RTT call", outcome);
    }
}

/// `per_peer` messages over each HTTP connection and each WebSocket session, all at once;
/// returns how many were sent.
async fn load(url: &str, base: &str, per_peer: usize, tally: &Arc<Tally>) -> usize {
    let mut peers = Vec::new();
    for peer in 0..HTTP_CONNECTIONS {
        let (url, tally) = (url.to_owned(), tally.clone());
        peers.push(tokio::spawn(async move {
            over_http(&url, peer, per_peer, &tally).await
        }));
    }
    for peer in 0..WS_SESSIONS {
        for cbor in [true, false] {
            let (base, tally) = (base.to_owned(), tally.clone());
            peers.push(tokio::spawn(async move {
                over_websocket(&base, cbor, peer, per_peer, &tally).await
            }));
        }
    }
    for peer in futures::future::join_all(peers).await {
        peer.expect("a load peer did not panic");
    }
    (HTTP_CONNECTIONS + 2 * WS_SESSIONS) * per_peer
}

/// The `i`th message of a peer: a tool call or a natural-language product question, every
/// other one in a conversation of the peer's own, each with an attachment.
fn message(peer: usize, i: usize) -> Message {
    let mut message = if i.is_multiple_of(2) {
        Message::json(json!({"tool": "getProductInfo", "arguments": {"productId": "P12345"}}))
    } else {
        Message::text("english", "What is the price of product P12345?")
    };
    let mut attachment = Submessage::new(
        Format::Binary,
        "generic/octet-stream",
        Content::Bytes(vec![(i % 251) as u8; ATTACHMENT]),
    );
    attachment.label = Some("attachment".to_owned());
    message.submessages.push(attachment);
    if i % 4 < 2 {
        message.submessages.push(Submessage::new(
            Format::Token,
            "conversation_client",
            format!("load-{peer}"),
        ));
    }
    message
}

/// Whether a reply is a success.
fn judge(reply: &Message) -> Result<(), String> {
    match ErrorInfo::from_message(reply) {
        None if reply.messagetype.as_deref() != Some("error") => Ok(()),
        _ => Err(format!("{reply:?}")),
    }
}

async fn over_http(url: &str, peer: usize, count: usize, tally: &Tally) {
    // One connection: a pool of at most one idle connection, used one request at a time.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    for i in 0..count {
        let body = parley_nlip::to_json_value(&message(peer, i));
        let outcome = match client.post(url).json(&body).send().await {
            Ok(reply) => {
                let status = reply.status();
                match reply.bytes().await {
                    Ok(bytes) if status == 200 => parley_nlip::from_json_slice(&bytes)
                        .map_err(|e| e.to_string())
                        .and_then(|m| judge(&m)),
                    Ok(bytes) => Err(format!("{status}: {}", String::from_utf8_lossy(&bytes))),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        tally.record("HTTP", outcome);
    }
}

async fn over_websocket(base: &str, cbor: bool, peer: usize, count: usize, tally: &Tally) {
    let path = if cbor { "/nlip/ws" } else { "/nlip/ws/text" };
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{base}{path}"))
        .await
        .expect("a WebSocket session");
    // Conversations of their own: WebSocket peers are numbered after the HTTP ones.
    let peer = HTTP_CONNECTIONS + 2 * peer + usize::from(cbor);
    for i in 0..count {
        let message = message(peer, i);
        let frame = if cbor {
            Ws::Binary(parley_nlip::to_cbor_vec(&message).into())
        } else {
            Ws::Text(parley_nlip::to_json_value(&message).to_string().into())
        };
        let outcome = match socket.send(frame).await {
            Ok(()) => next_reply(&mut socket).await.and_then(|m| judge(&m)),
            Err(e) => Err(e.to_string()),
        };
        tally.record(path, outcome);
    }
    let _ = socket.close(None).await;
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next NLIP message on a session, whichever encoding its frame has.
async fn next_reply(socket: &mut Socket) -> Result<Message, String> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(300), socket.next())
            .await
            .map_err(|_| "no reply within 300 s".to_owned())?
            .ok_or("the session closed")?
            .map_err(|e| e.to_string())?;
        return match frame {
            Ws::Binary(bytes) => parley_nlip::from_cbor_slice(&bytes).map_err(|e| e.to_string()),
            Ws::Text(text) => {
                parley_nlip::from_json_slice(text.as_bytes()).map_err(|e| e.to_string())
            }
            Ws::Ping(_) | Ws::Pong(_) => continue,
            other => Err(format!("{other:?}")),
        };
    }
}
