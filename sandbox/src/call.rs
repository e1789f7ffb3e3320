//! One call: a fresh `Store` and instance, the input in, the outcome out.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use wasmtime::{Engine, Memory, Store, Trap, TypedFunc, UpdateDeadline};

use crate::config::SandboxConfig;
use crate::engine::EPOCH_TICK;
use crate::error::SandboxError;
use crate::host::{CallLimits, CallState, Phase, kind};
use crate::runtime::Entry;
use crate::{CallReport, CapabilityHost, Grants, Handler, HandlerInner, SandboxInner};

/// Serialises the input once, before any work, and enforces the input cap.
pub(crate) fn serialize_input(
    config: &SandboxConfig,
    input: &serde_json::Value,
) -> Result<Vec<u8>, SandboxError> {
    let bytes = serde_json::to_vec(input)
        .map_err(|e| SandboxError::internal_with("serialising the input", e))?;
    if bytes.len() as u64 > config.input_bytes {
        return Err(SandboxError::InputTooLarge {
            size: bytes.len() as u64,
            limit: config.input_bytes,
        });
    }
    Ok(bytes)
}

pub(crate) fn limits(config: &SandboxConfig, deadline_ms: u64) -> CallLimits {
    CallLimits {
        memory_bytes: config.memory_bytes,
        output_bytes: config.output_bytes,
        log_bytes: config.log_bytes,
        host_call_args_bytes: config.host_call_args_bytes,
        host_call_result_bytes: config.host_call_result_bytes,
        max_host_calls: config.max_host_calls,
        deadline: Duration::from_millis(deadline_ms),
    }
}

/// A new store for one call or one publish, with the memory limiter and the epoch deadline set.
/// Publishing traps at the epoch deadline (it runs to completion on the publishing thread). A call
/// runs with `call_async` inside the caller's task: it yields to the executor at every epoch tick
/// and fails with `timeout` once its deadline has passed.
pub(crate) fn new_store(
    engine: &Engine,
    ticker: &crate::engine::Ticker,
    state: CallState,
    deadline_ms: u64,
    fuel: Option<u64>,
) -> Result<Store<CallState>, SandboxError> {
    let mut store = idle_store(engine, state);
    start_clock(&mut store, ticker, deadline_ms, fuel)?;
    Ok(store)
}

/// A store with the memory limiter and, for a call, the epoch callback, whose clock has not
/// started: instances can be put into it, but its code does not run until [`start_clock`].
fn idle_store(engine: &Engine, state: CallState) -> Store<CallState> {
    let phase = state.phase;
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    if phase == Phase::Call {
        store.epoch_deadline_callback(|mut context| {
            let state = context.data_mut();
            if let Some(timeout) = state.past_deadline() {
                return Err(timeout);
            }
            // tokio's yield lets the runtime poll its timers and sockets before the guest
            // runs on (outside a runtime it wakes at once). The time until the guest runs
            // again is the executor's, not the call's: the deadline leaves it out.
            let yielded = Arc::clone(&state.yielded_nanos);
            let blocking = state.blocking;
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(async move {
                    let since = Instant::now();
                    if blocking {
                        yield_at_once().await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    yielded.fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
                }),
            ))
        });
    }
    store
}

/// Starts the store's clock: keeps the epoch ticker running while the store lives, sets the epoch
/// deadline and the fuel.
fn start_clock(
    store: &mut Store<CallState>,
    ticker: &crate::engine::Ticker,
    deadline_ms: u64,
    fuel: Option<u64>,
) -> Result<(), SandboxError> {
    // Before the deadline is set: the ticker may be parked.
    store.data_mut().epoch_hold = Some(ticker.hold());
    match store.data().phase {
        Phase::Publish => {
            // Round up to whole ticks and add one: the next tick may come right after this line.
            let tick_ms = EPOCH_TICK.as_millis().max(1) as u64;
            store.set_epoch_deadline(deadline_ms.div_ceil(tick_ms) + 1);
            store.epoch_deadline_trap();
        }
        Phase::Call => store.set_epoch_deadline(1),
    }
    if let Some(fuel) = fuel {
        store
            .set_fuel(fuel)
            .map_err(|e| SandboxError::wasmtime("setting fuel", e))?;
    }
    Ok(())
}

