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
//! * Storage faults (disk full, a read-only file or directory) retire the connections open at the
//!   time, and every operation checks first that the database file is still the one opened
//!   (`faults`).

use std::str::FromStr;
use std::sync::Arc;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::error::{BackendError, SqlError};
use crate::{StoreError, StoreOptions};

mod faults;

use self::faults::{Faults, FileIdentity};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    /// [`StoreOptions::max_log_messages`].
    max_log_messages: Option<u32>,
    /// When the last storage fault happened: no connection opened before it is used again.
    faults: Arc<Faults>,
    /// The database file as opened (none in memory).
    file: Option<FileIdentity>,
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

        let faults = Arc::new(Faults::default());
        let retired = Arc::clone(&faults);
        let mut pool_options = SqlitePoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.acquire_timeout)
            // A connection opened before the last storage fault, or one the driver believes
            // inside a transaction, is closed rather than handed out (see `faults`).
            .before_acquire(move |conn, meta| {
                use sqlx::Connection as _;
                let usable = !conn.is_in_transaction() && !retired.predates_last(meta.age);
                Box::pin(async move { Ok(usable) })
            });
        if in_memory {
            // An in-memory database lives as long as its last connection: keep exactly one open
            // for the pool's lifetime, or the data would vanish when the pool went idle.
            pool_options = pool_options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let file = (!in_memory).then(|| connect_options.get_filename().to_owned());
        let pool = pool_options.connect_with(connect_options).await?;
        MIGRATOR.run(&pool).await?;
        let file = file.map(|path| FileIdentity::of(&path));
        tracing::debug!("connected and migrated");
        Ok(Self {
            pool,
            max_log_messages: opts.max_log_messages,
            faults,
            file,
        })
    }

    /// A transaction holding the write lock from its first statement (see the module docs).
    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, SqlError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Before every operation: the database file is still the one opened at start.
    fn check_storage(&self) -> Result<(), StoreError> {
        match &self.file {
            Some(file) => file.check(),
            None => Ok(()),
        }
    }

    /// A storage fault happened: the connections open now are not handed out again.
    fn storage_fault(&self) {
        tracing::warn!("storage fault: the database connections open now will be replaced");
        self.faults.record();
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
    use serde_json::json;

    use super::{SqliteStore, query_has};
    use crate::{Direction, NewConversation, Store, StoreError, StoreOptions};

    /// A store on a fresh file with one pooled connection, so that a broken connection would be
    /// the one every operation gets; and a conversation to write to.
    async fn one_connection() -> (SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/parley.db?mode=rwc", dir.path().display());
        let options = StoreOptions {
            max_connections: 1,
            ..StoreOptions::default()
        };
        let store = SqliteStore::connect(&url, &options).await.expect("connect");
        let new = NewConversation {
            id: "c".into(),
            peer: None,
            state: json!({}),
        };
        store
            .create_conversation(new)
            .await
            .expect("a conversation");
        (store, dir)
    }

    async fn append(store: &SqliteStore) -> Result<(), StoreError> {
        let message = json!({"text": "hello"});
        store
            .append_message("c", Direction::Inbound, &message)
            .await
            .map(drop)
    }

    /// What a full disk leaves behind: SQLite rolled a transaction back on its own, and the
    /// driver, not knowing, believes the connection still in it.
    #[tokio::test]
    async fn a_connection_whose_transaction_sqlite_ended_is_not_used_again() {
        let (store, _dir) = one_connection().await;
        {
            let mut tx = store.write_tx().await.expect("begin");
            sqlx::query("ROLLBACK")
                .execute(&mut *tx)
                .await
                .expect("ended under the driver");
        }
        append(&store).await.expect("written on a fresh connection");
    }

    /// What a read-only file or directory leaves behind: a connection that stays read-only once
    /// the storage is writable again.
    #[tokio::test]
    async fn a_connection_that_met_a_storage_fault_is_replaced() {
        let (store, _dir) = one_connection().await;
        sqlx::query("PRAGMA query_only = ON")
            .execute(&store.pool)
            .await
            .expect("the connection is read-only");
        let err = append(&store).await.expect_err("read-only");
        assert!(err.is_transient(), "{err:?}");
        append(&store).await.expect("written on a fresh connection");
        store.check_writable().await.expect("writable again");
    }

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
