//! Persistent store for conversations, uploads and negotiated protocols (SQLite and PostgreSQL).
//!
//! Parley keeps everything that must survive a restart here: NLIP conversations and their message
//! logs, content-addressed uploads, agreed ANP protocols and who agreed them, negotiation
//! transcripts, generated handlers, per-peer protocol usage, the language-model calls and tokens
//! each conversation and negotiation spent, the peers the operator declared (their API keys'
//! digests and grants), and the audit log of who did what. Callers see one [`Store`] trait of
//! business operations; [`connect`] picks the backend from the URL.
//!
//! # Layout
//! - [`store`](Store): the trait, [`StoreOptions`], hashing and the clock both backends share.
//! - `rules`: the input rules (well-formed hashes, no U+0000, non-empty names), checked by every
//!   operation before its queries so the two backends cannot differ in what they accept.
//! - [`model`]: the records as plain Rust values (`serde_json::Value` for messages and state).
//! - `rows`: `FromRow` structs shared by both backends, column lists, and the TEXT/UUID encodings.
//! - `sql/`: the one implementation of [`Store`] both backends share (`$n` placeholders),
//!   compiled as a child module of each backend; one file of queries per group of tables.
//! - `sqlite`, `postgres`: how each backend connects, and the three kinds of transaction the shared
//!   queries run in (write, one-snapshot read, handler activation); `sqlite/faults`: recovering
//!   from storage faults and noticing a database file deleted under the store.
//! - [`StoreError`]: `NotFound`, `Conflict`, `Invalid` and `Unavailable` for callers to act on;
//!   the driver's error is an opaque [`BackendError`] source.
//! - `testing` (feature `testing`): isolated databases for other crates' integration tests.
//! - Migrations live in `migrations/sqlite` and `migrations/postgres` at the workspace root, one
//!   table per file with the same names on both sides, embedded with `sqlx::migrate!` and applied by
//!   [`connect`].
//!
//! # Invariants
//! - **The store is the only crate that knows SQL.** No sqlx type appears in the public API; other
//!   crates get `Arc<dyn Store>`.
//! - **The store knows nothing about NLIP or ANP.** Messages, states and verification reports are
//!   JSON values; protocol texts are strings.
//! - **Both backends behave the same**: [`connect`] always puts the shared input rules in front,
//!   and one story test runs against both.
//! - **Each trait method is one transaction.** A caller never holds a transaction across awaits of
//!   its own, so no business rule depends on the caller's discipline.
//! - **The store computes what identifies data**: upload ids and protocol hashes (SHA-256 of the
//!   exact bytes), handler source hashes, log sequence numbers, UUIDs and timestamps. Nothing of the
//!   kind is taken from a caller, but the time of an audit event: it happened before the batch
//!   that records it was written.
//! - **Rules that matter are also constraints**: one active handler per protocol (partial unique
//!   index), consecutive log sequence numbers (primary key + counter row), an accepted negotiation
//!   names its protocol (CHECK), every enumeration is a CHECKed closed set.
//! - **Migrations are never edited once applied**; a change is a new numbered file on both sides.
//! - **Operations are traced, data is not**: each runs in a `store.<operation>` span (debug level)
//!   whose one field is the backend's name; no message, state or value reaches a span or a log.

mod error;
pub mod model;
mod postgres;
mod rows;
mod rules;
mod sqlite;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

use tracing::Instrument as _;

pub use error::{BackendError, StoreError};
pub use model::{
    Agreement, AuditEvent, AuditFilter, Conversation, Direction, HandlerRecord, HandlerState,
    LoggedMessage, ModelUsage, ModelUsageOwner, Negotiation, NegotiationOutcome, NegotiationRecord,
    NegotiationStatus, NewAgreement, NewAuditEvent, NewConversation, NewHandler, NewNegotiation,
    NewPeer, PeerRecord, Protocol, ProtocolUsage, Role, Upload, UploadMeta,
};
pub use store::{MAX_AUDIT_TEXT, MAX_PAGE, Store, StoreOptions, sha256_hex};

/// Opens the store named by `url` and brings its schema up to date.
///
/// - `sqlite://path/to/parley.db?mode=rwc` — embedded; `mode=rwc` creates the file and its parent
///   directory. `sqlite::memory:` works for throwaway use (one connection).
/// - `postgres://…` or `postgresql://…` — a connection pool of `opts.max_connections`.
///
/// Migrations run on every connect; already applied ones are skipped, and sqlx refuses to start if
/// an applied migration was edited since.
pub async fn connect(url: &str, opts: StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("sqlite:") {
        let store = sqlite::SqliteStore::connect(url, &opts)
            .instrument(tracing::debug_span!("store.connect", backend = "sqlite"))
            .await?;
        Ok(Arc::new(store))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = postgres::PgStore::connect(url, &opts)
            .instrument(tracing::debug_span!("store.connect", backend = "postgres"))
            .await?;
        Ok(Arc::new(store))
    } else {
        // Only the scheme is echoed: the rest of a URL may hold a password.
        let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
        Err(StoreError::Invalid(format!(
            "unsupported database URL scheme {scheme:?}; use sqlite: or postgres:"
        )))
    }
}
