//! Running handlers: verification through the sandbox with fixture-answered capabilities,
//! and the cache of active, precompiled handlers that serves application traffic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

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
use uuid::Uuid;

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
///
/// Another instance on the same database may replace a protocol's handler (a run-time fix
/// activates a new version under the same hash) or retire it. So an entry serves without a look
/// at the store for at most [`ProtocolCache::REVALIDATE_AFTER`]; the first request after that
/// asks the store which handler is active (one indexed read per protocol per interval, on no
/// request's path otherwise) and keeps, replaces or drops the entry.
#[derive(Debug, Default)]
pub struct ProtocolCache {
    active: RwLock<HashMap<ProtocolHash, Cached>>,
}

/// One cached protocol: what serves it, which stored handler that is, and when the store last
/// confirmed it.
#[derive(Debug, Clone)]
struct Cached {
    active: ActiveProtocol,
    handler_id: Uuid,
    confirmed: Instant,
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
    /// How long a cached protocol serves before the store is asked whether its handler is still
    /// the active one.
    pub const REVALIDATE_AFTER: Duration = Duration::from_secs(1);

    /// The active protocol for `hash`, and whether it came from memory. A handler loaded from
    /// the store serves in its compiled form when it has one and `compiled` allows it.
    pub async fn get(
        &self,
        hash: &ProtocolHash,
        store: &Arc<dyn Store>,
        sandbox: &Arc<Sandbox>,
        compiled: bool,
    ) -> Result<(ActiveProtocol, bool), ProtocolLoadError> {
        let cached = self
            .active
            .read()
            .expect("protocol cache lock is never poisoned")
            .get(hash)
            .cloned();
        if let Some(cached) = &cached
            && cached.confirmed.elapsed() < Self::REVALIDATE_AFTER
        {
            return Ok((cached.active.clone(), true));
        }
        let hex = hash.to_string();
        let Some(handler) = store.active_handler(&hex).await? else {
            if cached.is_some() {
                self.remove(hash);
            }
            return Err(ProtocolLoadError::Unknown);
        };
        if let Some(cached) = cached
            && cached.handler_id == handler.id
        {
            self.confirm(hash, handler.id);
            return Ok((cached.active, true));
        }
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
        self.insert(*hash, handler.id, active.clone());
        Ok((active, false))
    }

    /// `active` serves `hash` from now on: the stored handler `handler_id`, just activated.
    pub fn insert(&self, hash: ProtocolHash, handler_id: Uuid, active: ActiveProtocol) {
        let cached = Cached {
            active,
            handler_id,
            confirmed: Instant::now(),
        };
        self.active
            .write()
            .expect("protocol cache lock is never poisoned")
            .insert(hash, cached);
    }

    /// The store confirmed that `handler_id` still serves `hash` (when the entry is still that
    /// handler's: another request may have replaced it meanwhile).
    fn confirm(&self, hash: &ProtocolHash, handler_id: Uuid) {
        let mut active = self
            .active
            .write()
            .expect("protocol cache lock is never poisoned");
        if let Some(cached) = active.get_mut(hash)
            && cached.handler_id == handler_id
        {
            cached.confirmed = Instant::now();
        }
    }

    fn remove(&self, hash: &ProtocolHash) {
        self.active
            .write()
            .expect("protocol cache lock is never poisoned")
            .remove(hash);
    }
}
