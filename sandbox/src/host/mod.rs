//! What the guest may import: the `parley` host functions and a WASI preview 1 shim with no ambient
//! authority. Everything here runs inside one call's `Store`, on the call's fiber.
//!
//! The WASI functions are implemented here rather than through `wasmtime-wasi` on purpose: the runtime
//! imports nine of them, and every one is a decision (no files, no environment, a coarse clock), which
//! reads better as nine small functions than as a configured WASI context. It also keeps a per-call
//! `Store` cheap: there is no WASI context to build.
//!
//! - `mod.rs`: the state a call's `Store` holds ([`CallState`]), its limits, and the linker.
//! - `parley.rs`: the `parley` imports (capabilities, input, logs, the outcome).
//! - `wasi.rs`: the WASI preview 1 shim.

mod parley;
#[cfg(test)]
mod tests;
mod wasi;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{Caller, Engine, Extern, Linker, ResourceLimiter};

use crate::error::SandboxError;
use crate::{CapabilityHost, Grants, LogLevel, LogLine};

/// Longest capability name accepted; longer names are refused.
const MAX_CAPABILITY_NAME: usize = 256;
/// What one log line counts against `log_bytes` at least.
const LOG_LINE_COST: u64 = 16;
/// Longest error message passed back from a failed capability or reported by the guest.
const MAX_MESSAGE: usize = 8 * 1024;

/// Outcome kinds reported by the guest through `parley.output`; mirrors the guest's `kind` module and
/// its prelude.
pub(crate) mod kind {
    pub const OK: u32 = 0;
    pub const THREW: u32 = 1;
    pub const INVALID_OUTPUT: u32 = 2;
    pub const CAPABILITY_FAILED: u32 = 3;
    pub const INVALID_HANDLER: u32 = 4;
    pub const INTERNAL: u32 = 6;
    pub const STACK_OVERFLOW: u32 = 7;
}

/// Per-call limits copied out of the config, so the store needs no reference to it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallLimits {
    pub memory_bytes: u64,
    pub output_bytes: u64,
    pub log_bytes: u64,
    pub host_call_args_bytes: u64,
    pub host_call_result_bytes: u64,
    pub max_host_calls: u32,
    pub deadline: Duration,
}

/// Enforces the memory cap and remembers that it was hit, so the resulting trap is classified as
/// `out_of_memory` rather than as whatever the guest did when its allocation failed.
#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: u64,
    pub(crate) memory_exhausted: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory_bytes {
            self.memory_exhausted = true;
            // Trap rather than let memory.grow return -1: a guest that handles allocation failure
            // badly could otherwise limp on in an inconsistent state.
            wasmtime::bail!("memory limit of {} bytes exceeded", self.memory_bytes);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The runtime never grows its table; a cap keeps a broken guest from trying.
        Ok(desired <= 100_000)
    }
}

/// Where the store is: evaluating a handler's top-level code at publish (`host_call` refuses), or
/// serving a call (`host_call` awaits the capability). Both run with the `*_async` APIs on the one
/// engine; a publish is driven to completion on the publishing thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Publish,
    Call,
}

/// Everything one call's `Store` owns.
pub(crate) struct CallState {
    pub phase: Phase,
    pub limits: CallLimits,
    pub limiter: Limiter,
    pub started: Instant,
    grants: Grants,
    host: Arc<dyn CapabilityHost>,
    host_calls: u32,
    /// What waits for `host_take`: the input of `parley_load` or `parley_run` when it starts, then
    /// the reply of the last `host_call`.
    pending: Vec<u8>,
    pub logs: Vec<LogLine>,
    log_bytes: u64,
    pub logs_truncated: bool,
    /// What the guest reported through `parley.output`.
    pub output: Option<(u32, Vec<u8>)>,
    /// An error a host function decided on before trapping; it wins over the trap's own classification.
    pub fatal: Option<SandboxError>,
    rng: u64,
    /// Keeps the epoch ticker running while this store lives (set by `new_store`).
    pub epoch_hold: Option<crate::engine::EpochHold>,
    /// Nanoseconds the call spent yielded to the executor (waiting for its turn to run again),
    /// which its deadline does not count. Shared with the yield futures.
    pub yielded_nanos: Arc<AtomicU64>,
    /// The call is driven by a blocking executor (`call_blocking`, `run_once`), perhaps on a
    /// thread that is inside a tokio task: its yields must wake it at once, since tokio's
    /// `yield_now` would leave the wake-up to a scheduler that the blocked thread never runs.
    pub blocking: bool,
    /// The guest's memory, once its instance is made: host functions use it rather than look the
    /// export up by name on every access (four times per capability call).
    pub memory: Option<wasmtime::Memory>,
}

impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState")
            .field("phase", &self.phase)
            .field("host_calls", &self.host_calls)
            .field("logs", &self.logs.len())
            .finish_non_exhaustive()
    }
}

impl CallState {
    pub(crate) fn new(
        phase: Phase,
        limits: CallLimits,
        grants: Grants,
        host: Arc<dyn CapabilityHost>,
        seed: u64,
    ) -> Self {
        CallState {
            phase,
            limits,
            limiter: Limiter {
                memory_bytes: limits.memory_bytes,
                memory_exhausted: false,
            },
            started: Instant::now(),
            grants,
            host,
            host_calls: 0,
            pending: Vec::new(),
            logs: Vec::new(),
            log_bytes: 0,
            logs_truncated: false,
            output: None,
            fatal: None,
            // splitmix64 must not start at zero-ish seeds that collide; mixing happens in `next_random`.
            rng: seed,
            epoch_hold: None,
            yielded_nanos: Arc::new(AtomicU64::new(0)),
            blocking: false,
            memory: None,
        }
    }

