//! What the guest may import: the `parley` host functions and a WASI preview 1 shim with no ambient
//! authority. Everything here runs inside one call's `Store`, on the call's fiber.
//!
//! The WASI functions are implemented here rather than through `wasmtime-wasi` on purpose: the runtime
//! imports nine of them, and every one is a decision (no files, no environment, a coarse clock), which
//! reads better as nine small functions than as a configured WASI context. It also keeps a per-call
//! `Store` cheap: there is no WASI context to build.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use tracing::Instrument;
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

/// What the handler hears when a capability host panics.
const PANICKED: &str = "the capability host panicked";

/// A capability call that passed every check, ready to run.
struct HostCall {
    capability: String,
    /// The arguments, or why they cannot be passed (the capability then fails for the handler).
    args: Result<serde_json::Value, String>,
    host: Arc<dyn CapabilityHost>,
}

/// The checks before a capability runs: phase, name, grant, call count, argument size, deadline.
fn begin_host_call(
    caller: &mut Caller<'_, CallState>,
    name_ptr: u32,
    name_len: u32,
    args_ptr: u32,
    args_len: u32,
) -> wasmtime::Result<HostCall> {
    let name_bytes = read_guest(
        caller,
        name_ptr,
        name_len.min(MAX_CAPABILITY_NAME as u32 + 1),
    )?;
    let capability = String::from_utf8_lossy(&name_bytes).into_owned();
    let state = caller.data_mut();
    if state.phase == Phase::Publish {
        return Err(state.fail(SandboxError::InvalidHandler {
            message: format!("top-level code called capability `{capability}`; capabilities are only available inside handle()"),
        }));
    }
    if name_len as usize > MAX_CAPABILITY_NAME {
        return Err(state.fail(SandboxError::CapabilityRefused {
            capability,
            reason: format!("capability names are at most {MAX_CAPABILITY_NAME} bytes"),
        }));
    }
    if !state.grants.allows(&capability) {
        return Err(state.fail(SandboxError::CapabilityRefused {
            capability,
            reason: "not granted to this handler".to_string(),
        }));
    }
    state.host_calls += 1;
    if state.host_calls > state.limits.max_host_calls {
        let limit = state.limits.max_host_calls;
        return Err(state.fail(SandboxError::CapabilityRefused {
            capability,
            reason: format!("more than {limit} host calls in one call"),
        }));
    }
    if u64::from(args_len) > state.limits.host_call_args_bytes {
        let limit = state.limits.host_call_args_bytes;
        return Err(state.fail(SandboxError::CapabilityArgsTooLarge {
            capability,
            size: args_len.into(),
            limit,
        }));
    }
    if let Some(timeout) = state.past_deadline() {
        return Err(timeout);
    }
    let args_bytes = read_guest(caller, args_ptr, args_len)?;
    let state = caller.data_mut();
    let args = crate::call::guest_json(&args_bytes)
        .map_err(|problem| format!("the arguments are {problem}"));
    Ok(HostCall {
        capability,
        args,
        host: Arc::clone(&state.host),
    })
}

/// `parley.host_call(name_ptr, name_len, args_ptr, args_len) -> i32`, for calls: the capability's
/// future is awaited on the call's fiber, so an async capability suspends the guest, not the thread.
async fn host_call(
    mut caller: Caller<'_, CallState>,
    (name_ptr, name_len, args_ptr, args_len): (u32, u32, u32, u32),
) -> wasmtime::Result<i32> {
    let call = begin_host_call(&mut caller, name_ptr, name_len, args_ptr, args_len)?;
    let args = match call.args {
        Ok(args) => args,
        Err(problem) => return finish_host_call(caller.data_mut(), Err(problem)),
    };
    let span = tracing::debug_span!("sandbox.host_call", capability = %call.capability);
    let future = match catch_unwind(AssertUnwindSafe(|| call.host.call(&call.capability, args))) {
        Ok(future) => AssertUnwindSafe(future).catch_unwind().instrument(span),
        Err(_) => return finish_host_call(caller.data_mut(), Err(PANICKED.to_string())),
    };
    // On a tokio runtime the capability gets what is left of the deadline and is dropped
    // (cancelled) when that runs out; elsewhere there is no timer to race it against, and the
    // deadline is checked when it returns.
    let left = caller.data().left();
    let outcome = if tokio::runtime::Handle::try_current().is_ok() {
        match tokio::time::timeout(left, future).await {
            Ok(outcome) => outcome,
            Err(_) => return Err(caller.data_mut().timed_out()),
        }
    } else {
        future.await
    };
    let result = outcome.unwrap_or_else(|_| Err(PANICKED.to_string()));
    finish_host_call(caller.data_mut(), result)
}

