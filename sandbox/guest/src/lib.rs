//! Parley's JavaScript runtime guest: QuickJS (through `rquickjs`) compiled for `wasm32-wasip1`.
//!
//! The host (crate `parley-sandbox`) drives this module through a tiny ABI, documented in
//! `sandbox/ABI.md`:
//!
//! * `parley_load(len) -> status` evaluates the prelude and the handler source. The host calls it
//!   once, at publish time, and then keeps the instance's memory as the handler's image;
//! * `parley_run(len)` runs `handle(JSON.parse(input))` in a fresh instance of that image and
//!   reports the outcome through the `parley.output` import.
//!
//! Imports (module `parley`): `host_call`, `host_take`, `log`, `output`. WASI preview 1 imports are only
//! those wasi-libc and Rust's std pull in; the host implements them itself with no ambient authority.
//!
//! Invariant: this module is single-threaded and each instance serves exactly one call, so the global
//! state below is never shared between two requests.

use std::cell::RefCell;

use parley_guest_abi::{self as abi, kind};
use rquickjs::{Array, Context, Ctx, Function, Object, Persistent, Runtime, Value};

mod json;

struct Loaded {
    runtime: Runtime,
    context: Context,
    run: Persistent<Function<'static>>,
    settled: Persistent<Function<'static>>,
}

thread_local! {
    static LOADED: RefCell<Option<Loaded>> = const { RefCell::new(None) };
    /// The JSON text of the call's result when `nativeResult` wrote it: it goes to `output`
    /// without becoming a JavaScript string first. Its own slot: jobs the handler queued may still
    /// call capabilities after the result is settled.
    static RESULT_JSON: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    /// The JSON text of a capability's arguments when `nativeArgs` wrote it, for the `nativeCall`
    /// that follows at once.
    static ARGS_JSON: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Bytes a call may allocate beyond the snapshot's heap before QuickJS's cycle collector runs.
const GC_HEADROOM: usize = 8 * 1024 * 1024;

const PRELUDE: &str = include_str!("prelude.js");

/// QuickJS's own recursion guard; the shadow stack (see .cargo/config.toml) is twice this size so the
/// guard fires first and surfaces as a catchable JS error instead of memory corruption.
const JS_MAX_STACK: usize = 1024 * 1024;

fn report(kind: u32, text: &str) {
    abi::report(kind, text.as_bytes());
}

fn describe_exception(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    if let rquickjs::Error::Exception = error {
        let value = ctx.catch();
        if let Some(exception) = value.as_exception() {
            let name: String = exception
                .get("name")
                .unwrap_or_else(|_| "Error".to_string());
            let message = match exception.message() {
                Some(message) if !message.is_empty() => format!("{name}: {message}"),
                _ => name,
            };
            return match exception.stack() {
                Some(stack) if !stack.is_empty() => format!("{message}\n{stack}"),
                _ => message,
            };
        }
        return match value.as_string().and_then(|s| s.to_string().ok()) {
            Some(text) => text,
            None => format!("{value:?}"),
        };
    }
    error.to_string()
}

/// Parses JSON text into a value with QuickJS's own parser, without making a JavaScript string of
/// the text first. `text` must end with a NUL byte that is not part of the JSON.
fn parse_json<'js>(ctx: &Ctx<'js>, text: &[u8]) -> rquickjs::Result<Value<'js>> {
    debug_assert_eq!(text.last(), Some(&0));
    let len = text.len().saturating_sub(1);
    // SAFETY: the buffer is live, NUL-terminated, and `len` excludes the terminator; the returned
    // value is owned and wrapped at once.
    unsafe {
        let value = rquickjs::qjs::JS_ParseJSON(
            ctx.as_raw().as_ptr(),
            text.as_ptr().cast(),
            len as rquickjs::qjs::size_t,
            c"<json>".as_ptr(),
        );
        let value = Value::from_raw(ctx.clone(), value);
        if value.is_exception() {
            return Err(rquickjs::Error::Exception);
        }
        Ok(value)
    }
}

/// `nativeCall(name, argsJson)`: runs a capability through the host. `argsJson` is the arguments'
/// JSON text, or null when `nativeArgs` has just written it. Returns `[true, result]` with the
/// result parsed, or `[false, errorMessage]`.
fn native_call<'js>(
    ctx: Ctx<'js>,
    name: String,
    args: Option<String>,
) -> rquickjs::Result<Array<'js>> {
    let args = match args {
        Some(text) => text.into_bytes(),
        None => ARGS_JSON
            .with(|cell| cell.borrow_mut().take())
            .unwrap_or_else(|| b"null".to_vec()),
    };
    let result = Array::new(ctx.clone())?;
    match abi::call_host(&name, &args) {
        Ok(mut reply) => {
            result.set(0, true)?;
            // The host only ever sends serde_json's output.
            reply.push(0);
            result.set(1, parse_json(&ctx, &reply)?)?;
        }
        Err(message) => {
            result.set(0, false)?;
            result.set(1, String::from_utf8_lossy(&message).into_owned())?;
        }
    }
    Ok(result)
}

