//! Ready instances: after resetting a finished call's instance, the reset thread
//! ([`super::reset`]) instantiates the same handler again in that slot (a new store, the handler's
//! image, the runtime code over it, the entry points looked up) and keeps it, up to
//! `ready_instances` of them, for the handlers called last. A call that finds one for its handler
//! puts its own state in the store, starts the clock and runs: instantiation is done after the
//! previous answer instead of before this one. Nothing has run in a ready instance, so isolation is
//! the same as in one made for the call.
//!
//! What it buys, measured: in the handler bench (`cargo bench -p parley-sandbox --bench handler`,
//! calls from a task that yields between them) a median call of 19.1 µs against 23.0 µs
//! instantiating on the way; in the negotiation bench, a 0-RTT call over WebSocket against a
//! provider in its own process 129–140 µs against 158–159 µs with `ready_instances = 0`, on a
//! machine whose two cores the bench kept busy; on an idle one the difference was within the noise.
//!
//! Switching it off: `ready_instances = 0` (or `deferred_reset = false`, which has no reset thread
//! to make them). Each call then instantiates its instance on its way, as the first call of a
//! handler always does.
//!
//! A ready instance holds its pool slot: a caller that finds no free slot drops the oldest ready
//! instance and takes its slot, and a finished call's slot is freed rather than kept ready when no
//! other slot is free (a call may be waiting for it; callers waiting for a slot are also woken when
//! an instance is made ready, and take its slot).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use futures::FutureExt as _;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::call::{Instantiated, limits};
use crate::config::SandboxConfig;
use crate::host::{CallLimits, CallState, Phase};
use crate::{CapabilityHost, Grants, HandlerInner, NoCapabilities};

/// Instances instantiated ahead of their call for the handlers called last, each with its pool
/// slot.
pub(crate) struct Ready {
    parked: Mutex<VecDeque<Parked>>,
    capacity: usize,
    /// What a ready instance's store holds until its call replaces it: the call limits (the memory
    /// limiter checks the image against them), no grants, no capabilities.
    limits: CallLimits,
    no_host: Arc<dyn CapabilityHost>,
    /// Wakes callers waiting for a slot when an instance is made ready (see `SandboxInner::slot`).
    pub(crate) parked_one: Notify,
}

struct Parked {
    handler: Weak<HandlerInner>,
    instance: Instantiated,
    slot: OwnedSemaphorePermit,
}

impl Ready {
    pub(crate) fn new(config: &SandboxConfig) -> Self {
        Ready {
            parked: Mutex::default(),
            capacity: config.ready_instances.min(config.pool_instances) as usize,
            limits: limits(config, config.deadline_ms),
            no_host: Arc::new(NoCapabilities),
            parked_one: Notify::new(),
        }
    }

    /// A ready instance of `handler`, with its slot.
    pub(crate) fn take(
        &self,
        handler: &Arc<HandlerInner>,
    ) -> Option<(Instantiated, OwnedSemaphorePermit)> {
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
    pub(crate) fn refill(&self, handler: &Weak<HandlerInner>, slots: &Arc<Semaphore>) {
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
        // In the pool's reserved slot (see `reset::RESET_INSTANCES`) until it takes a free one.
        let Some(Ok(instance)) = Instantiated::new(&strong, state).now_or_never() else {
            return;
        };
        drop(strong);
        let Ok(slot) = Arc::clone(slots).try_acquire_owned() else {
            return;
        };
        let evicted = self.park(Parked {
            handler: handler.clone(),
            instance,
            slot,
        });
        // Dropped outside the lock: dropping a store resets its instance.
        drop(evicted);
        // A caller that began waiting for a slot after the check above takes this one.
        self.parked_one.notify_waiters();
    }

    /// Keeps `ready`, first making room: the instances of handlers dropped since go, then the
    /// oldest. Returns those that went, for the caller to drop outside the lock.
    fn park(&self, ready: Parked) -> Vec<Parked> {
        let mut evicted = Vec::new();
        let Ok(mut parked) = self.parked.lock() else {
            evicted.push(ready);
            return evicted;
        };
        if parked.iter().any(|p| p.handler.strong_count() == 0) {
            let (live, dead): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut *parked)
                .into_iter()
                .partition(|p| p.handler.strong_count() > 0);
            *parked = live;
            evicted.extend(dead);
        }
        while parked.len() >= self.capacity {
            evicted.extend(parked.pop_front());
        }
        parked.push_back(ready);
        evicted
    }
}