/// `parley.host_call` while publishing: top-level code may not call capabilities.
fn host_call_at_publish(
    mut caller: Caller<'_, CallState>,
    name_ptr: u32,
    name_len: u32,
    args_ptr: u32,
    args_len: u32,
) -> wasmtime::Result<i32> {
    begin_host_call(&mut caller, name_ptr, name_len, args_ptr, args_len)?;
    Err(caller.data_mut().fail(SandboxError::internal(
        "a capability was called on the synchronous publish path",
    )))
}

/// Checks the deadline after a capability returned and queues its reply for `host_take`.
fn finish_host_call(
    state: &mut CallState,
    result: Result<serde_json::Value, String>,
) -> wasmtime::Result<i32> {
    // The epoch deadline cannot interrupt host code; check the clock on the way back in.
    if let Some(timeout) = state.past_deadline() {
        return Err(timeout);
    }
    let (ok, reply) = match result {
        Ok(value) => match serde_json::to_vec(&value) {
            Ok(json) if json.len() as u64 <= state.limits.host_call_result_bytes => (true, json),
            Ok(json) => (
                false,
                format!(
                    "result of {} bytes exceeds the {} byte limit",
                    json.len(),
                    state.limits.host_call_result_bytes
                )
                .into_bytes(),
            ),
            Err(error) => (
                false,
                format!("result is not serialisable: {error}").into_bytes(),
            ),
        },
        Err(message) => (false, truncate_message(message).into_bytes()),
    };
    let len = i32::try_from(reply.len()).map_err(|_| wasmtime::Error::msg("reply too large"))?;
    state.pending = reply;
    Ok(if ok { len } else { -len - 1 })
}

/// `parley.host_take(dst)`: copies the pending bytes (an input, or a capability's reply) into
/// guest memory.
fn host_take(mut caller: Caller<'_, CallState>, dst: u32) -> wasmtime::Result<()> {
    let memory = memory(&mut caller)?;
    let (data, state) = memory.data_and_store_mut(&mut caller);
    let pending = std::mem::take(&mut state.pending);
    let start = dst as usize;
    match data.get_mut(start..start.saturating_add(pending.len())) {
        Some(target) => {
            target.copy_from_slice(&pending);
            Ok(())
        }
        None => wasmtime::bail!("guest passed an out-of-bounds buffer"),
    }
}

/// `parley.log(level, ptr, len)`.
fn log(mut caller: Caller<'_, CallState>, level: u32, ptr: u32, len: u32) -> wasmtime::Result<()> {
    let state = caller.data();
    if state.log_bytes >= state.limits.log_bytes {
        caller.data_mut().logs_truncated = true;
        return Ok(());
    }
    let room = state.limits.log_bytes - state.log_bytes;
    let text = read_guest(
        &mut caller,
        ptr,
        len.min(u32::try_from(room).unwrap_or(u32::MAX)),
    )?;
    let level = match level {
        0 => LogLevel::Info,
        1 => LogLevel::Warn,
        _ => LogLevel::Error,
    };
    let state = caller.data_mut();
    if (text.len() as u64) < u64::from(len) {
        state.logs_truncated = true;
    }
    state.push_log(level, &text);
    Ok(())
}

/// `parley.output(kind, ptr, len)`: the call's outcome.
fn output(
    mut caller: Caller<'_, CallState>,
    kind: u32,
    ptr: u32,
    len: u32,
) -> wasmtime::Result<()> {
    let state = caller.data_mut();
    if state.output.is_some() {
        return Err(state.fail(SandboxError::internal("the guest reported two outcomes")));
    }
    if kind == kind::OK && u64::from(len) > state.limits.output_bytes {
        let limit = state.limits.output_bytes;
        return Err(state.fail(SandboxError::OutputTooLarge {
            size: len.into(),
            limit,
        }));
    }
    // Error messages are descriptions, not data: cap them instead of failing.
    let len = if kind == kind::OK {
        len
    } else {
        len.min(MAX_MESSAGE as u32)
    };
    let bytes = read_guest(&mut caller, ptr, len)?;
    caller.data_mut().output = Some((kind, bytes));
    Ok(())
}

