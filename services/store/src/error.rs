//! The one error type of the store.

use thiserror::Error;

/// What can go wrong in a store operation.
///
/// The first three variants are outcomes a caller acts on (404, 409, 400 at the HTTP edge). The last
/// two are opaque: the caller logs them and answers "internal error"; the cause chain stays in
/// `source()` and is never rendered into a response.
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

    /// The caller passed something the store refuses (a malformed hash, a nonsensical outcome).
    #[error("invalid input: {0}")]
    Invalid(String),

    /// The database failed or is unreachable.
    #[error("database error")]
    Database(#[source] sqlx::Error),

    /// Applying the embedded migrations failed (at `connect`).
    #[error("database migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
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
    /// request being wrong.
    pub fn is_transient(&self) -> bool {
        let Self::Database(err) = self else {
            return false;
        };
        match err {
            sqlx::Error::Database(_) => {
                matches!(violation(err), Some(sqlx::error::ErrorKind::Other))
            }
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::WorkerCrashed => true,
            _ => false,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        Self::Database(err)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        Self::Migrate(err)
    }
}

/// The kind of constraint an error violated, when it is one. Both backends report these through
/// sqlx's portable `ErrorKind`, which lets the SQLite and PostgreSQL code map them identically.
pub(crate) fn violation(err: &sqlx::Error) -> Option<sqlx::error::ErrorKind> {
    match err {
        sqlx::Error::Database(db) => Some(db.kind()),
        _ => None,
    }
}

pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(
        violation(err),
        Some(sqlx::error::ErrorKind::UniqueViolation)
    )
}

pub(crate) fn is_foreign_key_violation(err: &sqlx::Error) -> bool {
    matches!(
        violation(err),
        Some(sqlx::error::ErrorKind::ForeignKeyViolation)
    )
}
