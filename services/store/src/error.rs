//! The one error type of the store, and how a driver's failures become it.

use std::error::Error as StdError;
use std::fmt;

use thiserror::Error;

/// What can go wrong in a store operation.
///
/// The first three variants are outcomes a caller acts on (404, 409, 422 at the HTTP edge), and
/// `Unavailable` says that trying again later may succeed. The rest are failures a caller logs and
/// answers "internal error" for. The driver's own error stays in `source()`, opaque, and is never
/// rendered into a response.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The named row does not exist (an operation on a conversation, negotiation, handler or protocol
    /// that was never stored). Lookups return `Ok(None)` instead; this is for operations that need it.
    #[error("not found: {what}")]
    NotFound { what: String },

    /// The operation lost a race or contradicts the current state: a stale state version, a duplicate
    /// conversation id, finishing a negotiation twice, activating an unverified handler.
    #[error("conflict: {what}")]
    Conflict { what: String },

    /// The caller passed something the store refuses (a malformed hash, U+0000 in a text, an empty
    /// name, a nonsensical outcome).
    #[error("invalid input: {0}")]
    Invalid(String),

    /// The database is unreachable, busy, locked or too slow: the same operation may succeed if
    /// tried again unchanged.
    #[error("database unavailable")]
    Unavailable(#[source] BackendError),

    /// The database failed in a way that trying again does not change (a constraint no business
    /// rule names, a value it cannot decode, a closed pool).
    #[error("database error")]
    Database(#[source] BackendError),

    /// Applying the embedded migrations failed (at `connect`).
    #[error("database migration failed")]
    Migrate(#[source] BackendError),
}

impl StoreError {
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        Self::NotFound { what: what.into() }
    }

    pub(crate) fn conflict(what: impl Into<String>) -> Self {
        Self::Conflict { what: what.into() }
    }

    /// Whether the same operation may succeed if tried again unchanged: the database was
    /// unreachable, busy, locked or too slow, rather than refusing the data (a constraint) or the
    /// request being wrong. The same as matching [`StoreError::Unavailable`].
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// The database driver's own error behind [`StoreError::Unavailable`], [`StoreError::Database`] and
/// [`StoreError::Migrate`]: it displays the driver's message and keeps its cause chain for logs, and
/// is opaque, so no driver type is part of the store's API.
pub struct BackendError(Box<dyn StdError + Send + Sync>);

impl BackendError {
    pub(crate) fn new(err: impl StdError + Send + Sync + 'static) -> Self {
        Self(Box::new(err))
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for BackendError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// What a query, a transaction or a connect returns inside the crate: a business outcome already
/// decided, or a driver error not yet classified. `?` works on both; the `Store` implementations
/// turn it into a [`StoreError`] at their boundary, where driver errors are classified once.
#[derive(Debug)]
pub(crate) enum SqlError {
    Store(StoreError),
    Driver(sqlx::Error),
    Migrate(sqlx::migrate::MigrateError),
}

impl From<StoreError> for SqlError {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

impl From<sqlx::Error> for SqlError {
    fn from(err: sqlx::Error) -> Self {
        Self::Driver(err)
    }
}

impl From<sqlx::migrate::MigrateError> for SqlError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        Self::Migrate(err)
    }
}

impl From<SqlError> for StoreError {
    fn from(err: SqlError) -> Self {
        match err {
            SqlError::Store(err) => err,
            SqlError::Driver(err) if is_transient(&err) => {
                Self::Unavailable(BackendError::new(err))
            }
            SqlError::Driver(err) => Self::Database(BackendError::new(err)),
            SqlError::Migrate(err) => Self::Migrate(BackendError::new(err)),
        }
    }
}

/// Whether a driver error may pass if the operation is tried again: the connection failed, the
/// pool had no connection in time, the database answered that it is busy, locked, shutting
/// down, out of resources, or chose this transaction as a deadlock's or serialization's victim,
/// or the storage under it failed in a way that ends ([`is_storage_fault`]).
fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::InvalidSavePointStatement => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                sqlite_transient(&code)
            } else {
                db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                    .is_some()
                    && postgres_transient(&code)
            }
        }
        _ => false,
    }
}

/// SQLite's extended result code, by its primary code (the low byte): `SQLITE_BUSY` (5),
/// `SQLITE_LOCKED` (6) and `SQLITE_PROTOCOL` (15, a lock race in WAL recovery), and the storage
/// faults of [`sqlite_storage_fault`].
fn sqlite_transient(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|code| matches!(code & 0xff, 5 | 6 | 15))
        || sqlite_storage_fault(code)
}

/// SQLite's storage faults, by primary code: `SQLITE_READONLY` (8: the file or its directory
/// not writable, or the file moved), `SQLITE_IOERR` (10), `SQLITE_FULL` (13: disk full),
/// `SQLITE_CANTOPEN` (14). Each ends when the storage is back, but a connection that met one
/// may stay unusable (opened read-only, or with a transaction SQLite rolled back on its own).
fn sqlite_storage_fault(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|code| matches!(code & 0xff, 8 | 10 | 13 | 14))
}

