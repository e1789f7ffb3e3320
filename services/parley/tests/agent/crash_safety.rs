//! Crash safety: `parley serve` killed with SIGKILL while negotiations and conversations are
//! under way, then started again on the same database, has lost nothing it acknowledged and
//! holds nothing half-written: every agreement a requester was told of has its protocol and an
//! active, verified handler that serves at 0-RTT; every conversation message that was answered
//! is in the conversation's log; the negotiations the kill cut short are ended, not left
//! half-way through a turn; every acknowledged negotiation's start, end and handler activation
//! is in the audit log, and every audit event there is whole and records what did happen; a
//! SQLite file passes its integrity check. On SQLite and on PostgreSQL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parley::config::Settings;
use parley_anp::ProtocolHash;
use parley_store::{AuditEvent, AuditFilter, Direction, HandlerState, NegotiationStatus, Store};
use serde_json::{Value, json};

use crate::support::{BIN, examples, spawn_serve, utf8};

/// Negotiations started at once, each of its own variant of the product protocol.
const NEGOTIATIONS: usize = 6;
/// Conversations talking while the negotiations run, each one message at a time.
const CONVERSATIONS: usize = 4;
/// Agreements that must be acknowledged before the kill.
const AGREED_BEFORE_KILL: usize = 2;

#[test]
fn killed_on_sqlite_loses_nothing_acknowledged() {
    killed_mid_work_loses_nothing_acknowledged(None);
}

#[test]
fn killed_on_postgres_loses_nothing_acknowledged() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (url, guard) = runtime.block_on(parley_store::testing::fresh_postgres_url());
    killed_mid_work_loses_nothing_acknowledged(Some(&url));
    runtime
        .block_on(guard.drop_database())
        .expect("test database dropped");
}

/// The flags that lift the message rate and the throttles of one address.
const UNTHROTTLED: &[&str] = &[
    "--rate-limit",
    "0",
    "--throttle-negotiations-per-address",
    "0",
    "--throttle-model-calls-per-address",
    "0",
];

fn killed_mid_work_loses_nothing_acknowledged(database_url: Option<&str>) {
    let provider_dir = tempfile::tempdir().expect("tempdir");
    let requesters = tempfile::tempdir().expect("tempdir");
    let variants = protocol_variants(requesters.path());
    let serve = |extra: &[&str]| {
        spawn_serve(provider_dir.path(), |command| {
            command.env_remove("PARLEY_CONFIG").args(extra);
            match database_url {
                Some(url) => command.env("PARLEY_DATABASE_URL", url),
                None => command.env_remove("PARLEY_DATABASE_URL"),
            };
        })
    };

    // The talkers and requesters all come from one address: no rate limit and no throttles,
    // which are not what this test is about.
    let (mut provider, url) = serve(UNTHROTTLED);
    let negotiating: Vec<(PathBuf, Child)> = variants
        .iter()
        .enumerate()
        .map(|(i, protocol)| {
            let local = requesters.path().join(format!("requester-{i}"));
            let child = Command::new(BIN)
                .args([
                    "negotiate",
                    &url,
                    "--protocol",
                    utf8(protocol),
                    "--data-dir",
                ])
                .arg(&local)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("parley negotiate starts");
            (local, child)
        })
        .collect();
    let killed = Arc::new(AtomicBool::new(false));
    let talkers: Vec<_> = (0..CONVERSATIONS)
        .map(|c| {
            let (url, killed) = (url.clone(), killed.clone());
            std::thread::spawn(move || talk(&url, c, &killed))
        })
        .collect();

    let negotiating = kill_once_agreed(&mut provider, negotiating, &killed);
    let agreed = agreements(negotiating);
    assert!(agreed.len() >= AGREED_BEFORE_KILL, "{agreed:?}");
    let answered: Vec<Talk> = talkers
        .into_iter()
        .map(|t| t.join().expect("talker"))
        .collect();
    assert!(
        answered.iter().all(|t| !t.answered.is_empty()),
        "every conversation had answers before the kill"
    );
    eprintln!(
        "killed with {} of {NEGOTIATIONS} negotiations agreed and {} conversation messages answered",
        agreed.len(),
        answered.iter().map(|t| t.answered.len()).sum::<usize>()
    );

    // Interrupted negotiations are ended by the next server once older than its request time
    // limit: give it a short one and let that much pass.
    std::thread::sleep(Duration::from_millis(2_500));
    let restarted = [UNTHROTTLED, &["--request-timeout-ms", "2000"]].concat();
    let (provider, url) = serve(&restarted);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let store = runtime.block_on(open_store(provider_dir.path(), database_url));
    runtime.block_on(async {
        for (hash, _) in agreed.values() {
            agreement_is_whole(store.as_ref(), hash).await;
        }
        for talk in &answered {
            answers_are_logged(store.as_ref(), talk).await;
        }
        let agreed_hashes: Vec<&str> = agreed.values().map(|(hash, _)| hash.as_str()).collect();
        audit_is_whole(store.as_ref(), &agreed_hashes).await;
        let hashes: Vec<String> = variants
            .iter()
            .map(|p| ProtocolHash::of(&std::fs::read_to_string(p).expect("variant")).to_string())
            .collect();
        no_turn_left_half_done(store.as_ref(), &hashes).await;
    });
    for (hash, local) in agreed.values() {
        let before = runtime.block_on(negotiation_count(store.as_ref(), hash));
        call_at_zero_rtt(&url, hash, local);
        let after = runtime.block_on(negotiation_count(store.as_ref(), hash));
        assert_eq!(before, after, "{hash} served without a new negotiation");
    }
    if database_url.is_none() {
        sqlite_is_intact(&runtime, provider_dir.path());
    }
    stop(provider);
}

