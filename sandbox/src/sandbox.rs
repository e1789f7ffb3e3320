//! The sandbox and its handlers: [`Sandbox`] (engine, pool, compiled runtimes, cache, ticker),
//! [`Handler`] (a published memory image), and [`run_once`] for one-shot callers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use wasmtime::Engine;

use crate::cache::ArtifactCache;
use crate::call::{self, CallInput};
use crate::engine::{self, Ticker};
use crate::fast::ready::Ready;
use crate::fast::reset::{Release, Resets};
use crate::publish::{self, PublishSlots};
use crate::runtime::{Image, Runtime, RuntimeState};
use crate::{
    CallOutput, CallReport, CapabilityHost, Dialect, Grants, SandboxConfig, SandboxError, split,
};

/// A published handler: its memory image, ready to instantiate under the sandbox's shared runtime
/// code. Cheap to clone.
#[derive(Clone)]
pub struct Handler {
    pub(crate) inner: Arc<HandlerInner>,
}

pub(crate) struct HandlerInner {
    pub(crate) hash: String,
    pub(crate) dialect: Dialect,
    pub(crate) from_cache: bool,
    pub(crate) engine: Engine,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) image: Image,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("hash", &self.inner.hash)
            .field("dialect", &self.inner.dialect)
            .field("from_cache", &self.inner.from_cache)
            .finish_non_exhaustive()
    }
}

impl Handler {
    /// sha256 (hex) of the handler source.
    pub fn hash(&self) -> &str {
        &self.inner.hash
    }

    /// What the handler is written in.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// Whether publishing this handler compiled nothing: the runtime's code was already compiled
    /// by this sandbox or loaded from the artifact cache, so the handler cost only the evaluation of
    /// its top-level code and its (code-less) memory image. False for the publish that compiled the
    /// runtime.
    pub fn from_cache(&self) -> bool {
        self.inner.from_cache
    }
}

/// The sandbox: the engine, its instance pool, the runtime's compiled code, the artifact cache and
/// the epoch ticker. `Send + Sync`; share it in an `Arc`.
#[derive(Clone)]
pub struct Sandbox {
    pub(crate) inner: Arc<SandboxInner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub(crate) struct SandboxInner {
    pub(crate) config: SandboxConfig,
    pub(crate) engine: Engine,
    /// Each dialect's runtime (by [`Dialect::index`]), split into code and base image at `new`;
    /// its code compiled (or loaded from the cache) on first need. The lock is held while
    /// compiling, so concurrent publishes compile once.
    runtimes: [Mutex<RuntimeState>; 2],
    pub(crate) cache: Option<ArtifactCache>,
    /// Turns for publishes, which have instance slots of their own beside the calls'.
    pub(crate) publish_slots: PublishSlots,
    /// One permit per pooled instance: calls beyond the pool wait here instead of failing. A
    /// finished call keeps its permit until its instance is reset (see `fast::reset::Release`).
    pub(crate) slots: Arc<Semaphore>,
    /// Finished calls' instances waiting for their reset, and the instances made ready after it;
    /// `None` with `deferred_reset = false` (see [`crate::fast::reset`]).
    pub(crate) resets: Option<Arc<Resets>>,
    pub(crate) ticker: Ticker,
    /// Seeds the guest's `random_get`, different for every call.
    seeds: AtomicU64,
}

impl Sandbox {
    /// Creates a sandbox: validates `config`, splits the embedded runtimes into their code modules
    /// and base images (a runtime that cannot be split is an `internal` error), builds the engine
    /// and the instance pool, opens the artifact cache and starts the epoch ticker. Compiles
    /// nothing: see [`Sandbox::warm_up`].
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        config.validate()?;
        let split = |dialect: Dialect| -> Result<_, SandboxError> {
            let split = split::split(dialect.runtime_wasm().0).map_err(|e| {
                SandboxError::internal_with(
                    format!("splitting the embedded {} runtime", dialect.as_str()),
                    e,
                )
            })?;
            Ok(Mutex::new(RuntimeState::Split(Box::new(split))))
        };
        let runtimes = [split(Dialect::JavaScript)?, split(Dialect::Mapping)?];
        let engine = engine::call_engine(&config)?;
        let cache = config
            .cache_dir
            .as_deref()
            .map(ArtifactCache::open)
            .transpose()?;
        let slots = Arc::new(Semaphore::new(config.pool_instances as usize));
        let ticker = Ticker::start(engine.clone())?;
        let resets = if config.deferred_reset {
            Some(Resets::start(Ready::new(&config), Arc::clone(&slots))?)
        } else {
            None
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Sandbox {
            inner: Arc::new(SandboxInner {
                config,
                engine,
                runtimes,
                cache,
                publish_slots: PublishSlots::new(engine::PUBLISH_INSTANCES),
                slots,
                resets,
                ticker,
                seeds: AtomicU64::new(seed),
            }),
        })
    }

