//! The audit log on both backends: batches written whole or not at all, read back newest first
//! through every filter, refused when an event cannot be right, and kept when the conversation
//! it happened in expires and across a reconnect, and deleted by their retention, oldest first.
//!
//! PostgreSQL is required: with no server the PostgreSQL test fails and says how to start one.

use chrono::{DateTime, Duration, SubsecRound, Utc};
use parley_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use parley_store::{
    AuditFilter, MAX_AUDIT_TEXT, MAX_PAGE, NewAuditEvent, NewConversation, Store, StoreError,
    StoreOptions, connect,
};
use serde_json::json;

#[tokio::test]
async fn audit_sqlite() {
    let (url, _dir) = fresh_sqlite_url();
    audit(&url).await;
}

#[tokio::test]
async fn audit_postgres() {
    let (url, database) = fresh_postgres_url().await;
    audit(&url).await;
    database
        .drop_database()
        .await
        .expect("the test database can be dropped");
}

async fn audit(url: &str) {
    let store = connect(url, StoreOptions::default())
        .await
        .expect("connect and migrate");
    let start = Utc::now().trunc_subsecs(6) - Duration::minutes(10);
    let written = history(start);
    store.append_audit(&written).await.expect("append");
    filters(store.as_ref(), &written, start).await;
    refusals(store.as_ref(), start).await;
    expiry_keeps_the_log(store.as_ref()).await;
    drop(store);
    let again = connect(url, StoreOptions::default())
        .await
        .expect("reconnect");
    let all = again.list_audit(everything()).await.expect("list");
    assert_eq!(all.len(), written.len() + 1, "kept across a reconnect");
    retention(again.as_ref(), all.len()).await;
}

/// Retention deletes the oldest events first, in bounded batches, and never the future's.
async fn retention(store: &dyn Store, total: usize) {
    let future = store.expire_audit(Utc::now() + Duration::days(1), 10).await;
    assert!(matches!(future, Err(StoreError::Invalid(_))), "{future:?}");
    let before = store.list_audit(everything()).await.expect("list");
    let oldest_two: Vec<i64> = before.iter().rev().take(2).map(|e| e.id).collect();
    let removed = store.expire_audit(Utc::now(), 2).await.expect("expire");
    assert_eq!(removed, 2);
    let after = store.list_audit(everything()).await.expect("list");
    assert_eq!(after.len(), total - 2);
    assert!(
        after.iter().all(|e| !oldest_two.contains(&e.id)),
        "the oldest went first"
    );
    let cut = after.iter().map(|e| e.at).min().expect("events left");
    assert_eq!(
        store.expire_audit(cut, 100).await.expect("expire"),
        0,
        "none before the oldest"
    );
    let rest = store
        .expire_audit(Utc::now(), MAX_PAGE)
        .await
        .expect("expire");
    assert_eq!(rest, (total - 2) as u64);
    assert!(
        store
            .list_audit(everything())
            .await
            .expect("list")
            .is_empty()
    );
}

fn everything() -> AuditFilter {
    AuditFilter {
        limit: MAX_PAGE,
        ..AuditFilter::default()
    }
}

fn event(
    at: DateTime<Utc>,
    address: &str,
    action: &str,
    subject: &str,
    outcome: &str,
) -> NewAuditEvent {
    NewAuditEvent {
        at,
        peer: None,
        address: Some(address.into()),
        action: action.into(),
        subject: subject.into(),
        outcome: outcome.into(),
        detail: None,
    }
}

/// A negotiation from one address, then capability calls from two, one minute apart; the last
/// two share an instant, and one event names an authenticated peer.
fn history(start: DateTime<Utc>) -> Vec<NewAuditEvent> {
    let minute = |n| start + Duration::minutes(n);
    let mut events = vec![
        event(minute(0), "10.0.0.1", "negotiation.start", "n-1", "ok"),
        NewAuditEvent {
            detail: Some(json!({"protocol": "ab12", "rounds": 2})),
            ..event(minute(1), "10.0.0.1", "negotiation.end", "n-1", "accepted")
        },
        event(minute(2), "10.0.0.1", "handler.activate", "ab12", "ok"),
        event(
            minute(3),
            "10.0.0.2",
            "capability.call",
            "getProductInfo",
            "ok",
        ),
        event(
            minute(4),
            "10.0.0.2",
            "capability.call",
            "getProductInfo",
            "not_found",
        ),
    ];
    let mut refused = event(
        minute(4),
        "10.0.0.3",
        "capability.call",
        "deleteAll",
        "refused",
    );
    refused.peer = Some("alice".into());
    refused.detail = Some(json!({"reason": "not granted"}));
    events.push(refused);
    events
}