/// Variants of the example product protocol, each with a text (so a hash) of its own.
fn protocol_variants(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(examples().join("protocols/product-info.md"))
        .expect("the example protocol");
    (0..NEGOTIATIONS)
        .map(|i| {
            let variant = text.replacen(
                "The product name may be sent as a hint",
                &format!("Catalogue shelf {i}. The product name may be sent as a hint"),
                1,
            );
            assert_ne!(variant, text, "the variant differs");
            let path = dir.join(format!("product-{i}.md"));
            std::fs::write(&path, variant).expect("write variant");
            path
        })
        .collect()
}

/// Waits until [`AGREED_BEFORE_KILL`] negotiations have ended in agreement, then kills the
/// provider with SIGKILL at once, whatever else is in flight.
fn kill_once_agreed(
    provider: &mut Child,
    mut negotiating: Vec<(PathBuf, Child)>,
    killed: &AtomicBool,
) -> Vec<(PathBuf, Child)> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut agreed = 0;
        for (_, child) in &mut negotiating {
            if let Some(status) = child.try_wait().expect("try_wait") {
                assert!(status.success(), "a negotiation failed before the kill");
                agreed += 1;
            }
        }
        if agreed >= AGREED_BEFORE_KILL {
            break;
        }
        assert!(Instant::now() < deadline, "no agreements within 300 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.store(true, Ordering::SeqCst);
    provider.kill().expect("SIGKILL");
    provider.wait().expect("reaped");
    negotiating
}

/// The agreements the requesters were told of, by variant: (hash, the requester's data dir).
fn agreements(negotiating: Vec<(PathBuf, Child)>) -> BTreeMap<usize, (String, PathBuf)> {
    negotiating
        .into_iter()
        .enumerate()
        .filter_map(|(i, (local, child))| {
            let out = child.wait_with_output().expect("negotiate ends");
            let out = String::from_utf8_lossy(&out.stdout).into_owned();
            out.contains("status   agreed").then(|| {
                let hash = out
                    .lines()
                    .find_map(|l| l.strip_prefix("hash     "))
                    .expect("hash line")
                    .to_owned();
                (i, (hash, local))
            })
        })
        .collect()
}

/// What one conversation said and had answered before the kill.
struct Talk {
    conversation: Option<String>,
    answered: Vec<String>,
}

