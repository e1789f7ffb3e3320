//! The latency machinery: what the sandbox does beyond its plain model, in which a call
//! instantiates its handler, runs, and has its instance reset before it returns. Each piece is
//! here, says what it buys (measured) and how to switch it off; with all of them off the
//! sandbox's behaviour (limits, isolation, errors, answers) is the same, only slower.
//!
//! - [`reset`]: a finished call's instance is reset after its answer, on a thread of the idle
//!   scheduling class, instead of before the call returns. Off: `deferred_reset = false`.
//! - [`ready`]: instances instantiated ahead, after a call's answer, for the handlers called last.
//!   Off: `ready_instances = 0` (and with `deferred_reset = false`).
//! - [`mapping`]: the mapping runtime, which serves a built-in reasoner's handler from its mapping
//!   with no JavaScript engine in the call. Off: Parley's `[negotiation] compiled_handlers =
//!   false`; the sandbox runs it only for a [`Dialect::Mapping`](crate::Dialect) publish.
//! - [`perf_map`]: names for the guests' compiled functions in Linux `perf`, to see where a call's
//!   time goes. Off unless `perf_map = true`.
//!
//! The configuration values are fields of [`SandboxConfig`](crate::SandboxConfig) (Parley's
//! `[sandbox]` table) unless another table is named.

pub(crate) mod mapping;
pub(crate) mod perf_map;
pub(crate) mod ready;
pub(crate) mod reset;
