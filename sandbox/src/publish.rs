//! Publishing: handler source → wizer snapshot → compiled module, through the artifact cache.
//!
//! The snapshot is the whole point of the design: QuickJS's runtime, context, prelude and the handler's
//! compiled bytecode and top-level state are built once here, so a call starts from a ready `handle`
//! function in a copy-on-write image instead of booting a JavaScript engine.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use sha2::{Digest, Sha256};
use wasmtime::Module;
use wasmtime_wizer::{WasmtimeWizer, Wizer};

use crate::cache::WASMTIME_VERSION;
use crate::call::{classify, limits, new_store, outcome};
use crate::engine::compatibility_digest;
use crate::error::SandboxError;
use crate::host::{CallState, Phase};
use crate::{
    Grants, Handler, HandlerInner, NoCapabilities, RUNTIME_SHA256, RUNTIME_WASM, SandboxInner,
};

/// Version of this crate's artifact format and guest ABI; bump to invalidate every cached artifact.
const ARTIFACT_FORMAT: &str = "parley-sandbox-artifact-v1";

/// The cache key: sha256 over everything the compiled artifact depends on.
fn cache_key(kind: &str, handler_hash: &str, engine_digest: u64) -> String {
    let mut hasher = Sha256::new();
    for part in [
        ARTIFACT_FORMAT,
        kind,
        RUNTIME_SHA256,
        handler_hash,
        WASMTIME_VERSION,
        &format!("{engine_digest:016x}"),
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// Drives a future that never waits: wizer's snapshot API is async for the benefit of async stores,
/// but with a synchronous store every await completes immediately.
fn block_on_ready<F: Future>(future: F) -> Result<F::Output, SandboxError> {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut context) {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => Err(SandboxError::internal(
            "wizer's snapshot unexpectedly waited on a synchronous store",
        )),
    }
}

pub(crate) fn publish(sandbox: &Arc<SandboxInner>, source: &str) -> Result<Handler, SandboxError> {
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
    let span = tracing::info_span!("sandbox.publish", handler = %hash);
    let _entered = span.enter();
    let key = cache_key("handler", &hash, compatibility_digest(&sandbox.engine));

    if let Some(cache) = &sandbox.cache
        && let Some(module) = cache.load(&sandbox.engine, &key)
    {
        tracing::debug!("loaded from the artifact cache");
        return finish(sandbox, hash, module, true);
    }

    let snapshot = snapshot(sandbox, source)?;
    let module = Module::new(&sandbox.engine, &snapshot).map_err(|e| SandboxError::Compile {
        source: Box::new(crate::error::WasmtimeError(format!("{e:#}"))),
    })?;
    if let Some(cache) = &sandbox.cache {
        cache.store(&key, &module);
    }
    finish(sandbox, hash, module, false)
}

fn finish(
    sandbox: &Arc<SandboxInner>,
    hash: String,
    module: Module,
    from_cache: bool,
) -> Result<Handler, SandboxError> {
    // Anything the module imports beyond the linker's functions traps when called instead of failing
    // instantiation; our runtime imports nothing else, so this only matters for a corrupted build.
    let mut linker = sandbox.linker.clone();
    linker
        .define_unknown_imports_as_traps(&module)
        .map_err(|e| SandboxError::wasmtime("linking the handler", e))?;
    let pre = linker
        .instantiate_pre(&module)
        .map_err(|e| SandboxError::wasmtime("linking the handler", e))?;
    let handler = Handler {
        inner: Arc::new(HandlerInner {
            hash,
            from_cache,
            engine: sandbox.engine.clone(),
            pre,
        }),
    };
    // Instantiate once now, so a snapshot that cannot fit the instance limits fails at publish time
    // rather than on the first request.
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
    futures::executor::block_on(handler.inner.pre.instantiate_async(&mut store)).map_err(|e| {
        if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
            .is_some()
        {
            return SandboxError::Overloaded;
        }
        SandboxError::InvalidHandler {
            message: format!("the handler's snapshot does not fit the sandbox limits: {e:#}"),
        }
    })?;
    Ok(handler)
}

/// The wizer-instrumented runtime, compiled for the publish engine: built (or loaded from the cache)
/// once per sandbox.
fn instrumented_module(
    sandbox: &SandboxInner,
    instrumented_wasm: &[u8],
) -> Result<Module, SandboxError> {
    let mut slot = sandbox
        .instrumented
        .lock()
        .map_err(|_| SandboxError::internal("the instrumented-module lock is poisoned"))?;
    if let Some(module) = slot.as_ref() {
        return Ok(module.clone());
    }
    let key = cache_key(
        "instrumented-runtime",
        "",
        compatibility_digest(&sandbox.publish_engine),
    );
    let module = match sandbox
        .cache
        .as_ref()
        .and_then(|cache| cache.load(&sandbox.publish_engine, &key))
    {
        Some(module) => module,
        None => {
            let module = Module::new(&sandbox.publish_engine, instrumented_wasm)
                .map_err(|e| SandboxError::wasmtime("compiling the instrumented runtime", e))?;
            if let Some(cache) = &sandbox.cache {
                cache.store(&key, &module);
            }
            module
        }
    };
    *slot = Some(module.clone());
    Ok(module)
}

/// Evaluates `source` in a fresh runtime instance and snapshots the result into a new wasm module.
fn snapshot(sandbox: &SandboxInner, source: &str) -> Result<Vec<u8>, SandboxError> {
    let config = &sandbox.config;
    let wizer = Wizer::new();
    let (context, instrumented_wasm) = wizer
        .instrument(RUNTIME_WASM)
        .map_err(|e| SandboxError::wasmtime("instrumenting the runtime", e))?;
    let module = instrumented_module(sandbox, &instrumented_wasm)?;

    let deadline_ms = config.publish_deadline_ms;
    let state = CallState::new(
        Phase::Publish,
        limits(config, deadline_ms),
        Grants::none(),
        Arc::new(NoCapabilities),
        sandbox.next_seed(),
    );
    let mut store = new_store(
        &sandbox.publish_engine,
        &sandbox.ticker,
        state,
        deadline_ms,
        None,
    )?;
    let instance = sandbox
        .publish_linker
        .instantiate(&mut store, &module)
        .map_err(|e| SandboxError::wasmtime("instantiating the runtime", e))?;

    let loaded = (|| {
        let alloc = instance.get_typed_func::<u32, u32>(&mut store, "parley_alloc")?;
        let load = instance.get_typed_func::<(u32, u32), u32>(&mut store, "parley_load")?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("the runtime exports no memory"))?;
        let len = u32::try_from(source.len())?;
        let ptr = alloc.call(&mut store, len)?;
        memory.write(&mut store, ptr as usize, source.as_bytes())?;
        load.call(&mut store, (ptr, len))
    })();
    match loaded {
        Ok(0) => {}
        Ok(_) => {
            let output = store.data_mut().output.take();
            return Err(match outcome(output) {
                Err(error @ SandboxError::InvalidHandler { .. }) => error,
                Err(SandboxError::Internal { message, .. }) => {
                    SandboxError::InvalidHandler { message }
                }
                Err(other) => SandboxError::InvalidHandler {
                    message: other.to_string(),
                },
                Ok(_) => SandboxError::internal("the runtime failed to load without saying why"),
            });
        }
        Err(error) => {
            return Err(match classify(&mut store, error, config, deadline_ms) {
                error @ (SandboxError::InvalidHandler { .. } | SandboxError::Internal { .. }) => {
                    error
                }
                other => SandboxError::InvalidHandler {
                    message: format!("top-level code failed: {other}"),
                },
            });
        }
    }
    if !store.data().logs.is_empty() {
        tracing::debug!(
            lines = store.data().logs.len(),
            "top-level code logged output (discarded)"
        );
    }
    let snapshot = block_on_ready(wizer.snapshot(
        &context,
        &mut WasmtimeWizer {
            store: &mut store,
            instance,
        },
    ))?
    .map_err(|e| SandboxError::wasmtime("snapshotting the handler", e))?;
    Ok(snapshot)
}
