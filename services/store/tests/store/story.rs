//! The store story: every operation of the `Store` trait, told once and run against both backends.
//!
//! One long story rather than many small tests, because the interesting properties are about
//! sequences: a state written then raced, a handler verified then activated then rolled back, data
//! written, the store dropped, reconnected, and everything still there. Each chapter returns what it
//! wrote so the restart chapter can compare it field for field (timestamps included).
//!
//! PostgreSQL is required: with no server the PostgreSQL test fails and says how to start one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parley_store::testing::{SqliteWriteLock, fresh_postgres_url, fresh_sqlite_url};
use parley_store::{
    Agreement, Conversation, Direction, HandlerRecord, HandlerState, LoggedMessage,
    NegotiationOutcome, NegotiationRecord, NegotiationStatus, NewAgreement, NewConversation,
    NewHandler, NewNegotiation, Protocol, ProtocolUsage, Role, Store, StoreError, StoreOptions,
    Upload, connect, sha256_hex,
};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, SqliteConnection};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_sqlite() {
    let (_, dir) = fresh_sqlite_url();
    // A directory that does not exist yet: `mode=rwc` must create it as well as the file.
    let url = format!(
        "sqlite://{}/nested/state/parley.db?mode=rwc",
        dir.path().display()
    );
    story(&url, "sqlite").await;
    let file = dir.path().join("nested/state/parley.db");
    assert!(file.exists());
    // WAL is a property of the file, so a fresh plain connection sees it.
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", file.display()))
        .await
        .expect("open the database file");
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .expect("read journal mode");
    assert_eq!(mode, "wal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_postgres() {
    let (url, database) = fresh_postgres_url().await;
    story(&url, "postgres").await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}

#[tokio::test]
async fn a_dropped_postgres_guard_drops_its_database() {
    let (url, database) = fresh_postgres_url().await;
    let name = database.name().to_owned();
    // Leave a pool open on purpose: dropping must not wait for the test to close it.
    let store = connect(&url, options()).await.expect("connect");
    store
        .check_writable()
        .await
        .expect("the database takes writes");
    drop(database);
    let admin_url = std::env::var(parley_store::testing::PG_URL_ENV)
        .unwrap_or_else(|_| parley_store::testing::DEFAULT_PG_URL.to_owned());
    let mut admin = PgConnection::connect(&admin_url)
        .await
        .expect("admin connection");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .expect("query pg_database");
    assert_eq!(left, 0, "{name} was dropped");
}

#[tokio::test]
async fn an_in_memory_sqlite_store_keeps_its_data_for_its_lifetime() {
    let store = connect("sqlite::memory:", options())
        .await
        .expect("connect");
    store
        .create_conversation(NewConversation {
            id: "c".into(),
            peer: None,
            state: json!({}),
        })
        .await
        .expect("create");
    // Sequential operations may use different pool slots; all must see one database.
    for _ in 0..3 {
        store
            .append_message("c", Direction::Inbound, &json!({ "n": 1 }))
            .await
            .expect("append");
    }
    assert_eq!(
        store.list_messages("c", 0, 10).await.expect("list").len(),
        3
    );
}

#[tokio::test]
async fn unknown_url_schemes_are_invalid_and_do_not_echo_the_url() {
    let err = connect("mysql://user:secret@host/db", StoreOptions::default())
        .await
        .expect_err("mysql is not a backend");
    assert!(
        matches!(&err, StoreError::Invalid(msg) if !msg.contains("secret")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_locked_sqlite_database_is_unavailable_for_writes_and_still_read() {
    let (url, _dir) = fresh_sqlite_url();
    let options = StoreOptions {
        busy_timeout: Duration::from_millis(100),
        ..options()
    };
    let store = connect(&url, options).await.expect("connect");
    let new = NewConversation {
        id: "c".into(),
        peer: None,
        state: json!({}),
    };
    store.create_conversation(new).await.expect("create");

    let lock = SqliteWriteLock::acquire(&url).await.expect("lock");
    let err = store
        .append_message("c", Direction::Inbound, &json!({ "n": 1 }))
        .await
        .expect_err("the database is locked");
    assert!(
        matches!(err, StoreError::Unavailable(_)) && err.is_transient(),
        "{err:?}"
    );
    // The driver's error is kept for logs, behind an opaque source.
    let source = std::error::Error::source(&err).expect("a source");
    assert!(source.to_string().contains("locked"), "{source}");
    assert!(store.get_conversation("c").await.expect("reads").is_some());

    lock.release().await.expect("released");
    store
        .append_message("c", Direction::Inbound, &json!({ "n": 1 }))
        .await
        .expect("written once the lock is gone");
}

#[tokio::test]
async fn an_unreachable_postgres_server_is_unavailable() {
    let options = StoreOptions {
        acquire_timeout: Duration::from_secs(1),
        ..options()
    };
    // Port 1 on loopback: nothing listens there, the connection is refused.
    let err = connect("postgres://postgres@127.0.0.1:1/test", options)
        .await
        .expect_err("nothing listens on port 1");
    assert!(err.is_transient(), "{err:?}");
}

/// What the chapters wrote, to be found again after a restart.
struct Written {
    conversation: Conversation,
    log: Vec<LoggedMessage>,
    upload: Upload,
    protocol: Protocol,
    agreements: Vec<Agreement>,
    negotiation: NegotiationRecord,
    active_handler: HandlerRecord,
    usage: ProtocolUsage,
}

fn options() -> StoreOptions {
    StoreOptions {
        max_connections: 4,
        ..StoreOptions::default()
    }
}

async fn story(url: &str, backend: &str) {
    let store = connect(url, options()).await.expect("connect and migrate");
    assert_eq!(store.backend_name(), backend);
    store
        .check_writable()
        .await
        .expect("the database takes writes");

    let (conversation, log) = conversations(store.as_ref()).await;
    let upload = uploads(store.as_ref()).await;
    let (protocol, agreements) = protocols_and_agreements(store.as_ref()).await;
    let negotiation = negotiations(store.as_ref(), &conversation.id, &protocol.hash).await;
    let active_handler = handlers(store.as_ref(), &protocol.hash).await;
    let usage = usage(store.as_ref(), &protocol.hash).await;
    concurrency(&store, &protocol.hash).await;
    let written = Written {
        conversation: store
            .get_conversation(&conversation.id)
            .await
            .expect("get")
            .expect("conversation exists"),
        log,
        upload,
        protocol,
        agreements,
        negotiation,
        active_handler,
        usage,
    };

    // Restart: drop every handle, reconnect (migrations run again and must be no-ops), re-read.
    drop(store);
    let store = connect(url, options()).await.expect("reconnect");
    survives_restart(store.as_ref(), &written).await;
}

async fn conversations(store: &dyn Store) -> (Conversation, Vec<LoggedMessage>) {
    let id = format!("conv-{}", Uuid::new_v4());
    let created = store
        .create_conversation(NewConversation {
            id: id.clone(),
            peer: Some("127.0.0.1:40000".into()),
            state: json!({ "turn": 0 }),
        })
        .await
        .expect("create conversation");
    assert_eq!(created.id, id);
    assert_eq!(created.version, 0);
    assert_eq!(created.message_count, 0);
    assert_eq!(created.state, json!({ "turn": 0 }));
    assert_eq!(created.created_at, created.updated_at);

    let again = store
        .create_conversation(NewConversation {
            id: id.clone(),
            peer: None,
            state: json!({}),
        })
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    assert_eq!(
        store.get_conversation(&id).await.expect("get"),
        Some(created.clone()),
        "a read returns exactly what create returned"
    );
    assert_eq!(store.get_conversation("no-such").await.expect("get"), None);

    // Optimistic concurrency: the right version wins, a stale one conflicts and changes nothing.
    let v1 = store
        .update_conversation_state(&id, 0, &json!({ "turn": 1 }))
        .await
        .expect("update at version 0");
    assert_eq!(v1, 1);
    let stale = store
        .update_conversation_state(&id, 0, &json!({ "turn": 99 }))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { .. })),
        "{stale:?}"
    );
    let missing = store
        .update_conversation_state("no-such", 0, &json!({}))
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound { .. })),
        "{missing:?}"
    );
    let current = store
        .get_conversation(&id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        (current.version, &current.state),
        (1, &json!({ "turn": 1 }))
    );

    let touched = store.touch_conversation(&id).await.expect("touch");
    assert!(touched >= current.updated_at);
    assert!(matches!(
        store.touch_conversation("no-such").await,
        Err(StoreError::NotFound { .. })
    ));

    conversation_log(store, &id, touched).await
}

