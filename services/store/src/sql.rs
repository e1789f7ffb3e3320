//! The SQL both backends share: one [`Store`](crate::Store) implementation, written once.
//!
//! This file is the module `shared` of both `sqlite.rs` and `postgres.rs` (`#[path]`), compiled
//! once for each: there it implements `Store` for the backend's `SqlStore` type, whose backend name
//! is `BACKEND_NAME`. The queries use `$n` placeholders, which PostgreSQL and sqlx's SQLite driver
//! both bind by number, and column encodings (`rows`) that decode the same on both. What differs
//! between the backends is how they connect and three transactions each provides as inherent
//! methods of its store type (see `sqlite.rs` and `postgres.rs` for how and why):
//!
//! * `write_tx()`: a read-write transaction in which appends to a conversation or negotiation get
//!   consecutive sequence numbers;
//! * `read_tx()`: a read-only transaction over one snapshot, for reads of more than one statement;
//! * `activation_tx(id)`: a write transaction in which activations of handler `id`'s protocol are
//!   serialised, so that of two concurrent activations the later one wins.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use crate::StoreError;
use crate::error::{is_foreign_key_violation, is_unique_violation};
use crate::model::{
    Agreement, Conversation, Direction, Handler, HandlerState, LoggedMessage, Negotiation,
    NegotiationOutcome, NegotiationRecord, NegotiationStatus, NewAgreement, NewConversation,
    NewHandler, NewNegotiation, Protocol, ProtocolUsage, Role, Upload, UploadMeta,
};
use crate::rows::{
    AgreementRow, ConversationRow, DbUuid, HandlerRow, MessageRow, NegotiationRow, ProtocolRow,
    UploadMetaRow, UploadRow, UsageRow, agreement_columns, conversation_columns, handler_columns,
    message_columns, negotiation_columns, protocol_columns, upload_meta_columns, usage_columns,
};
use crate::store::{now, page_limit, sha256_hex};

#[async_trait::async_trait]
impl crate::Store for super::SqlStore {
    fn backend_name(&self) -> &'static str {
        super::BACKEND_NAME
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    // --- conversations -------------------------------------------------------------------------

