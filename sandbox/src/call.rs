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
    run: TypedFunc<u32, ()>,
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
            let run = Entry::func::<u32, ()>(&instance, &mut store, &entry.run)?;
            let memory = entry.memory(&instance, &mut store)?;
            wasmtime::Result::Ok((run, memory))
        }
        .await;
        match found {
            Ok((run, memory)) => Ok(Instantiated { store, run, memory }),
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
    input: Vec<u8>,
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
    let Instantiated { mut store, run, .. } = call;
    let ran = async {
        let len = store.data_mut().hand_input(input)?;
        run.call_async(&mut store, len).await
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

/// Instances of finished calls waiting for their reset, and the instances made ready after it.
///
/// Resets run on a thread of their own in the idle scheduling class (`sandbox-reset`), which
/// takes every pending instance, gives its slot back, resets it and instantiates its handler
/// again, ready for the handler's next call (see [`Ready`]). While instances keep coming it wakes on its
/// own clock, every [`RESET_INTERVAL`], never woken by a call; with nothing pending it parks, and
/// the first instance deferred after that unparks it. So a call hands its instance over with no
/// more than a lock, and the reset runs where the request path does not: in the idle class, a
/// worker or a peer that wakes up takes the core from it at once.
///
/// Before, the reset ran in a task on the worker that had just answered, right after the
/// answer: the peer's thread woken by the answer is placed on the answering core (the wake-up
/// says its waker is about to sleep), and waited there for the reset; and the worker saw the
/// peer's next request only after it. A caller that finds no ready instance instantiates one in
/// a free slot on its way; with no slot free, it resets the oldest pending instance itself and
/// takes its slot. Outside a task (off a runtime, or blocking on one) the reset is done at once.
pub(crate) struct Resets {
    pending: std::sync::Mutex<std::collections::VecDeque<Finished>>,
    /// The reset thread is parked (or about to): the next deferral unparks it.
    parked: std::sync::atomic::AtomicBool,
    pub(crate) ready: Ready,
    /// The pool's slots for calls: a ready instance takes one.
    slots: Arc<tokio::sync::Semaphore>,
    /// The reset thread; it ends when the last reference to these resets is gone.
    worker: std::sync::OnceLock<std::thread::Thread>,
}

/// How often the reset thread looks for finished instances while they keep coming.
pub(crate) const RESET_INTERVAL: Duration = Duration::from_micros(250);

impl Resets {
    /// Creates the resets and starts their thread.
    pub(crate) fn start(
        ready: Ready,
        slots: Arc<tokio::sync::Semaphore>,
    ) -> Result<Arc<Self>, SandboxError> {
        let resets = Arc::new(Resets {
            pending: std::sync::Mutex::default(),
            parked: std::sync::atomic::AtomicBool::new(false),
            ready,
            slots,
            worker: std::sync::OnceLock::new(),
        });
        let weak = Arc::downgrade(&resets);
        let handle = std::thread::Builder::new()
            .name("sandbox-reset".to_string())
            .spawn(move || {
                lower_priority();
                loop {
                    let Some(resets) = weak.upgrade() else { return };
                    if resets.run() {
                        drop(resets);
                        std::thread::sleep(RESET_INTERVAL);
                        continue;
                    }
                    // Announced before the last look: an instance deferred after it unparks
                    // this thread (park's token makes an unpark before the park count).
                    resets
                        .parked
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    let idle = resets.pending.lock().map_or(true, |p| p.is_empty());
                    drop(resets);
                    if idle {
                        // The timeout only bounds how long a dropped sandbox's thread lingers.
                        std::thread::park_timeout(Duration::from_secs(1));
                    }
                }
            })
            .map_err(|e| SandboxError::internal_with("starting the reset thread", e))?;
        let _ = resets.worker.set(handle.thread().clone());
        Ok(resets)
    }

    fn defer(
        self: Arc<Self>,
        store: Store<CallState>,
        slot: tokio::sync::OwnedSemaphorePermit,
        handler: Weak<HandlerInner>,
    ) {
        // Only a task yields to its runtime when it waits; a thread blocking on a runtime
        // (`block_on`) resets its instance itself, as it blocks anyway.
        if tokio::task::try_id().is_none() {
            return;
        }
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        pending.push_back((store, slot, handler));
        drop(pending);
        if self.parked.swap(false, std::sync::atomic::Ordering::SeqCst)
            && let Some(worker) = self.worker.get()
        {
            worker.unpark();
        }
    }

    /// The slot of the oldest pending instance, reset here and now: for a caller that found no
    /// slot free while the reset thread is behind (a busy machine starves it).
    pub(crate) fn reclaim_one(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let (store, slot, _) = self.pending.lock().ok()?.pop_front()?;
        // Outside the lock: dropping the store is the reset.
        drop(store);
        Some(slot)
    }

    /// Resets every pending instance and makes an instance of the handler it ran ready (see
    /// [`Ready::refill`]). Whether there was any. Takes one at a time, so that a caller can still
    /// reclaim the others while this thread waits for a core.
    fn run(&self) -> bool {
        let mut any = false;
        loop {
            let next = match self.pending.lock() {
                Ok(mut pending) => pending.pop_front(),
                Err(_) => None,
            };
            let Some(next) = next else { return any };
            any = true;
            let (store, slot, handler) = next;
            // The slot goes back first, and the store is reset in the pool's reserved slot: were
            // this thread kept off the cores from here on, no caller would wait for it.
            drop(slot);
            // Outside the lock: dropping the store is the reset.
            drop(store);
            self.ready.refill(&handler, &self.slots);
        }
    }
}

impl Drop for Resets {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.get() {
            worker.unpark();
        }
    }
}

/// Puts the calling thread in the idle scheduling class (`SCHED_IDLE`), where the platform has
/// one: it runs only on a core nothing else wants, and any other thread that wakes up there takes
/// the core from it at once. (A nice value alone does not do that: a thread at nice 19 could keep
/// its core for the rest of its time slice, up to milliseconds, after a worker woke.)
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(error) =
            set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle)
        {
            tracing::debug!(?error, "the reset thread keeps its scheduling policy");
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

    /// Makes an instance of `handler` ready in one of `slots`, unless readiness is off, the handler
    /// is gone or fewer than two slots are free (a call may be waiting for one). The oldest ready
    /// instance makes room if needed.
    fn refill(&self, handler: &Weak<HandlerInner>, slots: &Arc<tokio::sync::Semaphore>) {
        // One slot for this instance and one left free: a call may be waiting for it.
        if self.capacity == 0 || slots.available_permits() < 2 {
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
        // In the pool's reserved slot (see `engine::RESET_INSTANCES`) until it takes a free one.
        let Some(Ok(instance)) = Instantiated::new(&strong, state).now_or_never() else {
            return;
        };
        drop(strong);
        let Ok(slot) = Arc::clone(slots).try_acquire_owned() else {
            return;
        };
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
