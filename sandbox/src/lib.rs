//! Runs generated protocol handlers inside wasmtime with hard limits.
//!
//! A handler is JavaScript that defines `handle(request)`. It never runs in Parley's own process space:
//! it runs in a QuickJS runtime compiled to WebAssembly, which the sandbox splits into two parts.
//! The runtime's **code** (QuickJS, the driver, the host glue: all of its functions, with its memory
//! turned into an import) is compiled once per [`Sandbox`] and cached on disk, keyed and MAC'd, so a
//! restart loads it in milliseconds. A handler is only **data**: [`Sandbox::publish`] evaluates its
//! source once in the runtime and keeps the resulting linear memory (QuickJS's heap with the handler's
//! bytecode and top-level state) as a small code-less module, the handler's memory image.
//! [`Sandbox::call`] then runs each request in a fresh instance: the handler's memory, mapped
//! copy-on-write from its image, under the shared compiled code, with a deadline, a memory cap, a wasm
//! stack cap, size caps on everything crossing the boundary, and no capability but the granted ones.
//! So publishing a handler compiles nothing, and a hundred handlers share one copy of QuickJS's
//! native code. The ABI and the reasons behind it are in `sandbox/ABI.md`.
//!
//! A second runtime, the mapping runtime, serves a built-in reasoner's mapping (JSON) as the
//! compiled form of the JavaScript generated from it, with no JavaScript engine in the call. It has
//! the same ABI, limits, grants and error model and goes through the same split, images and pool;
//! [`Dialect`] picks the runtime at [`Sandbox::publish_as`].
//!
//! # Layout
//! - `lib.rs`: [`Dialect`], the embedded JavaScript runtime, and the public types' re-exports.
//! - `sandbox.rs`: [`Sandbox`], [`Handler`], [`run_once`].
//! - `capability.rs`: [`CapabilityHost`], [`NoCapabilities`], [`Grants`].
//! - `report.rs`: [`CallOutput`], [`CallReport`], [`LogLine`].
//! - `config.rs`: [`SandboxConfig`], every limit with its default, and `validate()`.
//! - `error.rs`: [`SandboxError`], one variant per outcome, each with a stable `code()`.
//! - `engine.rs`: the wasmtime engine (its instance pool) and the epoch ticker.
//! - `split/`: the wasm transforms: the runtime into code module and base image, a memory into a
//!   handler image.
//! - `runtime.rs`: the compiled runtime code (through the artifact cache) and how an instance of it
//!   is put together over a memory image.
//! - `publish.rs`: source → top-level code evaluated over the base image → handler image.
//! - `pool.rs`: which instance slot a call gets, and waiting for one.
//! - `call.rs`: one call: the handler's instance, input in, outcome out; `store.rs`: a call's
//!   `Store`, its deadline and the classification of traps.
//! - `host/`: everything the guest may import: the `parley` host functions and a WASI shim with
//!   no ambient authority.
//! - `cache.rs`: the on-disk artifact cache; the only place with `unsafe`.
//! - `fast/`: the latency machinery, each piece with what it buys and how to switch it off:
//!   deferred resets on an idle-class thread, ready instances, the mapping runtime, `perf_map`.
//! - `guest/`, `mapping-guest/`: the runtime guests (their own cargo workspaces, built by
//!   `scripts/setup-guest.sh`); `guest-abi/`: their shared side of the ABI; `runtimes/`: the two
//!   built runtimes with their sha256 files, committed, which the crate embeds.
//!
//! # Invariants
//! - No wasmtime type appears in the public API; wasmtime errors are flattened into [`SandboxError`].
//! - One `Store` per call, holding that call's two instances (the handler's memory image and the
//!   runtime code); nothing a handler does survives its call. Handlers share compiled code, never
//!   memory: each call's memory comes from its own handler's image.
//! - The runtime code keeps no state outside its memory between calls: its mutable globals must be
//!   back at their initial values when a handler has been loaded (checked at publish).
//! - A precompiled artifact is loaded only if its HMAC, keyed by a secret in the cache directory,
//!   verifies: the sandbox only loads native code it produced itself.
//! - Libraries never read the environment: all limits come from [`SandboxConfig`].
//! - The embedded runtimes are the committed bytes whose sha256 files `build.rs` checks them
//!   against; `scripts/setup-guest.sh` proves a fresh build of their sources gives the same bytes.

