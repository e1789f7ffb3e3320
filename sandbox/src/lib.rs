//! Runs generated protocol handlers inside wasmtime with hard limits.
//!
//! A handler is JavaScript that defines `handle(request)`. It never runs in Parley's own process space:
//! it runs in a QuickJS runtime compiled to WebAssembly, which the sandbox splits into two parts.
//! The runtime's **code** (QuickJS, the driver, the host glue: all of its functions, with its memory
//! turned into an import) is compiled once per [`Sandbox`] and cached on disk, keyed and MAC'd, so a
//! restart loads it in milliseconds. A handler is only **data**: [`Sandbox::publish`] evaluates its
//! source once in the runtime and keeps the resulting linear memory (QuickJS's heap with the handler's
//! bytecode and top-level state) as a small code-less module, the handler's memory image.
//! [`Sandbox::call`] then runs each request in a fresh instance: the handler's memory, mapped
//! copy-on-write from its image, under the shared compiled code, with a deadline, a memory cap, a wasm
//! stack cap, size caps on everything crossing the boundary, and no capability but the granted ones.
//! So publishing a handler compiles nothing, and a hundred handlers share one copy of QuickJS's
//! native code. The ABI and the reasons behind it are in `sandbox/ABI.md`.
//!
//! A second runtime, the mapping runtime, serves a built-in reasoner's mapping (JSON) as the
//! compiled form of the JavaScript generated from it, with no JavaScript engine in the call. It has
//! the same ABI, limits, grants and error model and goes through the same split, images and pool;
//! [`Dialect`] picks the runtime at [`Sandbox::publish_as`].
//!
//! # Layout
//! - `lib.rs`: the public surface: [`Sandbox`], [`Handler`], [`Grants`], [`CapabilityHost`],
//!   [`CallOutput`], [`run_once`].
//! - `config.rs`: [`SandboxConfig`], every limit with its default, and `validate()`.
//! - `error.rs`: [`SandboxError`], one variant per outcome, each with a stable `code()`.
//! - `engine.rs`: the wasmtime engine (its instance pool) and the epoch ticker.
//! - `split.rs`: the wasm transforms: the runtime into code module and base image, a memory into a
//!   handler image.
//! - `runtime.rs`: the compiled runtime code (through the artifact cache) and how an instance of it
//!   is put together over a memory image.
//! - `publish.rs`: source → top-level code evaluated over the base image → handler image.
//! - `call.rs`: one call: a `Store`, the handler's image and the runtime code instantiated from the
//!   pool, input in, outcome out, trap classification.
//! - `host.rs`: everything the guest may import: the `parley` host functions and a WASI shim with no
//!   ambient authority.
//! - `cache.rs`: the on-disk artifact cache; the only place with `unsafe`.
//! - `guest/`, `mapping-guest/`: the runtime guests (their own cargo workspaces, built by
//!   `scripts/setup-guest.sh`); `guest-abi/`: their shared side of the ABI; `runtimes/`: the two
//!   built runtimes with their sha256 files, committed, which the crate embeds.
//!
//! # Invariants
//! - No wasmtime type appears in the public API; wasmtime errors are flattened into [`SandboxError`].
//! - One `Store` per call, holding that call's two instances (the handler's memory image and the
//!   runtime code); nothing a handler does survives its call. Handlers share compiled code, never
//!   memory: each call's memory comes from its own handler's image.
//! - The runtime code keeps no state outside its memory between calls: its mutable globals must be
//!   back at their initial values when a handler has been loaded (checked at publish).
//! - A precompiled artifact is loaded only if its HMAC, keyed by a secret in the cache directory,
//!   verifies: the sandbox only loads native code it produced itself.
//! - Libraries never read the environment: all limits come from [`SandboxConfig`].

mod cache;
mod call;
mod config;
mod engine;
mod error;
mod host;
mod publish;
mod runtime;
mod split;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::Engine;

pub use crate::config::{ConfigError, SandboxConfig};
pub use crate::error::SandboxError;

use crate::cache::ArtifactCache;
use crate::engine::Ticker;
use crate::runtime::{Image, Runtime, RuntimeState};

