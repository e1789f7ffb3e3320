//! The mapping runtime: a second runtime guest (`sandbox/mapping-guest`, about 290 KB of wasm
//! around the crate `parley-mapping`) that serves a built-in reasoner's handler from its mapping,
//! the plan its JavaScript was generated from, with no JavaScript engine in the call: the image is
//! the parsed mapping (a few KiB of heap instead of QuickJS's), and a call is a JSON parse, a few
//! comparisons, the capability call and a JSON write. It has the JavaScript runtime's ABI, limits,
//! grants and error model and goes through the same split, images and pool; [`Dialect::Mapping`]
//! picks it at publish (`sandbox/ABI.md`, *The mapping runtime*).
//!
//! What it buys, measured with the negotiation bench (`tests/benches/`): the product
//! protocol's `Provider::application` 19 µs median against 47 µs through the JavaScript, and a
//! 0-RTT call against a provider in its own process 1.62× (HTTP) and 1.78–1.83× (WebSocket) of a
//! plain text message, where the JavaScript gave 1.81–1.88× and 2.21–2.48×. Handlers a language
//! model wrote have no mapping and stay JavaScript.
//!
//! Switching it off: Parley's `[negotiation] compiled_handlers = false` serves every handler as
//! its JavaScript; the sandbox runs this runtime only for a [`Dialect::Mapping`] publish. Parley
//! serves a mapping only after it answered every test case of its protocol exactly as the verified
//! JavaScript did (`services/parley/src/negotiation/provider/compiled.rs`), and keeps it with the handler in
//! the store (`handlers.compiled`, migration 0010). Removing it: this file, the
//! [`Dialect::Mapping`] variant, `sandbox/mapping-guest` and that module.
//!
//! [`Dialect::Mapping`]: crate::Dialect::Mapping

/// The mapping runtime guest, committed under `sandbox/runtimes/` (built by
/// `scripts/setup-guest.sh` from `sandbox/mapping-guest`).
pub(crate) const MAPPING_RUNTIME_WASM: &[u8] =
    include_bytes!("../../runtimes/parley-mapping-runtime.wasm");

/// sha256 (hex) of the embedded mapping runtime, checked by `build.rs` against its committed
/// hash; part of its cache key.
pub const MAPPING_RUNTIME_SHA256: &str = env!("PARLEY_MAPPING_RUNTIME_SHA256");
