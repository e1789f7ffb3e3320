//! Parley's mapping runtime guest: answers requests from a built-in reasoner's [`Mapping`] inside
//! the sandbox, through [`parley_mapping::serve`]. It is the compiled form of the JavaScript the
//! built-in reasoner generates from the same mapping: no JavaScript engine, so a call costs a
//! small instance and a few microseconds of work instead of a QuickJS heap.
//!
//! Same ABI as the JavaScript runtime (`sandbox/ABI.md`), with a mapping's JSON where that takes
//! a handler's source:
//!
//! * `parley_alloc(len) -> ptr` hands the host a buffer to write into;
//! * `parley_load(ptr, len) -> status` parses the mapping. The host calls it once, at publish time,
//!   and keeps the instance's memory (the parsed mapping) as the handler's image;
//! * `parley_run(ptr, len)` answers the request in a fresh instance of that image and reports the
//!   outcome through the `parley.output` import.
//!
//! Imports (module `parley`): `host_call`, `host_take`, `output`. WASI imports: only those Rust's
//! std pulls in; the host implements them with no ambient authority.
//!
//! Invariant: single-threaded, and each instance serves exactly one call.

use std::cell::RefCell;

use parley_mapping::Mapping;
use serde_json::Value;

/// Outcome kinds reported through `parley.output`; mirrored by `OutcomeKind` on the host side.
mod kind {
    pub const OK: u32 = 0;
    pub const THREW: u32 = 1;
    pub const INVALID_HANDLER: u32 = 4;
    pub const INTERNAL: u32 = 6;
}

#[link(wasm_import_module = "parley")]
unsafe extern "C" {
    /// Runs a capability: `n >= 0`, a JSON result of `n` bytes is waiting; `n < 0`, an error
    /// message of `-n - 1` bytes. A refused capability never returns: the host ends the call.
    fn host_call(name_ptr: *const u8, name_len: u32, args_ptr: *const u8, args_len: u32) -> i32;
    /// Copies the waiting result or error message to `dst`.
    fn host_take(dst: *mut u8);
    /// Reports the outcome; called exactly once per `parley_run` / failed `parley_load`.
    fn output(kind: u32, ptr: *const u8, len: u32);
}

thread_local! {
    static MAPPING: RefCell<Option<Mapping>> = const { RefCell::new(None) };
}

fn report(kind: u32, bytes: &[u8]) {
    // SAFETY: the pointer and length describe a live, initialised byte slice.
    unsafe { output(kind, bytes.as_ptr(), bytes.len() as u32) }
}

/// Allocates `len` bytes for the host to fill; leaked on purpose (an instance serves one call).
#[unsafe(no_mangle)]
pub extern "C" fn parley_alloc(len: u32) -> *mut u8 {
    let mut buffer = Vec::<u8>::with_capacity(len as usize + 1);
    let ptr = buffer.as_mut_ptr();
    std::mem::forget(buffer);
    ptr
}

fn bytes_from_host<'a>(ptr: *const u8, len: u32) -> &'a [u8] {
    // SAFETY: the host wrote exactly `len` bytes at `ptr`, a buffer it got from `parley_alloc(len)`.
    unsafe { std::slice::from_raw_parts(ptr, len as usize) }
}

/// Parses the mapping. 0 = loaded; otherwise the reason went to `output` as an invalid handler.
#[unsafe(no_mangle)]
pub extern "C" fn parley_load(ptr: *const u8, len: u32) -> u32 {
    match serde_json::from_slice::<Mapping>(bytes_from_host(ptr, len)) {
        Ok(mapping) => {
            MAPPING.with(|slot| *slot.borrow_mut() = Some(mapping));
            0
        }
        Err(error) => {
            report(
                kind::INVALID_HANDLER,
                format!("the mapping is not valid: {error}").as_bytes(),
            );
            1
        }
    }
}

/// Runs the mapping's capability through the host.
fn call_capability(name: &str, args: Value) -> Result<Value, String> {
    let args = serde_json::to_vec(&args).map_err(|e| e.to_string())?;
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
        let mut reply = Vec::<u8>::with_capacity(len);
        host_take(reply.as_mut_ptr());
        reply.set_len(len);
        (ok, reply)
    };
    if ok {
        serde_json::from_slice(&reply)
            .map_err(|e| format!("the capability's result is not JSON: {e}"))
    } else {
        Err(String::from_utf8_lossy(&reply).into_owned())
    }
}

/// Answers the request `ptr[..len]` (JSON) and reports the answer.
#[unsafe(no_mangle)]
pub extern "C" fn parley_run(ptr: *const u8, len: u32) {
    let request: Value = match serde_json::from_slice(bytes_from_host(ptr, len)) {
        Ok(request) => request,
        Err(error) => {
            report(
                kind::THREW,
                format!("SyntaxError: the request is not JSON: {error}").as_bytes(),
            );
            return;
        }
    };
    let answer = MAPPING.with(|slot| {
        slot.borrow()
            .as_ref()
            .map(|mapping| parley_mapping::serve(mapping, &request, call_capability))
    });
    match answer.map(|answer| serde_json::to_vec(&answer)) {
        Some(Ok(json)) => report(kind::OK, &json),
        Some(Err(error)) => report(kind::INTERNAL, error.to_string().as_bytes()),
        None => report(kind::INTERNAL, b"no mapping was loaded"),
    }
}
