//! What one source address may hold at a time: open connections and requests in flight, each
//! capped per address so that one address cannot take every slot the server has
//! (`limits.max_connections_per_address`, `limits.max_concurrent_requests_per_address`), and
//! the throttles a request meets before it is read ([`Throttles`]: messages, or uploads on the
//! upload port).
//!
//! An address is a [`PeerAddress`]: an IPv4 address, or an IPv6 /64, since one IPv6 host
//! would otherwise have 2^64 addresses to spread its connections over.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::Limits;
use crate::error::ApiError;
use crate::peer::PeerAddress;
use crate::throttle::{Kind, Throttles};

/// Shards of the per-address counts: requests from different addresses seldom wait on the same
/// lock, and a shard's lock is held only to add or subtract one.
const SHARDS: usize = 16;

/// How many of something each address holds, at most `limit` each. An address holding none has
/// no entry, so the table is as large as the number of addresses holding something.
#[derive(Debug)]
pub(crate) struct PerAddress {
    limit: usize,
    hasher: RandomState,
    shards: [Mutex<HashMap<PeerAddress, usize>>; SHARDS],
}

impl PerAddress {
    pub(crate) fn new(limit: usize) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            limit,
            hasher: RandomState::new(),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        })
    }

    fn shard(&self, key: &PeerAddress) -> &Mutex<HashMap<PeerAddress, usize>> {
        // The remainder is below `SHARDS`, so the cast cannot truncate.
        let i = (self.hasher.hash_one(key) % SHARDS as u64) as usize;
        &self.shards[i]
    }

    /// One more for `key`, unless it already holds `limit`; given back when the guard drops.
    pub(crate) fn try_acquire(self: &Arc<Self>, key: PeerAddress) -> Option<AddressGuard> {
        let mut shard = self
            .shard(&key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let held = shard.entry(key).or_insert(0);
        if *held >= self.limit {
            return None;
        }
        *held += 1;
        Some(AddressGuard {
            counts: Arc::clone(self),
            key,
        })
    }

    /// How many `key` holds now.
    #[cfg(test)]
    fn held(&self, key: PeerAddress) -> usize {
        let shard = self
            .shard(&key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shard.get(&key).copied().unwrap_or(0)
    }

    fn release(&self, key: PeerAddress) {
        let mut shard = self
            .shard(&key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Entry::Occupied(mut held) = shard.entry(key) {
            *held.get_mut() -= 1;
            if *held.get() == 0 {
                held.remove();
            }
        }
    }
}

/// One connection or request counted for its address until dropped.
#[derive(Debug)]
pub(crate) struct AddressGuard {
    counts: Arc<PerAddress>,
    key: PeerAddress,
}

impl Drop for AddressGuard {
    fn drop(&mut self) {
        self.counts.release(self.key);
    }
}

/// The admission rules every listener applies, built once from the limits.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Open connections per address, on both listeners together.
    pub(crate) connections: Arc<PerAddress>,
    /// Requests in flight per address (NLIP messages over HTTP and uploads).
    requests: Arc<PerAddress>,
    /// Uploads arriving, in all (at most `max_uploads`) and per address.
    uploads: Arc<tokio::sync::Semaphore>,
    max_uploads: usize,
    uploads_per_address: Arc<PerAddress>,
    /// The throttles, shared with the agent.
    throttles: Arc<Throttles>,
}

/// What an upload holds while it arrives: its request slot, and an upload slot in all and of
/// its address.
#[derive(Debug)]
pub(crate) struct UploadSlot {
    _request: AddressGuard,
    _upload: tokio::sync::OwnedSemaphorePermit,
    _address: AddressGuard,
}

impl Admission {
    pub(crate) fn new(limits: &Limits, throttles: Arc<Throttles>) -> Admission {
        Admission {
            connections: PerAddress::new(limits.max_connections_per_address),
            requests: PerAddress::new(limits.max_concurrent_requests_per_address),
            uploads: Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_uploads)),
            max_uploads: limits.max_concurrent_uploads,
            uploads_per_address: PerAddress::new(limits.max_concurrent_uploads_per_address),
            throttles,
        }
    }

    /// The throttle of `kind` for one request from `peer`: over it, the request is refused
    /// with the time after which the next one passes.
    pub(crate) fn throttle(&self, kind: Kind, peer: SocketAddr) -> Result<(), ApiError> {
        Ok(self.throttles.check(kind, PeerAddress::of(peer), None)?)
    }

    /// The per-peer throttle of `kind` for one request of authenticated peer `id` (its
    /// address was counted when it was admitted).
    pub(crate) fn throttle_peer(&self, kind: Kind, id: &str) -> Result<(), ApiError> {
        Ok(self.throttles.check_peer(kind, id)?)
    }

    /// Admits one NLIP message from `peer`: its throttle, then one of the address's
    /// request slots, held until the guard drops.
    pub(crate) fn admit(&self, peer: SocketAddr) -> Result<AddressGuard, ApiError> {
        self.throttle(Kind::Messages, peer)?;
        self.slot(peer)
    }

    fn slot(&self, peer: SocketAddr) -> Result<AddressGuard, ApiError> {
        self.requests
            .try_acquire(PeerAddress::of(peer))
            .ok_or_else(|| {
                crate::metrics::refused("too_many_in_flight");
                ApiError::TooManyInFlight {
                    limit: self.requests.limit,
                }
            })
    }

    /// Admits one upload from `peer`: the uploads' throttle, one of the address's request
    /// slots, then one of the server's and one of the address's upload slots; none is waited
    /// for.
    pub(crate) fn admit_upload(&self, peer: SocketAddr) -> Result<UploadSlot, ApiError> {
        self.throttle(Kind::Uploads, peer)?;
        let request = self.slot(peer)?;
        let busy = |limit| {
            crate::metrics::refused("too_many_uploads");
            ApiError::TooManyUploads { limit }
        };
        let upload = Arc::clone(&self.uploads)
            .try_acquire_owned()
            .map_err(|_| busy(self.max_uploads))?;
        let address = self
            .uploads_per_address
            .try_acquire(PeerAddress::of(peer))
            .ok_or_else(|| busy(self.uploads_per_address.limit))?;
        Ok(UploadSlot {
            _request: request,
            _upload: upload,
            _address: address,
        })
    }

    /// Forgets the throttles' state of sources that have been quiet for a while; called
    /// periodically so their tables do not grow with every address ever seen.
    pub(crate) fn forget_quiet(&self) {
        self.throttles.forget_quiet();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn an_address_holds_at_most_its_limit_and_others_are_not_affected() {
        let counts = PerAddress::new(2);
        let one = PeerAddress::of(addr("127.0.0.1:1"));
        let two = PeerAddress::of(addr("127.0.0.2:1"));
        let a = counts.try_acquire(one).expect("first");
        let _b = counts.try_acquire(one).expect("second");
        assert!(counts.try_acquire(one).is_none(), "the third is refused");
        let _c = counts
            .try_acquire(two)
            .expect("another address is not affected");
        drop(a);
        assert_eq!(counts.held(one), 1);
        let _d = counts
            .try_acquire(one)
            .expect("a slot given back is free again");
    }

    #[test]
    fn an_address_holding_nothing_has_no_entry() {
        let counts = PerAddress::new(3);
        let keys: Vec<_> = (0..100u8)
            .map(|i| PeerAddress::of(SocketAddr::from(([10, 0, 0, i], 1))))
            .collect();
        let guards: Vec<_> = keys
            .iter()
            .map(|&k| counts.try_acquire(k).expect("free"))
            .collect();
        drop(guards);
        let entries: usize = counts
            .shards
            .iter()
            .map(|s| s.lock().expect("not poisoned").len())
            .sum();
        assert_eq!(entries, 0);
    }

    #[test]
    fn the_message_rate_counts_per_address_and_says_when_to_retry() {
        let limits = Limits {
            rate_limit_per_second: 1,
            rate_limit_burst: 2,
            ..Limits::default()
        };
        let throttles = Arc::new(Throttles::new(&limits, &crate::config::Throttle::off()));
        let admission = Admission::new(&limits, throttles);
        let one = addr("127.0.0.1:5");
        assert!(admission.admit(one).is_ok());
        assert!(admission.admit(one).is_ok());
        match admission.admit(one) {
            Err(ApiError::RateLimited(refused)) => {
                assert_eq!(refused.kind, Kind::Messages);
                assert!(refused.wait <= std::time::Duration::from_secs(1));
            }
            other => panic!("expected rate_limited, got {other:?}"),
        }
        assert!(admission.admit(addr("127.0.0.2:5")).is_ok());
        assert!(
            admission.admit_upload(one).is_ok(),
            "uploads have a throttle of their own"
        );
    }
}
