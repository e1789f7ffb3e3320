//! Conversations and their message logs.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{LogEntry, SqlStore, append_entry};
use crate::StoreError;
use crate::error::{SqlError, duplicate};
use crate::model::{Conversation, Direction, LoggedMessage, NewConversation};
use crate::rows::{ConversationRow, MessageRow, conversation_columns, message_columns};
use crate::store::{now, page_limit};

pub(super) async fn create(
    store: &SqlStore,
    new: NewConversation,
) -> Result<Conversation, SqlError> {
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
    .fetch_one(&store.pool)
    .await
    .map(Into::into)
    .map_err(duplicate(|| {
        format!("conversation {} already exists", new.id)
    }))
}

pub(super) async fn get(store: &SqlStore, id: &str) -> Result<Option<Conversation>, SqlError> {
    let row = sqlx::query_as::<_, ConversationRow>(concat!(
        "SELECT ",
        conversation_columns!(),
        " FROM conversations WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

pub(super) async fn touch(store: &SqlStore, id: &str) -> Result<DateTime<Utc>, SqlError> {
    let updated_at = sqlx::query_scalar::<_, DateTime<Utc>>(
        "UPDATE conversations SET updated_at = $2 WHERE id = $1 RETURNING updated_at",
    )
    .bind(id)
    .bind(now())
    .fetch_optional(&store.pool)
    .await?
    .ok_or_else(|| StoreError::not_found(format!("conversation {id}")))?;
    Ok(updated_at)
}

pub(super) async fn update_state(
    store: &SqlStore,
    id: &str,
    expected_version: i64,
    state: &Value,
) -> Result<i64, SqlError> {
    let mut tx = store.write_tx().await?;
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
    let current = sqlx::query_scalar::<_, i64>("SELECT version FROM conversations WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    Err(match current {
        Some(current) => StoreError::conflict(format!(
            "conversation {id} state is at version {current}, not {expected_version}"
        )),
        None => StoreError::not_found(format!("conversation {id}")),
    }
    .into())
}

pub(super) async fn append_message(
    store: &SqlStore,
    conversation_id: &str,
    direction: Direction,
    message: &Value,
) -> Result<LoggedMessage, SqlError> {
    let now = now();
    let mut tx = store.write_tx().await?;
    // Bumping the counter first takes the row's write lock, so concurrent appends queue here and
    // each gets the next number; the peer's messages count its turns in the same statement.
    let seq = sqlx::query_scalar::<_, i64>(
        "UPDATE conversations SET last_seq = last_seq + 1, turns = turns + $3, updated_at = $2
         WHERE id = $1
         RETURNING last_seq",
    )
    .bind(conversation_id)
    .bind(now)
    .bind(i64::from(direction == Direction::Inbound))
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::not_found(format!("conversation {conversation_id}")))?;
    let entry = LogEntry::new(seq, direction, message, now);
    let logged = append_entry(
        &mut tx,
        concat!(
            "INSERT INTO conversation_messages (conversation_id, seq, direction, message, created_at)
             VALUES ($1, $2, $3, $4, $5)
             RETURNING ",
            message_columns!()
        ),
        conversation_id.to_owned(),
        entry,
    )
    .await?;
    // Retention: the log keeps its newest `max_log_messages`; normally this deletes one row.
    if let Some(keep) = store.max_log_messages
        && seq > i64::from(keep)
    {
        sqlx::query("DELETE FROM conversation_messages WHERE conversation_id = $1 AND seq <= $2")
            .bind(conversation_id)
            .bind(seq - i64::from(keep))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(logged)
}

pub(super) async fn list_messages(
    store: &SqlStore,
    conversation_id: &str,
    after_seq: i64,
    limit: u32,
) -> Result<Vec<LoggedMessage>, SqlError> {
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
    .fetch_all(&store.pool)
    .await?;
    // An empty page is ambiguous: check that the conversation exists. One the idle sweep deleted
    // between the two statements reads as not found, which it then is.
    if rows.is_empty() && get(store, conversation_id).await?.is_none() {
        return Err(StoreError::not_found(format!("conversation {conversation_id}")).into());
    }
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Deletes up to `limit` conversations last active before `idle_since`, oldest first, with what
/// hangs on them (`ON DELETE CASCADE`): their logs, model usage, negotiations and the
/// negotiations' transcripts and model usage. Protocols, agreements, handlers and protocol usage
/// belong to no conversation and stay.
pub(super) async fn expire(
    store: &SqlStore,
    idle_since: DateTime<Utc>,
    limit: u32,
) -> Result<u64, SqlError> {
    let done = sqlx::query(
        "DELETE FROM conversations WHERE id IN (
             SELECT id FROM conversations WHERE updated_at < $1 ORDER BY updated_at LIMIT $2)",
    )
    .bind(idle_since)
    .bind(page_limit(limit))
    .execute(&store.pool)
    .await?;
    Ok(done.rows_affected())
}
