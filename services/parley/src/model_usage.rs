//! What the language model cost, recorded once the work that spent it is done: the calls and
//! tokens a [`UsageMeter`] counted go to `/metrics` (always) and to the store, for the conversation
//! or negotiation that spent them.
//!
//! A stateless exchange (no conversation) has no owner: its cost is in the metrics only, so it
//! still touches no database. A failed write is logged and does not fail the reply that has
//! already been answered; the metrics have the counts either way.

use parley_reasoner::UsageMeter;
use parley_store::{ModelUsage, ModelUsageOwner, Store};

/// Takes what `meter` counted and records it: in the metrics, and for `owner` in `store`.
pub(crate) async fn settle(store: &dyn Store, owner: Option<ModelUsageOwner>, meter: &UsageMeter) {
    let spent = meter.take();
    if spent.is_empty() {
        return;
    }
    for (purpose, tally) in &spent {
        crate::metrics::model_usage(*purpose, tally);
    }
    let Some(owner) = owner else {
        return;
    };
    let rows: Vec<ModelUsage> = spent
        .iter()
        .map(|(purpose, tally)| ModelUsage {
            purpose: purpose.as_str().to_owned(),
            calls: clamp(tally.calls),
            unmetered_calls: clamp(tally.unmetered_calls),
            prompt_tokens: clamp(tally.prompt_tokens),
            completion_tokens: clamp(tally.completion_tokens),
        })
        .collect();
    if let Err(error) = store.record_model_usage(&owner, &rows).await {
        tracing::warn!(%error, %owner, "model usage not recorded in the store");
    }
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
