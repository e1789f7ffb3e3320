//! Serving application messages: protocol hash → active handler → answer. No reasoner and no
//! negotiation; only the protocol's schema checks around the sandboxed handler. Nothing here
//! knows how the message travelled.

use parley_anp::ProtocolHash;
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
        if let Err(v) = active.doc.validate_request(request) {
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
        if let Err(v) = active.doc.validate_response(&output) {
            metrics::handler_call("invalid_response");
            return Err(ApiError::Handler {
                code: "invalid_response".into(),
                message: v.to_string(),
            });
        }
        metrics::handler_call("ok");
        Ok(output)
    }

    /// The active protocol of `hash`, from memory or loaded from the store.
    async fn active(&self, hash: &ProtocolHash) -> Result<ActiveProtocol, ApiError> {
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
