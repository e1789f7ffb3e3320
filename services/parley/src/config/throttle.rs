//! The `[throttle]` table: how often one client address, and one authenticated peer, may cause
//! each kind of work (enforced by `crate::throttle`).
//!
//! ```toml
//! [throttle.negotiations]
//! per_address = { per_minute = 300, burst = 150 }
//! per_peer = { per_minute = 300, burst = 150 }
//! ```
//!
//! Every NLIP message per address is `limits.rate_limit_per_second` and `limits.rate_limit_burst`
//! (the oldest of the throttles, kept where it was); `[throttle.messages]` holds only `per_peer`.

use std::str::FromStr;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// A steady rate and the burst allowed on top of it. A rate of 0 turns the throttle off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// How many per minute, on average; 0: unlimited.
    pub per_minute: u32,
    /// How many may come at once (a full bucket), at least 1 when the rate is on.
    pub burst: u32,
}

impl Rate {
    /// No throttle.
    pub const OFF: Rate = Rate {
        per_minute: 0,
        burst: 0,
    };

    pub const fn new(per_minute: u32, burst: u32) -> Rate {
        Rate { per_minute, burst }
    }

    pub fn is_off(&self) -> bool {
        self.per_minute == 0
    }

    fn validate(&self, setting: &'static str) -> Result<(), ConfigError> {
        if !self.is_off() && self.burst == 0 {
            return Err(invalid(
                setting,
                "the burst must be positive when the rate is on",
            ));
        }
        Ok(())
    }
}

/// `PER_MINUTE/BURST`, or `PER_MINUTE` alone (a burst of a minute's worth); `0` turns it off.
impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rate, String> {
        let number = |part: &str| {
            part.trim().parse::<u32>().map_err(|e| {
                format!("{part:?} is not a whole number ({e}); write PER_MINUTE/BURST")
            })
        };
        match s.split_once('/') {
            Some((rate, burst)) => Ok(Rate::new(number(rate)?, number(burst)?)),
            None => {
                let rate = number(s)?;
                Ok(Rate::new(rate, rate))
            }
        }
    }
}

/// A kind's throttles: per client address and per authenticated peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindRates {
    pub per_address: Rate,
    pub per_peer: Rate,
}

impl KindRates {
    const fn both(rate: Rate) -> KindRates {
        KindRates {
            per_address: rate,
            per_peer: rate,
        }
    }
}

/// Every NLIP message's throttle per authenticated peer (per address: `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRates {
    pub per_peer: Rate,
}

/// A `[throttle.KIND]` table as written: what it leaves out keeps its default.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct KindTable {
    per_address: Option<Rate>,
    per_peer: Option<Rate>,
}

impl KindTable {
    fn over(self, default: KindRates) -> KindRates {
        KindRates {
            per_address: self.per_address.unwrap_or(default.per_address),
            per_peer: self.per_peer.unwrap_or(default.per_peer),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct MessageTable {
    per_peer: Option<Rate>,
}

/// The `[throttle]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ThrottleTable {
    messages: MessageTable,
    negotiations: KindTable,
    model_calls: KindTable,
    uploads: KindTable,
}

impl From<ThrottleTable> for Throttle {
    fn from(table: ThrottleTable) -> Throttle {
        let d = Throttle::default();
        Throttle {
            messages: MessageRates {
                per_peer: table.messages.per_peer.unwrap_or(d.messages.per_peer),
            },
            negotiations: table.negotiations.over(d.negotiations),
            model_calls: table.model_calls.over(d.model_calls),
            uploads: table.uploads.over(d.uploads),
        }
    }
}

/// The throttles of each kind of work. On the defaults a client that talks, negotiates and
/// uploads as people and agents do never meets them, while one address (or peer) cannot take
/// more than a small share of what the server and its model can do: a few negotiation
/// messages and model calls a second, sustained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(from = "ThrottleTable")]
pub struct Throttle {
    /// Every NLIP message, on any transport (`POST /nlip`, a WebSocket message, an `/anp`
    /// frame, an `/mcp` request).
    pub messages: MessageRates,
    /// Meta-protocol messages that start or continue a negotiation (over NLIP or `/anp`).
    pub negotiations: KindRates,
    /// Messages answered by the reasoner (natural language), whatever the reasoner is: the
    /// built-in one costs nothing, but a deployment's throttles should not change with it.
    pub model_calls: KindRates,
    /// Uploads on the upload port.
    pub uploads: KindRates,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            messages: MessageRates {
                per_peer: Rate::new(6_000, 200),
            },
            negotiations: KindRates::both(Rate::new(300, 150)),
            model_calls: KindRates::both(Rate::new(300, 150)),
            uploads: KindRates::both(Rate::new(120, 60)),
        }
    }
}