/// The log of conversation `id`: appends, refusals and paging. Returns the conversation after them,
/// and its log.
async fn conversation_log(
    store: &dyn Store,
    id: &str,
    touched: chrono::DateTime<chrono::Utc>,
) -> (Conversation, Vec<LoggedMessage>) {
    // The log: sequence numbers 1.. in append order, directions and bodies kept.
    let mut appended = Vec::new();
    for i in 0..7 {
        let direction = if i % 2 == 0 {
            Direction::Inbound
        } else {
            Direction::Outbound
        };
        let message = json!({
            "messagetype": "data",
            "format": "text",
            "content": format!("message {i}"),
            "submessages": [{ "format": "token", "subformat": "conversation", "content": id }],
        });
        let logged = store
            .append_message(id, direction, &message)
            .await
            .expect("append");
        assert_eq!(logged.seq, i + 1);
        assert_eq!(logged.direction, direction);
        assert_eq!(logged.message, message);
        appended.push(logged);
    }
    let appended_missing = store
        .append_message("no-such", Direction::Inbound, &json!({}))
        .await;
    assert!(matches!(appended_missing, Err(StoreError::NotFound { .. })));

    // Peers choose message contents and tokens; what one backend could not store is refused on
    // both, and a key no row can have is simply absent.
    let nul = store
        .append_message(id, Direction::Inbound, &json!({ "content": "a\u{0}b" }))
        .await;
    assert!(matches!(nul, Err(StoreError::Invalid(_))), "{nul:?}");
    assert_eq!(store.get_conversation("a\u{0}b").await.expect("get"), None);
    assert!(matches!(
        store
            .append_message("a\u{0}b", Direction::Inbound, &json!({}))
            .await,
        Err(StoreError::NotFound { .. })
    ));

    let all = store.list_messages(id, 0, 100).await.expect("list");
    assert_eq!(all, appended, "the log reads back in order, unchanged");
    // Paging: after a seq, with a limit.
    let page = store.list_messages(id, 2, 3).await.expect("page");
    assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), [3, 4, 5]);
    let tail = store.list_messages(id, 5, 100).await.expect("tail");
    assert_eq!(tail.iter().map(|m| m.seq).collect::<Vec<_>>(), [6, 7]);
    assert!(
        store
            .list_messages(id, 7, 100)
            .await
            .expect("empty page")
            .is_empty()
    );
    assert!(matches!(
        store.list_messages("no-such", 0, 10).await,
        Err(StoreError::NotFound { .. })
    ));

    let after = store
        .get_conversation(id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(after.message_count, 7);
    assert!(after.updated_at >= touched, "appending marks activity");
    (after, all)
}