/// Whether `err` is a storage fault after which the connections open at the time are not to be
/// used again: a SQLite storage fault ([`sqlite_storage_fault`]), or a connection whose
/// transaction state the driver lost (`begin_with` on a connection it still believes in a
/// transaction, after SQLite rolled one back on its own).
pub(crate) fn is_storage_fault(err: &SqlError) -> bool {
    match err {
        SqlError::Driver(sqlx::Error::InvalidSavePointStatement) => true,
        SqlError::Driver(sqlx::Error::Database(db))
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
        {
            sqlite_storage_fault(&db.code().unwrap_or_default())
        }
        _ => false,
    }
}

/// A PostgreSQL SQLSTATE: connection exceptions (class 08), serialization failure and deadlock
/// (40001, 40P01), insufficient resources (class 53), lock not available (55P03), statement
/// timeout or cancel (57014), and the server shutting down or starting (57P01 to 57P03).
fn postgres_transient(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03"
        )
}

/// The kind of constraint an error violated, when it is one. Both backends report these through
/// sqlx's portable `ErrorKind`, which lets the SQLite and PostgreSQL code map them identically.
fn violation(err: &sqlx::Error) -> Option<sqlx::error::ErrorKind> {
    match err {
        sqlx::Error::Database(db) => Some(db.kind()),
        _ => None,
    }
}

fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(
        violation(err),
        Some(sqlx::error::ErrorKind::UniqueViolation)
    )
}

fn is_foreign_key_violation(err: &sqlx::Error) -> bool {
    matches!(
        violation(err),
        Some(sqlx::error::ErrorKind::ForeignKeyViolation)
    )
}

/// For `map_err` on a statement whose foreign key names a row that must exist: a violation is
/// [`StoreError::NotFound`] of that row (`what`), anything else a driver error.
pub(crate) fn missing(what: impl FnOnce() -> String) -> impl FnOnce(sqlx::Error) -> SqlError {
    move |err| {
        if is_foreign_key_violation(&err) {
            StoreError::not_found(what()).into()
        } else {
            err.into()
        }
    }
}

/// For `map_err` on a statement a unique key guards: a violation is [`StoreError::Conflict`]
/// (`what`), anything else a driver error.
pub(crate) fn duplicate(what: impl FnOnce() -> String) -> impl FnOnce(sqlx::Error) -> SqlError {
    move |err| {
        if is_unique_violation(&err) {
            StoreError::conflict(what()).into()
        } else {
            err.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_and_locked_sqlite_codes_are_transient_by_their_primary_code() {
        // SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT (517), SQLITE_LOCKED_SHAREDCACHE (262).
        for code in ["5", "517", "262", "6", "15"] {
            assert!(sqlite_transient(code), "{code}");
        }
        // SQLITE_CONSTRAINT_UNIQUE (2067), SQLITE_ERROR, SQLITE_CORRUPT.
        for code in ["2067", "1", "11", "x"] {
            assert!(!sqlite_transient(code), "{code}");
        }
    }

    #[test]
    fn sqlite_storage_faults_are_transient_by_their_primary_code() {
        // SQLITE_READONLY, SQLITE_READONLY_DBMOVED (1032), SQLITE_IOERR_WRITE (778),
        // SQLITE_FULL, SQLITE_CANTOPEN.
        for code in ["8", "1032", "778", "13", "14"] {
            assert!(sqlite_storage_fault(code), "{code}");
            assert!(sqlite_transient(code), "{code}");
        }
        for code in ["5", "11", "2067", "x"] {
            assert!(!sqlite_storage_fault(code), "{code}");
        }
    }

    #[test]
    fn postgres_sqlstates_that_pass_are_transient() {
        for code in ["08006", "40001", "40P01", "53300", "57P01", "55P03"] {
            assert!(postgres_transient(code), "{code}");
        }
        // unique_violation, syntax_error, undefined_table.
        for code in ["23505", "42601", "42P01"] {
            assert!(!postgres_transient(code), "{code}");
        }
    }

    #[test]
    fn driver_errors_are_classified_and_kept_as_the_opaque_source() {
        let unavailable = StoreError::from(SqlError::from(sqlx::Error::PoolTimedOut));
        assert!(matches!(unavailable, StoreError::Unavailable(_)));
        assert!(unavailable.is_transient());
        let source = StdError::source(&unavailable).expect("the driver's error");
        assert_eq!(source.to_string(), sqlx::Error::PoolTimedOut.to_string());

        let permanent = StoreError::from(SqlError::from(sqlx::Error::PoolClosed));
        assert!(matches!(permanent, StoreError::Database(_)));
        assert!(!permanent.is_transient());

        let decided = StoreError::from(SqlError::from(StoreError::conflict("x")));
        assert!(matches!(decided, StoreError::Conflict { .. }));
    }
}
