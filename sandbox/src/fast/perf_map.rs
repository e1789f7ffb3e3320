//! `perf_map`: wasmtime writes `/tmp/perf-<pid>.map`, which names the runtimes' and the handlers'
//! compiled functions, so that `perf record -p <pid>` and `perf report` show the guest's functions
//! by their symbols instead of `[unknown]`. It buys no speed: it is how the figures behind the
//! other pieces of this module were found (a call's time split between the guest's JSON parser and
//! writer, the handler's own code, the reset and the host; `sandbox/ABI.md`, *Performance*). The file
//! grows with every module compiled or loaded, so it is off unless `perf_map = true`.

use wasmtime::ProfilingStrategy;

use crate::config::SandboxConfig;

/// Turns wasmtime's perf map on in `wasm` when `config` asks for it.
pub(crate) fn configure(config: &SandboxConfig, wasm: &mut wasmtime::Config) {
    if config.perf_map {
        wasm.profiler(ProfilingStrategy::PerfMap);
    }
}