    /// The configuration this sandbox enforces.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Evaluates a handler source's top-level code once and keeps the resulting memory as the
    /// handler's image. Blocking: it takes milliseconds (the top-level code's own time, up to
    /// `publish_deadline_ms`, plus turning the memory into an image), and the first publish in a
    /// sandbox that was not warmed up also compiles the runtime's code (seconds) or loads it from
    /// the artifact cache. Call it from `spawn_blocking` in async code.
    pub fn publish(&self, source: &str) -> Result<Handler, SandboxError> {
        publish::publish(&self.inner, Dialect::JavaScript, source)
    }

    /// [`Sandbox::publish`] for a handler of any [`Dialect`]; for [`Dialect::Mapping`] the source
    /// is the mapping's JSON, and a source that is not a mapping is an `invalid_handler`.
    pub fn publish_as(&self, dialect: Dialect, source: &str) -> Result<Handler, SandboxError> {
        publish::publish(&self.inner, dialect, source)
    }

    /// How many instances are instantiated ahead right now, waiting for a call of their handler
    /// (see [`SandboxConfig::ready_instances`]).
    pub fn ready_instances(&self) -> usize {
        self.inner
            .resets
            .as_ref()
            .map_or(0, |resets| resets.ready.len())
    }

    /// Compiles both runtimes' code, or loads it from the artifact cache, so that publishing is
    /// quick from the first handler on. Idempotent; concurrent callers (and publishes) wait for
    /// the one compile. Blocking, like [`Sandbox::publish`].
    pub fn warm_up(&self) -> Result<(), SandboxError> {
        for dialect in Dialect::ALL {
            self.inner.runtime(dialect)?;
        }
        Ok(())
    }

    /// Runs one call with fresh isolation. The guest runs on a pooled fiber stack inside the
    /// caller's task: no thread hand-off, and a handler that computes for long yields to the
    /// executor at every epoch tick, so it never holds a runtime thread for more than a tick at a
    /// time. When every pooled instance is busy, the call waits for one up to the call deadline,
    /// then fails with `overloaded`.
    pub async fn call(
        &self,
        handler: &Handler,
        input: &serde_json::Value,
        grants: &Grants,
        host: Arc<dyn CapabilityHost>,
    ) -> Result<CallOutput, SandboxError> {
        self.call_report(handler, input, grants, host)
            .await
            .into_output()
    }

    /// Like [`Sandbox::call`], but returns the captured logs whatever the outcome.
    pub async fn call_report(
        &self,
        handler: &Handler,
        input: &serde_json::Value,
        grants: &Grants,
        host: Arc<dyn CapabilityHost>,
    ) -> CallReport {
        let started = std::time::Instant::now();
        let input = match call::serialize_input(&self.inner.config, input) {
            Ok(input) => input,
            Err(error) => return CallReport::failed(error, started),
        };
        let (ready, slot) = match self.inner.claim(handler, true).await {
            Ok(claimed) => claimed,
            Err(error) => return CallReport::failed(error, started),
        };
        // Deferred, the slot goes with the instance; reset now, it is held until the call ends.
        let (release, _slot) = match &self.inner.resets {
            Some(resets) => (Release::Deferred(Arc::clone(resets), slot), None),
            None => (Release::Now, Some(slot)),
        };
        let call = CallInput {
            input,
            grants: grants.clone(),
            host,
            blocking: false,
        };
        call::call_report(&self.inner, handler, call, ready, release).await
    }

