//! Serving application messages: protocol hash → active handler → answer. No reasoner and no
//! negotiation; only the protocol's schema checks around the sandboxed handler. Nothing here
//! knows how the message travelled.

use std::sync::Arc;

use parley_anp::{ProtocolDoc, ProtocolHash, SchemaRole, SchemaViolation};
use serde_json::Value;
use tracing::Instrument as _;

use super::Provider;
use crate::error::ApiError;
use crate::host::CapabilityBridge;
use crate::metrics;
use crate::negotiation::runner::{ActiveProtocol, ProtocolLoadError};

impl Provider {
    /// Answers one application message of protocol `hash` from `peer` through the protocol's
    /// active handler. `runtime` runs the handler's capability calls when the caller is not on
    /// the runtime itself.
    pub async fn application(
        &self,
        hash: &ProtocolHash,
        request: &Value,
        peer: &str,
        runtime: tokio::runtime::Handle,
    ) -> Result<Value, ApiError> {
        let active = self.active(hash).await?;
        if let Err(v) = check(&active.doc, SchemaRole::Request, request).await {
            metrics::handler_call("invalid_request");
            return Err(ApiError::InvalidProtocolMessage(v.to_string()));
        }
        let host = CapabilityBridge::new(self.capabilities.clone(), runtime);
        let span = tracing::debug_span!("handler.call", protocol = %hash);
        let result = self
            .sandbox
            .call(&active.handler, request, &active.grants, host)
            .instrument(span)
            .await;
        self.usage.count(peer, hash, result.is_ok());
        let output = match result {
            Ok(out) => out.output,
            Err(e) => {
                metrics::handler_call(e.code());
                return Err(ApiError::Handler {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                });
            }
        };
        if let Err(v) = check(&active.doc, SchemaRole::Response, &output).await {
            metrics::handler_call("invalid_response");
            return Err(ApiError::Handler {
                code: "invalid_response".into(),
                message: v.to_string(),
            });
        }
        metrics::handler_call("ok");
        Ok(output)
    }

    /// The protocols this agent serves (those with an active handler, in any instance on the
    /// same database), at most `limit`, the earliest activated first.
    pub async fn served_protocols(
        &self,
        limit: u32,
    ) -> Result<Vec<parley_store::Protocol>, ApiError> {
        Ok(self.store.active_protocols(limit).await?)
    }

    /// The active protocol of `hash`, from memory or loaded from the store.
    pub(super) async fn active(&self, hash: &ProtocolHash) -> Result<ActiveProtocol, ApiError> {
        let loaded = self
            .cache
            .get(
                hash,
                &self.store,
                &self.sandbox,
                self.limits.compiled_handlers,
            )
            .await;
        match loaded {
            Ok((active, hit)) => {
                metrics::protocol_cache(if hit { "hit" } else { "miss" });
                Ok(active)
            }
            Err(ProtocolLoadError::Unknown) => {
                metrics::protocol_cache("miss");
                Err(ApiError::UnknownProtocol(hash.to_string()))
            }
            Err(e) => Err(ApiError::internal(e)),
        }
    }
}

/// A message of at most this many JSON values and string bytes is checked against its schema
/// in place: the check costs microseconds, less than handing it to another thread.
const CHECK_IN_PLACE: usize = 2048;

/// Checks `value` against `doc`'s schema for `role`. Patterns match in linear time and a
/// schema's size is bounded when it is agreed (`parley_anp::protocol::limits`), so a check
/// costs at most in proportion to the message; a large message is still checked on a blocking
/// thread, so that the request's deadline, a timer on the request's task, answers the peer
/// when it passes even while the check runs.
pub(super) async fn check(
    doc: &Arc<ProtocolDoc>,
    role: SchemaRole,
    value: &Value,
) -> Result<(), SchemaViolation> {
    let validate = move |doc: &ProtocolDoc, value: &Value| match role {
        SchemaRole::Request => doc.validate_request(value),
        SchemaRole::Response => doc.validate_response(value),
    };
    if weight_within(value, CHECK_IN_PLACE) {
        return validate(doc, value);
    }
    let (doc, value) = (Arc::clone(doc), value.clone());
    match tokio::task::spawn_blocking(move || validate(&doc, &value)).await {
        Ok(checked) => checked,
        // The blocking task only fails when it panicked: let the panic continue.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Whether `value` has at most `budget` JSON values and string bytes; stops counting once over.
fn weight_within(value: &Value, budget: usize) -> bool {
    fn spend(value: &Value, left: &mut usize) -> bool {
        let cost = match value {
            Value::String(s) => 1 + s.len(),
            Value::Object(map) => 1 + map.keys().map(String::len).sum::<usize>(),
            _ => 1,
        };
        let Some(rest) = left.checked_sub(cost) else {
            return false;
        };
        *left = rest;
        match value {
            Value::Array(items) => items.iter().all(|v| spend(v, left)),
            Value::Object(map) => map.values().all(|v| spend(v, left)),
            _ => true,
        }
    }
    let mut left = budget;
    spend(value, &mut left)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::weight_within;

    #[test]
    fn small_messages_weigh_little_and_large_ones_stop_the_count() {
        let small = json!({"messageId": "m1", "productId": "P12345"});
        assert!(weight_within(&small, 64));
        assert!(!weight_within(&small, 10));
        let many = json!(vec![1; 10_000]);
        assert!(!weight_within(&many, 2048));
        let long = json!("x".repeat(3000));
        assert!(!weight_within(&long, 2048));
    }
}
