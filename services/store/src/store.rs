//! The `Store` trait, its options, and the checks both backends share.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::StoreError;
use crate::model::{
    Agreement, AuditEvent, AuditFilter, Conversation, Direction, HandlerRecord, LoggedMessage,
    ModelUsage, ModelUsageOwner, Negotiation, NegotiationOutcome, NegotiationRecord, NewAgreement,
    NewAuditEvent, NewConversation, NewHandler, NewNegotiation, NewPeer, PeerRecord, Protocol,
    ProtocolUsage, Role, Upload, UploadMeta,
};

/// Most rows a listing returns, whatever limit the caller asks for; keeps one request from pulling a
/// whole log into memory.
pub const MAX_PAGE: u32 = 1000;

/// Longest an audit event's words (`peer`, `address`, `action`, `subject`, `outcome`) may be, in
/// bytes: they name things, and a peer chooses some of them (a capability name it asked for).
pub const MAX_AUDIT_TEXT: usize = 1024;

/// Connection settings that are not part of the URL.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Pool size. SQLite has one writer at a time anyway; extra connections serve concurrent reads.
    pub max_connections: u32,
    /// How long an operation waits for a pooled connection before failing.
    pub acquire_timeout: Duration,
    /// SQLite only: how long a writer waits for the database lock before giving up with "busy".
    pub busy_timeout: Duration,
    /// PostgreSQL only: how long `connect` waits for its first connection (a server that is down
    /// or does not answer). The migrations after it are not bounded: another instance may hold
    /// the migration lock for as long as its migrations take.
    pub connect_timeout: Duration,
    /// Most messages a conversation's log keeps: appending one more deletes the oldest, in the
    /// same transaction (`None`: every message is kept). Sequence numbers are not reused, so
    /// a log that was trimmed starts after 1.
    pub max_log_messages: Option<u32>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
            busy_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            max_log_messages: None,
        }
    }
}

