//! Deferred resets: a finished call's instance is reset after the call has answered, on the
//! sandbox's own thread (`sandbox-reset`) in the idle scheduling class (`SCHED_IDLE` on Linux),
//! instead of before the call returns. Dropping a call's `Store` resets its pool slot: every page
//! the call dirtied is copied back from the handler's image, about a third of a small call's time
//! (7.5–10 µs of a JavaScript call hot). Measured with the negotiation bench (`tests/benches/`): a
//! reset in a task after the answer takes 50–60 µs off a 0-RTT round trip over WebSocket against
//! a reset before the call returns; but on the answering worker it still delays the peer the answer
//! has just woken (the scheduler puts a woken reader on its waker's core) and the worker's next
//! request, and this thread does better again: with client and provider in one process 47–55 µs
//! against 90 µs; under load (8 connections to a provider in its own process) 10–25 % more
//! requests per second at less provider CPU per request; sequential calls to a provider in its own
//! process unchanged. The idle class matters: a thread at nice 19 keeps its core for the rest of
//! its time slice after a worker wakes there, and raised the p99 under load by half.
//!
//! Switching it off: `deferred_reset = false` resets every instance before its call returns and
//! starts no thread; no instance is then made ready ahead either ([`super::ready`]).
//!
//! The thread takes every pending instance, gives its slot back, resets it and makes its handler
//! ready again. While instances keep coming it wakes on its own clock, every [`RESET_INTERVAL`],
//! never woken by a call; with nothing pending it parks, and the first instance deferred after
//! that unparks it. So a call hands its instance over with no more than a lock. A caller that finds
//! no slot free resets the oldest pending instance itself and takes its slot ([`Resets::reclaim_one`]):
//! on a machine too busy to give the idle class a core, the reset falls back onto the request path.
//! Calls not made from a task (`call_blocking`, `run_once`, a thread blocking on a runtime) reset
//! before returning.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Store;

use super::ready::Ready;
use crate::HandlerInner;
use crate::error::SandboxError;
use crate::host::CallState;

/// Instance slots for the reset thread, beside the `pool_instances` for calls: the finished
/// instance it resets, and then the instance it makes ready, until that takes a call's slot. It
/// gives a finished call's slot back before it starts, so a caller never waits for it.
pub(crate) const RESET_INSTANCES: u32 = 1;

/// How often the reset thread looks for finished instances while they keep coming. Measured
/// against 100 µs, 1 ms and 5 ms with the negotiation bench: 250 µs gave the lowest 0-RTT/text
/// ratios over WebSocket.
pub(crate) const RESET_INTERVAL: Duration = Duration::from_micros(250);

/// When a finished call's instance goes back to the pool.
pub(crate) enum Release {
    /// Before the call returns: for callers that block their thread anyway, and for every call
    /// with `deferred_reset = false`. The caller holds the call's slot until then.
    Now,
    /// Later, through [`Resets`], holding the caller's pool slot until then.
    Deferred(Arc<Resets>, OwnedSemaphorePermit),
}

impl Release {
    /// Gives back `store`, the instance of a call of `handler`.
    pub(crate) fn instance(self, store: Store<CallState>, handler: &Arc<HandlerInner>) {
        match self {
            Release::Now => drop(store),
            Release::Deferred(resets, slot) => resets.defer(store, slot, Arc::downgrade(handler)),
        }
    }
}

/// A finished call's store, its pool slot, and the handler it ran.
type Finished = (Store<CallState>, OwnedSemaphorePermit, Weak<HandlerInner>);

/// Instances of finished calls waiting for their reset, and the instances made ready after it.
pub(crate) struct Resets {
    pending: Mutex<VecDeque<Finished>>,
    /// The reset thread is parked (or about to): the next deferral unparks it.
    parked: AtomicBool,
    pub(crate) ready: Ready,
    /// The pool's slots for calls: a ready instance takes one.
    slots: Arc<Semaphore>,
    /// The reset thread; it ends when the last reference to these resets is gone.
    worker: OnceLock<std::thread::Thread>,
}

impl Resets {
    /// Creates the resets and starts their thread.
    pub(crate) fn start(ready: Ready, slots: Arc<Semaphore>) -> Result<Arc<Self>, SandboxError> {
        let resets = Arc::new(Resets {
            pending: Mutex::default(),
            parked: AtomicBool::new(false),
            ready,
            slots,
            worker: OnceLock::new(),
        });
        let weak = Arc::downgrade(&resets);
        let handle = std::thread::Builder::new()
            .name("sandbox-reset".to_string())
            .spawn(move || {
                lower_priority();
                while let Some(resets) = weak.upgrade() {
                    resets.turn();
                }
            })
            .map_err(|e| SandboxError::internal_with("starting the reset thread", e))?;
        let _ = resets.worker.set(handle.thread().clone());
        Ok(resets)
    }

    /// One turn of the reset thread: resets what is pending and sleeps one interval, or parks
    /// when nothing was. Takes `self` by value so that it holds no reference while it waits.
    fn turn(self: Arc<Self>) {
        if self.run() {
            drop(self);
            std::thread::sleep(RESET_INTERVAL);
            return;
        }
        // Announced before the last look: an instance deferred after it unparks this thread
        // (park's token makes an unpark before the park count).
        self.parked.store(true, Ordering::SeqCst);
        let idle = self.pending.lock().map_or(true, |p| p.is_empty());
        drop(self);
        if idle {
            // The timeout only bounds how long a dropped sandbox's thread lingers.
            std::thread::park_timeout(Duration::from_secs(1));
        }
    }

    fn defer(
        self: Arc<Self>,
        store: Store<CallState>,
        slot: OwnedSemaphorePermit,
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
        if self.parked.swap(false, Ordering::SeqCst)
            && let Some(worker) = self.worker.get()
        {
            worker.unpark();
        }
    }

    /// The slot of the oldest pending instance, reset here and now: for a caller that found no
    /// slot free while the reset thread is behind (a busy machine starves it).
    pub(crate) fn reclaim_one(&self) -> Option<OwnedSemaphorePermit> {
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
            let Some((store, slot, handler)) = next else {
                return any;
            };
            any = true;
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