    /// Time the deadline counts: since the store was created, less the time spent yielded to the
    /// executor. Time inside capabilities counts.
    pub(crate) fn used(&self) -> Duration {
        self.started.elapsed().saturating_sub(Duration::from_nanos(
            self.yielded_nanos.load(Ordering::Relaxed),
        ))
    }

    /// What the call has left of its deadline.
    pub(crate) fn left(&self) -> Duration {
        self.limits.deadline.saturating_sub(self.used())
    }

    /// Whether the deadline has passed; then also the error that says so.
    pub(crate) fn past_deadline(&mut self) -> Option<wasmtime::Error> {
        (self.left().is_zero()).then(|| self.timed_out())
    }

    /// Records the call's `timeout` and returns the error that ends it.
    fn timed_out(&mut self) -> wasmtime::Error {
        let deadline_ms = self.limits.deadline.as_millis() as u64;
        self.fail(SandboxError::Timeout { deadline_ms })
    }

    fn push_log(&mut self, level: LogLevel, text: &[u8]) {
        let room = self.limits.log_bytes.saturating_sub(self.log_bytes);
        if room == 0 {
            self.logs_truncated = true;
            return;
        }
        let take = text.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if take < text.len() {
            self.logs_truncated = true;
        }
        // Every line costs at least LOG_LINE_COST, so a flood of empty lines is capped too.
        self.log_bytes += (take as u64).max(LOG_LINE_COST);
        self.logs.push(LogLine {
            level,
            text: String::from_utf8_lossy(&text[..take]).into_owned(),
        });
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: not cryptographic, and does not need to be. WASI random_get feeds hash seeds.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Leaves `input` waiting for the guest's `host_take`, as a capability's reply waits: how
    /// `parley_load` and `parley_run` get theirs. Returns the length they are called with.
    pub(crate) fn hand_input(&mut self, input: Vec<u8>) -> wasmtime::Result<u32> {
        let len = u32::try_from(input.len())?;
        self.pending = input;
        Ok(len)
    }

    pub(crate) fn fail(&mut self, error: SandboxError) -> wasmtime::Error {
        let message = error.to_string();
        self.fatal = Some(error);
        wasmtime::Error::msg(message)
    }
}

fn memory(caller: &mut Caller<'_, CallState>) -> wasmtime::Result<wasmtime::Memory> {
    if let Some(memory) = caller.data().memory {
        return Ok(memory);
    }
    match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => Ok(memory),
        _ => wasmtime::bail!("guest exports no memory"),
    }
}

/// Copies `len` bytes at `ptr` out of guest memory; `None` if out of bounds.
fn read_guest(caller: &mut Caller<'_, CallState>, ptr: u32, len: u32) -> wasmtime::Result<Vec<u8>> {
    let memory = memory(caller)?;
    let start = ptr as usize;
    let end = start.saturating_add(len as usize);
    match memory.data(&*caller).get(start..end) {
        Some(bytes) => Ok(bytes.to_vec()),
        None => wasmtime::bail!("guest passed an out-of-bounds buffer"),
    }
}

fn truncate_message(mut text: String) -> String {
    if text.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Builds the linker every instance is created through: exactly the imports listed in `ABI.md`.
pub(crate) fn linker(engine: &Engine, phase: Phase) -> Result<Linker<CallState>, SandboxError> {
    let mut linker = Linker::new(engine);
    let define = |result: wasmtime::Result<&mut Linker<CallState>>| {
        result
            .map(|_| ())
            .map_err(|e| SandboxError::wasmtime("defining a host function", e))
    };
    match phase {
        Phase::Call => define(
            linker.func_wrap_async("parley", "host_call", |caller, args| {
                Box::new(parley::host_call(caller, args))
            }),
        )?,
        Phase::Publish => {
            define(linker.func_wrap("parley", "host_call", parley::host_call_at_publish))?
        }
    }
    define(linker.func_wrap("parley", "host_take", parley::host_take))?;
    define(linker.func_wrap("parley", "log", parley::log))?;
    define(linker.func_wrap("parley", "output", parley::output))?;
    let wasi_module = "wasi_snapshot_preview1";
    define(linker.func_wrap(wasi_module, "fd_write", wasi::fd_write))?;
    define(linker.func_wrap(wasi_module, "fd_fdstat_get", wasi::fd_fdstat_get))?;
    define(linker.func_wrap(wasi_module, "fd_seek", wasi::fd_seek))?;
    define(linker.func_wrap(wasi_module, "fd_close", wasi::fd_close))?;
    define(linker.func_wrap(wasi_module, "environ_sizes_get", wasi::environ_sizes_get))?;
    define(linker.func_wrap(wasi_module, "environ_get", wasi::environ_get))?;
    define(linker.func_wrap(wasi_module, "clock_time_get", wasi::clock_time_get))?;
    define(linker.func_wrap(wasi_module, "random_get", wasi::random_get))?;
    define(linker.func_wrap(wasi_module, "proc_exit", wasi::proc_exit))?;
    Ok(linker)
}
