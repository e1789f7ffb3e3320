//! The audit log: who did what, when, and how it went, kept in the store
//! (`Store::append_audit`) and read with `parley audit`.
//!
//! # What is recorded
//!
//! | action | subject | outcome | written |
//! | --- | --- | --- | --- |
//! | `negotiation.start` | the negotiation's id | `ok` | before the turn is answered |
//! | `negotiation.end` | the negotiation's id | `accepted`, `rejected`, `failed`, `timeout` | before the turn is answered |
//! | `handler.activate` | the protocol's hash | `ok` | before the turn is answered |
//! | `handler.fix` | the protocol's hash | `accepted` (a new handler version is active), `rejected` | before the report is answered |
//! | `authenticate` | the scheme (`bearer`, `jwt`, `mtls`, `did:wba`) | `failed` | before the refusal is answered |
//! | what was refused (`negotiate`, `talk`, `capability.call`, `protocol.call`) | what it named | `refused` | before the refusal is answered |
//! | `capability.call` | the capability's name | `ok`, or the failure's code | in batches |
//!
//! A negotiation a crash cut short in the middle of a turn has its start and no end here: the
//! next server ends it (`Store::fail_interrupted_negotiations`, reason `interrupted`) in the
//! negotiations' own record.
//!
//! Each event names its [`Actor`]: the authenticated peer's id, when a credential named one, and
//! the address the request came from. The detail (JSON) says what else explains it: the
//! conversation, the protocol agreed, the reason, a call's duration.
//!
//! # Synchronous and batched
//!
//! **Decisions** (a negotiation started or ended, a handler activated, an authentication failed,
//! something refused) are written before the answer that reports them leaves ([`Audit::record`]):
//! a decision a peer was told of is in the log, also after a crash. They are few, and each
//! already costs database writes of its own.
//!
//! **Capability calls** are the hot path: a protocol handler's `host.call` costs about 30 µs in
//! all, a database write a hundred times that. They are queued in memory, in a buffer of at most
//! `[audit] buffer_events`, and written together in one transaction every `[audit]
//! flush_interval_ms` and at shutdown (as `negotiation/provider/usage.rs` writes usage counts).
//! The price: a crash loses the calls of the last interval, and a call that finds the buffer
//! full (the database slower than the calls for long) is not recorded, only counted
//! (`parley_audit_dropped_total`).
//!
//! # Failures
//!
//! Writing the audit log never fails a peer's request. A write that fails is logged and
//! counted (`parley_audit_write_failures_total{kind}`, `kind` = `decision` or `batch`); a
//! decision that could not be written joins the buffer, and a batch the database could not take
//! for a reason that may pass (unreachable, busy, locked) is kept for the next write, both within
//! the buffer's bound.
//!
//! # Who
//!
//! The transports run each request's work for its caller (`crate::access::scoped`:
//! `Agent::handle`, `/anp` frames, `/anp/rpc`, `/mcp` calls, a handler's `host.call`); whatever
//! runs there reads the actor, the caller's peer id and address, with [`current_actor`], so a
//! capability call made on a peer's behalf (a tool call, a handler's `host.call`, the reasoner's
//! calls) is recorded as the peer's. `parley-capabilities` knows nothing of peers: it tells the
//! observer [`Audit::observe`] installs of every call, on the caller's task.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_capabilities::{Capabilities, Invocation, InvokeObserver};
use parley_store::{MAX_AUDIT_TEXT, NewAuditEvent, Store};
use serde_json::{Value, json};

use crate::config::AuditSettings;
use crate::metrics;

/// Who an event is about: the peer a credential proved, and the address the request came from.
/// Either may be unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actor {
    /// The authenticated peer's id; `None` while the peer is known by its address only.
    pub peer: Option<String>,
    /// The IP address the request came from (an IPv4-mapped IPv6 address as its IPv4 address).
    pub address: Option<String>,
}

impl Actor {
    /// A request's caller: its authenticated peer's id, if any, and its address.
    pub fn of(caller: &crate::peer::Caller) -> Actor {
        Actor {
            peer: caller.principal.id.clone(),
            address: Some(caller.addr.ip().to_canonical().to_string()),
        }
    }

    /// A peer known by its address only.
    pub fn at(address: SocketAddr) -> Actor {
        Actor {
            peer: None,
            address: Some(address.ip().to_canonical().to_string()),
        }
    }