impl Throttle {
    /// Every throttle off: what a benchmark that drives the server from one address needs.
    pub fn off() -> Throttle {
        Throttle {
            messages: MessageRates {
                per_peer: Rate::OFF,
            },
            negotiations: KindRates::both(Rate::OFF),
            model_calls: KindRates::both(Rate::OFF),
            uploads: KindRates::both(Rate::OFF),
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let rates = [
            ("throttle.messages.per_peer", self.messages.per_peer),
            (
                "throttle.negotiations.per_address",
                self.negotiations.per_address,
            ),
            ("throttle.negotiations.per_peer", self.negotiations.per_peer),
            (
                "throttle.model_calls.per_address",
                self.model_calls.per_address,
            ),
            ("throttle.model_calls.per_peer", self.model_calls.per_peer),
            ("throttle.uploads.per_address", self.uploads.per_address),
            ("throttle.uploads.per_peer", self.uploads.per_peer),
        ];
        rates
            .iter()
            .try_for_each(|(setting, rate)| rate.validate(setting))
    }
}

/// The `[throttle]` flags of `parley serve`, each `PER_MINUTE/BURST` (`0`: off); each also
/// reads a `PARLEY_THROTTLE_*` environment variable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ThrottleArgs {
    /// NLIP messages per authenticated peer [default: 6000/200]
    #[arg(long, env = "PARLEY_THROTTLE_MESSAGES_PER_PEER", value_name = "RATE")]
    pub throttle_messages_per_peer: Option<Rate>,
    /// Negotiation messages per client address [default: 300/150]
    #[arg(
        long,
        env = "PARLEY_THROTTLE_NEGOTIATIONS_PER_ADDRESS",
        value_name = "RATE"
    )]
    pub throttle_negotiations_per_address: Option<Rate>,
    /// Negotiation messages per authenticated peer [default: 300/150]
    #[arg(
        long,
        env = "PARLEY_THROTTLE_NEGOTIATIONS_PER_PEER",
        value_name = "RATE"
    )]
    pub throttle_negotiations_per_peer: Option<Rate>,
    /// Messages answered by the reasoner per client address [default: 300/150]
    #[arg(
        long,
        env = "PARLEY_THROTTLE_MODEL_CALLS_PER_ADDRESS",
        value_name = "RATE"
    )]
    pub throttle_model_calls_per_address: Option<Rate>,
    /// Messages answered by the reasoner per authenticated peer [default: 300/150]
    #[arg(
        long,
        env = "PARLEY_THROTTLE_MODEL_CALLS_PER_PEER",
        value_name = "RATE"
    )]
    pub throttle_model_calls_per_peer: Option<Rate>,
    /// Uploads per client address [default: 120/60]
    #[arg(long, env = "PARLEY_THROTTLE_UPLOADS_PER_ADDRESS", value_name = "RATE")]
    pub throttle_uploads_per_address: Option<Rate>,
    /// Uploads per authenticated peer [default: 120/60]
    #[arg(long, env = "PARLEY_THROTTLE_UPLOADS_PER_PEER", value_name = "RATE")]
    pub throttle_uploads_per_peer: Option<Rate>,
}

impl ThrottleArgs {
    /// Sets what the flags give over what the file said.
    pub(super) fn apply(&self, t: &mut Throttle) {
        let pairs = [
            (self.throttle_messages_per_peer, &mut t.messages.per_peer),
            (
                self.throttle_negotiations_per_address,
                &mut t.negotiations.per_address,
            ),
            (
                self.throttle_negotiations_per_peer,
                &mut t.negotiations.per_peer,
            ),
            (
                self.throttle_model_calls_per_address,
                &mut t.model_calls.per_address,
            ),
            (
                self.throttle_model_calls_per_peer,
                &mut t.model_calls.per_peer,
            ),
            (
                self.throttle_uploads_per_address,
                &mut t.uploads.per_address,
            ),
            (self.throttle_uploads_per_peer, &mut t.uploads.per_peer),
        ];
        for (flag, field) in pairs {
            if let Some(rate) = flag {
                *field = rate;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_per_minute_and_burst() {
        assert_eq!("60/5".parse(), Ok(Rate::new(60, 5)));
        assert_eq!(" 30 ".parse(), Ok(Rate::new(30, 30)));
        assert_eq!("0".parse::<Rate>().map(|r| r.is_off()), Ok(true));
        for bad in ["", "ten", "1/", "-1/2", "1/2/3"] {
            let error = bad.parse::<Rate>().expect_err(bad);
            assert!(error.contains("PER_MINUTE/BURST"), "{error}");
        }
    }

    #[test]
    fn a_rate_that_is_on_needs_a_burst() {
        Throttle::default()
            .validate()
            .expect("the defaults are valid");
        Throttle::off().validate().expect("all off is valid");
        let mut t = Throttle::default();
        t.model_calls.per_peer = Rate::new(10, 0);
        let error = t.validate().expect_err("burst 0").to_string();
        assert!(error.contains("throttle.model_calls.per_peer"), "{error}");
    }

    #[test]
    fn a_file_sets_some_and_keeps_the_defaults_of_the_others() {
        let t: Throttle = toml::from_str(
            "[negotiations]\nper_address = { per_minute = 6, burst = 2 }\n\
             [messages]\nper_peer = { per_minute = 0, burst = 0 }\n",
        )
        .expect("a valid table");
        assert_eq!(t.negotiations.per_address, Rate::new(6, 2));
        assert_eq!(
            t.negotiations.per_peer,
            Throttle::default().negotiations.per_peer
        );
        assert!(t.messages.per_peer.is_off());
        assert_eq!(t.uploads, Throttle::default().uploads);
    }
}