async fn filters(store: &dyn Store, written: &[NewAuditEvent], start: DateTime<Utc>) {
    let all = store.list_audit(everything()).await.expect("list");
    assert_eq!(all.len(), written.len());
    // Newest first; of one instant, the later recorded first.
    let subjects: Vec<&str> = all.iter().map(|e| e.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "deleteAll",
            "getProductInfo",
            "getProductInfo",
            "ab12",
            "n-1",
            "n-1"
        ]
    );
    assert!(all.windows(2).all(|w| w[0].id > w[1].id));
    // Read back as written, detail and time included (oldest first is the order written).
    let read: Vec<NewAuditEvent> = all
        .iter()
        .rev()
        .map(|e| NewAuditEvent {
            at: e.at,
            peer: e.peer.clone(),
            address: e.address.clone(),
            action: e.action.clone(),
            subject: e.subject.clone(),
            outcome: e.outcome.clone(),
            detail: e.detail.clone(),
        })
        .collect();
    assert_eq!(read, written);

    let count = |filter: AuditFilter| async move {
        store
            .list_audit(filter)
            .await
            .expect("list")
            .iter()
            .map(|e| e.outcome.clone())
            .collect::<Vec<_>>()
    };
    let by = |f: fn(&mut AuditFilter)| {
        let mut filter = everything();
        f(&mut filter);
        filter
    };
    assert_eq!(
        count(by(|f| f.peer = Some("alice".into()))).await,
        ["refused"]
    );
    assert_eq!(
        count(by(|f| f.address = Some("10.0.0.2".into()))).await,
        ["not_found", "ok"]
    );
    assert_eq!(
        count(by(|f| f.action = Some("negotiation.end".into()))).await,
        ["accepted"]
    );
    assert_eq!(
        count(by(|f| f.outcome = Some("refused".into()))).await,
        ["refused"]
    );
    // Filters combine.
    let mut calls_ok = by(|f| f.action = Some("capability.call".into()));
    calls_ok.outcome = Some("ok".into());
    assert_eq!(count(calls_ok).await, ["ok"]);
    // `since` is inclusive, `until` exclusive: minutes 2 and 3.
    let mut window = everything();
    window.since = Some(start + Duration::minutes(2));
    window.until = Some(start + Duration::minutes(4));
    let found = store.list_audit(window).await.expect("list");
    let actions: Vec<&str> = found.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["capability.call", "handler.activate"]);
    // The limit keeps the newest; a limit above the page is the page.
    let newest = store
        .list_audit(AuditFilter {
            limit: 2,
            ..AuditFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(newest.len(), 2);
    assert_eq!(newest[0].subject, "deleteAll");
    let capped = AuditFilter {
        limit: u32::MAX,
        ..AuditFilter::default()
    };
    assert_eq!(
        store.list_audit(capped).await.expect("list").len(),
        written.len()
    );
    // A value no event can have matches nothing, without an error.
    for impossible in ["", "a\u{0}b"] {
        let filter = AuditFilter {
            peer: Some(impossible.into()),
            ..everything()
        };
        assert!(store.list_audit(filter).await.expect("list").is_empty());
    }
}

/// A batch with one bad event is refused whole: nothing of it is written.
async fn refusals(store: &dyn Store, start: DateTime<Utc>) {
    let before = store.list_audit(everything()).await.expect("list").len();
    let good = event(start, "10.0.0.9", "capability.call", "x", "ok");
    let bad_ones = [
        NewAuditEvent {
            action: String::new(),
            ..good.clone()
        },
        NewAuditEvent {
            address: Some(String::new()),
            ..good.clone()
        },
        NewAuditEvent {
            subject: "s".repeat(MAX_AUDIT_TEXT + 1),
            ..good.clone()
        },
        NewAuditEvent {
            detail: Some(json!(["\u{0}"])),
            ..good.clone()
        },
    ];
    for bad in bad_ones {
        let err = store
            .append_audit(&[good.clone(), bad])
            .await
            .expect_err("refused");
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    }
    store.append_audit(&[]).await.expect("an empty batch");
    let after = store.list_audit(everything()).await.expect("list").len();
    assert_eq!(before, after, "nothing of a refused batch is written");
}

/// Deleting an idle conversation leaves the audit of what happened in it.
async fn expiry_keeps_the_log(store: &dyn Store) {
    store
        .create_conversation(NewConversation {
            id: "audited".into(),
            peer: Some("10.0.0.1".into()),
            state: json!({}),
        })
        .await
        .expect("conversation");
    let mut happened = event(Utc::now(), "10.0.0.1", "negotiation.start", "n-2", "ok");
    happened.detail = Some(json!({"conversation": "audited"}));
    store.append_audit(&[happened]).await.expect("append");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let expired = store
        .expire_conversations(Utc::now(), MAX_PAGE)
        .await
        .expect("expire");
    assert!(expired >= 1);
    assert!(
        store
            .get_conversation("audited")
            .await
            .expect("read")
            .is_none()
    );
    let filter = AuditFilter {
        action: Some("negotiation.start".into()),
        ..everything()
    };
    let kept = store.list_audit(filter).await.expect("list");
    assert!(kept.iter().any(|e| e.subject == "n-2"), "{kept:?}");
}