    /// The actor of the work running now ([`current_actor`]), or else the one `peer` names (a
    /// socket address, an IP address, or an id as the provider records its peers).
    pub fn current_or(peer: &str) -> Actor {
        if let Some(actor) = current_actor() {
            return actor;
        }
        let ip = peer
            .parse::<SocketAddr>()
            .map(|s| s.ip())
            .or_else(|_| peer.parse::<IpAddr>());
        match ip {
            Ok(ip) => Actor {
                peer: None,
                address: Some(ip.to_canonical().to_string()),
            },
            Err(_) => Actor {
                peer: Some(peer.to_owned()),
                address: None,
            },
        }
    }
}

/// The actor of the work running now: the caller of the request it serves
/// ([`crate::access::current`]), if it serves one.
pub fn current_actor() -> Option<Actor> {
    crate::access::current().map(|caller| Actor::of(&caller))
}

/// The audit log's writer; cheap to clone, every clone writes the same log.
#[derive(Debug, Clone)]
pub struct Audit {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn Store>,
    /// Events waiting for the next batch, at most `capacity`.
    pending: Mutex<Vec<NewAuditEvent>>,
    capacity: usize,
    flush_interval: Duration,
    /// How long an event is kept (`audit.retention_days`); `None`: for ever.
    retention: Option<Duration>,
}

impl Audit {
    pub fn new(store: Arc<dyn Store>, settings: &AuditSettings) -> Audit {
        Audit {
            inner: Arc::new(Inner {
                store,
                pending: Mutex::new(Vec::new()),
                capacity: settings.buffer_events,
                flush_interval: Duration::from_millis(settings.flush_interval_ms),
                retention: settings.retention(),
            }),
        }
    }

    // --- what the server records ---------------------------------------------------------------

    /// `actor` was refused `action` on `subject` (a capability's name, a protocol's hash, the
    /// conversation): the authorization check's one line. Written before it returns.
    pub async fn refused(&self, actor: &Actor, action: &str, subject: &str, reason: &str) {
        let detail = json!({ "reason": clean(reason) });
        self.record(event(actor, action, subject, "refused", Some(detail)))
            .await;
    }

    /// `actor` presented a credential of `scheme` that did not prove who it is: the
    /// authentication check's one line. Written before it returns.
    pub async fn authentication_failed(&self, actor: &Actor, scheme: &str, reason: &str) {
        let detail = json!({ "reason": clean(reason) });
        self.record(event(actor, "authenticate", scheme, "failed", Some(detail)))
            .await;
    }

    /// A negotiation started in `conversation`. Written before it returns.
    pub async fn negotiation_started(&self, actor: &Actor, id: uuid::Uuid, conversation: &str) {
        let detail = json!({ "conversation": conversation });
        let subject = id.to_string();
        self.record(event(
            actor,
            "negotiation.start",
            &subject,
            "ok",
            Some(detail),
        ))
        .await;
    }

    /// A negotiation ended as `record` says. Written before it returns.
    pub async fn negotiation_ended(&self, actor: &Actor, record: &parley_store::Negotiation) {
        let detail = json!({
            "conversation": record.conversation_id,
            "protocol": record.protocol_hash,
            "reason": record.reason,
            "rounds": record.rounds,
        });
        let (subject, outcome) = (record.id.to_string(), record.status.as_str());
        self.record(event(
            actor,
            "negotiation.end",
            &subject,
            outcome,
            Some(detail),
        ))
        .await;
    }

    /// Handler `handler` became the active handler of protocol `hash` at the end of
    /// `negotiation`. Written before it returns.
    pub async fn handler_activated(
        &self,
        actor: &Actor,
        hash: &str,
        handler: uuid::Uuid,
        negotiation: uuid::Uuid,
    ) {
        let detail = json!({
            "handler": handler.to_string(),
            "negotiation": negotiation.to_string(),
        });
        self.record(event(actor, "handler.activate", hash, "ok", Some(detail)))
            .await;
    }

    /// A requester's run-time error report on protocol `hash` was answered: `fixed` names the
    /// handler version that replaced `previous`, or none when the report was refused for
    /// `reason`. Written before it returns.
    pub async fn handler_fix(
        &self,
        actor: &Actor,
        hash: &str,
        previous: uuid::Uuid,
        fixed: Option<uuid::Uuid>,
        reason: &str,
    ) {
        let detail = json!({
            "previous": previous.to_string(),
            "handler": fixed.map(|id| id.to_string()),
            "reason": clean(reason),
        });
        let outcome = if fixed.is_some() {
            "accepted"
        } else {
            "rejected"
        };
        self.record(event(actor, "handler.fix", hash, outcome, Some(detail)))
            .await;
    }

