//! The guest side of the sandbox ABI (`sandbox/ABI.md`), shared by Parley's runtime guests: the
//! host functions of module `parley`, wrapped so that each `unsafe` block rests on the host's
//! side of the contract, and the outcome kinds `output` takes.
//!
//! Each guest still defines its own exports (`parley_load`, `parley_run`): an export belongs to
//! the module that is built, so it is written there.

/// Outcome kinds reported through `parley.output`; mirrored by `OutcomeKind` on the host side.
pub mod kind {
    pub const OK: u32 = 0;
    pub const THREW: u32 = 1;
    pub const INVALID_HANDLER: u32 = 4;
    pub const INTERNAL: u32 = 6;
}

#[link(wasm_import_module = "parley")]
unsafe extern "C" {
    /// Asks the host to run a capability. Returns `n >= 0` on success (a JSON result of `n` bytes is
    /// waiting) or `n < 0` on failure (an error message of `-n - 1` bytes is waiting). A refused
    /// capability or oversized arguments never return: the host ends the call.
    fn host_call(name_ptr: *const u8, name_len: u32, args_ptr: *const u8, args_len: u32) -> i32;
    /// Copies the waiting bytes to `dst`: a `host_call`'s result or error message (of the length it
    /// announced), or, at the start of `parley_load` and `parley_run`, their input (of the length
    /// they were given).
    fn host_take(dst: *mut u8);
    /// Appends one log line (level 0 info, 1 warn, 2 error).
    fn log(level: u32, ptr: *const u8, len: u32);
    /// Reports the call's outcome; called exactly once per `parley_run` / failed `parley_load`.
    fn output(kind: u32, ptr: *const u8, len: u32);
}

/// Reports the outcome of a run (or of a failed load): `kind` and its bytes.
pub fn report(kind: u32, bytes: &[u8]) {
    // SAFETY: the pointer and length describe a live, initialised byte slice.
    unsafe { output(kind, bytes.as_ptr(), bytes.len() as u32) }
}

/// Appends one line to the call's log.
pub fn log_line(level: u32, line: &str) {
    // SAFETY: the pointer and length describe a live, initialised byte slice.
    unsafe { log(level, line.as_ptr(), line.len() as u32) }
}

/// The `len` bytes of input the host has waiting at the start of `parley_load` and `parley_run`.
pub fn take_input(len: u32) -> &'static [u8] {
    take_input_nul(len)
        .split_last()
        .map_or(&[], |(_, input)| input)
}

/// [`take_input`] with a NUL byte after the input (`len + 1` bytes in all), for a parser that
/// reads up to it in place. Leaked on purpose: an instance serves one call, and its whole memory
/// goes with it.
pub fn take_input_nul(len: u32) -> &'static [u8] {
    let len = len as usize;
    let mut buffer = Vec::<u8>::with_capacity(len + 1);
    // SAFETY: the host writes exactly the `len` input bytes it announced into a buffer of more
    // capacity than that; the NUL goes right after them.
    unsafe {
        host_take(buffer.as_mut_ptr());
        buffer.as_mut_ptr().add(len).write(0);
        buffer.set_len(len + 1);
    }
    buffer.leak()
}

/// Runs capability `name` with the JSON `args` through the host: the result's JSON text, or the
/// failure's message. The buffer has room for one byte more (a NUL to parse it in place).
pub fn call_host(name: &str, args: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    // SAFETY: pointers and lengths describe live buffers; `host_take` writes exactly the length
    // `host_call` announced into a buffer of that capacity.
    let (ok, reply) = unsafe {
        let n = host_call(
            name.as_ptr(),
            name.len() as u32,
            args.as_ptr(),
            args.len() as u32,
        );
        let (ok, len) = if n >= 0 {
            (true, n as usize)
        } else {
            (false, (-(n + 1)) as usize)
        };
        let mut buffer = Vec::<u8>::with_capacity(len + 1);
        host_take(buffer.as_mut_ptr());
        buffer.set_len(len);
        (ok, buffer)
    };
    if ok { Ok(reply) } else { Err(reply) }
}
