//! Throttles by kind of work, per client address and per authenticated peer: how often one
//! source may send messages, negotiate, have the reasoner answer, and upload.
//!
//! Each kind ([`Kind`]) has a rate and a burst per address ([`PeerAddress`]: an IPv4 address or
//! an IPv6 /64) and per peer (the id an authentication scheme resolved; none for an anonymous
//! peer, which is then throttled by address only), each a keyed GCRA limiter (governor). Over
//! either, the work is refused with the time after which the next one passes ([`RetryAfter`]),
//! which every transport hands to the peer: a 429 NLIP `rate_limited` error with `Retry-After`
//! over HTTP, `retry_after_ms` in the error's JSON on every transport.
//!
//! Where each kind is checked: **messages** by the transports, before a message is read
//! (`server::admission`, the `/anp` frame loop, the `/mcp` route); **negotiations** and
//! **model calls** by the agent once the router has chosen the message's path (and by `/anp` for
//! its meta frames), before any database or model is touched; **uploads** by the upload route.
//!
//! Memory: a limiter keeps one small cell per key it has seen; [`Throttles::forget_quiet`]
//! (called once a minute by the server) drops the keys whose bucket is full again, so the
//! tables hold only the sources active within about a burst's refill time.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::{Limits, Rate, Throttle};
use crate::peer::PeerAddress;
use crate::router::Route;

/// A kind of work a peer causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Every NLIP message, on any transport.
    Messages,
    /// A meta-protocol message (a negotiation started or continued).
    Negotiations,
    /// A message the reasoner answers (natural language).
    ModelCalls,
    /// An upload.
    Uploads,
}

impl Kind {
    const COUNT: usize = 4;

    fn index(self) -> usize {
        self as usize
    }

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Messages => "messages",
            Kind::Negotiations => "negotiations",
            Kind::ModelCalls => "model_calls",
            Kind::Uploads => "uploads",
        }
    }

    /// What the peer is told it sent too many of.
    fn noun(self) -> &'static str {
        match self {
            Kind::Messages => "messages",
            Kind::Negotiations => "negotiation messages",
            Kind::ModelCalls => "messages for the reasoner",
            Kind::Uploads => "uploads",
        }
    }

    /// The kind of work a routed message causes beyond being a message, if any.
    pub fn of_route(route: &Route<'_>) -> Option<Kind> {
        match route {
            // A fix report may rebuild a handler: it costs what a negotiation costs.
            Route::Meta(_) | Route::Fix(_) => Some(Kind::Negotiations),
            Route::NaturalLanguage => Some(Kind::ModelCalls),
            Route::Control | Route::Application(_) | Route::ToolCall(_) => None,
        }
    }
}

/// Whose throttle refused: the client address's or the authenticated peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Address,
    Peer,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Address => "address",
            Scope::Peer => "peer",
        }
    }
}

/// A refusal: which throttle, and how long until the next one of its kind passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    pub kind: Kind,
    pub scope: Scope,
    pub wait: Duration,
}

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "too many {} from this {}; retry after {} s",
            self.kind.noun(),
            self.scope.name(),
            whole_seconds(self.wait)
        )
    }
}

/// A refusal of `kind` by `scope`'s limiter, counted in `parley_throttled_total`.
fn refused(kind: Kind, scope: Scope, wait: Duration) -> RetryAfter {
    crate::metrics::throttled(kind.name(), Scope::name(scope));
    RetryAfter { kind, scope, wait }
}

