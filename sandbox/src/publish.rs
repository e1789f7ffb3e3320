//! Publishing: handler source → the runtime's memory after the handler's top-level code ran → a
//! handler image.
//!
//! A handler is not code: every handler runs the same runtime code, which the sandbox compiles once
//! (or loads from the artifact cache; see `runtime.rs`). What publishing produces is the state a
//! call starts from: QuickJS's runtime and context, the prelude, the handler's compiled bytecode and
//! its top-level state, all of which live in the runtime's linear memory. Publishing instantiates
//! the runtime over its base image, evaluates the source once (`parley_load`), and turns the memory
//! as it is then into a small code-less module whose data segments are that memory (`split.rs`).
//! Wasmtime maps the image copy-on-write into each call's memory, so a call starts from a ready
//! `handle` function instead of booting a JavaScript engine, and compiling the image is quick: it
//! has no functions.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::{Module, Store};

use crate::call::{limits, outcome};
use crate::config::SandboxConfig;
use crate::error::SandboxError;
use crate::host::{CallState, Phase};
use crate::runtime::{Entry, Runtime};
use crate::store::{classify, new_store};
use crate::{Dialect, Grants, Handler, HandlerInner, NoCapabilities, SandboxInner};

/// Pool room for publishes, beside the calls': a publish runs the runtime in the call engine, so it
/// needs an instance slot of its own. At most this many publishes evaluate top-level code at once;
/// more wait for a turn (up to `publish_deadline_ms`, then `overloaded`).
#[derive(Debug)]
pub(crate) struct PublishSlots {
    free: Mutex<u32>,
    freed: Condvar,
}

/// A publish's turn; the slot is given back when it is dropped.
pub(crate) struct PublishSlot<'a>(&'a PublishSlots);

impl PublishSlots {
    pub(crate) fn new(slots: u32) -> Self {
        PublishSlots {
            free: Mutex::new(slots),
            freed: Condvar::new(),
        }
    }

    /// A free slot, waiting up to `wait` for one.
    fn acquire(&self, wait: Duration) -> Result<PublishSlot<'_>, SandboxError> {
        let poisoned = |_| SandboxError::internal("the publish slots' lock is poisoned");
        let free = self.free.lock().map_err(poisoned)?;
        let (mut free, _) = self
            .freed
            .wait_timeout_while(free, wait, |free| *free == 0)
            .map_err(|_| SandboxError::internal("the publish slots' lock is poisoned"))?;
        if *free == 0 {
            return Err(SandboxError::Overloaded);
        }
        *free -= 1;
        Ok(PublishSlot(self))
    }
}

impl Drop for PublishSlot<'_> {
    fn drop(&mut self) {
        if let Ok(mut free) = self.0.free.lock() {
            *free += 1;
            self.0.freed.notify_one();
        }
    }
}

pub(crate) fn publish(
    sandbox: &Arc<SandboxInner>,
    dialect: Dialect,
    source: &str,
) -> Result<Handler, SandboxError> {
    let config = &sandbox.config;
    if source.len() as u64 > config.source_bytes {
        return Err(SandboxError::InvalidHandler {
            message: format!(
                "the source is {} bytes, over the {} byte limit",
                source.len(),
                config.source_bytes
            ),
        });
    }
    let hash = hex::encode(Sha256::digest(source.as_bytes()));
    let span = tracing::info_span!("sandbox.publish", handler = %hash, dialect = dialect.as_str());
    let _entered = span.enter();
    let started = Instant::now();

    let (runtime, compiled) = sandbox.runtime(dialect)?;
    let _slot = sandbox
        .publish_slots
        .acquire(Duration::from_millis(config.publish_deadline_ms))?;
    let image = load(sandbox, &runtime, source)?;
    let image_bytes = image.len();
    let module = Module::new(&sandbox.engine, &image).map_err(|e| SandboxError::Compile {
        source: Box::new(crate::error::WasmtimeError(format!("{e:#}"))),
    })?;
    let image = runtime.handler_image(&module)?;
    let handler = Handler {
        inner: Arc::new(HandlerInner {
            hash,
            dialect,
            from_cache: !compiled,
            engine: sandbox.engine.clone(),
            runtime,
            image,
        }),
    };
    check_instantiation(sandbox, &handler)?;
    tracing::debug!(elapsed = ?started.elapsed(), image_bytes, "published");
    Ok(handler)
}

