//! The `parley` imports: `host_call` (a capability), `host_take` (pending input or a
//! capability's reply), `log` and `output` (the call's outcome). See `sandbox/ABI.md`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures::FutureExt;
use tracing::Instrument;
use wasmtime::Caller;

use super::{
    CallState, MAX_CAPABILITY_NAME, MAX_MESSAGE, Phase, kind, memory, read_guest, truncate_message,
};
use crate::error::SandboxError;
use crate::{CapabilityHost, LogLevel};

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
pub(super) async fn host_call(
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
pub(super) fn host_call_at_publish(
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
pub(super) fn host_take(mut caller: Caller<'_, CallState>, dst: u32) -> wasmtime::Result<()> {
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
pub(super) fn log(
    mut caller: Caller<'_, CallState>,
    level: u32,
    ptr: u32,
    len: u32,
) -> wasmtime::Result<()> {
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
pub(super) fn output(
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
