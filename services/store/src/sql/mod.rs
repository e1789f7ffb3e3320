//! The SQL both backends share: one [`Store`](crate::Store) implementation, written once.
//!
//! This directory is the module `shared` of both `sqlite.rs` and `postgres.rs` (`#[path]`),
//! compiled once for each: there it implements `Store` for the backend's `SqlStore` type, whose
//! backend name is `BACKEND_NAME` and whose database is `Db`. The queries use `$n` placeholders,
//! which PostgreSQL and sqlx's SQLite driver both bind by number, and column encodings (`rows`)
//! that decode the same on both. What differs between the backends is how they connect and three
//! transactions each provides as inherent methods of its store type (see `sqlite.rs` and
//! `postgres.rs` for how and why):
//!
//! * `write_tx()`: a read-write transaction in which appends to a conversation or negotiation get
//!   consecutive sequence numbers;
//! * `read_tx()`: a read-only transaction over one snapshot, for reads of more than one statement;
//! * `activation_tx(id)`: a write transaction in which activations of handler `id`'s protocol are
//!   serialised, so that of two concurrent activations the later one wins;
//!
//! and two hooks around every operation: `check_storage()` before it (SQLite: the database file
//! is still the one opened) and `storage_fault()` after a storage fault (SQLite: the connections
//! open then are retired).
//!
//! The queries live in one file per group of tables, as free functions returning the crate's
//! internal `SqlError`. The trait implementation here runs each operation in its span
//! (`store.<operation>`, with the backend's name and nothing of the data) and turns its `SqlError`
//! into a [`StoreError`], where driver errors are classified once. A call the input rules
//! (`rules`) refuse never reaches a backend and has no span.

mod audit;
mod conversations;
mod handlers;
mod model_usage;
mod negotiations;
mod peers;
mod protocols;
mod uploads;
mod usage;

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::Instrument as _;
use uuid::Uuid;

use super::{BACKEND_NAME, Db, SqlStore};
use crate::StoreError;
use crate::error::SqlError;
use crate::model::{
    Agreement, AuditEvent, AuditFilter, Conversation, Direction, HandlerRecord, LoggedMessage,
    ModelUsage, ModelUsageOwner, Negotiation, NegotiationOutcome, NegotiationRecord, NewAgreement,
    NewAuditEvent, NewConversation, NewHandler, NewNegotiation, NewPeer, PeerRecord, Protocol,
    ProtocolUsage, Role, Upload, UploadMeta,
};
use crate::rules::{
    self, check_audit_event, check_model_usage, check_new_peer, check_outcome, could_exist,
    existing, json, name,
};

/// The span of one business operation: `store.<operation>` at debug level, so that nothing is built
/// when debug is off, naming the backend and nothing of the data.
macro_rules! span {
    ($name:literal) => {
        tracing::debug_span!($name, backend = BACKEND_NAME)
    };
}

/// Runs one operation's queries inside its span, once the backend found its storage as it was
/// (`SqlStore::check_storage`), and turns their `SqlError` into a `StoreError`; a storage fault
/// is reported to the backend first (`SqlStore::storage_fault`), which stops
/// handing out the connections open at the time.
async fn traced<T>(
    store: &SqlStore,
    span: tracing::Span,
    queries: impl Future<Output = Result<T, SqlError>>,
) -> Result<T, StoreError> {
    store.check_storage()?;
    match queries.instrument(span).await {
        Ok(value) => Ok(value),
        Err(err) => {
            if crate::error::is_storage_fault(&err) {
                store.storage_fault();
            }
            Err(err.into())
        }
    }
}

/// One entry of an append-only log (a conversation's messages, a negotiation's transcript), with
/// the sequence number its owner's counter gave it in the same transaction.
struct LogEntry<'a> {
    seq: i64,
    direction: Direction,
    message: &'a Value,
    at: DateTime<Utc>,
}

impl<'a> LogEntry<'a> {
    fn new(seq: i64, direction: Direction, message: &'a Value, at: DateTime<Utc>) -> Self {
        LogEntry {
            seq,
            direction,
            message,
            at,
        }
    }
}

/// Inserts `entry` into a log with `insert` (binding the owner's key, the sequence number, the
/// direction, the message and the time, in that order, and returning the message columns).
async fn append_entry<K>(
    tx: &mut sqlx::Transaction<'static, Db>,
    insert: &'static str,
    owner: K,
    entry: LogEntry<'_>,
) -> Result<LoggedMessage, SqlError>
where
    K: for<'q> sqlx::Encode<'q, Db> + sqlx::Type<Db> + Send + 'static,
{
    let row = sqlx::query_as::<_, crate::rows::MessageRow>(insert)
        .bind(owner)
        .bind(entry.seq)
        .bind(crate::rows::Text(entry.direction))
        .bind(entry.message)
        .bind(entry.at)
        .fetch_one(&mut **tx)
        .await?;
    Ok(row.into())
}

