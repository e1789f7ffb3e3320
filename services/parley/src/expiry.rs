//! Idle conversations expire: a background task deletes, every
//! `limits.conversation_sweep_interval_ms`, the conversations idle for longer than
//! `limits.conversation_idle_timeout_ms` (`Store::expire_conversations`), with their logs, model
//! usage, negotiation state and negotiations. What was agreed in them (protocols, handlers,
//! agreements) is not theirs and stays, so 0-RTT reuse outlives the conversation that negotiated.
//!
//! After expiry a conversation is gone as if it never existed, which is what the agent's
//! conversation semantics make of a token that names none: Parley's own token
//! (`conversation_<agent id>`) is answered `unknown_conversation` (send without it to start
//! another), and a peer's own token starts a fresh conversation under the same id, turn 1.
//!
//! Several instances on one database may sweep at once: each deletes what is idle, and a row
//! deleted by one is simply not there for the other.

use std::sync::Arc;
use std::time::Duration;

use parley_store::{MAX_PAGE, Store, StoreError};

/// Starts the sweep: at once, then every `period`, until the task is aborted. `idle` of zero
/// starts nothing (conversations never expire).
pub fn spawn_sweep(
    store: Arc<dyn Store>,
    idle: Duration,
    period: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    if idle.is_zero() {
        return None;
    }
    Some(crate::periodic::spawn_every(period, move || {
        let store = store.clone();
        async move {
            match sweep(store.as_ref(), idle).await {
                Ok(0) => {}
                Ok(n) => {
                    crate::metrics::conversations_expired(n);
                    tracing::info!(conversations = n, "idle conversations expired");
                }
                Err(e) => tracing::warn!(
                    error = %crate::error::chain(&e),
                    "the sweep for idle conversations failed; trying again later"
                ),
            }
        }
    }))
}

/// Deletes every conversation idle for longer than `idle`, a batch of at most [`MAX_PAGE`] per
/// transaction, so a large backlog never holds the database for long; returns how many.
pub async fn sweep(store: &dyn Store, idle: Duration) -> Result<u64, StoreError> {
    expire_older_than(idle, |idle_since| {
        store.expire_conversations(idle_since, MAX_PAGE)
    })
    .await
}

/// Runs `batch` (one deletion, in its own transaction, of at most [`MAX_PAGE`] rows from before
/// the cut-off it is given: `age` ago) until one deletes fewer; returns how many went in all.
/// An age longer ago than a timestamp reaches deletes nothing: nothing can be that old.
pub(crate) async fn expire_older_than<F, Fut>(
    age: Duration,
    mut batch: F,
) -> Result<u64, StoreError>
where
    F: FnMut(chrono::DateTime<chrono::Utc>) -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let Some(cut_off) = chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
    else {
        return Ok(0);
    };
    let mut total = 0;
    loop {
        let removed = batch(cut_off).await?;
        total += removed;
        if removed < u64::from(MAX_PAGE) {
            return Ok(total);
        }
    }
}