// ---- WASI preview 1, with no ambient authority ----------------------------------------------------

const ERRNO_SUCCESS: i32 = 0;
const ERRNO_BADF: i32 = 8;
const ERRNO_FAULT: i32 = 21;
const ERRNO_INVAL: i32 = 28;
const ERRNO_SPIPE: i32 = 70;
const FILETYPE_CHARACTER_DEVICE: u8 = 2;
/// fd_write (bit 6) is the only right stdout/stderr have.
const RIGHTS_FD_WRITE: u64 = 1 << 6;

fn write_guest(
    caller: &mut Caller<'_, CallState>,
    ptr: u32,
    bytes: &[u8],
) -> wasmtime::Result<bool> {
    let memory = memory(caller)?;
    let start = ptr as usize;
    Ok(
        match memory
            .data_mut(&mut *caller)
            .get_mut(start..start.saturating_add(bytes.len()))
        {
            Some(target) => {
                target.copy_from_slice(bytes);
                true
            }
            None => false,
        },
    )
}

fn errno_of(written: bool) -> i32 {
    if written { ERRNO_SUCCESS } else { ERRNO_FAULT }
}

/// stdout and stderr go to the call's captured log (capped); there are no other descriptors.
fn fd_write(
    mut caller: Caller<'_, CallState>,
    fd: i32,
    iovs: u32,
    iovs_len: u32,
    nwritten: u32,
) -> wasmtime::Result<i32> {
    let level = match fd {
        1 => LogLevel::Info,
        2 => LogLevel::Error,
        _ => return Ok(ERRNO_BADF),
    };
    let memory = memory(&mut caller)?;
    let mut text = Vec::new();
    let mut total: u32 = 0;
    {
        let data = memory.data(&caller);
        for i in 0..iovs_len.min(1024) {
            let at = iovs as usize + i as usize * 8;
            let Some(iov) = data.get(at..at + 8) else {
                return Ok(ERRNO_FAULT);
            };
            let ptr = u32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]) as usize;
            let len = u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
            let Some(bytes) = data.get(ptr..ptr.saturating_add(len as usize)) else {
                return Ok(ERRNO_FAULT);
            };
            // Never buffer more than the log can take.
            let room = caller.data().limits.log_bytes as usize;
            if text.len() < room {
                let take = bytes.len().min(room - text.len());
                text.extend_from_slice(&bytes[..take]);
            }
            total = total.saturating_add(len);
        }
    }
    let trimmed = text.strip_suffix(b"\n").unwrap_or(&text).to_vec();
    if !trimmed.is_empty() {
        caller.data_mut().push_log(level, &trimmed);
    }
    Ok(errno_of(write_guest(
        &mut caller,
        nwritten,
        &total.to_le_bytes(),
    )?))
}

fn fd_fdstat_get(mut caller: Caller<'_, CallState>, fd: i32, buf: u32) -> wasmtime::Result<i32> {
    if !(1..=2).contains(&fd) {
        return Ok(ERRNO_BADF);
    }
    let mut stat = [0u8; 24];
    stat[0] = FILETYPE_CHARACTER_DEVICE;
    stat[8..16].copy_from_slice(&RIGHTS_FD_WRITE.to_le_bytes());
    Ok(errno_of(write_guest(&mut caller, buf, &stat)?))
}

fn fd_seek(_: Caller<'_, CallState>, fd: i32, _: i64, _: i32, _: u32) -> wasmtime::Result<i32> {
    Ok(if (1..=2).contains(&fd) {
        ERRNO_SPIPE
    } else {
        ERRNO_BADF
    })
}

fn fd_close(_: Caller<'_, CallState>, _fd: i32) -> wasmtime::Result<i32> {
    Ok(ERRNO_BADF)
}

/// The environment is empty.
fn environ_sizes_get(
    mut caller: Caller<'_, CallState>,
    count: u32,
    size: u32,
) -> wasmtime::Result<i32> {
    let ok = write_guest(&mut caller, count, &0u32.to_le_bytes())?
        && write_guest(&mut caller, size, &0u32.to_le_bytes())?;
    Ok(errno_of(ok))
}

