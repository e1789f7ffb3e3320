//! The requester's judgement of a provider's counter-proposal.

use parley_anp::{ProtocolDoc, Verdict};
use serde_json::Value;

/// The requester's deterministic judgement of a counter-proposal: acceptable when it still
/// takes requests we can build (its required request fields are fields we proposed) and
/// still answers every response field we asked for. The provider's text is read within the
/// default [`DocLimits`](parley_anp::DocLimits), as the provider reads ours.
pub fn judge_counter(ours: &ProtocolDoc, proposal: &str) -> Verdict {
    let theirs = match ProtocolDoc::parse_within(proposal, &parley_anp::DocLimits::default()) {
        Ok(d) => d,
        Err(e) => {
            return Verdict::Reject {
                reason: format!("the counter-proposal is not a usable protocol: {e}"),
            };
        }
    };
    let props = |schema: &Value| -> Vec<String> {
        schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let required = |schema: &Value| -> Vec<String> {
        schema
            .get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let our_request = props(ours.request_schema());
    let missing_request: Vec<_> = required(theirs.request_schema())
        .into_iter()
        .filter(|f| !our_request.contains(f))
        .collect();
    let their_response = props(theirs.response_schema());
    let missing_response: Vec<_> = props(ours.response_schema())
        .into_iter()
        .filter(|f| !their_response.contains(f))
        .collect();
    if missing_request.is_empty() && missing_response.is_empty() {
        Verdict::Accept
    } else {
        let mut problems = Vec::new();
        if !missing_request.is_empty() {
            problems.push(format!(
                "needs request fields we cannot supply ({})",
                missing_request.join(", ")
            ));
        }
        if !missing_response.is_empty() {
            problems.push(format!(
                "drops response fields we need ({})",
                missing_response.join(", ")
            ));
        }
        Verdict::Reject {
            reason: format!("the counter-proposal {}", problems.join(" and ")),
        }
    }
}