/// Instantiates `handler` once the way a call does, so an image that cannot fit the instance limits
/// fails at publish time rather than on the first request.
fn check_instantiation(sandbox: &SandboxInner, handler: &Handler) -> Result<(), SandboxError> {
    let state = CallState::new(
        Phase::Call,
        limits(&sandbox.config, sandbox.config.deadline_ms),
        Grants::none(),
        Arc::new(NoCapabilities),
        0,
    );
    let mut store = new_store(
        &sandbox.engine,
        &sandbox.ticker,
        state,
        sandbox.config.deadline_ms,
        sandbox.config.fuel,
    )?;
    let inner = &handler.inner;
    futures::executor::block_on(inner.runtime.instantiate(&mut store, &inner.image))
        .map(drop)
        .map_err(|e| {
            if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
            {
                return SandboxError::Overloaded;
            }
            SandboxError::InvalidHandler {
                message: format!("the handler's image does not fit the sandbox limits: {e:#}"),
            }
        })
}

/// Evaluates `source` in a fresh instance of the runtime over its base image and returns the
/// handler image: the memory as the handler's top-level code left it, as a wasm module.
fn load(sandbox: &SandboxInner, runtime: &Runtime, source: &str) -> Result<Vec<u8>, SandboxError> {
    let config = &sandbox.config;
    let deadline_ms = config.publish_deadline_ms;
    let state = CallState::new(
        Phase::Publish,
        limits(config, deadline_ms),
        Grants::none(),
        Arc::new(NoCapabilities),
        sandbox.next_seed(),
    );
    // The epoch deadline bounds top-level code; fuel, if the engine counts it, must not.
    let fuel = config.fuel.map(|_| u64::MAX);
    let mut store = new_store(&sandbox.engine, &sandbox.ticker, state, deadline_ms, fuel)?;

    let instance = futures::executor::block_on(runtime.instantiate(&mut store, &runtime.base))
        .map_err(|e| {
            if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
            {
                return SandboxError::Overloaded;
            }
            SandboxError::wasmtime("instantiating the runtime", e)
        })?;
    let initial_globals = runtime.globals(&mut store, &instance)?;
    let entry = &runtime.entry;
    let memory = entry
        .memory(&instance, &mut store)
        .map_err(|e| SandboxError::wasmtime("the runtime's memory", e))?;
    store.data_mut().memory = Some(memory);
    let loaded = futures::executor::block_on(async {
        let load = Entry::func::<u32, u32>(&instance, &mut store, &entry.load)?;
        let len = store.data_mut().hand_input(source.as_bytes().to_vec())?;
        load.call_async(&mut store, len).await
    });
    if let Some(error) = load_failure(&mut store, loaded, config, deadline_ms) {
        return Err(error);
    }
    if !store.data().logs.is_empty() {
        tracing::debug!(
            lines = store.data().logs.len(),
            "top-level code logged output (discarded)"
        );
    }
    // A call starts with the globals' initial values, since the image holds only the memory. The
    // shadow stack pointer, the runtime's only mutable global, is back where it started once
    // `parley_load` has returned.
    for ((name, initial), (_, now)) in initial_globals
        .iter()
        .zip(runtime.globals(&mut store, &instance)?)
    {
        if *initial != now {
            return Err(SandboxError::internal(format!(
                "the runtime's global `{name}` is {now:#x} after loading the handler, not its \
                 initial {initial:#x}: the memory image alone would not restore it"
            )));
        }
    }
    Ok(runtime.layout.handler_image(memory.data(&store)))
}

/// Why `parley_load` failed, if it did (`loaded` is what it returned), as the publish's error.
fn load_failure(
    store: &mut Store<CallState>,
    loaded: wasmtime::Result<u32>,
    config: &SandboxConfig,
    deadline_ms: u64,
) -> Option<SandboxError> {
    match loaded {
        Ok(0) => None,
        Ok(_) => Some(match outcome(store.data_mut().output.take()) {
            Err(error @ SandboxError::InvalidHandler { .. }) => error,
            Err(SandboxError::Internal { message, .. }) => SandboxError::InvalidHandler { message },
            Err(other) => SandboxError::InvalidHandler {
                message: other.to_string(),
            },
            Ok(_) => SandboxError::internal("the runtime failed to load without saying why"),
        }),
        Err(error) => Some(match classify(store, error, config, deadline_ms) {
            error @ (SandboxError::InvalidHandler { .. } | SandboxError::Internal { .. }) => error,
            other => SandboxError::InvalidHandler {
                message: format!("top-level code failed: {other}"),
            },
        }),
    }
}
