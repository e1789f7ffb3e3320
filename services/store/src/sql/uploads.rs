//! Content-addressed uploads.

use super::SqlStore;
use crate::StoreError;
use crate::error::SqlError;
use crate::model::{Upload, UploadMeta};
use crate::rows::{UploadMetaRow, UploadRow, upload_meta_columns};
use crate::store::{now, sha256_hex};

pub(super) async fn put(
    store: &SqlStore,
    bytes: &[u8],
    content_type: &str,
    filename: Option<&str>,
) -> Result<UploadMeta, SqlError> {
    let size = i64::try_from(bytes.len())
        .map_err(|_| StoreError::Invalid("upload is too large".into()))?;
    let id = sha256_hex(bytes);
    let mut tx = store.write_tx().await?;
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

pub(super) async fn get(store: &SqlStore, id: &str) -> Result<Option<Upload>, SqlError> {
    let row = sqlx::query_as::<_, UploadRow>(concat!(
        "SELECT ",
        upload_meta_columns!(),
        ", bytes FROM uploads WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

pub(super) async fn meta(store: &SqlStore, id: &str) -> Result<Option<UploadMeta>, SqlError> {
    let row = sqlx::query_as::<_, UploadMetaRow>(concat!(
        "SELECT ",
        upload_meta_columns!(),
        " FROM uploads WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&store.pool)
    .await?;
    Ok(row.map(Into::into))
}

pub(super) async fn total_size(store: &SqlStore) -> Result<u64, SqlError> {
    // SUM is NULL over no rows, and an integer of the backend's width otherwise.
    let total =
        sqlx::query_scalar::<_, i64>("SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM uploads")
            .fetch_one(&store.pool)
            .await?;
    Ok(u64::try_from(total).unwrap_or(0))
}
