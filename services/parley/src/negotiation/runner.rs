//! Running handlers: verification through the sandbox with fixture-answered capabilities,
//! and the cache of active, precompiled handlers that serves application traffic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use parley_anp::verify::verify_cases;
use parley_anp::{
    Fixtures, HandlerRunner, ProtocolDoc, ProtocolHash, TestCase, VerificationReport,
};
use parley_capabilities::Capabilities;
use parley_sandbox::{
    CapabilityFuture, CapabilityHost, Dialect, Grants, Handler, Sandbox, SandboxError,
};
use parley_store::Store;
use serde_json::Value;

use crate::host::CapabilityBridge;

/// Publishes handler source of `dialect` in the sandbox off the async workers (compilation is
/// CPU-heavy).
pub async fn publish(
    sandbox: &Arc<Sandbox>,
    dialect: Dialect,
    source: &str,
) -> Result<Handler, SandboxError> {
    let sandbox = sandbox.clone();
    let source = source.to_owned();
    match tokio::task::spawn_blocking(move || sandbox.publish_as(dialect, &source)).await {
        Ok(result) => result,
        // The blocking task only fails when it panicked: let the panic continue.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Publishes what serves a handler: its compiled form when it has one, else its JavaScript. A
/// compiled form that does not publish (it passed its check, so this means a broken or changed
/// mapping runtime) falls back to the JavaScript, with a warning, rather than failing the call.
pub async fn publish_serving(
    sandbox: &Arc<Sandbox>,
    source: &str,
    compiled: Option<&Value>,
) -> Result<Handler, SandboxError> {
    if let Some(compiled) = compiled {
        match publish(sandbox, Dialect::Mapping, &compiled.to_string()).await {
            Ok(handler) => return Ok(handler),
            Err(error) => tracing::warn!(
                %error,
                "the handler's compiled form does not publish; its JavaScript serves"
            ),
        }
    }
    publish(sandbox, Dialect::JavaScript, source).await
}

/// Answers `host.call` during verification: from the test case's fixtures, or — for
/// capabilities the operator marked read-only and the case gave no fixture for — for real.
/// Nothing else reaches a real capability, so verification has no side effects.
struct FixtureHost {
    fixtures: Fixtures,
    real: Arc<CapabilityBridge>,
    capabilities: Arc<Capabilities>,
}

impl CapabilityHost for FixtureHost {
    fn call(&self, capability: &str, args: Value) -> CapabilityFuture {
        if let Some(answer) = self.fixtures.lookup(capability, &args) {
            return Box::pin(std::future::ready(answer));
        }
        let read_only = self
            .capabilities
            .get(capability)
            .is_some_and(|c| c.read_only());
        if read_only {
            self.real.call(capability, args)
        } else {
            Box::pin(std::future::ready(self.fixtures.answer(capability, &args)))
        }
    }
}

/// Runs handlers for verification: each is published, run on its test cases and forgotten again
/// (see [`SandboxRunner::verify`]), so the runner holds only the handlers being verified.
#[derive(Debug)]
pub struct SandboxRunner {
    sandbox: Arc<Sandbox>,
    capabilities: Arc<Capabilities>,
    /// The handlers being verified, by a key unique to each verification (two negotiations may
    /// verify the same source at once).
    handlers: RwLock<HashMap<String, (Handler, Grants)>>,
    keys: AtomicU64,
    runtime: tokio::runtime::Handle,
}

/// Removes a verification's handler from the runner when the verification ends, or is dropped.
struct Verifying<'a> {
    runner: &'a SandboxRunner,
    key: String,
}

impl Drop for Verifying<'_> {
    fn drop(&mut self) {
        self.runner
            .handlers
            .write()
            .expect("handler map lock is never poisoned")
            .remove(&self.key);
    }
}