/// `value` as JSON text, or `None` (having run no code) when it is not plain data and needs
/// `JSON.stringify` (see `json.rs`). Leaves the text in `slot`; returns whether it did.
fn write_json<'js>(
    slot: &'static std::thread::LocalKey<RefCell<Option<Vec<u8>>>>,
    ctx: &Ctx<'js>,
    value: &Value<'js>,
    object_proto: Object<'js>,
    array_proto: Object<'js>,
) -> rquickjs::Result<bool> {
    let Some(mut writer) = json::Writer::new(ctx, object_proto, array_proto)? else {
        return Ok(false);
    };
    if writer.value(value, 0)?.is_none() {
        return Ok(false);
    }
    slot.with(|cell| *cell.borrow_mut() = Some(writer.out));
    Ok(true)
}

/// `nativeResult(value, objectPrototype, arrayPrototype)`: writes the call's result for `output`.
fn native_result<'js>(
    ctx: Ctx<'js>,
    value: Value<'js>,
    object_proto: Object<'js>,
    array_proto: Object<'js>,
) -> rquickjs::Result<bool> {
    write_json(&RESULT_JSON, &ctx, &value, object_proto, array_proto)
}

/// `nativeArgs(value, objectPrototype, arrayPrototype)`: writes a capability's arguments for the
/// `nativeCall` that follows.
fn native_args<'js>(
    ctx: Ctx<'js>,
    value: Value<'js>,
    object_proto: Object<'js>,
    array_proto: Object<'js>,
) -> rquickjs::Result<bool> {
    write_json(&ARGS_JSON, &ctx, &value, object_proto, array_proto)
}

fn native_log(level: u32, line: String) {
    abi::log_line(level, &line);
}

/// QuickJS creates a built-in function object (`Array.isArray`, `Number.isInteger`,
/// `Function.prototype[Symbol.hasInstance]`, ...) only when it is first read. Every call starts from
/// the image, so each call re-created the ones it used. Reading every property of every object
/// reachable from the global object, before the handler runs, puts them all in the image. Reads
/// descriptors only: no getter runs.
fn instantiate_builtins(ctx: &Ctx<'_>) {
    use rquickjs::qjs;
    let raw = ctx.as_raw().as_ptr();
    let mut seen = std::collections::HashSet::new();
    let mut pending: Vec<Value<'_>> = vec![ctx.globals().into_value()];
    while let Some(object) = pending.pop() {
        let Some(obj) = object.as_object() else {
            continue;
        };
        // SAFETY: reads the object's pointer, used only as an identity.
        let id = unsafe { qjs::JS_VALUE_GET_PTR(obj.as_raw()) } as usize;
        if !seen.insert(id) {
            continue;
        }
        if let Some(proto) = obj.get_prototype() {
            pending.push(proto.into_value());
        }
        let mut tab: *mut qjs::JSPropertyEnum = std::ptr::null_mut();
        let mut len: u32 = 0;
        let flags = (qjs::JS_GPN_STRING_MASK | qjs::JS_GPN_SYMBOL_MASK) as i32;
        // SAFETY: on success `tab` holds `len` entries until JS_FreePropertyEnum; each descriptor's
        // values are owned and wrapped (so freed) at once.
        unsafe {
            if qjs::JS_GetOwnPropertyNames(raw, &mut tab, &mut len, obj.as_raw(), flags) < 0 {
                drop(ctx.catch());
                continue;
            }
            for entry in std::slice::from_raw_parts(tab, len as usize) {
                let mut desc = std::mem::MaybeUninit::<qjs::JSPropertyDescriptor>::uninit();
                if qjs::JS_GetOwnProperty(raw, desc.as_mut_ptr(), obj.as_raw(), entry.atom) != 1 {
                    drop(ctx.catch());
                    continue;
                }
                let desc = desc.assume_init();
                for value in [desc.value, desc.getter, desc.setter] {
                    let value = Value::from_raw(ctx.clone(), value);
                    if value.is_object() {
                        pending.push(value);
                    }
                }
            }
            qjs::JS_FreePropertyEnum(raw, tab, len);
        }
    }
}

