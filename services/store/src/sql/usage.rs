//! Per-peer protocol usage counters.

use super::SqlStore;
use crate::error::{SqlError, missing};
use crate::model::ProtocolUsage;
use crate::rows::{UsageRow, usage_columns};
use crate::store::now;

pub(super) async fn record(
    store: &SqlStore,
    peer: &str,
    hash: &str,
    ok: u64,
    errors: u64,
) -> Result<ProtocolUsage, SqlError> {
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
    .fetch_one(&store.pool)
    .await
    .map(Into::into)
    .map_err(missing(|| format!("protocol {hash}")))
}

pub(super) async fn get(
    store: &SqlStore,
    peer: &str,
    hash: &str,
) -> Result<Option<ProtocolUsage>, SqlError> {
    let row = sqlx::query_as::<_, UsageRow>(concat!(
        "SELECT ",
        usage_columns!(),
        " FROM protocol_usage WHERE peer = $1 AND protocol_hash = $2"
    ))
    .bind(peer)
    .bind(hash)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}
