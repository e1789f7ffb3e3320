//! The PostgreSQL implementation: for deployments that run several Parley instances or want a
//! managed database.
//!
//! The queries are shared with SQLite (`sql/`); this file connects and provides the transactions
//! they run in. PostgreSQL specifics, decided here:
//! * Default isolation (READ COMMITTED). Sequence numbers come from `UPDATE … RETURNING` on the
//!   owner row, whose row lock queues concurrent appends; a waiting update re-reads the committed
//!   counter, so numbers stay consecutive without SERIALIZABLE retries.
//! * Activating a handler locks its protocol row `FOR NO KEY UPDATE` first, serialising activations
//!   of one protocol (the later one wins) while leaving foreign-key checks from other tables, which
//!   take `FOR KEY SHARE`, unblocked.
//! * Multi-statement reads run in a `REPEATABLE READ READ ONLY` transaction for one snapshot.

use std::str::FromStr;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::error::SqlError;
use crate::rows::DbUuid;
use crate::{StoreError, StoreOptions};

static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pool: PgPool,
    /// [`StoreOptions::max_log_messages`].
    max_log_messages: Option<u32>,
}

impl PgStore {
    /// Connects the pool, its first connection within `opts.connect_timeout`, and migrates the
    /// database (sqlx holds an advisory lock while migrating, so instances starting together do not
    /// race).
    pub(crate) async fn connect(url: &str, opts: &StoreOptions) -> Result<Self, SqlError> {
        // The parse error is not echoed: it could quote a URL holding a password.
        let connect_options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Invalid("bad PostgreSQL URL".into()))?;
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.acquire_timeout)
            .connect_lazy_with(connect_options);
        let first = tokio::time::timeout(opts.connect_timeout, pool.acquire())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        drop(first);
        MIGRATOR.run(&pool).await?;
        tracing::debug!("connected and migrated");
        Ok(Self {
            pool,
            max_log_messages: opts.max_log_messages,
        })
    }

    /// A read-write transaction; row locks taken by its statements do the serialising.
    async fn write_tx(&self) -> Result<Transaction<'static, Postgres>, SqlError> {
        Ok(self.pool.begin().await?)
    }

    /// A storage fault happened: PostgreSQL's own; its connections recover with the server, and
    /// the driver closes a broken one.
    fn storage_fault(&self) {}

    /// Before every operation: nothing to check here; the server answers for its storage.
    fn check_storage(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// One snapshot for every statement.
    async fn read_tx(&self) -> Result<Transaction<'static, Postgres>, SqlError> {
        Ok(self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?)
    }

    /// A write transaction holding the handler's protocol row `FOR NO KEY UPDATE`.
    async fn activation_tx(&self, id: Uuid) -> Result<Transaction<'static, Postgres>, SqlError> {
        let mut tx = self.write_tx().await?;
        // A handler's protocol never changes, so it can be read before taking the lock.
        let hash =
            sqlx::query_scalar::<_, String>("SELECT protocol_hash FROM handlers WHERE id = $1")
                .bind(DbUuid(id))
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found(format!("handler {id}")))?;
        sqlx::query("SELECT 1 FROM protocols WHERE hash = $1 FOR NO KEY UPDATE")
            .bind(&hash)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}

/// The store type and name the shared queries (`sql/`) are implemented for here.
type SqlStore = PgStore;
/// The database the shared queries run on here.
type Db = Postgres;
const BACKEND_NAME: &str = "postgres";

#[path = "sql/mod.rs"]
#[allow(
    clippy::duplicate_mod,
    reason = "one implementation, compiled for each backend"
)]
mod shared;
