//! The pool's instance slots for calls: which a call gets (a ready instance of its handler, a
//! free slot, the slot of a finished instance reset on the way), and waiting for one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use crate::call::Instantiated;
use crate::error::SandboxError;
use crate::{Handler, SandboxInner};

impl SandboxInner {
    /// The instance slot for a call of `handler`: a ready instance of it with its slot, or a free
    /// slot, waiting for one (`wait`, see [`SandboxInner::slot`]) or not ([`SandboxInner::slot_now`]).
    pub(crate) async fn claim(
        &self,
        handler: &Handler,
        wait: bool,
    ) -> Result<(Option<Instantiated>, OwnedSemaphorePermit), SandboxError> {
        let resets = self.resets.as_deref();
        if let Some((ready, slot)) = resets.and_then(|r| r.ready.take(&handler.inner)) {
            return Ok((Some(ready), slot));
        }
        // None ready (the reset thread has not caught up): a free slot, instantiated on the way.
        if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok((None, slot));
        }
        // None free: the oldest instance still waiting for its reset gives up its slot.
        if let Some(slot) = resets.and_then(|r| r.reclaim_one()) {
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
    async fn slot(&self) -> Result<OwnedSemaphorePermit, SandboxError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.slot_now();
        }
        let wait = tokio::time::sleep(Duration::from_millis(self.config.deadline_ms));
        tokio::pin!(wait);
        loop {
            // Created before the check: an instance made ready after it wakes this caller.
            let parked = self
                .resets
                .as_deref()
                .map(|resets| resets.ready.parked_one.notified());
            if let Ok(permit) = self.slot_now() {
                return Ok(permit);
            }
            let made_ready = async {
                match parked {
                    Some(parked) => parked.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                permit = Arc::clone(&self.slots).acquire_owned() => {
                    return permit.map_err(|_| SandboxError::Overloaded);
                }
                () = made_ready => {}
                () = &mut wait => return Err(SandboxError::Overloaded),
            }
        }
    }

    /// A free instance slot now, taken from the oldest ready instance if no other is free, or
    /// `overloaded`.
    fn slot_now(&self) -> Result<OwnedSemaphorePermit, SandboxError> {
        loop {
            if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
                return Ok(permit);
            }
            let evicted = self
                .resets
                .as_deref()
                .is_some_and(|resets| resets.ready.evict_oldest());
            if !evicted {
                return Err(SandboxError::Overloaded);
            }
        }
    }
}