/// Sends numbered messages in conversation `c`, one at a time, until the provider is killed.
fn talk(url: &str, c: usize, killed: &AtomicBool) -> Talk {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::new();
    let mut talk = Talk {
        conversation: None,
        answered: Vec::new(),
    };
    for n in 0.. {
        let text = format!("conversation {c}, message {n}: what can you do?");
        let message = json!({
            "format": "text", "subformat": "English", "content": text,
            "submessages": [{"format": "token", "subformat": "conversation", "content": format!("crash-{c}")}]
        });
        let reply = runtime.block_on(async {
            client
                .post(url)
                .json(&message)
                .timeout(Duration::from_secs(30))
                .send()
                .await?
                .error_for_status()?
                .json::<Value>()
                .await
        });
        match reply {
            Ok(reply) => {
                talk.conversation = conversation_of(&reply);
                talk.answered.push(text);
            }
            Err(e) => {
                assert!(killed.load(Ordering::SeqCst), "failed before the kill: {e}");
                break;
            }
        }
    }
    talk
}

/// The conversation id a reply names in its `conversation_parley` token.
fn conversation_of(reply: &Value) -> Option<String> {
    reply["submessages"]
        .as_array()?
        .iter()
        .find(|s| s["format"] == "token" && s["subformat"] == "conversation_parley")
        .and_then(|s| s["content"].as_str())
        .map(str::to_owned)
}

async fn open_store(data_dir: &Path, database_url: Option<&str>) -> Arc<dyn Store> {
    let settings = Settings {
        data_dir: data_dir.to_owned(),
        database_url: database_url.map(str::to_owned),
        ..Settings::default()
    };
    parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the provider's store")
}

/// An acknowledged agreement survives whole: its protocol, the agreement, an active handler
/// that passed verification.
async fn agreement_is_whole(store: &dyn Store, hash: &str) {
    assert!(
        store.get_protocol(hash).await.expect("read").is_some(),
        "protocol {hash} kept"
    );
    assert!(
        !store
            .agreements_for_protocol(hash)
            .await
            .expect("read")
            .is_empty(),
        "agreement on {hash} kept"
    );
    let handler = store
        .active_handler(hash)
        .await
        .expect("read")
        .unwrap_or_else(|| panic!("active handler of {hash} kept"));
    assert_eq!(handler.state, HandlerState::Active);
    assert!(handler.verification.is_some(), "{handler:?}");
}

/// The audit events of `action`, newest first.
async fn audited(store: &dyn Store, action: &str) -> Vec<AuditEvent> {
    let filter = AuditFilter {
        action: Some(action.into()),
        limit: parley_store::MAX_PAGE,
        ..AuditFilter::default()
    };
    store.list_audit(filter).await.expect("the audit log")
}