fn environ_get(_: Caller<'_, CallState>, _: u32, _: u32) -> wasmtime::Result<i32> {
    Ok(ERRNO_SUCCESS)
}

/// Clocks are coarsened to whole milliseconds: enough for timestamps in responses, too coarse for
/// timing side channels. The monotonic clock counts from the start of the call.
fn clock_time_get(
    mut caller: Caller<'_, CallState>,
    id: i32,
    _precision: i64,
    out: u32,
) -> wasmtime::Result<i32> {
    let nanos: u64 = match id {
        0 => {
            let since_epoch = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO);
            since_epoch.as_millis() as u64 * 1_000_000
        }
        1..=3 => caller.data().started.elapsed().as_millis() as u64 * 1_000_000,
        _ => return Ok(ERRNO_INVAL),
    };
    Ok(errno_of(write_guest(
        &mut caller,
        out,
        &nanos.to_le_bytes(),
    )?))
}

fn random_get(mut caller: Caller<'_, CallState>, buf: u32, len: u32) -> wasmtime::Result<i32> {
    let len = len.min(64 * 1024) as usize;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        let word = caller.data_mut().next_random();
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes.truncate(len);
    Ok(errno_of(write_guest(&mut caller, buf, &bytes)?))
}

fn proc_exit(mut caller: Caller<'_, CallState>, code: i32) -> wasmtime::Result<()> {
    let state = caller.data_mut();
    Err(state.fail(SandboxError::internal(format!(
        "the guest exited with code {code}"
    ))))
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
                Box::new(host_call(caller, args))
            }),
        )?,
        Phase::Publish => define(linker.func_wrap("parley", "host_call", host_call_at_publish))?,
    }
    define(linker.func_wrap("parley", "host_take", host_take))?;
    define(linker.func_wrap("parley", "log", log))?;
    define(linker.func_wrap("parley", "output", output))?;
    let wasi = "wasi_snapshot_preview1";
    define(linker.func_wrap(wasi, "fd_write", fd_write))?;
    define(linker.func_wrap(wasi, "fd_fdstat_get", fd_fdstat_get))?;
    define(linker.func_wrap(wasi, "fd_seek", fd_seek))?;
    define(linker.func_wrap(wasi, "fd_close", fd_close))?;
    define(linker.func_wrap(wasi, "environ_sizes_get", environ_sizes_get))?;
    define(linker.func_wrap(wasi, "environ_get", environ_get))?;
    define(linker.func_wrap(wasi, "clock_time_get", clock_time_get))?;
    define(linker.func_wrap(wasi, "random_get", random_get))?;
    define(linker.func_wrap(wasi, "proc_exit", proc_exit))?;
    Ok(linker)
}

#[cfg(test)]
mod tests {
    //! The WASI shim and the import policy, exercised by a hand-assembled module (no JavaScript in
    //! between): what a compromised runtime could reach is exactly what these functions allow.

    use super::*;
    use crate::config::SandboxConfig;
    use crate::{NoCapabilities, engine};