    /// A capability call: queued for the next batch.
    pub fn capability_called(&self, actor: &Actor, call: &Invocation<'_>) {
        let micros = u64::try_from(call.elapsed.as_micros()).unwrap_or(u64::MAX);
        let detail = json!({ "duration_us": micros });
        let event = event(
            actor,
            "capability.call",
            call.capability,
            call.outcome,
            Some(detail),
        );
        self.queue(vec![event]);
    }

    /// Records every capability call `capabilities` makes from now on, as the current actor's.
    /// A set of capabilities shared by two servers records for the first one only.
    pub fn observe(&self, capabilities: &Capabilities) {
        if !capabilities.observe(Arc::new(CallObserver(self.clone()))) {
            tracing::warn!(
                "the capabilities' calls are audited already; this server's log does not get them"
            );
        }
    }

    // --- how it is written ---------------------------------------------------------------------

    /// Writes `event` now; when the database cannot take it, it is logged, counted and queued
    /// for the next batch. Never fails.
    pub async fn record(&self, event: NewAuditEvent) {
        let written = self
            .inner
            .store
            .append_audit(std::slice::from_ref(&event))
            .await;
        if let Err(e) = written {
            metrics::audit_write_failed("decision");
            tracing::warn!(
                error = %crate::error::chain(&e),
                action = %event.action,
                "could not write an audit event; queued for the next batch"
            );
            if e.is_transient() {
                self.queue(vec![event]);
            }
        }
    }

    /// Adds `events` to the buffer, as far as it has room; the rest are dropped and counted.
    pub(crate) fn queue(&self, events: Vec<NewAuditEvent>) {
        let mut pending = self.lock();
        let room = self.inner.capacity.saturating_sub(pending.len());
        let dropped = events.len().saturating_sub(room);
        pending.extend(events.into_iter().take(room));
        drop(pending);
        if dropped > 0 {
            metrics::audit_dropped(dropped as u64);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<NewAuditEvent>> {
        self.inner
            .pending
            .lock()
            .expect("the audit buffer's lock is never poisoned")
    }

    /// Writes the buffered events in one transaction. When the database fails in a way that may
    /// pass, they go back to the buffer for the next flush (as far as it has room); a batch the
    /// database refuses is dropped with a warning. Returns how many events wait.
    pub async fn flush(&self) -> usize {
        let batch = std::mem::take(&mut *self.lock());
        if batch.is_empty() {
            return 0;
        }
        if let Err(e) = self.inner.store.append_audit(&batch).await {
            metrics::audit_write_failed("batch");
            tracing::warn!(
                error = %crate::error::chain(&e),
                events = batch.len(),
                "could not write the audit log's capability calls"
            );
            if e.is_transient() {
                // Older events first: they go back ahead of those queued meanwhile.
                let mut pending = self.lock();
                let newer = std::mem::replace(&mut *pending, batch);
                drop(pending);
                self.queue(newer);
            }
        }
        self.lock().len()
    }

    /// Writes the buffer every `[audit] flush_interval_ms` until the task is aborted.
    pub fn spawn_flusher(&self) -> tokio::task::JoinHandle<()> {
        let audit = self.clone();
        crate::periodic::spawn_every(self.inner.flush_interval, move || {
            let audit = audit.clone();
            async move {
                audit.flush().await;
            }
        })
    }

    /// Starts the retention sweep: at once, then every `period`, the events older than
    /// `audit.retention_days` are deleted, in batches. No retention starts nothing.
    pub fn spawn_retention(&self, period: Duration) -> Option<tokio::task::JoinHandle<()>> {
        let keep = self.inner.retention?;
        let audit = self.clone();
        Some(crate::periodic::spawn_every(period, move || {
            let audit = audit.clone();
            async move {
                match audit.expire(keep).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(events = n, "audit events past their retention deleted")
                    }
                    Err(e) => tracing::warn!(
                        error = %crate::error::chain(&e),
                        "the audit retention sweep failed; trying again later"
                    ),
                }
            }
        }))
    }