/// The JavaScript runtime guest, committed under `sandbox/runtimes/` (built by
/// `scripts/setup-guest.sh` from `sandbox/guest`).
pub(crate) const RUNTIME_WASM: &[u8] = include_bytes!("../runtimes/parley-runtime.wasm");
/// sha256 (hex) of the embedded JavaScript runtime, checked by `build.rs` against its committed
/// hash; part of its cache key.
pub const RUNTIME_SHA256: &str = env!("PARLEY_RUNTIME_SHA256");
/// The mapping runtime guest, committed under `sandbox/runtimes/` (built by
/// `scripts/setup-guest.sh` from `sandbox/mapping-guest`).
pub(crate) const MAPPING_RUNTIME_WASM: &[u8] =
    include_bytes!("../runtimes/parley-mapping-runtime.wasm");
/// sha256 (hex) of the embedded mapping runtime, checked by `build.rs` against its committed
/// hash; part of its cache key.
pub const MAPPING_RUNTIME_SHA256: &str = env!("PARLEY_MAPPING_RUNTIME_SHA256");

/// What a handler is written in, and so which runtime runs it. Both runtimes have the same ABI,
/// limits, grants and error model (`sandbox/ABI.md`); they differ in what a handler's source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// JavaScript defining `handle(request)`, run by QuickJS.
    JavaScript,
    /// A built-in reasoner's mapping as JSON (crate `parley-mapping`), served by the mapping
    /// runtime: the compiled form of the JavaScript generated from that mapping, with no
    /// JavaScript engine in the call.
    Mapping,
}

impl Dialect {
    const ALL: [Dialect; 2] = [Dialect::JavaScript, Dialect::Mapping];

    /// The embedded runtime guest and its sha256.
    fn runtime_wasm(self) -> (&'static [u8], &'static str) {
        match self {
            Dialect::JavaScript => (RUNTIME_WASM, RUNTIME_SHA256),
            Dialect::Mapping => (MAPPING_RUNTIME_WASM, MAPPING_RUNTIME_SHA256),
        }
    }

    fn index(self) -> usize {
        match self {
            Dialect::JavaScript => 0,
            Dialect::Mapping => 1,
        }
    }

    /// `javascript` or `mapping`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::JavaScript => "javascript",
            Dialect::Mapping => "mapping",
        }
    }
}

/// What a capability call produces: the capability's result, or a message for the handler.
pub type CapabilityFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<serde_json::Value, String>> + Send>>;

/// Performs capabilities for handlers, only for capabilities the call's [`Grants`] allow and with
/// arguments within the size cap. The returned future is awaited on the call's own task (inside the
/// guest's fiber), so it may do async IO; it must not block the thread. The call's deadline keeps
/// running meanwhile: on a tokio runtime the future gets what is left of it and is dropped (the
/// capability cancelled, the call failing with `timeout`) when that runs out. A blocking caller
/// (`call_blocking`, `run_once`) has no timer to race it against, so there the deadline is only
/// checked when the capability returns. Dropping the call's future cancels the capability too.
pub trait CapabilityHost: Send + Sync {
    /// Runs `capability` with `args`. An `Err` becomes a catchable `CapabilityError` in the handler.
    fn call(&self, capability: &str, args: serde_json::Value) -> CapabilityFuture;
}

/// A synchronous function is a host whose answers are ready at once (fixtures, tests).
impl<F> CapabilityHost for F
where
    F: Fn(&str, serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync,
{
    fn call(&self, capability: &str, args: serde_json::Value) -> CapabilityFuture {
        Box::pin(std::future::ready(self(capability, args)))
    }
}

/// A host with no capabilities: every call fails. For handlers granted nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCapabilities;

impl CapabilityHost for NoCapabilities {
    fn call(&self, capability: &str, _: serde_json::Value) -> CapabilityFuture {
        Box::pin(std::future::ready(Err(format!(
            "no capability host is configured for `{capability}`"
        ))))
    }
}

/// The capabilities one call may use, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants(Arc<BTreeSet<String>>);

impl Grants {
    /// Grants nothing.
    pub fn none() -> Self {
        Grants::default()
    }

    /// Whether `capability` is granted.
    pub fn allows(&self, capability: &str) -> bool {
        self.0.contains(capability)
    }

    /// The granted names, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl<S: Into<String>> FromIterator<S> for Grants {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        Grants(Arc::new(names.into_iter().map(Into::into).collect()))
    }
}

