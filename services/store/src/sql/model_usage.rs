//! Language-model calls and tokens per conversation and per negotiation.
//!
//! The two owners have a table each (so each has its foreign key); the statements differ only in
//! the table and the owner column, written out once per owner by `owner_statements!`.

use super::SqlStore;
use crate::error::{SqlError, missing};
use crate::model::{ModelUsage, ModelUsageOwner};
use crate::rows::{DbUuid, ModelUsageRow, model_usage_columns};

/// The upsert and the select of one owner's table.
struct Statements {
    add: &'static str,
    list: &'static str,
}

macro_rules! owner_statements {
    ($table:literal, $owner:literal) => {
        Statements {
            add: concat!(
                "INSERT INTO ",
                $table,
                " (",
                $owner,
                ", purpose, calls, unmetered_calls, prompt_tokens, completion_tokens)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (",
                $owner,
                ", purpose) DO UPDATE SET
                     calls = ",
                $table,
                ".calls + excluded.calls,
                     unmetered_calls = ",
                $table,
                ".unmetered_calls + excluded.unmetered_calls,
                     prompt_tokens = ",
                $table,
                ".prompt_tokens + excluded.prompt_tokens,
                     completion_tokens = ",
                $table,
                ".completion_tokens + excluded.completion_tokens
                 RETURNING ",
                model_usage_columns!()
            ),
            list: concat!(
                "SELECT ",
                model_usage_columns!(),
                " FROM ",
                $table,
                " WHERE ",
                $owner,
                " = $1 ORDER BY purpose"
            ),
        }
    };
}

const CONVERSATION: Statements = owner_statements!("conversation_model_usage", "conversation_id");
const NEGOTIATION: Statements = owner_statements!("negotiation_model_usage", "negotiation_id");

fn statements(owner: &ModelUsageOwner) -> &'static Statements {
    match owner {
        ModelUsageOwner::Conversation(_) => &CONVERSATION,
        ModelUsageOwner::Negotiation(_) => &NEGOTIATION,
    }
}

/// Binds the owner's key as its column stores it.
macro_rules! bind_owner {
    ($query:expr, $owner:expr) => {
        match $owner {
            ModelUsageOwner::Conversation(id) => $query.bind(id.as_str()),
            ModelUsageOwner::Negotiation(id) => $query.bind(DbUuid(*id)),
        }
    };
}

pub(super) async fn record(
    store: &SqlStore,
    owner: &ModelUsageOwner,
    usage: &[ModelUsage],
) -> Result<Vec<ModelUsage>, SqlError> {
    let add = statements(owner).add;
    let mut tx = store.write_tx().await?;
    let mut totals = Vec::with_capacity(usage.len());
    for entry in usage {
        let query = bind_owner!(sqlx::query_as::<_, ModelUsageRow>(add), owner);
        let row = query
            .bind(&entry.purpose)
            .bind(entry.calls)
            .bind(entry.unmetered_calls)
            .bind(entry.prompt_tokens)
            .bind(entry.completion_tokens)
            .fetch_one(&mut *tx)
            .await
            .map_err(missing(|| owner.to_string()))?;
        totals.push(row.into());
    }
    tx.commit().await?;
    Ok(totals)
}

pub(super) async fn list(
    store: &SqlStore,
    owner: &ModelUsageOwner,
) -> Result<Vec<ModelUsage>, SqlError> {
    let query = bind_owner!(
        sqlx::query_as::<_, ModelUsageRow>(statements(owner).list),
        owner
    );
    let rows = query.fetch_all(&store.pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}