    /// Deletes the events older than `keep`; returns how many.
    pub async fn expire(&self, keep: Duration) -> Result<u64, parley_store::StoreError> {
        let store = &self.inner.store;
        crate::expiry::expire_older_than(keep, |before| {
            store.expire_audit(before, parley_store::MAX_PAGE)
        })
        .await
    }

    /// The last flush, at shutdown: retried while the database fails in a way that may pass,
    /// for at most `within`; events still unwritten then are lost, with a warning.
    pub async fn flush_within(&self, within: Duration) {
        let unwritten = crate::periodic::retry_within(within, || self.flush()).await;
        if unwritten > 0 {
            tracing::warn!(
                unwritten,
                "audit events could not be written before shutdown; lost"
            );
        }
    }
}

/// Tells the audit log of every capability call, as the actor of the task that made it.
#[derive(Debug)]
struct CallObserver(Audit);

impl InvokeObserver for CallObserver {
    fn invoked(&self, call: &Invocation<'_>) {
        self.0
            .capability_called(&current_actor().unwrap_or_default(), call);
    }
}

/// An event of now, its words made storable ([`clean`], and `-` for a word left empty).
fn event(
    actor: &Actor,
    action: &str,
    subject: &str,
    outcome: &str,
    detail: Option<Value>,
) -> NewAuditEvent {
    let word = |text: &str| match clean(text) {
        w if w.is_empty() => "-".to_owned(),
        w => w.into_owned(),
    };
    let known = |text: &Option<String>| text.as_deref().filter(|t| !t.is_empty()).map(word);
    NewAuditEvent {
        at: chrono::Utc::now(),
        peer: known(&actor.peer),
        address: known(&actor.address),
        action: word(action),
        subject: word(subject),
        outcome: word(outcome),
        detail,
    }
}

