//! Protocol usage per peer: counted in memory on every application message and written to
//! the store once a second and at shutdown, so the 0-RTT path pays no database write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_anp::ProtocolHash;
use parley_store::Store;

/// Per-peer call counts of each protocol, (successes, failures), not written yet.
#[derive(Debug, Default)]
pub(super) struct UsageCounts {
    pending: Mutex<HashMap<(String, ProtocolHash), (u64, u64)>>,
}

impl UsageCounts {
    pub(super) fn count(&self, peer: &str, hash: &ProtocolHash, ok: bool) {
        let mut pending = self.pending.lock().expect("usage lock is never poisoned");
        let entry = pending.entry((peer.to_owned(), *hash)).or_default();
        if ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// Writes what has been counted since the last flush. When the database fails in a way that
    /// may pass (unreachable, busy, locked), what is not written yet is kept for the next flush;
    /// counts the database refuses are dropped with a warning. Returns how many (peer, protocol)
    /// counts are kept.
    pub(super) async fn flush(&self, store: &Arc<dyn Store>) -> usize {
        let batch =
            std::mem::take(&mut *self.pending.lock().expect("usage lock is never poisoned"));
        let mut batch = batch.into_iter();
        while let Some(((peer, hash), (ok, errors))) = batch.next() {
            match store
                .record_usage(&peer, &hash.to_string(), ok, errors)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "could not record protocol usage; kept for the next flush");
                    let unwritten = std::iter::once(((peer, hash), (ok, errors))).chain(batch);
                    let mut pending = self.pending.lock().expect("usage lock is never poisoned");
                    for (key, (ok, errors)) in unwritten {
                        let entry = pending.entry(key).or_default();
                        entry.0 = entry.0.saturating_add(ok);
                        entry.1 = entry.1.saturating_add(errors);
                    }
                    return pending.len();
                }
                Err(e) => {
                    tracing::warn!(error = %e, %peer, protocol = %hash, "protocol usage refused by the store; dropped");
                }
            }
        }
        0
    }

    /// The last flush, at shutdown: retried while the database fails in a way that may pass,
    /// for at most `within`. Counts still unwritten then are lost, with a warning.
    pub(super) async fn flush_within(&self, store: &Arc<dyn Store>, within: Duration) {
        let unwritten = crate::periodic::retry_within(within, || self.flush(store)).await;
        if unwritten > 0 {
            tracing::warn!(
                unwritten,
                "protocol usage counts could not be written before shutdown; lost"
            );
        }
    }

    /// Flushes every `period` until the returned task is aborted.
    pub(super) fn spawn_flusher(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        period: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let counts = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                counts.flush(&store).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Connection as _;

    use super::*;

    fn pending(usage: &UsageCounts, peer: &str, hash: &ProtocolHash) -> Option<(u64, u64)> {
        let pending = usage.pending.lock().expect("usage lock");
        pending.get(&(peer.to_owned(), *hash)).copied()
    }

    /// Peer `peer-a`'s counts of `hash` in the store, once nothing of them is pending.
    async fn written(
        store: &Arc<dyn Store>,
        usage: &UsageCounts,
        hash: &ProtocolHash,
    ) -> (i64, i64) {
        assert_eq!(pending(usage, "peer-a", hash), None);
        let row = store
            .usage("peer-a", &hash.to_string())
            .await
            .expect("usage")
            .expect("a usage row");
        (row.ok_count, row.error_count)
    }

    /// A SQLite store in `dir` that waits 100 ms for a lock, the hash of a protocol stored in
    /// it, and a second connection holding its write lock (see [`unlock`]).
    async fn locked_usage_store(
        dir: &tempfile::TempDir,
    ) -> (Arc<dyn Store>, ProtocolHash, sqlx::SqliteConnection) {
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("usage.db").display()
        );
        let options = parley_store::StoreOptions {
            busy_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        let store = parley_store::connect(&url, options).await.expect("store");
        let text = "# A protocol\n";
        store.put_protocol(text).await.expect("protocol");
        let mut holder = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("second connection");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .expect("lock");
        (store, ProtocolHash::of(text), holder)
    }

    /// Releases the write lock [`locked_usage_store`]'s connection holds.
    async fn unlock(holder: &mut sqlx::SqliteConnection) {
        sqlx::query("COMMIT").execute(holder).await.expect("unlock");
    }

    #[tokio::test]
    async fn usage_counts_outlast_a_locked_database_and_counts_it_refuses_are_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, hash, mut holder) = locked_usage_store(&dir).await;
        let usage = UsageCounts::default();
        usage.count("peer-a", &hash, true);
        usage.count("peer-a", &hash, true);
        usage.count("peer-a", &hash, false);

        // Another connection holds the write lock: the flush cannot write and keeps the counts.
        usage.flush(&store).await;
        assert_eq!(pending(&usage, "peer-a", &hash), Some((2, 1)));
        unlock(&mut holder).await;

        // Counted meanwhile, then written together.
        usage.count("peer-a", &hash, true);
        usage.flush(&store).await;
        assert_eq!(written(&store, &usage, &hash).await, (3, 1));

        // A protocol the store does not know: refused (foreign key), not retried for ever.
        let unknown = ProtocolHash::of("# Never stored\n");
        usage.count("peer-a", &unknown, true);
        usage.flush(&store).await;
        assert_eq!(pending(&usage, "peer-a", &unknown), None);
        assert!(
            store
                .usage("peer-a", &unknown.to_string())
                .await
                .expect("usage")
                .is_none()
        );
    }

    #[tokio::test]
    async fn the_last_flush_waits_for_a_locked_database_within_its_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, hash, mut holder) = locked_usage_store(&dir).await;
        let usage = UsageCounts::default();
        usage.count("peer-a", &hash, true);

        // With no time to wait, one try: the count is not written.
        usage.flush_within(&store, Duration::ZERO).await;
        assert_eq!(pending(&usage, "peer-a", &hash), Some((1, 0)));
        // With time, the flush outlasts the lock, released part-way through.
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            unlock(&mut holder).await;
        });
        usage.flush_within(&store, Duration::from_secs(10)).await;
        release.await.expect("released");
        assert_eq!(written(&store, &usage, &hash).await, (1, 0));
    }
}