/// Returns `Pending` once, having woken its task already: a yield any executor resumes at once.
async fn yield_at_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Turns a failed guest call into the error a caller acts on. A host function's own verdict wins, then
/// the memory limiter's, then the trap code.
pub(crate) fn classify(
    store: &mut Store<CallState>,
    error: wasmtime::Error,
    config: &SandboxConfig,
    deadline_ms: u64,
) -> SandboxError {
    let state = store.data_mut();
    if let Some(fatal) = state.fatal.take() {
        return fatal;
    }
    if state.limiter.memory_exhausted {
        return SandboxError::OutOfMemory {
            limit_bytes: config.memory_bytes,
        };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => SandboxError::Timeout { deadline_ms },
        Some(Trap::OutOfFuel) => SandboxError::FuelExhausted {
            fuel: config.fuel.unwrap_or_default(),
        },
        Some(Trap::StackOverflow) => SandboxError::StackOverflow {
            message: "the wasm stack is exhausted".to_string(),
        },
        _ => SandboxError::wasmtime("the guest trapped", error),
    }
}

/// How deep JSON from a handler (its result, a capability's arguments) may nest: serde_json's
/// recursion limit, which keeps the host's stack safe while parsing.
pub(crate) const MAX_JSON_DEPTH: usize = 128;

/// Parses JSON text the guest wrote. The guest only writes well-formed JSON (its own writer or
/// `JSON.stringify`), so what fails here is a value nested deeper than [`MAX_JSON_DEPTH`]; the
/// error is a predicate for a sentence about that value ("the result is …").
pub(crate) fn guest_json(bytes: &[u8]) -> Result<serde_json::Value, String> {
    serde_json::from_slice(bytes).map_err(|e| {
        // serde_json has no public error code for it; its message is stable.
        if e.to_string().starts_with("recursion limit exceeded") {
            format!("nested deeper than {MAX_JSON_DEPTH} levels")
        } else {
            format!("not JSON ({e})")
        }
    })
}

/// Maps the guest's reported outcome to a result.
pub(crate) fn outcome(output: Option<(u32, Vec<u8>)>) -> Result<serde_json::Value, SandboxError> {
    let Some((kind, bytes)) = output else {
        return Err(SandboxError::internal("the guest reported no outcome"));
    };
    let text = || String::from_utf8_lossy(&bytes).into_owned();
    match kind {
        kind::OK => guest_json(&bytes).map_err(|problem| SandboxError::InvalidOutput {
            message: format!("the handler's result is {problem}"),
        }),
        kind::THREW => Err(SandboxError::HandlerThrew { message: text() }),
        kind::INVALID_OUTPUT => Err(SandboxError::InvalidOutput { message: text() }),
        kind::CAPABILITY_FAILED => Err(SandboxError::CapabilityFailed { message: text() }),
        kind::STACK_OVERFLOW => Err(SandboxError::StackOverflow { message: text() }),
        kind::INVALID_HANDLER => Err(SandboxError::InvalidHandler { message: text() }),
        kind::INTERNAL => Err(SandboxError::internal(format!("guest: {}", text()))),
        other => Err(SandboxError::internal(format!(
            "the guest reported an unknown outcome kind {other}"
        ))),
    }
}

/// A call's store with the handler's instances in it, before any of its code has run, and the
/// entry points the call uses. A store holds exactly one of these, and a call runs in exactly one.
pub(crate) struct Instantiated {
    store: Store<CallState>,
    alloc: TypedFunc<u32, u32>,
    run: TypedFunc<(u32, u32), ()>,
    memory: Memory,
}

