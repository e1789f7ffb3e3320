//! Negotiations and their transcripts.

use serde_json::Value;
use uuid::Uuid;

use super::{LogEntry, SqlStore, append_entry};
use crate::StoreError;
use crate::error::{SqlError, missing};
use crate::model::{
    Direction, LoggedMessage, Negotiation, NegotiationOutcome, NegotiationRecord,
    NegotiationStatus, NewNegotiation,
};
use crate::rows::{DbUuid, MessageRow, NegotiationRow, Text, message_columns, negotiation_columns};
use crate::store::now;

pub(super) async fn start(store: &SqlStore, new: NewNegotiation) -> Result<Negotiation, SqlError> {
    sqlx::query_as::<_, NegotiationRow>(concat!(
        "INSERT INTO negotiations
             (id, conversation_id, role, peer, status, rounds, last_seq, started_at)
         VALUES ($1, $2, $3, $4, 'negotiating', 0, 0, $5)
         RETURNING ",
        negotiation_columns!()
    ))
    .bind(DbUuid(Uuid::new_v4()))
    .bind(&new.conversation_id)
    .bind(Text(new.role))
    .bind(&new.peer)
    .bind(now())
    .fetch_one(&store.pool)
    .await
    .map(Into::into)
    .map_err(missing(|| format!("conversation {}", new.conversation_id)))
}

pub(super) async fn append_transcript(
    store: &SqlStore,
    negotiation_id: Uuid,
    direction: Direction,
    message: &Value,
) -> Result<LoggedMessage, SqlError> {
    let now = now();
    let mut tx = store.write_tx().await?;
    // As for conversation logs: the counter's row lock queues concurrent appends.
    let seq = sqlx::query_scalar::<_, i64>(
        "UPDATE negotiations SET last_seq = last_seq + 1
         WHERE id = $1
         RETURNING last_seq",
    )
    .bind(DbUuid(negotiation_id))
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::not_found(format!("negotiation {negotiation_id}")))?;
    let entry = LogEntry::new(seq, direction, message, now);
    let logged = append_entry(
        &mut tx,
        concat!(
            "INSERT INTO negotiation_messages (negotiation_id, seq, direction, message, created_at)
             VALUES ($1, $2, $3, $4, $5)
             RETURNING ",
            message_columns!()
        ),
        DbUuid(negotiation_id),
        entry,
    )
    .await?;
    tx.commit().await?;
    Ok(logged)
}

pub(super) async fn finish(
    store: &SqlStore,
    id: Uuid,
    outcome: NegotiationOutcome,
) -> Result<Negotiation, SqlError> {
    let mut tx = store.write_tx().await?;
    let finished = sqlx::query_as::<_, NegotiationRow>(concat!(
        "UPDATE negotiations
         SET status = $2, protocol_hash = $3, rounds = $4, reason = $5, ended_at = $6
         WHERE id = $1 AND status = 'negotiating'
         RETURNING ",
        negotiation_columns!()
    ))
    .bind(DbUuid(id))
    .bind(Text(outcome.status))
    .bind(&outcome.protocol_hash)
    .bind(outcome.rounds)
    .bind(&outcome.reason)
    .bind(now())
    .fetch_optional(&mut *tx)
    .await
    // The protocol is the one foreign key this update sets.
    .map_err(missing(|| {
        format!(
            "protocol {}",
            outcome.protocol_hash.as_deref().unwrap_or_default()
        )
    }))?;
    if let Some(row) = finished {
        tx.commit().await?;
        return Ok(row.into());
    }
    let status = sqlx::query_scalar::<_, Text<NegotiationStatus>>(
        "SELECT status FROM negotiations WHERE id = $1",
    )
    .bind(DbUuid(id))
    .fetch_optional(&mut *tx)
    .await?;
    Err(match status {
        Some(Text(status)) => {
            StoreError::conflict(format!("negotiation {id} already finished as {status}"))
        }
        None => StoreError::not_found(format!("negotiation {id}")),
    }
    .into())
}

pub(super) async fn get(store: &SqlStore, id: Uuid) -> Result<Option<NegotiationRecord>, SqlError> {
    // One snapshot for the row and its transcript.
    let mut tx = store.read_tx().await?;
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

pub(super) async fn for_protocol(
    store: &SqlStore,
    hash: &str,
) -> Result<Vec<Negotiation>, SqlError> {
    let rows = sqlx::query_as::<_, NegotiationRow>(concat!(
        "SELECT ",
        negotiation_columns!(),
        " FROM negotiations WHERE protocol_hash = $1 ORDER BY started_at DESC, id"
    ))
    .bind(hash)
    .fetch_all(&store.pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// The reason recorded for a negotiation whose last turn never finished.
const INTERRUPTED: &str = "interrupted: the server stopped during a turn of this negotiation";

pub(super) async fn fail_interrupted(
    store: &SqlStore,
    before: chrono::DateTime<chrono::Utc>,
) -> Result<u64, SqlError> {
    let done = sqlx::query(
        "UPDATE negotiations SET status = 'failed', reason = $2, ended_at = $3
         WHERE status = 'negotiating'
           AND ((last_seq = 0 AND started_at < $1)
                OR EXISTS (SELECT 1 FROM negotiation_messages m
                           WHERE m.negotiation_id = negotiations.id
                             AND m.seq = negotiations.last_seq
                             AND m.direction = 'inbound'
                             AND m.created_at < $1))",
    )
    .bind(before)
    .bind(INTERRUPTED)
    .bind(now())
    .execute(&store.pool)
    .await?;
    Ok(done.rows_affected())
}
