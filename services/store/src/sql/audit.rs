//! The audit log: events appended in batches, read back newest first through filters.

use chrono::SubsecRound as _;

use super::{Db, SqlStore};
use crate::error::SqlError;
use crate::model::{AuditEvent, AuditFilter, NewAuditEvent};
use crate::rows::{AuditRow, audit_columns};
use crate::store::page_limit;

/// Events per INSERT statement: one round trip each, far below either backend's limit on bound
/// parameters (7 per event).
const ROWS_PER_STATEMENT: usize = 100;

pub(super) async fn append(store: &SqlStore, events: &[NewAuditEvent]) -> Result<(), SqlError> {
    let mut tx = store.write_tx().await?;
    for chunk in events.chunks(ROWS_PER_STATEMENT) {
        let mut insert = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO audit_events (at, peer, address, action, subject, outcome, detail) ",
        );
        insert.push_values(chunk, |mut row, event| {
            // Microseconds, as PostgreSQL keeps them: an event reads back as it was written.
            row.push_bind(event.at.trunc_subsecs(6))
                .push_bind(event.peer.as_deref())
                .push_bind(event.address.as_deref())
                .push_bind(event.action.as_str())
                .push_bind(event.subject.as_str())
                .push_bind(event.outcome.as_str())
                .push_bind(event.detail.as_ref());
        });
        insert.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The oldest events before `before`, at most `limit`, in one statement (an index on `at`
/// finds them).
pub(super) async fn expire(
    store: &SqlStore,
    before: chrono::DateTime<chrono::Utc>,
    limit: u32,
) -> Result<u64, SqlError> {
    let done = sqlx::query(
        "DELETE FROM audit_events WHERE id IN \
         (SELECT id FROM audit_events WHERE at < $1 ORDER BY at, id LIMIT $2)",
    )
    .bind(before.trunc_subsecs(6))
    .bind(page_limit(limit))
    .execute(&store.pool)
    .await?;
    Ok(done.rows_affected())
}

/// One statement holding a condition per filter set, so each backend can use the index of the
/// filter it finds most selective (a `$n IS NULL OR column = $n` form would hide it).
pub(super) async fn list(
    store: &SqlStore,
    filter: AuditFilter,
) -> Result<Vec<AuditEvent>, SqlError> {
    let mut query = sqlx::QueryBuilder::<Db>::new(concat!(
        "SELECT ",
        audit_columns!(),
        " FROM audit_events WHERE 1 = 1"
    ));
    let words = [
        (" AND peer = ", filter.peer),
        (" AND address = ", filter.address),
        (" AND action = ", filter.action),
        (" AND outcome = ", filter.outcome),
    ];
    for (condition, value) in words {
        if let Some(value) = value {
            query.push(condition).push_bind(value);
        }
    }
    if let Some(since) = filter.since {
        query.push(" AND at >= ").push_bind(since.trunc_subsecs(6));
    }
    if let Some(until) = filter.until {
        query.push(" AND at < ").push_bind(until.trunc_subsecs(6));
    }
    query
        .push(" ORDER BY at DESC, id DESC LIMIT ")
        .push_bind(page_limit(filter.limit));
    let rows = query
        .build_query_as::<AuditRow>()
        .fetch_all(&store.pool)
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}