/// Every persistent operation Parley performs, one business operation per method, each in one
/// transaction.
///
/// Conventions:
/// * lookups by key (`get_*`, `active_handler`, `usage`, `upload_meta`) return `Ok(None)` when the
///   row does not exist: absence is an answer there, not an error;
/// * operations on a row that must exist return [`StoreError::NotFound`];
/// * losing a race or contradicting the current state returns [`StoreError::Conflict`];
/// * the store assigns sequence numbers, UUIDs, content hashes and timestamps itself.
///
/// Method order here is the order of the implementation both backends share (`sql/mod.rs`),
/// which checks each operation's input with the rules in `rules.rs` before its queries.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// `"sqlite"` or `"postgres"`, for logs and health output.
    fn backend_name(&self) -> &'static str;

    /// Writes one row of its own in a write transaction: the database takes writes now (its disk
    /// is not full, it is not read-only, its file is the one opened). What readiness checks.
    async fn check_writable(&self) -> Result<(), StoreError>;

    // --- conversations -------------------------------------------------------------------------

    /// Stores a new conversation at version 0 with an empty log. A duplicate id is a `Conflict`.
    async fn create_conversation(&self, new: NewConversation) -> Result<Conversation, StoreError>;

    async fn get_conversation(&self, id: &str) -> Result<Option<Conversation>, StoreError>;

    /// Marks activity without changing anything else; returns the new `updated_at`.
    async fn touch_conversation(&self, id: &str) -> Result<DateTime<Utc>, StoreError>;

    /// Replaces the state if its version is still `expected_version`; returns the new version.
    /// A stale version is a `Conflict` (re-read, merge, retry).
    async fn update_conversation_state(
        &self,
        id: &str,
        expected_version: i64,
        state: &Value,
    ) -> Result<i64, StoreError>;

    /// Appends to the conversation log under the next sequence number (1, 2, 3, ... with no gaps,
    /// also under concurrent appends) and marks activity; with
    /// [`StoreOptions::max_log_messages`], the oldest messages beyond it are deleted.
    async fn append_message(
        &self,
        conversation_id: &str,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError>;

    /// Messages with `seq > after_seq`, oldest first, at most `limit` (capped at [`MAX_PAGE`]).
    /// Page with the last `seq` seen; the newest N start after `message_count - N`.
    async fn list_messages(
        &self,
        conversation_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<LoggedMessage>, StoreError>;

    /// Deletes at most `limit` (capped at [`MAX_PAGE`]) conversations whose last activity
    /// (`updated_at`: a message appended, the state written, a touch) is before `idle_since`,
    /// oldest first, with their logs, their model usage and their negotiations (with the
    /// negotiations' transcripts and model usage). Protocols, agreements, handlers and protocol
    /// usage stay. Returns how many; a caller sweeps until fewer than `limit` went. A cut-off
    /// in the future is `Invalid`: it would take conversations active now.
    async fn expire_conversations(
        &self,
        idle_since: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError>;

    // --- uploads -------------------------------------------------------------------------------

    /// Stores the bytes under their SHA-256. Idempotent: the same bytes again return the existing
    /// metadata (the first upload's content type and filename win).
    async fn put_upload(
        &self,
        bytes: &[u8],
        content_type: &str,
        filename: Option<&str>,
    ) -> Result<UploadMeta, StoreError>;

    async fn get_upload(&self, id: &str) -> Result<Option<Upload>, StoreError>;

    /// Metadata only, without reading the bytes.
    async fn upload_meta(&self, id: &str) -> Result<Option<UploadMeta>, StoreError>;

    /// How many bytes the stored uploads take together.
    async fn uploads_size(&self) -> Result<u64, StoreError>;

    // --- protocols and agreements --------------------------------------------------------------

    /// Stores a protocol text under the SHA-256 of its exact UTF-8 bytes. Idempotent.
    async fn put_protocol(&self, text: &str) -> Result<Protocol, StoreError>;

    async fn get_protocol(&self, hash: &str) -> Result<Option<Protocol>, StoreError>;

    /// Hashes of the stored protocols that begin with `prefix` (1 to 64 lower-case hex digits),
    /// in order, at most `limit` (capped at [`MAX_PAGE`]): how a short hash is resolved, as git
    /// resolves an abbreviated object name.
    async fn protocols_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError>;

    /// Records (or renews) that `peer` agreed a stored protocol with us in `role`.
    async fn record_agreement(&self, new: NewAgreement) -> Result<Agreement, StoreError>;

    /// Protocols agreed with `peer` in which we played `role`, most recently agreed first.
    async fn agreements_with_peer(
        &self,
        peer: &str,
        role: Role,
    ) -> Result<Vec<Agreement>, StoreError>;

    /// Everyone who agreed protocol `hash`, in either role, most recently agreed first.
    async fn agreements_for_protocol(&self, hash: &str) -> Result<Vec<Agreement>, StoreError>;

    /// Every agreement, most recently agreed first, at most `limit` (capped at [`MAX_PAGE`]).
    async fn list_agreements(&self, limit: u32) -> Result<Vec<Agreement>, StoreError>;

    // --- negotiations --------------------------------------------------------------------------

    /// Starts a negotiation in an existing conversation; the store mints its id.
    async fn start_negotiation(&self, new: NewNegotiation) -> Result<Negotiation, StoreError>;

    /// Appends to the transcript under the next sequence number (same rules as `append_message`).
    async fn append_transcript(
        &self,
        negotiation_id: Uuid,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError>;

    /// Ends a negotiation exactly once; finishing it again is a `Conflict`.
    async fn finish_negotiation(
        &self,
        id: Uuid,
        outcome: NegotiationOutcome,
    ) -> Result<Negotiation, StoreError>;

    /// A negotiation with its full transcript.
    async fn get_negotiation(&self, id: Uuid) -> Result<Option<NegotiationRecord>, StoreError>;

    /// Negotiations that recorded protocol `hash`, newest first.
    async fn negotiations_for_protocol(&self, hash: &str) -> Result<Vec<Negotiation>, StoreError>;

    /// Ends as `failed`, with the reason `interrupted`, every negotiation still `negotiating`
    /// whose last turn never finished: its newest transcript message is the peer's, recorded
    /// before `before` (or it has none, and started before `before`). What a process that
    /// stopped in the middle of a turn leaves behind; a turn still running elsewhere is younger
    /// than `before` when `before` is older than the longest a turn may run. Returns how many.
    async fn fail_interrupted_negotiations(&self, before: DateTime<Utc>)
    -> Result<u64, StoreError>;

    // --- handlers ------------------------------------------------------------------------------

    /// Stores generated code as a candidate for a stored protocol; the store hashes the source.
    async fn insert_handler_candidate(&self, new: NewHandler) -> Result<HandlerRecord, StoreError>;

    /// Records the verifier's report for a candidate. Passing keeps it a candidate, ready to
    /// activate; failing marks it `failed`. Only candidates can be verified.
    async fn record_handler_verification(
        &self,
        id: Uuid,
        passed: bool,
        report: &Value,
    ) -> Result<HandlerRecord, StoreError>;

    /// Makes a verified candidate (or a retired handler, to roll back) the active handler of its
    /// protocol and retires the previously active one, atomically. Activating the active handler
    /// again is a no-op.
    async fn activate_handler(&self, id: Uuid) -> Result<HandlerRecord, StoreError>;

    /// Attaches a handler's compiled form (a JSON object: the mapping its source was generated
    /// from) once it answered every test case as the source did. Only a handler that passed
    /// verification and is a candidate or active takes one (else `Conflict`); an unknown id is
    /// `NotFound`, anything but an object `Invalid`. Stored as its exact JSON text: it reads back
    /// with its keys in the same order.
    async fn attach_compiled(
        &self,
        id: Uuid,
        compiled: &Value,
    ) -> Result<HandlerRecord, StoreError>;

    async fn get_handler(&self, id: Uuid) -> Result<Option<HandlerRecord>, StoreError>;

    /// The handler serving protocol `hash`, if one is active.
    async fn active_handler(&self, hash: &str) -> Result<Option<HandlerRecord>, StoreError>;

    /// The protocols that have an active handler (what this agent serves as a provider), in
    /// the order their handlers became active, at most `limit` (capped at [`MAX_PAGE`]).
    async fn active_protocols(&self, limit: u32) -> Result<Vec<Protocol>, StoreError>;

    // --- usage ---------------------------------------------------------------------------------

    /// Adds `ok` successful and `errors` failed calls of protocol `hash` by `peer` (callers may
    /// batch counts; the row is upserted once per call of this method).
    async fn record_usage(
        &self,
        peer: &str,
        hash: &str,
        ok: u64,
        errors: u64,
    ) -> Result<ProtocolUsage, StoreError>;

    async fn usage(&self, peer: &str, hash: &str) -> Result<Option<ProtocolUsage>, StoreError>;

    // --- model usage ---------------------------------------------------------------------------

    /// Adds `usage` (entries for the same purpose add up) to what `owner` has spent on language
    /// models, in one transaction, and returns the owner's new totals of the purposes written, in
    /// the order given. An owner that does not exist is `NotFound`; a negative count, or more
    /// unmetered calls than calls in one entry, is `Invalid`.
    async fn record_model_usage(
        &self,
        owner: &ModelUsageOwner,
        usage: &[ModelUsage],
    ) -> Result<Vec<ModelUsage>, StoreError>;

    /// What `owner` has spent on language models, one entry per purpose, by purpose name; empty
    /// when it never called a model (or does not exist).
    async fn model_usage(&self, owner: &ModelUsageOwner) -> Result<Vec<ModelUsage>, StoreError>;

    // --- peers ---------------------------------------------------------------------------------

    /// Declares a peer. An id already declared (revoked or not) or a key id already another
    /// peer's is a `Conflict`; a key without its digest (or the reverse), a digest that is not a
    /// SHA-256, or grants that are not a JSON object are `Invalid`.
    async fn add_peer(&self, peer: NewPeer) -> Result<PeerRecord, StoreError>;

    /// The peer whose API key has this public id, revoked ones included: the caller checks
    /// `revoked_at` (and the digest).
    async fn peer_by_key_id(&self, key_id: &str) -> Result<Option<PeerRecord>, StoreError>;

    /// Every declared peer, revoked ones included, by id.
    async fn list_peers(&self) -> Result<Vec<PeerRecord>, StoreError>;

    /// Stops honouring a peer's key from now on; the peer keeps its row (its id and key id are
    /// not given out again). Revoking a revoked peer keeps the first time; an unknown id is
    /// `NotFound`.
    async fn revoke_peer(&self, id: &str) -> Result<PeerRecord, StoreError>;
    // --- audit ---------------------------------------------------------------------------------

    /// Appends `events` to the audit log in one transaction: all of them or none (an empty batch
    /// writes nothing). Every event is checked first: `action`, `subject` and `outcome` not
    /// empty, `peer` and `address` not empty when given, none of them longer than
    /// [`MAX_AUDIT_TEXT`] bytes, no U+0000 anywhere; one bad event makes the batch `Invalid`.
    /// Only its retention ([`Store::expire_audit`]) deletes an audit event: not the expiry of the
    /// conversation it happened in, nor anything else.
    async fn append_audit(&self, events: &[NewAuditEvent]) -> Result<(), StoreError>;

    /// Deletes at most `limit` (capped at [`MAX_PAGE`]) audit events that happened before
    /// `before`, oldest first; returns how many. A caller sweeps until fewer than `limit` went.
    /// A cut-off in the future is `Invalid`: it would take events of now.
    async fn expire_audit(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;

    /// The audit events matching every field `filter` sets, newest first (of one instant, the
    /// later recorded first), at most `filter.limit` (capped at [`MAX_PAGE`]). A filter value no
    /// event can have (empty, or holding U+0000) matches nothing.
    async fn list_audit(&self, filter: AuditFilter) -> Result<Vec<AuditEvent>, StoreError>;
}

// --- shared by both backends -------------------------------------------------------------------

/// The current instant at microsecond precision: PostgreSQL keeps microseconds, so truncating here
/// makes a value read back equal to the value written on both backends.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Lower-case hex SHA-256, the form every hash column holds.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A page size the database can bind (i64) and that respects [`MAX_PAGE`].
pub(crate) fn page_limit(limit: u32) -> i64 {
    i64::from(limit.min(MAX_PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_is_lower_case_hex_of_the_exact_bytes() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn now_has_microsecond_precision() {
        assert_eq!(now().timestamp_subsec_nanos() % 1000, 0);
    }

    #[test]
    fn page_limit_is_capped() {
        assert_eq!(page_limit(5), 5);
        assert_eq!(page_limit(u32::MAX), i64::from(MAX_PAGE));
    }
}