/// Severity of a captured log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// `console.log`, `console.info`, `console.debug`, stdout.
    Info,
    /// `console.warn`.
    Warn,
    /// `console.error`, stderr.
    Error,
}

/// One captured log line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    /// Severity.
    pub level: LogLevel,
    /// The text (lossy UTF-8, possibly cut at the log cap).
    pub text: String,
}

/// What a successful call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput {
    /// The handler's response.
    pub output: serde_json::Value,
    /// Captured `console.*` / stdout / stderr lines, up to `SandboxConfig::log_bytes`.
    pub logs: Vec<LogLine>,
    /// Whether some log output was dropped at the cap.
    pub logs_truncated: bool,
    /// Time from instantiation to outcome.
    pub elapsed: Duration,
}

/// Everything about one call, whether it succeeded or not: what `parley sandbox run` prints and what a
/// handler-fixing loop feeds back to the reasoner.
#[derive(Debug)]
pub struct CallReport {
    /// The handler's response, or why there is none.
    pub result: Result<serde_json::Value, SandboxError>,
    /// Captured log lines, kept even when the call failed.
    pub logs: Vec<LogLine>,
    /// Whether some log output was dropped at the cap.
    pub logs_truncated: bool,
    /// Time from the start of the call to its outcome.
    pub elapsed: Duration,
}

impl CallReport {
    /// A call that failed before the guest ran, `started` when the call began.
    pub(crate) fn failed(error: SandboxError, started: std::time::Instant) -> Self {
        CallReport {
            result: Err(error),
            logs: Vec::new(),
            logs_truncated: false,
            elapsed: started.elapsed(),
        }
    }

    /// The output of a successful call; the logs of a failed one are dropped.
    pub(crate) fn into_output(self) -> Result<CallOutput, SandboxError> {
        self.result.map(|output| CallOutput {
            output,
            logs: self.logs,
            logs_truncated: self.logs_truncated,
            elapsed: self.elapsed,
        })
    }
}

/// A published handler: its memory image, ready to instantiate under the sandbox's shared runtime
/// code. Cheap to clone.
#[derive(Clone)]
pub struct Handler {
    inner: Arc<HandlerInner>,
}

