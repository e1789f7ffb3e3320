//! WASI preview 1, with no ambient authority: only what wasi-libc and Rust's std pull in, each a
//! decision (`sandbox/ABI.md`): stdout and stderr go to the captured log, there are no other
//! descriptors, the environment is empty, clocks are coarsened to milliseconds, randomness is a
//! per-call stream, and exiting traps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wasmtime::Caller;

use super::{CallState, memory};
use crate::LogLevel;
use crate::error::SandboxError;

pub(super) const ERRNO_SUCCESS: i32 = 0;
pub(super) const ERRNO_BADF: i32 = 8;
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
pub(super) fn fd_write(
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

pub(super) fn fd_fdstat_get(
    mut caller: Caller<'_, CallState>,
    fd: i32,
    buf: u32,
) -> wasmtime::Result<i32> {
    if !(1..=2).contains(&fd) {
        return Ok(ERRNO_BADF);
    }
    let mut stat = [0u8; 24];
    stat[0] = FILETYPE_CHARACTER_DEVICE;
    stat[8..16].copy_from_slice(&RIGHTS_FD_WRITE.to_le_bytes());
    Ok(errno_of(write_guest(&mut caller, buf, &stat)?))
}

pub(super) fn fd_seek(
    _: Caller<'_, CallState>,
    fd: i32,
    _: i64,
    _: i32,
    _: u32,
) -> wasmtime::Result<i32> {
    Ok(if (1..=2).contains(&fd) {
        ERRNO_SPIPE
    } else {
        ERRNO_BADF
    })
}

pub(super) fn fd_close(_: Caller<'_, CallState>, _fd: i32) -> wasmtime::Result<i32> {
    Ok(ERRNO_BADF)
}

/// The environment is empty.
pub(super) fn environ_sizes_get(
    mut caller: Caller<'_, CallState>,
    count: u32,
    size: u32,
) -> wasmtime::Result<i32> {
    let ok = write_guest(&mut caller, count, &0u32.to_le_bytes())?
        && write_guest(&mut caller, size, &0u32.to_le_bytes())?;
    Ok(errno_of(ok))
}

pub(super) fn environ_get(_: Caller<'_, CallState>, _: u32, _: u32) -> wasmtime::Result<i32> {
    Ok(ERRNO_SUCCESS)
}

/// Clocks are coarsened to whole milliseconds: enough for timestamps in responses, too coarse for
/// timing side channels. The monotonic clock counts from the start of the call.
pub(super) fn clock_time_get(
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

pub(super) fn random_get(
    mut caller: Caller<'_, CallState>,
    buf: u32,
    len: u32,
) -> wasmtime::Result<i32> {
    let len = len.min(64 * 1024) as usize;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        let word = caller.data_mut().next_random();
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes.truncate(len);
    Ok(errno_of(write_guest(&mut caller, buf, &bytes)?))
}

pub(super) fn proc_exit(mut caller: Caller<'_, CallState>, code: i32) -> wasmtime::Result<()> {
    let state = caller.data_mut();
    Err(state.fail(SandboxError::internal(format!(
        "the guest exited with code {code}"
    ))))
}