async fn uploads(store: &dyn Store) -> Upload {
    let bytes = b"%PDF-1.7 pretend this is a document\x00\xff".to_vec();
    let meta = store
        .put_upload(&bytes, "application/pdf", Some("report.pdf"))
        .await
        .expect("put upload");
    assert_eq!(
        meta.id,
        sha256_hex(&bytes),
        "the id is the SHA-256 of the bytes"
    );
    assert_eq!(meta.size, i64::try_from(bytes.len()).expect("small"));
    assert_eq!(meta.filename.as_deref(), Some("report.pdf"));

    // Idempotent: the same bytes again are the same upload, first metadata kept, no error.
    let again = store
        .put_upload(&bytes, "application/octet-stream", None)
        .await
        .expect("put the same bytes again");
    assert_eq!(again, meta);

    let upload = store
        .get_upload(&meta.id)
        .await
        .expect("get upload")
        .expect("stored");
    assert_eq!(upload.meta, meta);
    assert_eq!(upload.bytes, bytes);
    assert_eq!(store.upload_meta(&meta.id).await.expect("meta"), Some(meta));

    let empty = store
        .put_upload(b"", "text/plain", None)
        .await
        .expect("empty upload");
    assert_eq!(empty.size, 0);
    assert_eq!(
        store
            .get_upload(&sha256_hex(b"never uploaded"))
            .await
            .expect("get"),
        None
    );
    assert!(matches!(
        store.get_upload("../../etc/passwd").await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.put_upload(b"x", "", None).await,
        Err(StoreError::Invalid(_))
    ));
    upload
}

async fn protocols_and_agreements(store: &dyn Store) -> (Protocol, Vec<Agreement>) {
    let text = "# Requirements\nLook up a city's weather.\n\n# Data Format\n```json\n{}\n```\n";
    let protocol = store.put_protocol(text).await.expect("put protocol");
    assert_eq!(protocol.hash, sha256_hex(text.as_bytes()));
    assert_eq!(protocol.text, text);
    assert_eq!(
        store.put_protocol(text).await.expect("idempotent"),
        protocol
    );
    // One byte different is another protocol.
    let other = store
        .put_protocol(&format!("{text} "))
        .await
        .expect("put other");
    assert_ne!(other.hash, protocol.hash);
    assert_eq!(
        store.get_protocol(&protocol.hash).await.expect("get"),
        Some(protocol.clone())
    );
    assert_eq!(
        store.get_protocol(&sha256_hex(b"?")).await.expect("get"),
        None
    );

    let users = agreements(store, &protocol, &other).await;
    (protocol, users)
}

