//! A call's or a publish's `Store`: the memory limiter, the epoch deadline and its yields, fuel,
//! and how a failed guest call becomes a [`SandboxError`].

use std::sync::Arc;
use std::time::Instant;

use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use crate::config::SandboxConfig;
use crate::engine::{EPOCH_TICK, Ticker};
use crate::error::SandboxError;
use crate::host::{CallState, Phase};

/// A new store for one call or one publish, with the memory limiter and the epoch deadline set.
/// Publishing traps at the epoch deadline (it runs to completion on the publishing thread). A call
/// runs with `call_async` inside the caller's task: it yields to the executor at every epoch tick
/// and fails with `timeout` once its deadline has passed.
pub(crate) fn new_store(
    engine: &Engine,
    ticker: &Ticker,
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
pub(crate) fn idle_store(engine: &Engine, state: CallState) -> Store<CallState> {
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
pub(crate) fn start_clock(
    store: &mut Store<CallState>,
    ticker: &Ticker,
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