/// Whole seconds, rounded up, at least one: what a `Retry-After` header holds.
pub fn whole_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// Whole milliseconds, rounded up, at least one: the error JSON's `retry_after_ms`.
pub fn whole_millis(wait: Duration) -> u64 {
    let millis = wait.as_millis() + u128::from(!wait.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(millis).unwrap_or(u64::MAX).max(1)
}

/// Every kind's limiters, per address and per peer; `None` where the rate is off.
#[derive(Debug)]
pub struct Throttles {
    by_address: [Option<DefaultKeyedRateLimiter<PeerAddress>>; Kind::COUNT],
    by_peer: [Option<DefaultKeyedRateLimiter<String>>; Kind::COUNT],
}

impl Throttles {
    /// The throttles `throttle` configures, with messages per address from `limits`
    /// (`rate_limit_per_second`, `rate_limit_burst`).
    pub fn new(limits: &Limits, throttle: &Throttle) -> Throttles {
        let messages = NonZeroU32::new(limits.rate_limit_per_second).map(|rate| {
            let burst = NonZeroU32::new(limits.rate_limit_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Throttles {
            by_address: [
                messages,
                keyed(throttle.negotiations.per_address),
                keyed(throttle.model_calls.per_address),
                keyed(throttle.uploads.per_address),
            ],
            by_peer: [
                keyed(throttle.messages.per_peer),
                keyed(throttle.negotiations.per_peer),
                keyed(throttle.model_calls.per_peer),
                keyed(throttle.uploads.per_peer),
            ],
        }
    }

    /// No throttle at all.
    pub fn off() -> Throttles {
        Throttles {
            by_address: Default::default(),
            by_peer: Default::default(),
        }
    }

    /// Counts one `kind` of work from `address` and, when authenticated, `peer`; refused
    /// (and counted in `parley_throttled_total`) when either is over its rate.
    pub fn check(
        &self,
        kind: Kind,
        address: PeerAddress,
        peer: Option<&str>,
    ) -> Result<(), RetryAfter> {
        if let Some(limiter) = &self.by_address[kind.index()] {
            limiter.check_key(&address).map_err(|no| {
                refused(
                    kind,
                    Scope::Address,
                    no.wait_time_from(limiter.clock().now()),
                )
            })?;
        }
        match peer {
            Some(peer) => self.check_peer(kind, peer),
            None => Ok(()),
        }
    }

    /// Only the per-peer throttle of `kind`: for work whose address was counted before its
    /// peer was known (a message admitted by address, then authenticated).
    pub fn check_peer(&self, kind: Kind, peer: &str) -> Result<(), RetryAfter> {
        if let Some(limiter) = &self.by_peer[kind.index()] {
            limiter.check_key(&peer.to_owned()).map_err(|no| {
                refused(kind, Scope::Peer, no.wait_time_from(limiter.clock().now()))
            })?;
        }
        Ok(())
    }

    /// Forgets the sources whose buckets are full again (they would pass as if never seen),
    /// so the tables do not grow with every address and peer ever seen.
    pub fn forget_quiet(&self) {
        for limiter in self.by_address.iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        for limiter in self.by_peer.iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// How many sources the tables hold now.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        let addresses: usize = self.by_address.iter().flatten().map(|l| l.len()).sum();
        let peers: usize = self.by_peer.iter().flatten().map(|l| l.len()).sum();
        addresses + peers
    }
}

/// A keyed limiter for `rate`, or none when it is off.
fn keyed<K>(rate: Rate) -> Option<DefaultKeyedRateLimiter<K>>
where
    K: std::hash::Hash + Eq + Clone,
{
    let per_minute = NonZeroU32::new(rate.per_minute)?;
    let burst = NonZeroU32::new(rate.burst).unwrap_or(per_minute);
    // 60 s / u32::MAX is still some 14 ns: never zero.
    let period = Duration::from_secs(60) / per_minute.get();
    let quota = Quota::with_period(period)?.allow_burst(burst);
    Some(RateLimiter::keyed(quota))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::config::KindRates;

    fn address(s: &str) -> PeerAddress {
        PeerAddress::of(s.parse::<SocketAddr>().expect("a socket address"))
    }

    fn negotiations(per_address: Rate, per_peer: Rate) -> Throttles {
        let mut throttle = Throttle::off();
        throttle.negotiations = KindRates {
            per_address,
            per_peer,
        };
        Throttles::new(&Limits::default(), &throttle)
    }

    #[test]
    fn a_kind_is_throttled_per_address_and_says_when_to_retry() {
        let throttles = negotiations(Rate::new(60, 2), Rate::OFF);
        let one = address("127.0.0.1:1");
        throttles
            .check(Kind::Negotiations, one, None)
            .expect("first");
        throttles
            .check(Kind::Negotiations, one, None)
            .expect("second");
        let refused = throttles
            .check(Kind::Negotiations, one, None)
            .expect_err("the burst is used up");
        assert_eq!(
            (refused.kind, refused.scope),
            (Kind::Negotiations, Scope::Address)
        );
        assert!(refused.wait > Duration::ZERO && refused.wait <= Duration::from_secs(1));
        assert!(refused.to_string().contains("retry after 1 s"), "{refused}");
        throttles
            .check(Kind::Negotiations, address("127.0.0.2:1"), None)
            .expect("another address has its own bucket");
        throttles
            .check(Kind::ModelCalls, one, None)
            .expect("another kind has its own bucket");
    }

    #[test]
    fn a_peer_is_throttled_across_its_addresses() {
        let throttles = negotiations(Rate::OFF, Rate::new(60, 1));
        throttles
            .check(Kind::Negotiations, address("10.0.0.1:1"), Some("alice"))
            .expect("first");
        let refused = throttles
            .check(Kind::Negotiations, address("10.0.0.2:1"), Some("alice"))
            .expect_err("the same peer from another address");
        assert_eq!(refused.scope, Scope::Peer);
        throttles
            .check(Kind::Negotiations, address("10.0.0.2:1"), Some("bob"))
            .expect("another peer");
        throttles
            .check(Kind::Negotiations, address("10.0.0.2:1"), None)
            .expect("an anonymous peer is throttled by address only");
    }

    #[test]
    fn quiet_sources_are_forgotten() {
        let throttles = negotiations(Rate::new(60_000, 1), Rate::new(60_000, 1));
        for i in 0..200u8 {
            let from = PeerAddress::of(SocketAddr::from(([10, 1, 0, i], 1)));
            let peer = format!("peer-{i}");
            throttles
                .check(Kind::Negotiations, from, Some(&peer))
                .expect("one each");
        }
        assert_eq!(throttles.remembered(), 400);
        // A millisecond refills a bucket of one at 1,000 a second.
        std::thread::sleep(Duration::from_millis(5));
        throttles.forget_quiet();
        assert_eq!(throttles.remembered(), 0);
    }

    #[test]
    fn off_is_off() {
        let throttles = Throttles::off();
        for _ in 0..1_000 {
            throttles
                .check(Kind::Uploads, address("127.0.0.1:1"), Some("p"))
                .expect("never refused");
        }
    }

    #[test]
    fn waits_round_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
        assert_eq!(whole_millis(Duration::from_micros(1)), 1);
        assert_eq!(whole_millis(Duration::from_micros(1500)), 2);
        assert_eq!(whole_millis(Duration::from_millis(250)), 250);
    }
}