mod cache;
mod call;
mod capability;
mod config;
mod engine;
mod error;
mod fast;
mod host;
mod pool;
mod publish;
mod report;
mod runtime;
mod sandbox;
mod split;
mod store;

pub use crate::capability::{CapabilityFuture, CapabilityHost, Grants, NoCapabilities};
pub use crate::config::{ConfigError, SandboxConfig};
pub use crate::error::SandboxError;
pub use crate::fast::mapping::MAPPING_RUNTIME_SHA256;
pub use crate::report::{CallOutput, CallReport, LogLevel, LogLine};
pub use crate::sandbox::{Handler, Sandbox, run_once, run_once_report};

pub(crate) use crate::sandbox::{HandlerInner, SandboxInner};

use crate::fast::mapping::MAPPING_RUNTIME_WASM;

/// The JavaScript runtime guest, committed under `sandbox/runtimes/` (built by
/// `scripts/setup-guest.sh` from `sandbox/guest`).
pub(crate) const RUNTIME_WASM: &[u8] = include_bytes!("../runtimes/parley-runtime.wasm");
/// sha256 (hex) of the embedded JavaScript runtime, checked by `build.rs` against its committed
/// hash; part of its cache key.
pub const RUNTIME_SHA256: &str = env!("PARLEY_RUNTIME_SHA256");

/// What a handler is written in, and so which runtime runs it. Both runtimes have the same ABI,
/// limits, grants and error model (`sandbox/ABI.md`); they differ in what a handler's source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// JavaScript defining `handle(request)`, run by QuickJS.
    JavaScript,
    /// A built-in reasoner's mapping as JSON (crate `parley-mapping`), served by the mapping
    /// runtime: the compiled form of the JavaScript generated from that mapping, with no
    /// JavaScript engine in the call.
    Mapping,
}

impl Dialect {
    const ALL: [Dialect; 2] = [Dialect::JavaScript, Dialect::Mapping];

    /// The embedded runtime guest and its sha256.
    fn runtime_wasm(self) -> (&'static [u8], &'static str) {
        match self {
            Dialect::JavaScript => (RUNTIME_WASM, RUNTIME_SHA256),
            Dialect::Mapping => (MAPPING_RUNTIME_WASM, MAPPING_RUNTIME_SHA256),
        }
    }

    fn index(self) -> usize {
        match self {
            Dialect::JavaScript => 0,
            Dialect::Mapping => 1,
        }
    }

    /// `javascript` or `mapping`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::JavaScript => "javascript",
            Dialect::Mapping => "mapping",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync() {
        assert_send_sync::<Sandbox>();
        assert_send_sync::<Handler>();
        assert_send_sync::<Grants>();
        assert_send_sync::<SandboxError>();
    }

    #[test]
    fn grants_allow_only_their_names() {
        let grants: Grants = ["weather.lookup", "db.read"].into_iter().collect();
        assert!(grants.allows("db.read"));
        assert!(!grants.allows("db.write"));
        assert!(!Grants::none().allows("db.read"));
        assert_eq!(
            grants.iter().collect::<Vec<_>>(),
            vec!["db.read", "weather.lookup"]
        );
    }

    #[test]
    fn the_embedded_runtimes_match_their_hashes() {
        use sha2::Digest;
        for dialect in Dialect::ALL {
            let (wasm, sha256) = dialect.runtime_wasm();
            assert_eq!(hex::encode(sha2::Sha256::digest(wasm)), sha256);
        }
        assert_ne!(RUNTIME_SHA256, MAPPING_RUNTIME_SHA256);
    }
}