/// Every acknowledged agreement's negotiation has its start, its accepted end and its handler's
/// activation in the audit log; and every decision the log holds is whole and did happen: it is
/// written once what it records was committed, so the kill may leave a record's work without
/// its event, never an event without its work.
async fn audit_is_whole(store: &dyn Store, agreed: &[&str]) {
    let starts = audited(store, "negotiation.start").await;
    let ends = audited(store, "negotiation.end").await;
    let activations = audited(store, "handler.activate").await;
    let has = |events: &[AuditEvent], subject: &str, outcome: &str| {
        events
            .iter()
            .any(|e| e.subject == subject && e.outcome == outcome)
    };
    for hash in agreed {
        let accepted: Vec<_> = store
            .negotiations_for_protocol(hash)
            .await
            .expect("read")
            .into_iter()
            .filter(|n| n.status == NegotiationStatus::Accepted)
            .collect();
        assert!(!accepted.is_empty(), "{hash} was agreed in a negotiation");
        for n in accepted {
            let id = n.id.to_string();
            assert!(has(&starts, &id, "ok"), "the start of {id} is audited");
            assert!(has(&ends, &id, "accepted"), "the end of {id} is audited");
        }
        assert!(
            has(&activations, hash, "ok"),
            "the activation of {hash} is audited"
        );
    }
    for event in starts.iter().chain(&ends).chain(&activations) {
        assert_eq!(event.address.as_deref(), Some("127.0.0.1"), "{event:?}");
        assert!(event.detail.is_some(), "{event:?}");
    }
    for end in &ends {
        let id = end.subject.parse().expect("a negotiation id");
        let record = store.get_negotiation(id).await.expect("read");
        let n = record
            .expect("an audited end names a negotiation")
            .negotiation;
        assert_eq!(n.status.as_str(), end.outcome, "{end:?}");
    }
    for start in &starts {
        let id = start.subject.parse().expect("a negotiation id");
        let record = store.get_negotiation(id).await.expect("read");
        assert!(
            record.is_some(),
            "an audited start names a negotiation: {start:?}"
        );
    }
    for activation in &activations {
        let handler = activation.detail.as_ref().expect("a detail")["handler"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .expect("the handler's id");
        let handler = store.get_handler(handler).await.expect("read");
        let handler = handler.expect("an audited activation names a handler");
        assert_eq!(handler.protocol_hash, activation.subject);
        assert!(
            matches!(handler.state, HandlerState::Active | HandlerState::Retired),
            "{handler:?}"
        );
    }
}

/// Every answered message of a conversation is in its log, and so is every answer.
async fn answers_are_logged(store: &dyn Store, talk: &Talk) {
    let id = talk.conversation.as_deref().expect("a conversation id");
    let log = store.list_messages(id, 0, 1000).await.expect("the log");
    let inbound: Vec<&str> = log
        .iter()
        .filter(|m| m.direction == Direction::Inbound)
        .filter_map(|m| m.message["content"].as_str())
        .collect();
    for text in &talk.answered {
        assert!(inbound.contains(&text.as_str()), "{text:?} logged in {id}");
    }
    let outbound = log
        .iter()
        .filter(|m| m.direction == Direction::Outbound)
        .count();
    assert!(outbound >= talk.answered.len(), "{id}: answers logged");
    let seqs: Vec<i64> = log.iter().map(|m| m.seq).collect();
    let consecutive: Vec<i64> = (1..=log.len() as i64).collect();
    assert_eq!(seqs, consecutive, "{id}: the log has no hole");
}

/// The restarted server ends the negotiations the kill cut short in the middle of a turn (at
/// start, once they are older than its request time limit). One the provider had answered is
/// waiting for its peer, as it would without a crash, and stays open.
async fn no_turn_left_half_done(store: &dyn Store, hashes: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut half_done = Vec::new();
        for hash in hashes {
            for n in store.negotiations_for_protocol(hash).await.expect("read") {
                if n.status != NegotiationStatus::Negotiating {
                    continue;
                }
                let record = store
                    .get_negotiation(n.id)
                    .await
                    .expect("read")
                    .expect("the negotiation");
                let last = record.transcript.last().map(|m| m.direction);
                if last != Some(Direction::Outbound) {
                    half_done.push(n.id);
                }
            }
        }
        if half_done.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "turns left half done after the restart: {half_done:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn negotiation_count(store: &dyn Store, hash: &str) -> usize {
    store
        .negotiations_for_protocol(hash)
        .await
        .expect("read")
        .len()
}

/// Calls the agreed protocol from the requester that agreed it; the provider must know it.
fn call_at_zero_rtt(url: &str, hash: &str, local: &Path) {
    let request = r#"{"messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#;
    let out = Command::new(BIN)
        .args(["call", url, "--protocol", hash, "--data-dir"])
        .arg(local)
        .args(["--json", request])
        .output()
        .expect("parley call runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("High-performance Laptop"),
        "{stdout}\n{stderr}"
    );
}

fn sqlite_is_intact(runtime: &tokio::runtime::Runtime, data_dir: &Path) {
    use sqlx::Connection as _;
    let path = data_dir.join("parley.db");
    let check: String = runtime.block_on(async {
        let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("open the SQLite file");
        sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&mut db)
            .await
            .expect("integrity_check")
    });
    assert_eq!(check, "ok");
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.wait();
}