    async fn create_conversation(&self, new: NewConversation) -> Result<Conversation, StoreError> {
        let now = now();
        sqlx::query_as::<_, ConversationRow>(concat!(
            "INSERT INTO conversations (id, peer, state, version, last_seq, created_at, updated_at)
             VALUES ($1, $2, $3, 0, 0, $4, $4)
             RETURNING ",
            conversation_columns!()
        ))
        .bind(&new.id)
        .bind(&new.peer)
        .bind(&new.state)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map(Into::into)
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::conflict(format!("conversation {} already exists", new.id))
            } else {
                e.into()
            }
        })
    }

    async fn get_conversation(&self, id: &str) -> Result<Option<Conversation>, StoreError> {
        let row = sqlx::query_as::<_, ConversationRow>(concat!(
            "SELECT ",
            conversation_columns!(),
            " FROM conversations WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    async fn touch_conversation(&self, id: &str) -> Result<DateTime<Utc>, StoreError> {
        sqlx::query_scalar::<_, DateTime<Utc>>(
            "UPDATE conversations SET updated_at = $2 WHERE id = $1 RETURNING updated_at",
        )
        .bind(id)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::not_found(format!("conversation {id}")))
    }

    async fn update_conversation_state(
        &self,
        id: &str,
        expected_version: i64,
        state: &Value,
    ) -> Result<i64, StoreError> {
        let mut tx = self.write_tx().await?;
        let new_version = sqlx::query_scalar::<_, i64>(
            "UPDATE conversations SET state = $3, version = version + 1, updated_at = $4
             WHERE id = $1 AND version = $2
             RETURNING version",
        )
        .bind(id)
        .bind(expected_version)
        .bind(state)
        .bind(now())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(version) = new_version {
            tx.commit().await?;
            return Ok(version);
        }
        // Nothing updated: tell a stale version from a missing conversation.
        let current =
            sqlx::query_scalar::<_, i64>("SELECT version FROM conversations WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        Err(match current {
            Some(current) => StoreError::conflict(format!(
                "conversation {id} state is at version {current}, not {expected_version}"
            )),
            None => StoreError::not_found(format!("conversation {id}")),
        })
    }

    async fn append_message(
        &self,
        conversation_id: &str,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError> {
        let now = now();
        let mut tx = self.write_tx().await?;
        // Bumping the counter first takes the row's write lock, so concurrent appends queue here
        // and each gets the next number.
        let seq = sqlx::query_scalar::<_, i64>(
            "UPDATE conversations SET last_seq = last_seq + 1, updated_at = $2
             WHERE id = $1
             RETURNING last_seq",
        )
        .bind(conversation_id)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::not_found(format!("conversation {conversation_id}")))?;
        let row = sqlx::query_as::<_, MessageRow>(concat!(
            "INSERT INTO conversation_messages (conversation_id, seq, direction, message, created_at)
             VALUES ($1, $2, $3, $4, $5)
             RETURNING ",
            message_columns!()
        ))
        .bind(conversation_id)
        .bind(seq)
        .bind(direction)
        .bind(message)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    async fn list_messages(
        &self,
        conversation_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        let rows = sqlx::query_as::<_, MessageRow>(concat!(
            "SELECT ",
            message_columns!(),
            " FROM conversation_messages
             WHERE conversation_id = $1 AND seq > $2
             ORDER BY seq
             LIMIT $3"
        ))
        .bind(conversation_id)
        .bind(after_seq)
        .bind(page_limit(limit))
        .fetch_all(&self.pool)
        .await?;
        // An empty page is ambiguous; conversations are never deleted, so checking existence in a
        // second statement cannot race with anything.
        if rows.is_empty() && self.get_conversation(conversation_id).await?.is_none() {
            return Err(StoreError::not_found(format!(
                "conversation {conversation_id}"
            )));
        }
        Ok(rows.into_iter().map(Into::into).collect())
    }

    // --- uploads -------------------------------------------------------------------------------

    async fn put_upload(
        &self,
        bytes: &[u8],
        content_type: &str,
        filename: Option<&str>,
    ) -> Result<UploadMeta, StoreError> {
        let size = i64::try_from(bytes.len())
            .map_err(|_| StoreError::Invalid("upload is too large".into()))?;
        let id = sha256_hex(bytes);
        let mut tx = self.write_tx().await?;
        // Same bytes, same id: a second upload is a no-op and returns the first one's metadata.
        sqlx::query(
            "INSERT INTO uploads (id, size, content_type, filename, bytes, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&id)
        .bind(size)
        .bind(content_type)
        .bind(filename)
        .bind(bytes)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query_as::<_, UploadMetaRow>(concat!(
            "SELECT ",
            upload_meta_columns!(),
            " FROM uploads WHERE id = $1"
        ))
        .bind(&id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    async fn get_upload(&self, id: &str) -> Result<Option<Upload>, StoreError> {
        let row = sqlx::query_as::<_, UploadRow>(concat!(
            "SELECT ",
            upload_meta_columns!(),
            ", bytes FROM uploads WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    async fn upload_meta(&self, id: &str) -> Result<Option<UploadMeta>, StoreError> {
        let row = sqlx::query_as::<_, UploadMetaRow>(concat!(
            "SELECT ",
            upload_meta_columns!(),
            " FROM uploads WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    // --- protocols and agreements --------------------------------------------------------------

    async fn put_protocol(&self, text: &str) -> Result<Protocol, StoreError> {
        let hash = sha256_hex(text.as_bytes());
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO protocols (hash, text, created_at) VALUES ($1, $2, $3)
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(&hash)
        .bind(text)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query_as::<_, ProtocolRow>(concat!(
            "SELECT ",
            protocol_columns!(),
            " FROM protocols WHERE hash = $1"
        ))
        .bind(&hash)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    async fn get_protocol(&self, hash: &str) -> Result<Option<Protocol>, StoreError> {
        let row = sqlx::query_as::<_, ProtocolRow>(concat!(
            "SELECT ",
            protocol_columns!(),
            " FROM protocols WHERE hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    async fn record_agreement(&self, new: NewAgreement) -> Result<Agreement, StoreError> {
        sqlx::query_as::<_, AgreementRow>(concat!(
            "INSERT INTO protocol_agreements
                 (peer, protocol_hash, role, peer_url, agreed_at, last_agreed_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (peer, protocol_hash, role) DO UPDATE SET
                 peer_url = COALESCE(excluded.peer_url, protocol_agreements.peer_url),
                 last_agreed_at = excluded.last_agreed_at
             RETURNING ",
            agreement_columns!()
        ))
        .bind(&new.peer)
        .bind(&new.protocol_hash)
        .bind(new.role)
        .bind(&new.peer_url)
        .bind(now())
        .fetch_one(&self.pool)
        .await
        .map(Into::into)
        .map_err(|e| {
            if is_foreign_key_violation(&e) {
                StoreError::not_found(format!("protocol {}", new.protocol_hash))
            } else {
                e.into()
            }
        })
    }

    async fn agreements_with_peer(
        &self,
        peer: &str,
        role: Role,
    ) -> Result<Vec<Agreement>, StoreError> {
        let rows = sqlx::query_as::<_, AgreementRow>(concat!(
            "SELECT ",
            agreement_columns!(),
            " FROM protocol_agreements
             WHERE peer = $1 AND role = $2
             ORDER BY last_agreed_at DESC, protocol_hash"
        ))
        .bind(peer)
        .bind(role)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn agreements_for_protocol(&self, hash: &str) -> Result<Vec<Agreement>, StoreError> {
        let rows = sqlx::query_as::<_, AgreementRow>(concat!(
            "SELECT ",
            agreement_columns!(),
            " FROM protocol_agreements
             WHERE protocol_hash = $1
             ORDER BY last_agreed_at DESC, peer, role"
        ))
        .bind(hash)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn list_agreements(&self, limit: u32) -> Result<Vec<Agreement>, StoreError> {
        let rows = sqlx::query_as::<_, AgreementRow>(concat!(
            "SELECT ",
            agreement_columns!(),
            " FROM protocol_agreements
             ORDER BY last_agreed_at DESC, peer, role
             LIMIT $1"
        ))
        .bind(page_limit(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    // --- negotiations --------------------------------------------------------------------------

    async fn start_negotiation(&self, new: NewNegotiation) -> Result<Negotiation, StoreError> {
        sqlx::query_as::<_, NegotiationRow>(concat!(
            "INSERT INTO negotiations
                 (id, conversation_id, role, peer, status, rounds, last_seq, started_at)
             VALUES ($1, $2, $3, $4, 'negotiating', 0, 0, $5)
             RETURNING ",
            negotiation_columns!()
        ))
        .bind(DbUuid(Uuid::new_v4()))
        .bind(&new.conversation_id)
        .bind(new.role)
        .bind(&new.peer)
        .bind(now())
        .fetch_one(&self.pool)
        .await
        .map(Into::into)
        .map_err(|e| {
            if is_foreign_key_violation(&e) {
                StoreError::not_found(format!("conversation {}", new.conversation_id))
            } else {
                e.into()
            }
        })
    }

    async fn append_transcript(
        &self,
        negotiation_id: Uuid,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError> {
        let now = now();
        let mut tx = self.write_tx().await?;
        let seq = sqlx::query_scalar::<_, i64>(
            "UPDATE negotiations SET last_seq = last_seq + 1
             WHERE id = $1
             RETURNING last_seq",
        )
        .bind(DbUuid(negotiation_id))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::not_found(format!("negotiation {negotiation_id}")))?;
        let row = sqlx::query_as::<_, MessageRow>(concat!(
            "INSERT INTO negotiation_messages (negotiation_id, seq, direction, message, created_at)
             VALUES ($1, $2, $3, $4, $5)
             RETURNING ",
            message_columns!()
        ))
        .bind(DbUuid(negotiation_id))
        .bind(seq)
        .bind(direction)
        .bind(message)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    async fn finish_negotiation(
        &self,
        id: Uuid,
        outcome: NegotiationOutcome,
    ) -> Result<Negotiation, StoreError> {
        let mut tx = self.write_tx().await?;
        let finished = sqlx::query_as::<_, NegotiationRow>(concat!(
            "UPDATE negotiations
             SET status = $2, protocol_hash = $3, rounds = $4, reason = $5, ended_at = $6
             WHERE id = $1 AND status = 'negotiating'
             RETURNING ",
            negotiation_columns!()
        ))
        .bind(DbUuid(id))
        .bind(outcome.status)
        .bind(&outcome.protocol_hash)
        .bind(outcome.rounds)
        .bind(&outcome.reason)
        .bind(now())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| match &outcome.protocol_hash {
            Some(hash) if is_foreign_key_violation(&e) => {
                StoreError::not_found(format!("protocol {hash}"))
            }
            _ => e.into(),
        })?;
        if let Some(row) = finished {
            tx.commit().await?;
            return Ok(row.into());
        }
        let status = sqlx::query_scalar::<_, NegotiationStatus>(
            "SELECT status FROM negotiations WHERE id = $1",
        )
        .bind(DbUuid(id))
        .fetch_optional(&mut *tx)
        .await?;
        Err(match status {
            Some(status) => {
                StoreError::conflict(format!("negotiation {id} already finished as {status}"))
            }
            None => StoreError::not_found(format!("negotiation {id}")),
        })
    }

    async fn get_negotiation(&self, id: Uuid) -> Result<Option<NegotiationRecord>, StoreError> {
        // One snapshot for the row and its transcript.
        let mut tx = self.read_tx().await?;
        let Some(row) = sqlx::query_as::<_, NegotiationRow>(concat!(
            "SELECT ",
            negotiation_columns!(),
            " FROM negotiations WHERE id = $1"
        ))
        .bind(DbUuid(id))
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let transcript = sqlx::query_as::<_, MessageRow>(concat!(
            "SELECT ",
            message_columns!(),
            " FROM negotiation_messages WHERE negotiation_id = $1 ORDER BY seq"
        ))
        .bind(DbUuid(id))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(NegotiationRecord {
            negotiation: row.into(),
            transcript: transcript.into_iter().map(Into::into).collect(),
        }))
    }

    async fn negotiations_for_protocol(&self, hash: &str) -> Result<Vec<Negotiation>, StoreError> {
        let rows = sqlx::query_as::<_, NegotiationRow>(concat!(
            "SELECT ",
            negotiation_columns!(),
            " FROM negotiations WHERE protocol_hash = $1 ORDER BY started_at DESC, id"
        ))
        .bind(hash)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    // --- handlers ------------------------------------------------------------------------------

    async fn insert_handler_candidate(&self, new: NewHandler) -> Result<Handler, StoreError> {
        sqlx::query_as::<_, HandlerRow>(concat!(
            "INSERT INTO handlers
                 (id, protocol_hash, source, source_sha256, backend, capabilities, state, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, 'candidate', $7)
             RETURNING ",
            handler_columns!()
        ))
        .bind(DbUuid(Uuid::new_v4()))
        .bind(&new.protocol_hash)
        .bind(&new.source)
        .bind(sha256_hex(new.source.as_bytes()))
        .bind(&new.backend)
        .bind(Json(&new.capabilities))
        .bind(now())
        .fetch_one(&self.pool)
        .await
        .map(Into::into)
        .map_err(|e| {
            if is_foreign_key_violation(&e) {
                StoreError::not_found(format!("protocol {}", new.protocol_hash))
            } else {
                e.into()
            }
        })
    }

    async fn record_handler_verification(
        &self,
        id: Uuid,
        passed: bool,
        report: &Value,
    ) -> Result<Handler, StoreError> {
        let next_state = if passed {
            HandlerState::Candidate
        } else {
            HandlerState::Failed
        };
        let mut tx = self.write_tx().await?;
        let verified = sqlx::query_as::<_, HandlerRow>(concat!(
            "UPDATE handlers
             SET verification = $2, verification_passed = $3, verified_at = $4, state = $5
             WHERE id = $1 AND state = 'candidate'
             RETURNING ",
            handler_columns!()
        ))
        .bind(DbUuid(id))
        .bind(report)
        .bind(passed)
        .bind(now())
        .bind(next_state)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = verified {
            tx.commit().await?;
            return Ok(row.into());
        }
        Err(handler_refusal(&mut tx, id, "only candidates are verified").await)
    }

    async fn activate_handler(&self, id: Uuid) -> Result<Handler, StoreError> {
        // Activations of one protocol are serialised from here on: what is read is current.
        let mut tx = self.activation_tx(id).await?;
        let current = sqlx::query_as::<_, HandlerRow>(concat!(
            "SELECT ",
            handler_columns!(),
            " FROM handlers WHERE id = $1"
        ))
        .bind(DbUuid(id))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::not_found(format!("handler {id}")))?;
        current.check_activatable()?;
        if current.state() == HandlerState::Active {
            tx.commit().await?;
            return Ok(current.into());
        }
        let now = now();
        sqlx::query(
            "UPDATE handlers SET state = 'retired', retired_at = $2
             WHERE protocol_hash = $1 AND state = 'active'",
        )
        .bind(current.protocol_hash())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query_as::<_, HandlerRow>(concat!(
            "UPDATE handlers SET state = 'active', activated_at = $2, retired_at = NULL
             WHERE id = $1
             RETURNING ",
            handler_columns!()
        ))
        .bind(DbUuid(id))
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::conflict(format!(
                    "another handler became active while activating {id}"
                ))
            } else {
                e.into()
            }
        })?;
        tx.commit().await?;
        Ok(row.into())
    }

    async fn attach_compiled(&self, id: Uuid, compiled: &Value) -> Result<Handler, StoreError> {
        let mut tx = self.write_tx().await?;
        let attached = sqlx::query_as::<_, HandlerRow>(concat!(
            "UPDATE handlers SET compiled = $2
             WHERE id = $1 AND verification_passed AND state IN ('candidate', 'active')
             RETURNING ",
            handler_columns!()
        ))
        .bind(DbUuid(id))
        // As text, so that its keys keep their order (PostgreSQL's JSONB would sort them).
        .bind(compiled.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = attached {
            tx.commit().await?;
            return Ok(row.into());
        }
        Err(handler_refusal(
            &mut tx,
            id,
            "only a verified candidate or the active handler takes a compiled form",
        )
        .await)
    }

    async fn get_handler(&self, id: Uuid) -> Result<Option<Handler>, StoreError> {
        let row = sqlx::query_as::<_, HandlerRow>(concat!(
            "SELECT ",
            handler_columns!(),
            " FROM handlers WHERE id = $1"
        ))
        .bind(DbUuid(id))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    async fn active_handler(&self, hash: &str) -> Result<Option<Handler>, StoreError> {
        let row = sqlx::query_as::<_, HandlerRow>(concat!(
            "SELECT ",
            handler_columns!(),
            " FROM handlers WHERE protocol_hash = $1 AND state = 'active'"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }

    // --- usage ---------------------------------------------------------------------------------

    async fn record_usage(
        &self,
        peer: &str,
        hash: &str,
        ok: u64,
        errors: u64,
    ) -> Result<ProtocolUsage, StoreError> {
        let ok_count = i64::try_from(ok).unwrap_or(i64::MAX);
        let error_count = i64::try_from(errors).unwrap_or(i64::MAX);
        sqlx::query_as::<_, UsageRow>(concat!(
            "INSERT INTO protocol_usage
                 (peer, protocol_hash, ok_count, error_count, first_used_at, last_used_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (peer, protocol_hash) DO UPDATE SET
                 ok_count = protocol_usage.ok_count + excluded.ok_count,
                 error_count = protocol_usage.error_count + excluded.error_count,
                 last_used_at = excluded.last_used_at
             RETURNING ",
            usage_columns!()
        ))
        .bind(peer)
        .bind(hash)
        .bind(ok_count)
        .bind(error_count)
        .bind(now())
        .fetch_one(&self.pool)
        .await
        .map(Into::into)
        .map_err(|e| {
            if is_foreign_key_violation(&e) {
                StoreError::not_found(format!("protocol {hash}"))
            } else {
                e.into()
            }
        })
    }

    async fn usage(&self, peer: &str, hash: &str) -> Result<Option<ProtocolUsage>, StoreError> {
        let row = sqlx::query_as::<_, UsageRow>(concat!(
            "SELECT ",
            usage_columns!(),
            " FROM protocol_usage WHERE peer = $1 AND protocol_hash = $2"
        ))
        .bind(peer)
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(Into::into))
    }
}

/// Why a conditional update of handler `id` changed no row: the handler does not exist, or its
/// state does not allow it (`rule` says which states do).
async fn handler_refusal(
    tx: &mut sqlx::Transaction<'static, super::Db>,
    id: Uuid,
    rule: &str,
) -> StoreError {
    let state = sqlx::query_scalar::<_, HandlerState>("SELECT state FROM handlers WHERE id = $1")
        .bind(DbUuid(id))
        .fetch_optional(&mut **tx)
        .await;
    match state {
        Ok(Some(state)) => StoreError::conflict(format!("handler {id} is {state}; {rule}")),
        Ok(None) => StoreError::not_found(format!("handler {id}")),
        Err(e) => e.into(),
    }
}