/// `text` without U+0000 (which the store refuses), cut to at most [`MAX_AUDIT_TEXT`] bytes at a
/// character boundary.
fn clean(text: &str) -> Cow<'_, str> {
    let text: Cow<'_, str> = if text.contains('\0') {
        text.replace('\0', "\u{FFFD}").into()
    } else {
        text.into()
    };
    let mut end = text.len().min(MAX_AUDIT_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text {
        Cow::Borrowed(t) => Cow::Borrowed(&t[..end]),
        Cow::Owned(mut t) => {
            t.truncate(end);
            Cow::Owned(t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_made_storable() {
        assert_eq!(clean("getProductInfo"), "getProductInfo");
        assert_eq!(clean("a\0b"), "a\u{FFFD}b");
        let long = "é".repeat(MAX_AUDIT_TEXT);
        let cut = clean(&long);
        assert!(cut.len() <= MAX_AUDIT_TEXT && cut.len() >= MAX_AUDIT_TEXT - 1);
        let nul_heavy = "\0".repeat(MAX_AUDIT_TEXT);
        assert!(clean(&nul_heavy).len() <= MAX_AUDIT_TEXT);
        let e = event(&Actor::default(), "capability.call", "", "ok", None);
        assert_eq!((e.subject.as_str(), e.peer, e.address), ("-", None, None));
    }

    #[test]
    fn actors_are_named_by_their_canonical_address_or_their_id() {
        let mapped: SocketAddr = "[::ffff:10.0.0.7]:4000".parse().expect("address");
        assert_eq!(Actor::at(mapped).address.as_deref(), Some("10.0.0.7"));
        let from_socket = Actor::current_or("127.0.0.1:5555");
        assert_eq!(from_socket.address.as_deref(), Some("127.0.0.1"));
        assert_eq!(Actor::current_or("::1").address.as_deref(), Some("::1"));
        assert_eq!(
            Actor::current_or("did:example:a").peer.as_deref(),
            Some("did:example:a")
        );
    }

    /// The value of `parley_audit_dropped_total`, 0 before anything was dropped.
    fn dropped_so_far() -> f64 {
        metrics::render()
            .lines()
            .find_map(|l| l.strip_prefix("parley_audit_dropped_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    async fn listed(store: &Arc<dyn Store>, action: &str) -> Vec<parley_store::AuditEvent> {
        let filter = parley_store::AuditFilter {
            action: Some(action.into()),
            limit: 100,
            ..Default::default()
        };
        store.list_audit(filter).await.expect("list")
    }

    #[tokio::test]
    async fn calls_wait_in_a_bounded_buffer_and_decisions_are_written_at_once() {
        use sqlx::Connection as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("a.db").display());
        let options = parley_store::StoreOptions {
            busy_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        let store = parley_store::connect(&url, options).await.expect("store");
        let settings = AuditSettings {
            buffer_events: 2,
            ..AuditSettings::default()
        };
        let audit = Audit::new(store.clone(), &settings);
        let alice = Actor {
            peer: Some("alice".into()),
            address: Some("10.0.0.1".into()),
        };
        let call = Invocation {
            capability: "getProductInfo",
            outcome: "ok",
            elapsed: Duration::from_micros(31),
        };
        // Three calls, room for two: one is dropped and counted.
        let before = dropped_so_far();
        for _ in 0..3 {
            audit.capability_called(&alice, &call);
        }
        assert!(dropped_so_far() - before >= 1.0);
        assert!(
            listed(&store, "capability.call").await.is_empty(),
            "not yet"
        );
        // A decision is written before it returns.
        let id = uuid::Uuid::new_v4();
        audit.negotiation_started(&alice, id, "c-1").await;
        let started = listed(&store, "negotiation.start").await;
        assert_eq!(started.len(), 1);
        assert_eq!(started[0].subject, id.to_string());
        assert_eq!(audit.flush().await, 0);
        let calls = listed(&store, "capability.call").await;
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].peer.as_deref(), Some("alice"));
        assert_eq!(calls[0].detail, Some(json!({"duration_us": 31})));

        // Another connection holds the write lock: a refusal cannot be written at once; it
        // waits in the buffer, also through a flush that cannot write, until one can.
        let mut holder = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("second connection");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .expect("lock");
        audit
            .refused(&alice, "capability.call", "deleteAll", "not granted")
            .await;
        assert_eq!(audit.flush().await, 1);
        sqlx::query("COMMIT")
            .execute(&mut holder)
            .await
            .expect("unlock");
        audit.flush_within(Duration::from_secs(5)).await;
        let refused = listed(&store, "capability.call").await;
        assert_eq!(refused.len(), 3);
        assert_eq!(
            (refused[0].subject.as_str(), refused[0].outcome.as_str()),
            ("deleteAll", "refused")
        );
        assert_eq!(refused[0].detail, Some(json!({"reason": "not granted"})));
    }

    #[tokio::test]
    async fn work_for_a_caller_knows_its_actor() {
        assert_eq!(current_actor(), None);
        let alice = Actor {
            peer: Some("alice".into()),
            address: Some("10.0.0.1".into()),
        };
        let principal = crate::access::Principal {
            id: Some("alice".into()),
            scheme: crate::access::Scheme::ApiKey,
            grants: parley_auth::Grants::talk_only(),
        };
        let caller = crate::peer::Caller::new(
            "10.0.0.1:4711".parse().expect("address"),
            std::sync::Arc::new(principal),
        );
        let seen = crate::access::scoped(caller, async {
            tokio::task::yield_now().await;
            (current_actor(), Actor::current_or("127.0.0.1:1"))
        })
        .await;
        assert_eq!(seen, (Some(alice.clone()), alice));
        assert_eq!(current_actor(), None);
    }
}

#[cfg(test)]
mod retention_tests {
    use super::*;

    #[tokio::test]
    async fn retention_deletes_what_is_older_than_it_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("a.db").display());
        let store = parley_store::connect(&url, Default::default())
            .await
            .expect("store");
        let at = |days_ago: i64| NewAuditEvent {
            at: chrono::Utc::now() - chrono::Duration::days(days_ago),
            ..event(&Actor::default(), "capability.call", "x", "ok", None)
        };
        store
            .append_audit(&[at(40), at(10), at(0)])
            .await
            .expect("written");
        let audit = Audit::new(store.clone(), &AuditSettings::default());
        let month = Duration::from_secs(30 * 86_400);
        assert_eq!(audit.expire(month).await.expect("expired"), 1);
        assert_eq!(audit.expire(month).await.expect("expired"), 0);
        assert_eq!(audit.expire(Duration::MAX).await.expect("no cut-off"), 0);
        let left = store
            .list_audit(parley_store::AuditFilter {
                limit: 10,
                ..Default::default()
            })
            .await
            .expect("listed");
        assert_eq!(left.len(), 2);
    }
}
