//! The peers the operator declared: their API keys' digests and grants.

use super::SqlStore;
use crate::StoreError;
use crate::error::SqlError;
use crate::model::{NewPeer, PeerRecord};
use crate::rows::{PeerRow, peer_columns};
use crate::store::now;

pub(super) async fn add(store: &SqlStore, peer: NewPeer) -> Result<PeerRecord, SqlError> {
    let mut tx = store.write_tx().await?;
    // Either unique key (the id, the key id) may be taken; nothing is inserted then, and a second
    // look says which, so the operator reads what to change.
    let row = sqlx::query_as::<_, PeerRow>(concat!(
        "INSERT INTO peers (id, key_id, key_digest, grants, created_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT DO NOTHING
         RETURNING ",
        peer_columns!()
    ))
    .bind(&peer.id)
    .bind(&peer.key_id)
    .bind(&peer.key_digest)
    .bind(&peer.grants)
    .bind(now())
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = row {
        tx.commit().await?;
        return Ok(row.into());
    }
    let id_taken = sqlx::query_scalar::<_, String>("SELECT id FROM peers WHERE id = $1")
        .bind(&peer.id)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    Err(if id_taken {
        StoreError::conflict(format!("peer {} exists", peer.id))
    } else {
        StoreError::conflict(format!(
            "key id {} is another peer's",
            peer.key_id.as_deref().unwrap_or_default()
        ))
    }
    .into())
}

pub(super) async fn by_key_id(
    store: &SqlStore,
    key_id: &str,
) -> Result<Option<PeerRecord>, SqlError> {
    let row = sqlx::query_as::<_, PeerRow>(concat!(
        "SELECT ",
        peer_columns!(),
        " FROM peers WHERE key_id = $1"
    ))
    .bind(key_id)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

pub(super) async fn list(store: &SqlStore) -> Result<Vec<PeerRecord>, SqlError> {
    let rows = sqlx::query_as::<_, PeerRow>(concat!(
        "SELECT ",
        peer_columns!(),
        " FROM peers ORDER BY id"
    ))
    .fetch_all(&store.pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(super) async fn revoke(store: &SqlStore, id: &str) -> Result<PeerRecord, SqlError> {
    let mut tx = store.write_tx().await?;
    let row = sqlx::query_as::<_, PeerRow>(concat!(
        "UPDATE peers SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING ",
        peer_columns!()
    ))
    .bind(id)
    .bind(now())
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| StoreError::not_found(format!("peer {id}")))?;
    tx.commit().await?;
    Ok(row.into())
}