fn load(source: &str) -> Result<Loaded, (u32, String)> {
    let internal = |e: rquickjs::Error| (kind::INTERNAL, e.to_string());
    let runtime = Runtime::new().map_err(internal)?;
    runtime.set_max_stack_size(JS_MAX_STACK);
    let context = Context::full(&runtime).map_err(internal)?;
    let (run, settled) = context.with(|ctx| -> Result<_, (u32, String)> {
        instantiate_builtins(&ctx);
        let prelude: Function = ctx
            .eval(PRELUDE)
            .map_err(|e| (kind::INTERNAL, describe_exception(&ctx, e)))?;
        let call = Function::new(ctx.clone(), native_call).map_err(internal)?;
        let log = Function::new(ctx.clone(), native_log).map_err(internal)?;
        let result = Function::new(ctx.clone(), native_result).map_err(internal)?;
        let args = Function::new(ctx.clone(), native_args).map_err(internal)?;
        let driver: Function = prelude
            .call((call, log, result, args))
            .map_err(|e| (kind::INTERNAL, describe_exception(&ctx, e)))?;

        let mut options = rquickjs::context::EvalOptions::default();
        options.global = true;
        options.strict = false;
        options.filename = Some("handler.js".to_string());
        ctx.eval_with_options::<Value, _>(source, options)
            .map_err(|e| (kind::INVALID_HANDLER, describe_exception(&ctx, e)))?;
        let handle: Value = ctx
            .globals()
            .get("handle")
            .map_err(|e| (kind::INVALID_HANDLER, describe_exception(&ctx, e)))?;
        let Some(handle) = handle.into_function() else {
            return Err((
                kind::INVALID_HANDLER,
                "the handler source must define a function `handle(request)`".to_string(),
            ));
        };
        let pair: Array = driver
            .call((handle,))
            .map_err(|e| (kind::INTERNAL, describe_exception(&ctx, e)))?;
        let run: Function = pair.get(0).map_err(internal)?;
        let settled: Function = pair.get(1).map_err(internal)?;
        Ok((Persistent::save(&ctx, run), Persistent::save(&ctx, settled)))
    })?;
    // Collect the garbage of evaluation now so it is not part of every call's copy-on-write image.
    runtime.run_gc();
    // QuickJS frees most garbage by reference counting; its tracing GC only finds cycles, and when it
    // runs it writes to every object's header, i.e. dirties every heap page of the snapshot, which the
    // host must then reset after the call. A call is short-lived and its memory is thrown away, so
    // only trace once a call has allocated a lot more than the snapshot holds.
    let snapshot_heap = usize::try_from(runtime.memory_usage().malloc_size).unwrap_or(0);
    runtime.set_gc_threshold(snapshot_heap + GC_HEADROOM);
    Ok(Loaded {
        runtime,
        context,
        run,
        settled,
    })
}

/// Evaluates the prelude and the handler source. Returns 0 on success; otherwise reports the reason
/// through `parley.output` and returns 1.
#[unsafe(no_mangle)]
pub extern "C" fn parley_load(len: u32) -> u32 {
    let source = match std::str::from_utf8(abi::take_input(len)) {
        Ok(source) => source,
        Err(_) => {
            report(kind::INVALID_HANDLER, "the handler source is not UTF-8");
            return 1;
        }
    };
    match load(source) {
        Ok(loaded) => {
            LOADED.with(|cell| *cell.borrow_mut() = Some(loaded));
            0
        }
        Err((kind, message)) => {
            report(kind, &message);
            1
        }
    }
}

fn report_pair(ctx: &Ctx<'_>, result: rquickjs::Result<Value<'_>>) -> bool {
    match result {
        Ok(value) => match value.as_array() {
            Some(pair) => {
                let kind: u32 = pair.get(0).unwrap_or(kind::INTERNAL);
                // A result `nativeResult` wrote (the pair's text is then null).
                let written = (kind == kind::OK)
                    .then(|| RESULT_JSON.with(|cell| cell.borrow_mut().take()))
                    .flatten();
                if let Some(json) = written {
                    abi::report(kind, &json);
                    return true;
                }
                let text: String = pair.get(1).unwrap_or_default();
                report(kind, &text);
                true
            }
            None => false,
        },
        Err(error) => {
            let message = describe_exception(ctx, error);
            report(kind::THREW, &message);
            true
        }
    }
}

/// Runs the handler on the `len` bytes of JSON input the host has waiting and reports the outcome.
#[unsafe(no_mangle)]
pub extern "C" fn parley_run(len: u32) {
    LOADED.with(|cell| {
        let borrowed = cell.borrow();
        let Some(loaded) = borrowed.as_ref() else {
            report(kind::INTERNAL, "no handler is loaded");
            return;
        };
        // The host's bytes and the NUL after them: `parse_json` parses in place.
        let input = abi::take_input_nul(len);
        let reported = loaded.context.with(|ctx| {
            let run = match loaded.run.clone().restore(&ctx) {
                Ok(run) => run,
                Err(error) => {
                    report(kind::INTERNAL, &error.to_string());
                    return true;
                }
            };
            let request = match parse_json(&ctx, input) {
                Ok(request) => request,
                Err(error) => {
                    let message = describe_exception(&ctx, error);
                    report(kind::THREW, &format!("input is not JSON: {message}"));
                    return true;
                }
            };
            report_pair(&ctx, run.call::<_, Value>((request,)))
        });
        if reported {
            return;
        }
        // The handler returned a promise: drain the job queue (microtasks only; there are no timers),
        // then ask the driver how it settled.
        loop {
            match loaded.runtime.execute_pending_job() {
                Ok(true) => continue,
                Ok(false) => break,
                // A job threw: the driver's own reaction records handler rejections, so an exception
                // here is from a job the handler queued itself; keep draining.
                Err(_) => continue,
            }
        }
        let reported = loaded
            .context
            .with(|ctx| match loaded.settled.clone().restore(&ctx) {
                Ok(settled) => report_pair(&ctx, settled.call::<_, Value>(())),
                Err(error) => {
                    report(kind::INTERNAL, &error.to_string());
                    true
                }
            });
        if !reported {
            report(kind::INTERNAL, "the driver returned no outcome");
        }
    });
}