impl Instantiated {
    /// Puts `handler`'s instances (its memory image, then the runtime code over it) into a new
    /// store holding `state`. The store's clock is not started.
    pub(crate) async fn new(
        handler: &HandlerInner,
        state: CallState,
    ) -> Result<Self, (Store<CallState>, wasmtime::Error)> {
        let mut store = idle_store(&handler.engine, state);
        let found = async {
            let instance = handler
                .runtime
                .instantiate(&mut store, &handler.image)
                .await?;
            let entry = &handler.runtime.entry;
            let alloc = Entry::func::<u32, u32>(&instance, &mut store, &entry.alloc)?;
            let run = Entry::func::<(u32, u32), ()>(&instance, &mut store, &entry.run)?;
            let memory = entry.memory(&instance, &mut store)?;
            wasmtime::Result::Ok((alloc, run, memory))
        }
        .await;
        match found {
            Ok((alloc, run, memory)) => Ok(Instantiated {
                store,
                alloc,
                run,
                memory,
            }),
            Err(e) => Err((store, e)),
        }
    }
}

/// Runs `handler` on the serialised `input` in a fresh instance (`ready`, instantiated ahead for
/// this handler, or one made now); the report keeps the logs whatever the outcome.
#[tracing::instrument(name = "sandbox.call", level = "debug", skip_all, fields(handler = %handler.hash()))]
pub(crate) async fn call_report(
    sandbox: &SandboxInner,
    handler: &Handler,
    input: &[u8],
    grants: Grants,
    host: Arc<dyn CapabilityHost>,
    ready: Option<Instantiated>,
    release: Release,
) -> CallReport {
    let config = &sandbox.config;
    let started = Instant::now();
    let failed = |error: SandboxError| CallReport::failed(error, started);
    if !Engine::same(&handler.inner.engine, &sandbox.engine) {
        return failed(SandboxError::internal(
            "this handler was published by a different sandbox",
        ));
    }
    let mut state = CallState::new(
        Phase::Call,
        limits(config, config.deadline_ms),
        grants,
        host,
        sandbox.next_seed(),
    );
    // Only blocking callers release at once (see `Release`).
    state.blocking = matches!(release, Release::Now);
    let mut call = match ready {
        Some(mut ready) => {
            *ready.store.data_mut() = state;
            ready
        }
        None => match Instantiated::new(&handler.inner, state).await {
            Ok(instantiated) => instantiated,
            Err((_, e))
                if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                    .is_some() =>
            {
                return failed(SandboxError::Overloaded);
            }
            Err((mut store, e)) => {
                return failed(classify(&mut store, e, config, config.deadline_ms));
            }
        },
    };
    // Host functions find the guest's memory here rather than by its export's name.
    call.store.data_mut().memory = Some(call.memory);
    if let Err(error) = start_clock(
        &mut call.store,
        &sandbox.ticker,
        config.deadline_ms,
        config.fuel,
    ) {
        return failed(error);
    }
    let Instantiated {
        mut store,
        alloc,
        run,
        memory,
    } = call;
    let ran = async {
        let len = u32::try_from(input.len())?;
        let ptr = alloc.call_async(&mut store, len).await?;
        memory.write(&mut store, ptr as usize, input)?;
        run.call_async(&mut store, (ptr, len)).await
    }
    .await;
    let trapped = ran
        .err()
        .map(|error| classify(&mut store, error, config, config.deadline_ms));
    let state = store.data_mut();
    let result = match trapped {
        Some(error) => Err(error),
        None => outcome(state.output.take()),
    };
    let logs = std::mem::take(&mut state.logs);
    let logs_truncated = state.logs_truncated;
    release.instance(store, &handler.inner);
    if let Err(error) = &result {
        tracing::debug!(
            code = error.code(),
            logs = logs.len(),
            "sandbox.call failed"
        );
    }
    CallReport {
        result,
        logs,
        logs_truncated,
        elapsed: started.elapsed(),
    }
}

