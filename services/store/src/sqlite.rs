//! The SQLite implementation: the embedded default.
//!
//! The queries are shared with PostgreSQL (`sql/`); this file connects and provides the
//! transactions they run in. SQLite specifics, decided here:
//! * WAL journal: readers never block the writer and vice versa; `synchronous = NORMAL`, which is
//!   durable across application crashes in WAL mode (a power cut may lose the last commits).
//! * Write transactions start with `BEGIN IMMEDIATE`, taking the write lock up front. A deferred
//!   transaction that reads and then writes can fail with `SQLITE_BUSY` straight away, bypassing the
//!   busy timeout, when another connection committed in between; an immediate one just waits.
//! * Timestamps are RFC 3339 UTC text; with a fixed `+00:00` offset, text order is time order, so
//!   `ORDER BY` on them is correct.

use std::str::FromStr;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::error::{BackendError, SqlError};
use crate::{StoreError, StoreOptions};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    /// [`StoreOptions::max_log_messages`].
    max_log_messages: Option<u32>,
}

impl SqliteStore {
    /// Opens (and with `mode=rwc` creates, parent directory included) the database and migrates it.
    pub(crate) async fn connect(url: &str, opts: &StoreOptions) -> Result<Self, SqlError> {
        let connect_options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Invalid(format!("bad SQLite URL: {e}")))?
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(opts.busy_timeout);

        let in_memory = url.contains(":memory:") || query_has(url, "mode", "memory");
        if !in_memory
            && query_has(url, "mode", "rwc")
            && let Some(parent) = connect_options.get_filename().parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Database(BackendError::new(e)))?;
        }

        let mut pool_options = SqlitePoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.acquire_timeout);
        if in_memory {
            // An in-memory database lives as long as its last connection: keep exactly one open
            // for the pool's lifetime, or the data would vanish when the pool went idle.
            pool_options = pool_options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let pool = pool_options.connect_with(connect_options).await?;
        MIGRATOR.run(&pool).await?;
        tracing::debug!("connected and migrated");
        Ok(Self {
            pool,
            max_log_messages: opts.max_log_messages,
        })
    }

    /// A transaction holding the write lock from its first statement (see the module docs).
    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, SqlError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// A deferred transaction: in WAL mode its statements read one snapshot.
    async fn read_tx(&self) -> Result<Transaction<'static, Sqlite>, SqlError> {
        Ok(self.pool.begin().await?)
    }

    /// A write transaction: `BEGIN IMMEDIATE` serialises it with every other writer.
    async fn activation_tx(&self, _id: Uuid) -> Result<Transaction<'static, Sqlite>, SqlError> {
        self.write_tx().await
    }
}

/// Whether the URL's query string has `key=value` (sqlx parses the URL but does not expose the mode).
fn query_has(url: &str, key: &str, value: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query
            .split('&')
            .any(|pair| pair.split_once('=') == Some((key, value)))
    })
}

/// The store type and name the shared queries (`sql/`) are implemented for here.
type SqlStore = SqliteStore;
/// The database the shared queries run on here.
type Db = Sqlite;
const BACKEND_NAME: &str = "sqlite";

#[path = "sql/mod.rs"]
#[allow(
    clippy::duplicate_mod,
    reason = "one implementation, compiled for each backend"
)]
mod shared;

#[cfg(test)]
mod tests {
    use super::query_has;

    #[test]
    fn query_has_matches_whole_pairs() {
        assert!(query_has("sqlite://a/b.db?mode=rwc", "mode", "rwc"));
        assert!(query_has(
            "sqlite://a/b.db?cache=shared&mode=rwc",
            "mode",
            "rwc"
        ));
        assert!(!query_has("sqlite://a/b.db?mode=rw", "mode", "rwc"));
        assert!(!query_has("sqlite://a/mode=rwc.db", "mode", "rwc"));
    }
}