    fn leb(mut value: u32, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn name(text: &str, out: &mut Vec<u8>) {
        leb(text.len() as u32, out);
        out.extend_from_slice(text.as_bytes());
    }

    fn section(id: u8, body: Vec<u8>, out: &mut Vec<u8>) {
        out.push(id);
        leb(body.len() as u32, out);
        out.extend(body);
    }

    /// Imports `sock_accept` (not provided by the host), `fd_write` and `environ_sizes_get`; exports
    /// functions that call each.
    fn probe_module() -> Vec<u8> {
        const I32: u8 = 0x7f;
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        let types = [
            vec![0x60, 3, I32, I32, I32, 1, I32],
            vec![0x60, 4, I32, I32, I32, I32, 1, I32],
            vec![0x60, 2, I32, I32, 1, I32],
            vec![0x60, 0, 1, I32],
        ];
        let mut body = vec![types.len() as u8];
        types.iter().for_each(|t| body.extend(t));
        section(1, body, &mut wasm);

        let mut body = vec![3];
        for (field, ty) in [
            ("sock_accept", 0),
            ("fd_write", 1),
            ("environ_sizes_get", 2),
        ] {
            name("wasi_snapshot_preview1", &mut body);
            name(field, &mut body);
            body.extend([0x00, ty]);
        }
        section(2, body, &mut wasm);
        section(3, vec![4, 3, 3, 3, 3], &mut wasm);
        section(5, vec![1, 0x00, 1], &mut wasm);

        let mut body = vec![5];
        name("memory", &mut body);
        body.extend([0x02, 0]);
        for (export, index) in [
            ("accept", 3),
            ("write_fd3", 4),
            ("write_stdout", 5),
            ("env_count", 6),
        ] {
            name(export, &mut body);
            body.extend([0x00, index]);
        }
        section(7, body, &mut wasm);

        let bodies: [&[u8]; 4] = [
            // sock_accept(0, 0, 0)
            &[0x00, 0x41, 0, 0x41, 0, 0x41, 0, 0x10, 0, 0x0b],
            // fd_write(3, iovs 0, 1 iovec, nwritten at 48)
            &[0x00, 0x41, 3, 0x41, 0, 0x41, 1, 0x41, 48, 0x10, 1, 0x0b],
            // fd_write(1, iovs 0, 1 iovec, nwritten at 48)
            &[0x00, 0x41, 1, 0x41, 0, 0x41, 1, 0x41, 48, 0x10, 1, 0x0b],
            // mem[64] = 99; environ_sizes_get(64, 68); return mem[64]
            &[
                0x00, 0x41, 0xc0, 0x00, 0x41, 0xe3, 0x00, 0x36, 2, 0, 0x41, 0xc0, 0x00, 0x41, 0xc4,
                0x00, 0x10, 2, 0x1a, 0x41, 0xc0, 0x00, 0x28, 2, 0, 0x0b,
            ],
        ];
        let mut body = vec![bodies.len() as u8];
        for code in bodies {
            leb(code.len() as u32, &mut body);
            body.extend_from_slice(code);
        }
        section(10, body, &mut wasm);

        // Data: an iovec {ptr 32, len 5} at 0 and "hello" at 32.
        let mut data = vec![32, 0, 0, 0, 5, 0, 0, 0];
        data.resize(32, 0);
        data.extend_from_slice(b"hello");
        let mut body = vec![1, 0x00, 0x41, 0, 0x0b];
        leb(data.len() as u32, &mut body);
        body.extend(data);
        section(11, body, &mut wasm);
        wasm
    }

    fn call(export: &str) -> (wasmtime::Result<i32>, CallState) {
        let config = SandboxConfig::default();
        let engine = engine::call_engine(&config).expect("engine");
        let mut linker = linker(&engine, Phase::Call).expect("linker");
        let module = wasmtime::Module::new(&engine, probe_module()).expect("valid probe module");
        linker
            .define_unknown_imports_as_traps(&module)
            .expect("trap stubs");
        let state = CallState::new(
            Phase::Call,
            crate::call::limits(&config, config.deadline_ms),
            Grants::none(),
            Arc::new(NoCapabilities),
            1,
        );
        let mut store = wasmtime::Store::new(&engine, state);
        store.set_epoch_deadline(1_000_000);
        let result = futures::executor::block_on(async {
            let instance = linker
                .instantiate_async(&mut store, &module)
                .await
                .expect("an unknown import does not fail instantiation");
            let func = instance
                .get_typed_func::<(), i32>(&mut store, export)
                .expect("export exists");
            func.call_async(&mut store, ()).await
        });
        (result, store.into_data())
    }

    #[test]
    fn undefined_imports_trap_when_called() {
        let (result, _) = call("accept");
        let error = result.expect_err("sock_accept is not provided");
        assert!(format!("{error:#}").contains("sock_accept"), "{error:#}");
    }

    #[test]
    fn only_stdout_and_stderr_exist_and_they_are_captured() {
        let (result, state) = call("write_fd3");
        assert_eq!(result.expect("returns an errno"), ERRNO_BADF);
        assert!(state.logs.is_empty());

        let (result, state) = call("write_stdout");
        assert_eq!(result.expect("returns an errno"), ERRNO_SUCCESS);
        assert_eq!(state.logs.len(), 1);
        assert_eq!(state.logs[0].text, "hello");
        assert_eq!(state.logs[0].level, LogLevel::Info);
    }

    #[test]
    fn the_environment_is_empty() {
        let (result, _) = call("env_count");
        assert_eq!(result.expect("returns the count"), 0);
    }
}
