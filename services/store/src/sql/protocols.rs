//! Protocol texts and who agreed them.

use super::SqlStore;
use crate::error::{SqlError, missing};
use crate::model::{Agreement, NewAgreement, Protocol, Role};
use crate::rows::{AgreementRow, ProtocolRow, Text, agreement_columns, protocol_columns};
use crate::store::{now, page_limit, sha256_hex};

pub(super) async fn put(store: &SqlStore, text: &str) -> Result<Protocol, SqlError> {
    let hash = sha256_hex(text.as_bytes());
    let mut tx = store.write_tx().await?;
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

pub(super) async fn get(store: &SqlStore, hash: &str) -> Result<Option<Protocol>, SqlError> {
    let row = sqlx::query_as::<_, ProtocolRow>(concat!(
        "SELECT ",
        protocol_columns!(),
        " FROM protocols WHERE hash = $1"
    ))
    .bind(hash)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

/// `prefix` is lower-case hex (checked), so it holds no `LIKE` wildcard; hashes are stored in
/// lower case, so SQLite's case-insensitive `LIKE` and PostgreSQL's agree.
pub(super) async fn with_prefix(
    store: &SqlStore,
    prefix: &str,
    limit: u32,
) -> Result<Vec<String>, SqlError> {
    let hashes = sqlx::query_scalar::<_, String>(
        "SELECT hash FROM protocols WHERE hash LIKE $1 ORDER BY hash LIMIT $2",
    )
    .bind(format!("{prefix}%"))
    .bind(page_limit(limit))
    .fetch_all(&store.pool)
    .await?;
    Ok(hashes)
}

pub(super) async fn record_agreement(
    store: &SqlStore,
    new: NewAgreement,
) -> Result<Agreement, SqlError> {
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
    .bind(Text(new.role))
    .bind(&new.peer_url)
    .bind(now())
    .fetch_one(&store.pool)
    .await
    .map(Into::into)
    .map_err(missing(|| format!("protocol {}", new.protocol_hash)))
}

pub(super) async fn agreements_with_peer(
    store: &SqlStore,
    peer: &str,
    role: Role,
) -> Result<Vec<Agreement>, SqlError> {
    let rows = sqlx::query_as::<_, AgreementRow>(concat!(
        "SELECT ",
        agreement_columns!(),
        " FROM protocol_agreements
         WHERE peer = $1 AND role = $2
         ORDER BY last_agreed_at DESC, protocol_hash"
    ))
    .bind(peer)
    .bind(Text(role))
    .fetch_all(&store.pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(super) async fn agreements_for_protocol(
    store: &SqlStore,
    hash: &str,
) -> Result<Vec<Agreement>, SqlError> {
    let rows = sqlx::query_as::<_, AgreementRow>(concat!(
        "SELECT ",
        agreement_columns!(),
        " FROM protocol_agreements
         WHERE protocol_hash = $1
         ORDER BY last_agreed_at DESC, peer, role"
    ))
    .bind(hash)
    .fetch_all(&store.pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(super) async fn list_agreements(
    store: &SqlStore,
    limit: u32,
) -> Result<Vec<Agreement>, SqlError> {
    let rows = sqlx::query_as::<_, AgreementRow>(concat!(
        "SELECT ",
        agreement_columns!(),
        " FROM protocol_agreements
         ORDER BY last_agreed_at DESC, peer, role
         LIMIT $1"
    ))
    .bind(page_limit(limit))
    .fetch_all(&store.pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}