/// When a finished call's instance goes back to the pool. Dropping its `Store` resets the
/// instance's memory (every page the call dirtied is copied back from the handler's image) and frees
/// its pool slot: about a third of a small call's time, none of which its caller needs to wait
/// for.
pub(crate) enum Release {
    /// Before the call returns: for callers that block their thread anyway.
    Now,
    /// Later, through [`Resets`], holding the caller's pool slot until then.
    Deferred(Arc<Resets>, tokio::sync::OwnedSemaphorePermit),
}

impl Release {
    fn instance(self, store: Store<CallState>, handler: &Arc<HandlerInner>) {
        match self {
            Release::Now => drop(store),
            Release::Deferred(resets, slot) => resets.defer(store, slot, Arc::downgrade(handler)),
        }
    }
}

/// A finished call's store, its pool slot, and the handler it ran.
type Finished = (
    Store<CallState>,
    tokio::sync::OwnedSemaphorePermit,
    Weak<HandlerInner>,
);

/// Instances of finished calls waiting for their reset, and the instances made ready after it. A
/// deferred instance is reset by a task spawned for it: tokio runs a task spawned from a worker
/// right after the current one, on the same thread, so the reset happens once the caller has
/// answered its peer (the caller's task yields when it waits for the next request). The same task
/// then instantiates the handler again in that slot, ready for the handler's next call (see
/// [`Ready`]). A caller that makes its next call without yielding first (a loop over test cases,
/// say) finds the reset still pending and does it itself before taking an instance, so its next
/// instance is the one just made, warm in the cache, rather than another slot. Outside a task (off
/// a runtime, or blocking on one) the reset is done at once.
pub(crate) struct Resets {
    pending: std::sync::Mutex<Vec<Finished>>,
    /// A reset task is spawned and has not started yet: no need for another. (A caller that
    /// calls again without yielding would otherwise spawn one per call, and each spawn behind
    /// another wakes a second worker to steal it.)
    scheduled: std::sync::atomic::AtomicBool,
    pub(crate) ready: Ready,
}

impl Resets {
    pub(crate) fn new(ready: Ready) -> Self {
        Resets {
            pending: std::sync::Mutex::default(),
            scheduled: std::sync::atomic::AtomicBool::new(false),
            ready,
        }
    }

    fn defer(
        self: Arc<Self>,
        store: Store<CallState>,
        slot: tokio::sync::OwnedSemaphorePermit,
        handler: Weak<HandlerInner>,
    ) {
        // Only a task yields to its runtime when it waits; a thread blocking on a runtime
        // (`block_on`) is no worker, and a task spawned from it would be reset by another
        // thread, racing the caller's next call for the slot.
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|_| tokio::task::try_id().is_some());
        // Returning drops `store` and `slot`: the reset happens at once.
        let Some(runtime) = runtime else { return };
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        pending.push((store, slot, handler));
        drop(pending);
        if !self
            .scheduled
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            runtime.spawn(async move {
                // Cleared first: an instance deferred from now on needs a task of its own,
                // unless this run takes it.
                self.scheduled
                    .store(false, std::sync::atomic::Ordering::Release);
                self.run();
            });
        }
    }

    /// Resets every pending instance, then makes an instance ready in its slot for the handler
    /// it ran, or frees the slot.
    pub(crate) fn run(&self) {
        let due = match self.pending.lock() {
            Ok(mut pending) if !pending.is_empty() => std::mem::take(&mut *pending),
            _ => return,
        };
        // Outside the lock: dropping the stores is the work.
        for (store, slot, handler) in due {
            drop(store);
            self.ready.refill(&handler, slot);
        }
    }
}