/// Who agreed `protocol` and `other`, and in which role. Returns everyone who agreed `protocol`.
async fn agreements(store: &dyn Store, protocol: &Protocol, other: &Protocol) -> Vec<Agreement> {
    let requester_side = store
        .record_agreement(agreement(
            "did:example:weather",
            Some("https://weather.example/nlip"),
            &protocol.hash,
            Role::Requester,
        ))
        .await
        .expect("agree as requester");
    assert_eq!(requester_side.agreed_at, requester_side.last_agreed_at);
    // Renewal without a URL keeps the known URL and the first agreement time.
    let renewed = store
        .record_agreement(agreement(
            "did:example:weather",
            None,
            &protocol.hash,
            Role::Requester,
        ))
        .await
        .expect("renew");
    assert_eq!(renewed.peer_url, requester_side.peer_url);
    assert_eq!(renewed.agreed_at, requester_side.agreed_at);
    assert!(renewed.last_agreed_at >= requester_side.last_agreed_at);
    store
        .record_agreement(agreement(
            "did:example:weather",
            None,
            &other.hash,
            Role::Requester,
        ))
        .await
        .expect("second protocol with the same peer");
    store
        .record_agreement(agreement(
            "did:example:client",
            None,
            &protocol.hash,
            Role::Provider,
        ))
        .await
        .expect("agree as provider");
    let unknown = store
        .record_agreement(agreement(
            "p",
            None,
            &sha256_hex(b"never stored"),
            Role::Provider,
        ))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::NotFound { .. })),
        "{unknown:?}"
    );
    agreement_listings(store, protocol, other).await
}

/// The agreements recorded, listed by peer and role, by protocol, and all of them. Returns
/// everyone who agreed `protocol`.
async fn agreement_listings(
    store: &dyn Store,
    protocol: &Protocol,
    other: &Protocol,
) -> Vec<Agreement> {
    let with_peer = store
        .agreements_with_peer("did:example:weather", Role::Requester)
        .await
        .expect("list by peer");
    assert_eq!(
        with_peer
            .iter()
            .map(|a| &a.protocol_hash)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([&protocol.hash, &other.hash])
    );
    assert!(
        store
            .agreements_with_peer("did:example:weather", Role::Provider)
            .await
            .expect("list by peer")
            .is_empty()
    );
    let users = store
        .agreements_for_protocol(&protocol.hash)
        .await
        .expect("list by hash");
    assert_eq!(
        users
            .iter()
            .map(|a| (a.peer.as_str(), a.role))
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([
            ("did:example:client", Role::Provider),
            ("did:example:weather", Role::Requester)
        ])
    );
    let all = store.list_agreements(10).await.expect("list all");
    for user in &users {
        assert!(
            all.contains(user),
            "every agreement, across peers and roles"
        );
    }
    assert_eq!(store.list_agreements(1).await.expect("limited").len(), 1);
    users
}

async fn negotiations(store: &dyn Store, conversation_id: &str, hash: &str) -> NegotiationRecord {
    let started = store
        .start_negotiation(NewNegotiation {
            conversation_id: conversation_id.into(),
            role: Role::Provider,
            peer: "did:example:client".into(),
        })
        .await
        .expect("start");
    assert_eq!(started.status, NegotiationStatus::Negotiating);
    assert_eq!((started.rounds, started.message_count), (0, 0));
    assert_eq!(started.ended_at, None);
    let orphan = store
        .start_negotiation(NewNegotiation {
            conversation_id: "no-such".into(),
            role: Role::Provider,
            peer: "x".into(),
        })
        .await;
    assert!(
        matches!(orphan, Err(StoreError::NotFound { .. })),
        "{orphan:?}"
    );

    let proposal =
        json!({ "action": "protocolNegotiation", "sequenceId": 0, "status": "negotiating" });
    let answer = json!({ "action": "protocolNegotiation", "sequenceId": 1, "status": "accepted" });
    let first = store
        .append_transcript(started.id, Direction::Inbound, &proposal)
        .await
        .expect("append transcript");
    let second = store
        .append_transcript(started.id, Direction::Outbound, &answer)
        .await
        .expect("append transcript");
    assert_eq!((first.seq, second.seq), (1, 2));
    assert!(matches!(
        store
            .append_transcript(Uuid::new_v4(), Direction::Inbound, &proposal)
            .await,
        Err(StoreError::NotFound { .. })
    ));

    negotiation_outcomes(
        store,
        conversation_id,
        started.id,
        hash,
        vec![first, second],
    )
    .await
}

