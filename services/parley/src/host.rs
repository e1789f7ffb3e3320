//! The bridge that lets sandboxed handlers reach declared capabilities through the one
//! host function the sandbox exposes.

use std::sync::Arc;

use parley_capabilities::Capabilities;
use parley_sandbox::CapabilityFuture;
use serde_json::Value;
use tracing::Instrument as _;

/// Performs a handler's `host.call` with the real capability bindings. The sandbox awaits the
/// returned future on the call's own task; off the runtime (a blocking caller) the capability
/// runs as a task on `runtime` instead, for the same [`crate::peer::Caller`].
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
    fn call(&self, capability: &str, args: Value) -> CapabilityFuture {
        let capabilities = Arc::clone(&self.capabilities);
        // Debug level: disabled by default, so a handler's calls on the 0-RTT path pay nothing
        // measurable for it. The arguments are never recorded.
        let span = tracing::debug_span!("capability.call", name = capability);
        let capability = capability.to_owned();
        let invoke = async move {
            capabilities
                .invoke(&capability, args)
                .await
                .map_err(|e| format!("{}: {e}", e.code()))
        }
        .instrument(span);
        // The call is the handler's caller's, wherever it runs: its grants decide it and the
        // audit log names it.
        let caller = crate::access::current();
        let invoke = async move {
            match caller {
                Some(caller) => crate::access::scoped(caller, invoke).await,
                None => invoke.await,
            }
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            return Box::pin(invoke);
        }
        let task = self.runtime.spawn(invoke);
        Box::pin(async move {
            task.await
                .map_err(|e| format!("the capability task failed: {e}"))?
        })
    }
}