impl SandboxRunner {
    pub fn new(sandbox: Arc<Sandbox>, capabilities: Arc<Capabilities>) -> Self {
        SandboxRunner {
            sandbox,
            capabilities,
            handlers: RwLock::new(HashMap::new()),
            keys: AtomicU64::new(0),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// How many handlers are being verified right now.
    pub fn verifying(&self) -> usize {
        self.handlers
            .read()
            .expect("handler map lock is never poisoned")
            .len()
    }

    /// Publishes `source` (of `dialect`) and runs `cases` through it against `doc`'s response
    /// schema, its capabilities granted as `grants` and answered from each case's fixtures.
    /// An `Err` is a handler that does not publish.
    pub async fn verify(
        &self,
        doc: &ProtocolDoc,
        cases: &[TestCase],
        dialect: Dialect,
        source: &str,
        grants: &[String],
    ) -> Result<VerificationReport, SandboxError> {
        let handler = publish(&self.sandbox, dialect, source).await?;
        let key = format!(
            "{}#{}",
            handler.hash(),
            self.keys.fetch_add(1, Ordering::Relaxed)
        );
        let grants: Grants = grants.iter().cloned().collect();
        self.handlers
            .write()
            .expect("handler map lock is never poisoned")
            .insert(key.clone(), (handler, grants));
        let verifying = Verifying { runner: self, key };
        Ok(verify_cases(doc, cases, self, &verifying.key).await)
    }
}

#[async_trait]
impl HandlerRunner for SandboxRunner {
    async fn run(
        &self,
        handler: &str,
        request: Value,
        fixtures: Fixtures,
    ) -> Result<Value, String> {
        let (handler, grants) = self
            .handlers
            .read()
            .expect("handler map lock is never poisoned")
            .get(handler)
            .cloned()
            .ok_or_else(|| format!("handler {handler} was not published"))?;
        let host = Arc::new(FixtureHost {
            fixtures,
            real: CapabilityBridge::new(self.capabilities.clone(), self.runtime.clone()),
            capabilities: self.capabilities.clone(),
        });
        self.sandbox
            .call(&handler, &request, &grants, host)
            .await
            .map(|out| out.output)
            .map_err(|e| format!("{}: {e}", e.code()))
    }
}

/// An agreed protocol ready to serve: its document (for schema checks), its precompiled
/// handler and the capabilities it was verified against.
#[derive(Debug, Clone)]
pub struct ActiveProtocol {
    pub doc: Arc<ProtocolDoc>,
    pub handler: Handler,
    pub grants: Grants,
}

/// Active handlers by protocol hash. Misses load from the store (any instance on the same
/// database sees the same protocols) and publish from the artifact cache.
#[derive(Debug, Default)]
pub struct ProtocolCache {
    active: RwLock<HashMap<ProtocolHash, ActiveProtocol>>,
}

/// Why an active protocol could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolLoadError {
    #[error("no active handler for this protocol")]
    Unknown,
    #[error(transparent)]
    Store(#[from] parley_store::StoreError),
    #[error("the stored protocol text does not parse: {0}")]
    Protocol(#[from] parley_anp::ProtocolError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl ProtocolCache {
    /// The active protocol for `hash`, and whether it came from memory. A handler loaded from
    /// the store serves in its compiled form when it has one and `compiled` allows it.
    pub async fn get(
        &self,
        hash: &ProtocolHash,
        store: &Arc<dyn Store>,
        sandbox: &Arc<Sandbox>,
        compiled: bool,
    ) -> Result<(ActiveProtocol, bool), ProtocolLoadError> {
        if let Some(p) = self
            .active
            .read()
            .expect("protocol cache lock is never poisoned")
            .get(hash)
        {
            return Ok((p.clone(), true));
        }
        let hex = hash.to_string();
        let handler = store
            .active_handler(&hex)
            .await?
            .ok_or(ProtocolLoadError::Unknown)?;
        let protocol = store
            .get_protocol(&hex)
            .await?
            .ok_or(ProtocolLoadError::Unknown)?;
        let doc = ProtocolDoc::parse(protocol.text)?;
        // A verified compiled form serves in place of the JavaScript (see `Provider::check_compiled`).
        let serving = handler.compiled.as_ref().filter(|_| compiled);
        let active = ActiveProtocol {
            doc: Arc::new(doc),
            handler: publish_serving(sandbox, &handler.source, serving).await?,
            grants: handler.capabilities.iter().cloned().collect(),
        };
        self.insert(*hash, active.clone());
        Ok((active, false))
    }

    pub fn insert(&self, hash: ProtocolHash, active: ActiveProtocol) {
        self.active
            .write()
            .expect("protocol cache lock is never poisoned")
            .insert(hash, active);
    }
}
