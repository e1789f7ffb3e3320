//! Parley's mapping runtime guest: answers requests from a built-in reasoner's [`Mapping`] inside
//! the sandbox, through [`parley_mapping::serve`]. It is the compiled form of the JavaScript the
//! built-in reasoner generates from the same mapping: no JavaScript engine, so a call costs a
//! small instance and a few microseconds of work instead of a QuickJS heap.
//!
//! Same ABI as the JavaScript runtime (`sandbox/ABI.md`), with a mapping's JSON where that takes
//! a handler's source:
//!
//! * `parley_load(len) -> status` parses the mapping. The host calls it once, at publish time,
//!   and keeps the instance's memory (the parsed mapping) as the handler's image;
//! * `parley_run(len)` answers the request in a fresh instance of that image and reports the
//!   outcome through the `parley.output` import.
//!
//! Imports (module `parley`): `host_call`, `host_take`, `output`. WASI imports: only those Rust's
//! std pulls in; the host implements them with no ambient authority.
//!
//! Invariant: single-threaded, and each instance serves exactly one call.

use std::cell::RefCell;

use parley_guest_abi::{self as abi, kind, report};
use parley_mapping::Mapping;
use serde_json::Value;

thread_local! {
    static MAPPING: RefCell<Option<Mapping>> = const { RefCell::new(None) };
}

/// Parses the mapping, `len` bytes of JSON the host has waiting. 0 = loaded; otherwise the reason
/// went to `output` as an invalid handler.
#[unsafe(no_mangle)]
pub extern "C" fn parley_load(len: u32) -> u32 {
    match serde_json::from_slice::<Mapping>(abi::take_input(len)) {
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
    match abi::call_host(name, &args) {
        Ok(reply) => serde_json::from_slice(&reply)
            .map_err(|e| format!("the capability's result is not JSON: {e}")),
        Err(message) => Err(String::from_utf8_lossy(&message).into_owned()),
    }
}

/// Answers the request, `len` bytes of JSON the host has waiting, and reports the answer.
#[unsafe(no_mangle)]
pub extern "C" fn parley_run(len: u32) {
    let request: Value = match serde_json::from_slice(abi::take_input(len)) {
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