    /// [`Sandbox::call`] for synchronous callers (benchmarks, the CLI): blocks the current thread
    /// until the call ends. Any thread will do, since the guest runs on its own fiber stack; in
    /// async code use [`Sandbox::call`], which does not block. When every pooled instance is busy
    /// it fails at once with `overloaded` rather than wait.
    pub fn call_blocking(
        &self,
        handler: &Handler,
        input: &serde_json::Value,
        grants: &Grants,
        host: Arc<dyn CapabilityHost>,
    ) -> Result<CallOutput, SandboxError> {
        let input = call::serialize_input(&self.inner.config, input)?;
        let call = CallInput {
            input,
            grants: grants.clone(),
            host,
            blocking: true,
        };
        futures::executor::block_on(async {
            let (ready, _slot) = self.inner.claim(handler, false).await?;
            call::call_report(&self.inner, handler, call, ready, Release::Now)
                .await
                .into_output()
        })
    }
}

impl SandboxInner {
    /// The compiled runtime of `dialect`, compiling or loading it first if needed; also whether
    /// this call compiled it.
    pub(crate) fn runtime(&self, dialect: Dialect) -> Result<(Arc<Runtime>, bool), SandboxError> {
        let mut state = self.runtimes[dialect.index()]
            .lock()
            .map_err(|_| SandboxError::internal("the runtime lock is poisoned"))?;
        let (runtime, compiled) = match &*state {
            RuntimeState::Ready(runtime) => return Ok((Arc::clone(runtime), false)),
            RuntimeState::Split(split) => {
                Runtime::load_or_compile(self, split, dialect.runtime_wasm().1)?
            }
        };
        let runtime = Arc::new(runtime);
        *state = RuntimeState::Ready(Arc::clone(&runtime));
        Ok((runtime, compiled))
    }

    pub(crate) fn next_seed(&self) -> u64 {
        self.seeds.fetch_add(0x9E37_79B9, Ordering::Relaxed)
    }
}

/// Runs `source` once on `input`: creates a sandbox with `config`, publishes the handler and calls
/// it. This is everything `parley sandbox run` needs; the CLI wrapper is:
///
/// ```text
/// // parley sandbox run --handler FILE.js --input JSON [--grant CAPABILITY...]
/// let source = std::fs::read_to_string(&args.handler)?;
/// let input: serde_json::Value = serde_json::from_str(&args.input)?;
/// let grants: parley_sandbox::Grants = args.grant.iter().cloned().collect();
/// let report = parley_sandbox::run_once_report(config.sandbox.clone(), &source, &input, &grants, host);
/// for line in &report.logs { eprintln!("[{:?}] {}", line.level, line.text); }
/// match report.result {
///     Ok(output) => println!("{}", serde_json::to_string_pretty(&output)?),
///     Err(e) => { eprintln!("error {}: {e}", e.code()); std::process::exit(1); }
/// }
/// ```
///
/// Blocking (it compiles the handler unless `config.cache_dir` has it): do not call it from async code.
pub fn run_once(
    config: SandboxConfig,
    source: &str,
    input: &serde_json::Value,
    grants: &Grants,
    host: Arc<dyn CapabilityHost>,
) -> Result<CallOutput, SandboxError> {
    run_once_report(config, source, input, grants, host).into_output()
}

/// [`run_once`], keeping the handler's logs when the call fails (for the CLI to print them).
pub fn run_once_report(
    config: SandboxConfig,
    source: &str,
    input: &serde_json::Value,
    grants: &Grants,
    host: Arc<dyn CapabilityHost>,
) -> CallReport {
    let started = std::time::Instant::now();
    let prepared = Sandbox::new(config).and_then(|sandbox| {
        let handler = sandbox.publish(source)?;
        let input = call::serialize_input(&sandbox.inner.config, input)?;
        Ok((sandbox, handler, input))
    });
    let (sandbox, handler, input) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => return CallReport::failed(error, started),
    };
    let call = CallInput {
        input,
        grants: grants.clone(),
        host,
        blocking: true,
    };
    futures::executor::block_on(call::call_report(
        &sandbox.inner,
        &handler,
        call,
        None,
        Release::Now,
    ))
}