/// How negotiation `id`, whose transcript is `transcript`, ends (once), and another ending.
/// Returns its record.
async fn negotiation_outcomes(
    store: &dyn Store,
    conversation_id: &str,
    id: Uuid,
    hash: &str,
    transcript: Vec<LoggedMessage>,
) -> NegotiationRecord {
    refused_endings(store, id).await;

    let finished = store
        .finish_negotiation(
            id,
            outcome(NegotiationStatus::Accepted, Some(hash), 1, None),
        )
        .await
        .expect("finish");
    assert_eq!(finished.status, NegotiationStatus::Accepted);
    assert_eq!(finished.protocol_hash.as_deref(), Some(hash));
    assert_eq!((finished.rounds, finished.message_count), (1, 2));
    assert!(
        finished
            .ended_at
            .is_some_and(|end| end >= finished.started_at)
    );
    let twice = store
        .finish_negotiation(
            id,
            outcome(NegotiationStatus::Rejected, None, 2, Some("late")),
        )
        .await;
    assert!(
        matches!(twice, Err(StoreError::Conflict { .. })),
        "{twice:?}"
    );
    assert!(matches!(
        store
            .finish_negotiation(
                Uuid::new_v4(),
                outcome(NegotiationStatus::Failed, None, 0, None),
            )
            .await,
        Err(StoreError::NotFound { .. })
    ));

    a_timeout_ending(store, conversation_id).await;

    let record = store
        .get_negotiation(id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.negotiation, finished);
    assert_eq!(record.transcript, transcript);
    assert_eq!(
        store.get_negotiation(Uuid::new_v4()).await.expect("get"),
        None
    );

    let by_hash = store
        .negotiations_for_protocol(hash)
        .await
        .expect("list by hash");
    assert_eq!(by_hash, vec![finished]);
    record
}

/// Endings refused before anything is written: acceptance without a protocol, or naming one
/// never stored.
async fn refused_endings(store: &dyn Store, id: Uuid) {
    let no_hash = store
        .finish_negotiation(id, outcome(NegotiationStatus::Accepted, None, 1, None))
        .await;
    assert!(
        matches!(no_hash, Err(StoreError::Invalid(_))),
        "{no_hash:?}"
    );
    let unknown_hash = store
        .finish_negotiation(
            id,
            outcome(
                NegotiationStatus::Accepted,
                Some(&sha256_hex(b"never stored")),
                1,
                None,
            ),
        )
        .await;
    assert!(
        matches!(unknown_hash, Err(StoreError::NotFound { .. })),
        "{unknown_hash:?}"
    );
}

/// Every spec-legal ending can be recorded, e.g. a timeout with a reason and no protocol.
async fn a_timeout_ending(store: &dyn Store, conversation_id: &str) {
    let timed_out = store
        .start_negotiation(NewNegotiation {
            conversation_id: conversation_id.into(),
            role: Role::Requester,
            peer: "did:example:slow".into(),
        })
        .await
        .expect("start");
    let timed_out = store
        .finish_negotiation(
            timed_out.id,
            outcome(NegotiationStatus::Timeout, None, 3, Some("peer_timeout")),
        )
        .await
        .expect("finish as timeout");
    assert_eq!(timed_out.reason.as_deref(), Some("peer_timeout"));
}

/// An agreement with `peer` on protocol `hash`, we in `role`.
fn agreement(peer: &str, url: Option<&str>, hash: &str, role: Role) -> NewAgreement {
    NewAgreement {
        peer: peer.into(),
        peer_url: url.map(str::to_owned),
        protocol_hash: hash.into(),
        role,
    }
}

/// A negotiation's ending.
fn outcome(
    status: NegotiationStatus,
    protocol_hash: Option<&str>,
    rounds: i64,
    reason: Option<&str>,
) -> NegotiationOutcome {
    NegotiationOutcome {
        status,
        protocol_hash: protocol_hash.map(str::to_owned),
        rounds,
        reason: reason.map(str::to_owned),
    }
}

fn new_handler(hash: &str, source: &str) -> NewHandler {
    NewHandler {
        protocol_hash: hash.into(),
        source: source.into(),
        backend: "builtin".into(),
        capabilities: vec!["weather.lookup".into()],
    }
}

