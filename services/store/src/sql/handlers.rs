//! Generated handlers: candidates, verification, activation, compiled forms.

use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Db, SqlStore};
use crate::StoreError;
use crate::error::{SqlError, duplicate, missing};
use crate::model::{HandlerRecord, HandlerState, NewHandler, Protocol};
use crate::rows::{DbUuid, HandlerRow, ProtocolRow, Text, handler_columns};
use crate::store::{now, page_limit, sha256_hex};

pub(super) async fn insert_candidate(
    store: &SqlStore,
    new: NewHandler,
) -> Result<HandlerRecord, SqlError> {
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
    .fetch_one(&store.pool)
    .await
    .map(Into::into)
    .map_err(missing(|| format!("protocol {}", new.protocol_hash)))
}

pub(super) async fn record_verification(
    store: &SqlStore,
    id: Uuid,
    passed: bool,
    report: &Value,
) -> Result<HandlerRecord, SqlError> {
    let next_state = if passed {
        HandlerState::Candidate
    } else {
        HandlerState::Failed
    };
    let mut tx = store.write_tx().await?;
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
    .bind(Text(next_state))
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = verified {
        tx.commit().await?;
        return Ok(row.into());
    }
    Err(refusal(&mut tx, id, "only candidates are verified").await)
}

pub(super) async fn activate(store: &SqlStore, id: Uuid) -> Result<HandlerRecord, SqlError> {
    // Activations of one protocol are serialised from here on: what is read is current.
    let mut tx = store.activation_tx(id).await?;
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
    .map_err(duplicate(|| {
        format!("another handler became active while activating {id}")
    }))?;
    tx.commit().await?;
    Ok(row.into())
}

pub(super) async fn attach_compiled(
    store: &SqlStore,
    id: Uuid,
    compiled: &Value,
) -> Result<HandlerRecord, SqlError> {
    let mut tx = store.write_tx().await?;
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
    Err(refusal(
        &mut tx,
        id,
        "only a verified candidate or the active handler takes a compiled form",
    )
    .await)
}

pub(super) async fn get(store: &SqlStore, id: Uuid) -> Result<Option<HandlerRecord>, SqlError> {
    let row = sqlx::query_as::<_, HandlerRow>(concat!(
        "SELECT ",
        handler_columns!(),
        " FROM handlers WHERE id = $1"
    ))
    .bind(DbUuid(id))
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

pub(super) async fn active(
    store: &SqlStore,
    hash: &str,
) -> Result<Option<HandlerRecord>, SqlError> {
    let row = sqlx::query_as::<_, HandlerRow>(concat!(
        "SELECT ",
        handler_columns!(),
        " FROM handlers WHERE protocol_hash = $1 AND state = 'active'"
    ))
    .bind(hash)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

/// One query, on the index of active handlers; the protocol's own columns, by the join.
pub(super) async fn active_protocols(
    store: &SqlStore,
    limit: u32,
) -> Result<Vec<Protocol>, SqlError> {
    let rows = sqlx::query_as::<_, ProtocolRow>(
        "SELECT p.hash, p.text, p.created_at
         FROM handlers h JOIN protocols p ON p.hash = h.protocol_hash
         WHERE h.state = 'active'
         ORDER BY h.activated_at, p.hash
         LIMIT $1",
    )
    .bind(page_limit(limit))
    .fetch_all(&store.pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Why a conditional update of handler `id` changed no row: the handler does not exist, or its
/// state does not allow it (`rule` says which states do).
async fn refusal(tx: &mut sqlx::Transaction<'static, Db>, id: Uuid, rule: &str) -> SqlError {
    let state =
        sqlx::query_scalar::<_, Text<HandlerState>>("SELECT state FROM handlers WHERE id = $1")
            .bind(DbUuid(id))
            .fetch_optional(&mut **tx)
            .await;
    match state {
        Ok(Some(Text(state))) => {
            StoreError::conflict(format!("handler {id} is {state}; {rule}")).into()
        }
        Ok(None) => StoreError::not_found(format!("handler {id}")).into(),
        Err(e) => e.into(),
    }
}