#[async_trait::async_trait]
impl crate::Store for SqlStore {
    fn backend_name(&self) -> &'static str {
        BACKEND_NAME
    }

    async fn check_writable(&self) -> Result<(), StoreError> {
        traced(self, span!("store.check_writable"), async {
            let mut tx = self.write_tx().await?;
            sqlx::query(
                "INSERT INTO write_probe (id, checked_at) VALUES (1, $1)
                 ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
            )
            .bind(crate::store::now())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    // --- conversations -------------------------------------------------------------------------

    async fn create_conversation(&self, new: NewConversation) -> Result<Conversation, StoreError> {
        name("conversation id", &new.id)?;
        if let Some(peer) = &new.peer {
            rules::text("peer", peer)?;
        }
        json("conversation state", &new.state)?;
        traced(
            self,
            span!("store.create_conversation"),
            conversations::create(self, new),
        )
        .await
    }

    async fn get_conversation(&self, id: &str) -> Result<Option<Conversation>, StoreError> {
        if !could_exist(id) {
            return Ok(None);
        }
        traced(
            self,
            span!("store.get_conversation"),
            conversations::get(self, id),
        )
        .await
    }

    async fn touch_conversation(&self, id: &str) -> Result<DateTime<Utc>, StoreError> {
        existing("conversation", id)?;
        traced(
            self,
            span!("store.touch_conversation"),
            conversations::touch(self, id),
        )
        .await
    }

    async fn update_conversation_state(
        &self,
        id: &str,
        expected_version: i64,
        state: &Value,
    ) -> Result<i64, StoreError> {
        existing("conversation", id)?;
        json("conversation state", state)?;
        traced(
            self,
            span!("store.update_conversation_state"),
            conversations::update_state(self, id, expected_version, state),
        )
        .await
    }

    async fn append_message(
        &self,
        conversation_id: &str,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError> {
        existing("conversation", conversation_id)?;
        json("message", message)?;
        traced(
            self,
            span!("store.append_message"),
            conversations::append_message(self, conversation_id, direction, message),
        )
        .await
    }

    async fn list_messages(
        &self,
        conversation_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        existing("conversation", conversation_id)?;
        traced(
            self,
            span!("store.list_messages"),
            conversations::list_messages(self, conversation_id, after_seq, limit),
        )
        .await
    }

    async fn expire_conversations(
        &self,
        idle_since: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        rules::past("idle cut-off", idle_since)?;
        traced(
            self,
            span!("store.expire_conversations"),
            conversations::expire(self, idle_since, limit),
        )
        .await
    }

    // --- uploads -------------------------------------------------------------------------------

    async fn put_upload(
        &self,
        bytes: &[u8],
        content_type: &str,
        filename: Option<&str>,
    ) -> Result<UploadMeta, StoreError> {
        name("content type", content_type)?;
        if let Some(filename) = filename {
            rules::text("filename", filename)?;
        }
        traced(
            self,
            span!("store.put_upload"),
            uploads::put(self, bytes, content_type, filename),
        )
        .await
    }

    async fn get_upload(&self, id: &str) -> Result<Option<Upload>, StoreError> {
        rules::hash("upload id", id)?;
        traced(self, span!("store.get_upload"), uploads::get(self, id)).await
    }

    async fn upload_meta(&self, id: &str) -> Result<Option<UploadMeta>, StoreError> {
        rules::hash("upload id", id)?;
        traced(self, span!("store.upload_meta"), uploads::meta(self, id)).await
    }

    async fn uploads_size(&self) -> Result<u64, StoreError> {
        traced(self, span!("store.uploads_size"), uploads::total_size(self)).await
    }

    // --- protocols and agreements --------------------------------------------------------------

    async fn put_protocol(&self, text: &str) -> Result<Protocol, StoreError> {
        name("protocol text", text)?;
        traced(
            self,
            span!("store.put_protocol"),
            protocols::put(self, text),
        )
        .await
    }

    async fn get_protocol(&self, hash: &str) -> Result<Option<Protocol>, StoreError> {
        rules::hash("protocol hash", hash)?;
        traced(
            self,
            span!("store.get_protocol"),
            protocols::get(self, hash),
        )
        .await
    }

    async fn protocols_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        rules::hash_prefix("protocol hash prefix", prefix)?;
        traced(
            self,
            span!("store.protocols_with_prefix"),
            protocols::with_prefix(self, prefix, limit),
        )
        .await
    }

    async fn record_agreement(&self, new: NewAgreement) -> Result<Agreement, StoreError> {
        name("peer", &new.peer)?;
        if let Some(url) = &new.peer_url {
            rules::text("peer URL", url)?;
        }
        rules::hash("protocol hash", &new.protocol_hash)?;
        traced(
            self,
            span!("store.record_agreement"),
            protocols::record_agreement(self, new),
        )
        .await
    }

    async fn agreements_with_peer(
        &self,
        peer: &str,
        role: Role,
    ) -> Result<Vec<Agreement>, StoreError> {
        if !could_exist(peer) {
            return Ok(Vec::new());
        }
        traced(
            self,
            span!("store.agreements_with_peer"),
            protocols::agreements_with_peer(self, peer, role),
        )
        .await
    }

    async fn agreements_for_protocol(&self, hash: &str) -> Result<Vec<Agreement>, StoreError> {
        rules::hash("protocol hash", hash)?;
        traced(
            self,
            span!("store.agreements_for_protocol"),
            protocols::agreements_for_protocol(self, hash),
        )
        .await
    }

    async fn list_agreements(&self, limit: u32) -> Result<Vec<Agreement>, StoreError> {
        traced(
            self,
            span!("store.list_agreements"),
            protocols::list_agreements(self, limit),
        )
        .await
    }

    // --- negotiations --------------------------------------------------------------------------

    async fn start_negotiation(&self, new: NewNegotiation) -> Result<Negotiation, StoreError> {
        existing("conversation", &new.conversation_id)?;
        name("peer", &new.peer)?;
        traced(
            self,
            span!("store.start_negotiation"),
            negotiations::start(self, new),
        )
        .await
    }

    async fn append_transcript(
        &self,
        negotiation_id: Uuid,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError> {
        json("message", message)?;
        traced(
            self,
            span!("store.append_transcript"),
            negotiations::append_transcript(self, negotiation_id, direction, message),
        )
        .await
    }

    async fn finish_negotiation(
        &self,
        id: Uuid,
        outcome: NegotiationOutcome,
    ) -> Result<Negotiation, StoreError> {
        check_outcome(&outcome)?;
        traced(
            self,
            span!("store.finish_negotiation"),
            negotiations::finish(self, id, outcome),
        )
        .await
    }

    async fn get_negotiation(&self, id: Uuid) -> Result<Option<NegotiationRecord>, StoreError> {
        traced(
            self,
            span!("store.get_negotiation"),
            negotiations::get(self, id),
        )
        .await
    }

    async fn negotiations_for_protocol(&self, hash: &str) -> Result<Vec<Negotiation>, StoreError> {
        rules::hash("protocol hash", hash)?;
        traced(
            self,
            span!("store.negotiations_for_protocol"),
            negotiations::for_protocol(self, hash),
        )
        .await
    }

    async fn fail_interrupted_negotiations(
        &self,
        before: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        traced(
            self,
            span!("store.fail_interrupted_negotiations"),
            negotiations::fail_interrupted(self, before),
        )
        .await
    }

    // --- handlers ------------------------------------------------------------------------------

    async fn insert_handler_candidate(&self, new: NewHandler) -> Result<HandlerRecord, StoreError> {
        rules::hash("protocol hash", &new.protocol_hash)?;
        rules::text("handler source", &new.source)?;
        name("handler backend", &new.backend)?;
        for capability in &new.capabilities {
            name("capability name", capability)?;
        }
        traced(
            self,
            span!("store.insert_handler_candidate"),
            handlers::insert_candidate(self, new),
        )
        .await
    }

    async fn record_handler_verification(
        &self,
        id: Uuid,
        passed: bool,
        report: &Value,
    ) -> Result<HandlerRecord, StoreError> {
        json("verification report", report)?;
        traced(
            self,
            span!("store.record_handler_verification"),
            handlers::record_verification(self, id, passed, report),
        )
        .await
    }

    async fn activate_handler(&self, id: Uuid) -> Result<HandlerRecord, StoreError> {
        traced(
            self,
            span!("store.activate_handler"),
            handlers::activate(self, id),
        )
        .await
    }

    async fn attach_compiled(
        &self,
        id: Uuid,
        compiled: &Value,
    ) -> Result<HandlerRecord, StoreError> {
        if !compiled.is_object() {
            return Err(StoreError::Invalid(
                "a compiled form must be a JSON object".into(),
            ));
        }
        json("compiled form", compiled)?;
        traced(
            self,
            span!("store.attach_compiled"),
            handlers::attach_compiled(self, id, compiled),
        )
        .await
    }

    async fn get_handler(&self, id: Uuid) -> Result<Option<HandlerRecord>, StoreError> {
        traced(self, span!("store.get_handler"), handlers::get(self, id)).await
    }

    async fn active_handler(&self, hash: &str) -> Result<Option<HandlerRecord>, StoreError> {
        rules::hash("protocol hash", hash)?;
        traced(
            self,
            span!("store.active_handler"),
            handlers::active(self, hash),
        )
        .await
    }

    async fn active_protocols(&self, limit: u32) -> Result<Vec<Protocol>, StoreError> {
        traced(
            self,
            span!("store.active_protocols"),
            handlers::active_protocols(self, limit),
        )
        .await
    }

    // --- usage ---------------------------------------------------------------------------------

    async fn record_usage(
        &self,
        peer: &str,
        hash: &str,
        ok: u64,
        errors: u64,
    ) -> Result<ProtocolUsage, StoreError> {
        name("peer", peer)?;
        rules::hash("protocol hash", hash)?;
        traced(
            self,
            span!("store.record_usage"),
            usage::record(self, peer, hash, ok, errors),
        )
        .await
    }

    async fn usage(&self, peer: &str, hash: &str) -> Result<Option<ProtocolUsage>, StoreError> {
        rules::hash("protocol hash", hash)?;
        if !could_exist(peer) {
            return Ok(None);
        }
        traced(self, span!("store.usage"), usage::get(self, peer, hash)).await
    }

    // --- model usage ---------------------------------------------------------------------------

    async fn record_model_usage(
        &self,
        owner: &ModelUsageOwner,
        usage: &[ModelUsage],
    ) -> Result<Vec<ModelUsage>, StoreError> {
        if let ModelUsageOwner::Conversation(id) = owner {
            existing("conversation", id)?;
        }
        for entry in usage {
            check_model_usage(entry)?;
        }
        if usage.is_empty() {
            return Ok(Vec::new());
        }
        traced(
            self,
            span!("store.record_model_usage"),
            model_usage::record(self, owner, usage),
        )
        .await
    }

    async fn model_usage(&self, owner: &ModelUsageOwner) -> Result<Vec<ModelUsage>, StoreError> {
        if let ModelUsageOwner::Conversation(id) = owner
            && !could_exist(id)
        {
            return Ok(Vec::new());
        }
        traced(
            self,
            span!("store.model_usage"),
            model_usage::list(self, owner),
        )
        .await
    }

    // --- peers ---------------------------------------------------------------------------------

    async fn add_peer(&self, peer: NewPeer) -> Result<PeerRecord, StoreError> {
        check_new_peer(&peer)?;
        traced(self, span!("store.add_peer"), peers::add(self, peer)).await
    }

    async fn peer_by_key_id(&self, key_id: &str) -> Result<Option<PeerRecord>, StoreError> {
        if !could_exist(key_id) {
            return Ok(None);
        }
        traced(
            self,
            span!("store.peer_by_key_id"),
            peers::by_key_id(self, key_id),
        )
        .await
    }

    // --- audit ---------------------------------------------------------------------------------

    async fn append_audit(&self, events: &[NewAuditEvent]) -> Result<(), StoreError> {
        for event in events {
            check_audit_event(event)?;
        }
        if events.is_empty() {
            return Ok(());
        }
        traced(
            self,
            span!("store.append_audit"),
            audit::append(self, events),
        )
        .await
    }

    async fn list_peers(&self) -> Result<Vec<PeerRecord>, StoreError> {
        traced(self, span!("store.list_peers"), peers::list(self)).await
    }

    async fn revoke_peer(&self, id: &str) -> Result<PeerRecord, StoreError> {
        existing("peer", id)?;
        traced(self, span!("store.revoke_peer"), peers::revoke(self, id)).await
    }

    async fn expire_audit(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        rules::past("audit cut-off", before)?;
        traced(
            self,
            span!("store.expire_audit"),
            audit::expire(self, before, limit),
        )
        .await
    }

    async fn list_audit(&self, filter: AuditFilter) -> Result<Vec<AuditEvent>, StoreError> {
        let words = [
            &filter.peer,
            &filter.address,
            &filter.action,
            &filter.outcome,
        ];
        if words.into_iter().flatten().any(|w| !could_exist(w)) {
            return Ok(Vec::new());
        }
        traced(self, span!("store.list_audit"), audit::list(self, filter)).await
    }
}