async fn handlers(store: &dyn Store, hash: &str) -> HandlerRecord {
    assert_eq!(store.active_handler(hash).await.expect("active"), None);
    assert_eq!(
        active_protocols(store).await,
        Vec::<String>::new(),
        "no protocol is served before a handler is active"
    );
    let first = store
        .insert_handler_candidate(new_handler(hash, "function handle(r) { return 1; }"))
        .await
        .expect("insert candidate");
    assert_eq!(first.state, HandlerState::Candidate);
    assert_eq!(first.source_sha256, sha256_hex(first.source.as_bytes()));
    assert_eq!(first.capabilities, ["weather.lookup"]);
    assert_eq!(
        (first.verification_passed, first.verification.as_ref()),
        (None, None)
    );
    assert!(matches!(
        store
            .insert_handler_candidate(new_handler(&sha256_hex(b"never stored"), "x"))
            .await,
        Err(StoreError::NotFound { .. })
    ));

    // Unverified code never becomes active, nor takes a compiled form.
    let unverified = store.activate_handler(first.id).await;
    assert!(
        matches!(unverified, Err(StoreError::Conflict { .. })),
        "{unverified:?}"
    );
    assert_eq!(first.compiled, None);
    // Keys out of sorted order, nested too: they must come back in this order.
    let mapping = json!({
        "entity": "Städte ✓",
        "capability": "weather.lookup",
        "response": [{ "value": { "z": 1, "a": [true, { "y": null, "b": 2.5 }] } }]
    });
    assert!(matches!(
        store.attach_compiled(first.id, &mapping).await,
        Err(StoreError::Conflict { .. })
    ));

    let report = json!({ "cases": 3, "passed": 3 });
    let first = verify_and_activate(store, hash, first, &mapping, &report).await;
    assert_eq!(active_protocols(store).await, [hash]);
    let active = failures_and_rollback(store, hash, first, &mapping, &report).await;
    // A protocol with a retired handler and an active one is served once.
    assert_eq!(active_protocols(store).await, [hash]);
    let listed = store.active_protocols(1).await.expect("active protocols");
    assert!(listed[0].text.contains("weather"), "{:?}", listed[0]);
    active
}

/// The hashes of the protocols with an active handler.
async fn active_protocols(store: &dyn Store) -> Vec<String> {
    let listed = store.active_protocols(10).await.expect("active protocols");
    listed.into_iter().map(|p| p.hash).collect()
}

/// A verified candidate takes its compiled form and becomes active. Returns it, active.
async fn verify_and_activate(
    store: &dyn Store,
    hash: &str,
    first: HandlerRecord,
    mapping: &Value,
    report: &Value,
) -> HandlerRecord {
    let verified = store
        .record_handler_verification(first.id, true, report)
        .await
        .expect("verify");
    assert_eq!(verified.state, HandlerState::Candidate);
    assert_eq!(verified.verification_passed, Some(true));
    assert_eq!(verified.verification, Some(report.clone()));
    assert_eq!(verified.compiled, None);
    // A verified candidate takes its compiled form; activation keeps it.
    let attached = store
        .attach_compiled(first.id, mapping)
        .await
        .expect("attach the compiled form");
    assert_eq!(attached.compiled.as_ref(), Some(mapping));
    assert_eq!(
        attached.compiled.as_ref().map(Value::to_string),
        Some(mapping.to_string()),
        "the same text: keys in the same order"
    );
    assert_eq!(
        store.get_handler(first.id).await.expect("get"),
        Some(attached.clone())
    );
    for not_an_object in [json!([1]), json!("mapping"), Value::Null] {
        assert!(matches!(
            store.attach_compiled(first.id, &not_an_object).await,
            Err(StoreError::Invalid(_))
        ));
    }
    assert!(matches!(
        store.attach_compiled(Uuid::new_v4(), mapping).await,
        Err(StoreError::NotFound { .. })
    ));
    let first = store.activate_handler(first.id).await.expect("activate");
    assert_eq!(first.compiled.as_ref(), Some(mapping));
    assert_eq!(
        store.active_handler(hash).await.expect("active"),
        Some(first.clone())
    );
    assert_eq!(first.state, HandlerState::Active);
    assert!(first.activated_at.is_some());
    assert_eq!(
        store
            .activate_handler(first.id)
            .await
            .expect("re-activate is a no-op"),
        first
    );
    assert!(matches!(
        store
            .record_handler_verification(first.id, false, report)
            .await,
        Err(StoreError::Conflict { .. })
    ));

    first
}

