//! The bridge that lets sandboxed handlers reach declared capabilities through the one
//! host function the sandbox exposes.

use std::sync::Arc;

use parley_capabilities::Capabilities;
use serde_json::Value;

/// Performs a handler's `host.call` with the real capability bindings. The sandbox calls it
/// on one of its own threads or inside `tokio::task::block_in_place`, never on a thread that
/// is acting as an async worker at that moment, so blocking on the runtime is safe.
#[derive(Debug, Clone)]
pub struct CapabilityBridge {
    capabilities: Arc<Capabilities>,
    runtime: tokio::runtime::Handle,
}

impl CapabilityBridge {
    pub fn new(capabilities: Arc<Capabilities>, runtime: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(CapabilityBridge {
            capabilities,
            runtime,
        })
    }
}

impl parley_sandbox::CapabilityHost for CapabilityBridge {
    fn call(&self, capability: &str, args: Value) -> Result<Value, String> {
        self.runtime
            .block_on(self.capabilities.invoke(capability, args))
            .map_err(|e| format!("{}: {e}", e.code()))
    }
}