/// Instances instantiated ahead of their call for the handlers called last, at most
/// `SandboxConfig::ready_instances`, each holding its pool slot: a call that finds one for its
/// handler skips instantiation (a new store, the handler's memory image and the runtime code
/// instantiated, the entry points looked up), which is then done after the previous call's
/// answer rather than before this one's. Nothing has run in a ready instance, so a call in it
/// starts exactly as in one made for it. A caller that finds no free slot takes one from the
/// oldest ready instance.
pub(crate) struct Ready {
    parked: std::sync::Mutex<std::collections::VecDeque<Parked>>,
    capacity: usize,
    /// What a ready instance's store holds until its call replaces it: the call limits (the memory
    /// limiter checks the image against them), no grants, no capabilities.
    limits: CallLimits,
    no_host: Arc<dyn CapabilityHost>,
    /// Wakes callers waiting for a slot when an instance is made ready (see `SandboxInner::slot`).
    pub(crate) parked_one: tokio::sync::Notify,
}

struct Parked {
    handler: Weak<HandlerInner>,
    instance: Instantiated,
    slot: tokio::sync::OwnedSemaphorePermit,
}

impl Ready {
    pub(crate) fn new(config: &SandboxConfig) -> Self {
        Ready {
            parked: std::sync::Mutex::default(),
            capacity: config.ready_instances.min(config.pool_instances) as usize,
            limits: limits(config, config.deadline_ms),
            no_host: Arc::new(crate::NoCapabilities),
            parked_one: tokio::sync::Notify::new(),
        }
    }

    /// A ready instance of `handler`, with its slot.
    pub(crate) fn take(
        &self,
        handler: &Arc<HandlerInner>,
    ) -> Option<(Instantiated, tokio::sync::OwnedSemaphorePermit)> {
        if self.capacity == 0 {
            return None;
        }
        let mut parked = self.parked.lock().ok()?;
        // The newest first: the most likely to be warm in the cache.
        let index = parked
            .iter()
            .rposition(|p| std::ptr::eq(p.handler.as_ptr(), Arc::as_ptr(handler)))?;
        let taken = parked.remove(index)?;
        drop(parked);
        Some((taken.instance, taken.slot))
    }

    /// How many instances are ready.
    pub(crate) fn len(&self) -> usize {
        self.parked.lock().map_or(0, |parked| parked.len())
    }

    /// Drops the oldest ready instance, freeing its slot. Whether there was one.
    pub(crate) fn evict_oldest(&self) -> bool {
        let oldest = match self.parked.lock() {
            Ok(mut parked) => parked.pop_front(),
            Err(_) => None,
        };
        oldest.is_some()
    }

    /// Makes an instance of `handler` ready in `slot`, unless readiness is off, the handler is
    /// gone or no other slot is free (a call may be waiting for this one), in which case the slot
    /// is freed. The oldest ready instance makes room if needed.
    fn refill(&self, handler: &Weak<HandlerInner>, slot: tokio::sync::OwnedSemaphorePermit) {
        if self.capacity == 0 || slot.semaphore().available_permits() == 0 {
            return;
        }
        let Some(strong) = handler.upgrade() else {
            return;
        };
        let state = CallState::new(
            Phase::Call,
            self.limits,
            Grants::none(),
            Arc::clone(&self.no_host),
            0,
        );
        // Instantiation runs no guest code and nothing in it waits: it completes in one poll.
        let Some(Ok(instance)) = Instantiated::new(&strong, state).now_or_never() else {
            return;
        };
        drop(strong);
        // Dropped outside the lock: dropping a store resets its instance.
        let mut evicted = Vec::new();
        if let Ok(mut parked) = self.parked.lock() {
            // Those of handlers dropped since go first, then the oldest.
            if parked.iter().any(|p| p.handler.strong_count() == 0) {
                let (live, dead): (std::collections::VecDeque<_>, std::collections::VecDeque<_>) =
                    std::mem::take(&mut *parked)
                        .into_iter()
                        .partition(|p| p.handler.strong_count() > 0);
                *parked = live;
                evicted.extend(dead);
            }
            while parked.len() >= self.capacity {
                evicted.extend(parked.pop_front());
            }
            parked.push_back(Parked {
                handler: handler.clone(),
                instance,
                slot,
            });
        }
        drop(evicted);
        // A caller that began waiting for a slot after the check above takes this one.
        self.parked_one.notify_waiters();
    }
}