/// A failing candidate, a second handler retiring the active `first`, and a rollback. Returns the
/// handler active at the end (`first` again).
async fn failures_and_rollback(
    store: &dyn Store,
    hash: &str,
    first: HandlerRecord,
    mapping: &Value,
    report: &Value,
) -> HandlerRecord {
    // A failing candidate is marked failed and can never be activated.
    let broken = store
        .insert_handler_candidate(new_handler(hash, "function handle( {"))
        .await
        .expect("insert");
    let broken = store
        .record_handler_verification(broken.id, false, &json!({ "error": "SyntaxError" }))
        .await
        .expect("record failure");
    assert_eq!(broken.state, HandlerState::Failed);
    assert!(matches!(
        store.activate_handler(broken.id).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        store.attach_compiled(broken.id, mapping).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        store
            .get_handler(broken.id)
            .await
            .expect("get")
            .and_then(|h| h.compiled),
        None,
        "a refused attach changes nothing"
    );

    // Activating a second verified handler retires the first: one active handler per protocol.
    let second = store
        .insert_handler_candidate(new_handler(hash, "function handle(r) { return 2; }"))
        .await
        .expect("insert");
    store
        .record_handler_verification(second.id, true, report)
        .await
        .expect("verify");
    let second = store.activate_handler(second.id).await.expect("activate");
    assert_eq!(
        store.active_handler(hash).await.expect("active"),
        Some(second.clone())
    );
    let first = store
        .get_handler(first.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(first.state, HandlerState::Retired);
    assert!(first.retired_at.is_some());

    // Rolling back re-activates the retired one and retires the second.
    let first = store.activate_handler(first.id).await.expect("roll back");
    assert_eq!(first.state, HandlerState::Active);
    assert_eq!(first.retired_at, None);
    assert_eq!(
        store
            .get_handler(second.id)
            .await
            .expect("get")
            .map(|h| h.state),
        Some(HandlerState::Retired)
    );
    assert_eq!(
        store.active_handler(hash).await.expect("active"),
        Some(first.clone())
    );

    assert_eq!(store.get_handler(Uuid::new_v4()).await.expect("get"), None);
    assert!(matches!(
        store.activate_handler(Uuid::new_v4()).await,
        Err(StoreError::NotFound { .. })
    ));
    first
}

async fn usage(store: &dyn Store, hash: &str) -> ProtocolUsage {
    assert_eq!(
        store
            .usage("did:example:client", hash)
            .await
            .expect("usage"),
        None
    );
    let first = store
        .record_usage("did:example:client", hash, 1, 0)
        .await
        .expect("record");
    assert_eq!(
        (first.ok_count, first.error_count, first.calls()),
        (1, 0, 1)
    );
    store
        .record_usage("did:example:client", hash, 1, 0)
        .await
        .expect("record");
    let last = store
        .record_usage("did:example:client", hash, 0, 1)
        .await
        .expect("record");
    assert_eq!((last.ok_count, last.error_count, last.calls()), (2, 1, 3));
    assert_eq!(last.first_used_at, first.first_used_at);
    assert!(last.last_used_at >= first.last_used_at);
    // Batched counts add up in one upsert.
    let batched = store
        .record_usage("did:example:client", hash, 5, 2)
        .await
        .expect("record batch");
    assert_eq!((batched.ok_count, batched.error_count), (7, 3));
    // Counters are per peer.
    let other = store
        .record_usage("did:example:other", hash, 0, 1)
        .await
        .expect("record");
    assert_eq!(other.calls(), 1);
    assert!(matches!(
        store
            .record_usage("p", &sha256_hex(b"never stored"), 1, 0)
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store
            .usage("did:example:client", hash)
            .await
            .expect("usage"),
        Some(batched.clone())
    );
    batched
}

/// Races through separate pooled connections: what the transactions and constraints promise must
/// hold when callers overlap.
async fn concurrency(store: &Arc<dyn Store>, hash: &str) {
    const PER_TASK: i64 = 25;
    let id = format!("race-{}", Uuid::new_v4());
    store
        .create_conversation(NewConversation {
            id: id.clone(),
            peer: None,
            state: json!({}),
        })
        .await
        .expect("create");

    // Two tasks appending to one conversation get distinct, consecutive sequence numbers.
    let appender = |direction: Direction| {
        let store = Arc::clone(store);
        let id = id.clone();
        tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..PER_TASK {
                let logged = store
                    .append_message(&id, direction, &json!({ "n": i }))
                    .await
                    .expect("concurrent append");
                seqs.push(logged.seq);
            }
            seqs
        })
    };
    let (a, b) = tokio::join!(appender(Direction::Inbound), appender(Direction::Outbound));
    let (a, b) = (a.expect("task a"), b.expect("task b"));
    assert!(
        a.windows(2).all(|w| w[0] < w[1]),
        "a task sees its own appends in order"
    );
    assert!(
        b.windows(2).all(|w| w[0] < w[1]),
        "a task sees its own appends in order"
    );
    let all: BTreeSet<i64> = a.iter().chain(&b).copied().collect();
    assert_eq!(all, (1..=2 * PER_TASK).collect(), "distinct and gap-free");
    let log = store.list_messages(&id, 0, 1000).await.expect("list");
    assert_eq!(
        log.iter().map(|m| m.seq).collect::<Vec<_>>(),
        (1..=2 * PER_TASK).collect::<Vec<_>>()
    );
    let conversation = store
        .get_conversation(&id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(conversation.message_count, 2 * PER_TASK);

    // Two writers holding the same version: exactly one wins.
    let writer = |n: i64| {
        let store = Arc::clone(store);
        let id = id.clone();
        tokio::spawn(async move {
            store
                .update_conversation_state(&id, 0, &json!({ "writer": n }))
                .await
        })
    };
    let (x, y) = tokio::join!(writer(1), writer(2));
    let outcomes = [x.expect("task"), y.expect("task")];
    assert_eq!(
        outcomes.iter().filter(|r| matches!(r, Ok(1))).count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Conflict { .. })))
            .count(),
        1,
        "{outcomes:?}"
    );

    concurrent_uploads_and_activations(store, hash).await;
}