struct HandlerInner {
    hash: String,
    dialect: Dialect,
    from_cache: bool,
    engine: Engine,
    runtime: Arc<Runtime>,
    image: Image,
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
    inner: Arc<SandboxInner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub(crate) struct SandboxInner {
    config: SandboxConfig,
    engine: Engine,
    /// Each dialect's runtime (by [`Dialect::index`]), split into code and base image at `new`;
    /// its code compiled (or loaded from the cache) on first need. The lock is held while
    /// compiling, so concurrent publishes compile once.
    runtimes: [std::sync::Mutex<RuntimeState>; 2],
    cache: Option<ArtifactCache>,
    /// Turns for publishes, which have instance slots of their own beside the calls'.
    publish_slots: publish::PublishSlots,
    /// One permit per pooled instance: calls beyond the pool wait here instead of failing. A
    /// finished call keeps its permit until its instance is reset (see `call::Release`).
    slots: Arc<tokio::sync::Semaphore>,
    /// Finished calls' instances waiting for their reset.
    resets: Arc<call::Resets>,
    ticker: Ticker,
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
            Ok(std::sync::Mutex::new(RuntimeState::Split(Box::new(split))))
        };
        let runtimes = [split(Dialect::JavaScript)?, split(Dialect::Mapping)?];
        let engine = engine::call_engine(&config)?;
        let cache = config
            .cache_dir
            .as_deref()
            .map(ArtifactCache::open)
            .transpose()?;
        let slots = Arc::new(tokio::sync::Semaphore::new(config.pool_instances as usize));
        let ticker = Ticker::start(engine.clone())?;
        let resets = call::Resets::start(call::Ready::new(&config), Arc::clone(&slots))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Sandbox {
            inner: Arc::new(SandboxInner {
                config,
                engine,
                runtimes,
                cache,
                publish_slots: publish::PublishSlots::new(engine::PUBLISH_INSTANCES),
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
        self.inner.resets.ready.len()
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
        let release = call::Release::Deferred(self.inner.resets.clone(), slot);
        call::call_report(
            &self.inner,
            handler,
            input,
            grants.clone(),
            host,
            ready,
            release,
        )
        .await
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
        futures::executor::block_on(async {
            let (ready, _slot) = self.inner.claim(handler, false).await?;
            call::call_report(
                &self.inner,
                handler,
                input,
                grants.clone(),
                host,
                ready,
                call::Release::Now,
            )
            .await
            .into_output()
        })
    }
}

impl SandboxInner {
    /// The compiled runtime of `dialect`, compiling or loading it first if needed; also whether
    /// this call compiled it.
    fn runtime(&self, dialect: Dialect) -> Result<(Arc<Runtime>, bool), SandboxError> {
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

    /// The instance slot for a call of `handler`: a ready instance of it with its slot, or a free
    /// slot, waiting for one (`wait`, see [`SandboxInner::slot`]) or not ([`SandboxInner::slot_now`]).
    async fn claim(
        &self,
        handler: &Handler,
        wait: bool,
    ) -> Result<
        (
            Option<call::Instantiated>,
            tokio::sync::OwnedSemaphorePermit,
        ),
        SandboxError,
    > {
        if let Some((ready, slot)) = self.resets.ready.take(&handler.inner) {
            return Ok((Some(ready), slot));
        }
        // None ready (the reset thread has not caught up): a free slot, instantiated on the way.
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok((None, slot));
        }
        // None free: the oldest instance still waiting for its reset gives up its slot.
        if let Some(slot) = self.resets.reclaim_one() {
            return Ok((None, slot));
        }
        let slot = if wait {
            self.slot().await?
        } else {
            self.slot_now()?
        };
        Ok((None, slot))
    }

    /// A free instance slot. An async caller on a tokio runtime waits for one up to the call
    /// deadline; anyone else gets one only if it is free now. Then: `overloaded`. A slot held by
    /// a ready instance of another handler counts as free.
    async fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, SandboxError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.slot_now();
        }
        let wait = tokio::time::sleep(std::time::Duration::from_millis(self.config.deadline_ms));
        tokio::pin!(wait);
        loop {
            // Created before the check: an instance made ready after it wakes this caller.
            let parked = self.resets.ready.parked_one.notified();
            if let Ok(permit) = self.slot_now() {
                return Ok(permit);
            }
            tokio::select! {
                permit = self.slots.clone().acquire_owned() => {
                    return permit.map_err(|_| SandboxError::Overloaded);
                }
                () = parked => {}
                () = &mut wait => return Err(SandboxError::Overloaded),
            }
        }
    }

    /// A free instance slot now, taken from the oldest ready instance if no other is free, or
    /// `overloaded`.
    fn slot_now(&self) -> Result<tokio::sync::OwnedSemaphorePermit, SandboxError> {
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return Ok(permit);
            }
            if !self.resets.ready.evict_oldest() {
                return Err(SandboxError::Overloaded);
            }
        }
    }

    fn next_seed(&self) -> u64 {
        self.seeds.fetch_add(0x9E37_79B9, Ordering::Relaxed)
    }
}

/// Runs `source` once on `input`: creates a sandbox with `config`, publishes the handler and calls it. This is everything `parley sandbox run` needs; the CLI wrapper is:
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
    let grants = grants.clone();
    futures::executor::block_on(call::call_report(
        &sandbox.inner,
        &handler,
        input,
        grants,
        host,
        None,
        call::Release::Now,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync() {
        assert_send_sync::<Sandbox>();
        assert_send_sync::<Handler>();
        assert_send_sync::<Grants>();
        assert_send_sync::<SandboxError>();
    }

    #[test]
    fn grants_allow_only_their_names() {
        let grants: Grants = ["weather.lookup", "db.read"].into_iter().collect();
        assert!(grants.allows("db.read"));
        assert!(!grants.allows("db.write"));
        assert!(!Grants::none().allows("db.read"));
        assert_eq!(
            grants.iter().collect::<Vec<_>>(),
            vec!["db.read", "weather.lookup"]
        );
    }

    #[test]
    fn the_embedded_runtimes_match_their_hashes() {
        use sha2::Digest;
        for dialect in Dialect::ALL {
            let (wasm, sha256) = dialect.runtime_wasm();
            assert_eq!(hex::encode(sha2::Sha256::digest(wasm)), sha256);
        }
        assert_ne!(RUNTIME_SHA256, MAPPING_RUNTIME_SHA256);
    }
}