/// Uploads and handler activations racing each other.
async fn concurrent_uploads_and_activations(store: &Arc<dyn Store>, hash: &str) {
    // The same bytes uploaded twice at once: both succeed with one id.
    let bytes = Uuid::new_v4().as_bytes().repeat(64);
    let uploader = || {
        let store = Arc::clone(store);
        let bytes = bytes.clone();
        tokio::spawn(async move {
            store
                .put_upload(&bytes, "application/octet-stream", None)
                .await
        })
    };
    let (u, v) = tokio::join!(uploader(), uploader());
    let (u, v) = (
        u.expect("task").expect("upload"),
        v.expect("task").expect("upload"),
    );
    assert_eq!(u.id, v.id);

    // Two verified handlers activated at once: afterwards exactly one is active.
    let mut racers = Vec::new();
    for n in 0..2 {
        let handler = store
            .insert_handler_candidate(new_handler(
                hash,
                &format!("function handle() {{ return {n}; }}"),
            ))
            .await
            .expect("insert");
        store
            .record_handler_verification(handler.id, true, &json!({ "passed": true }))
            .await
            .expect("verify");
        racers.push(handler.id);
    }
    let activate = |id: Uuid| {
        let store = Arc::clone(store);
        tokio::spawn(async move { store.activate_handler(id).await })
    };
    let (p, q) = tokio::join!(activate(racers[0]), activate(racers[1]));
    for outcome in [p.expect("task"), q.expect("task")] {
        assert!(
            matches!(outcome, Ok(_) | Err(StoreError::Conflict { .. })),
            "{outcome:?}"
        );
    }
    let active = store
        .active_handler(hash)
        .await
        .expect("active")
        .expect("one handler is active");
    assert!(racers.contains(&active.id));
    let states: Vec<HandlerState> = handler_states(store, &racers).await;
    assert_eq!(
        states
            .iter()
            .filter(|s| **s == HandlerState::Active)
            .count(),
        1,
        "{states:?}"
    );

    // Leave the story's chosen handler active for the restart chapter.
}

async fn handler_states(store: &Arc<dyn Store>, ids: &[Uuid]) -> Vec<HandlerState> {
    let mut states = Vec::new();
    for id in ids {
        let handler = store.get_handler(*id).await.expect("get").expect("exists");
        states.push(handler.state);
    }
    states
}

async fn survives_restart(store: &dyn Store, written: &Written) {
    let conversation = &written.conversation;
    assert_eq!(
        store
            .get_conversation(&conversation.id)
            .await
            .expect("get")
            .as_ref(),
        Some(conversation)
    );
    assert_eq!(
        store
            .list_messages(&conversation.id, 0, 1000)
            .await
            .expect("list"),
        written.log
    );
    assert_eq!(
        store
            .get_upload(&written.upload.meta.id)
            .await
            .expect("get")
            .as_ref(),
        Some(&written.upload)
    );
    assert_eq!(
        store
            .get_protocol(&written.protocol.hash)
            .await
            .expect("get")
            .as_ref(),
        Some(&written.protocol)
    );
    assert_eq!(
        store
            .agreements_for_protocol(&written.protocol.hash)
            .await
            .expect("list"),
        written.agreements
    );
    assert_eq!(
        store
            .get_negotiation(written.negotiation.negotiation.id)
            .await
            .expect("get")
            .as_ref(),
        Some(&written.negotiation)
    );
    // The concurrency chapter changed which handler is active; the one recorded is still stored
    // exactly as it was apart from its state.
    let handler = store
        .get_handler(written.active_handler.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(handler.source, written.active_handler.source);
    assert_eq!(
        handler.compiled.as_ref().map(Value::to_string),
        written
            .active_handler
            .compiled
            .as_ref()
            .map(Value::to_string)
    );
    assert!(handler.compiled.is_some(), "the compiled form survives too");
    assert_eq!(handler.activated_at, written.active_handler.activated_at);
    assert!(
        store
            .active_handler(&written.protocol.hash)
            .await
            .expect("active")
            .is_some(),
        "an active handler survives the restart"
    );
    assert_eq!(
        store
            .usage(&written.usage.peer, &written.usage.protocol_hash)
            .await
            .expect("usage")
            .as_ref(),
        Some(&written.usage)
    );
}
