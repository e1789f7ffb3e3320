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

/// Every allocation comes from one arena that only grows: an instance serves exactly one call, and
/// its whole memory is reset after it, so freeing would only cost time.
#[global_allocator]
static ARENA: arena::Arena = arena::Arena::new();

/// How much free memory `parley_load` leaves in the handler's image (it is taken after the load).
const KEEP_FREE: usize = 256 * 1024;

mod arena {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::Cell;

    const PAGE: usize = 65_536;

    /// Bump allocation from the end of linear memory, growing it a page at a time as needed. The
    /// last block can shrink or grow in place, and is given back when freed.
    pub struct Arena {
        next: Cell<usize>,
        end: Cell<usize>,
    }

    // The guest is single-threaded (wasm32-wasip1 without threads).
    unsafe impl Sync for Arena {}

    impl Arena {
        pub const fn new() -> Self {
            Arena {
                next: Cell::new(0),
                end: Cell::new(0),
            }
        }

        /// Takes `layout`'s block from the free part, if it fits there.
        /// (Before the first `reserve`, `end` is 0, so nothing fits: `GlobalAlloc` is never asked
        /// for zero bytes.)
        fn fit(&self, layout: Layout) -> Option<usize> {
            let align = layout.align() - 1;
            let start = self.next.get().checked_add(align)? & !align;
            let end = start.checked_add(layout.size())?;
            if end > self.end.get() {
                return None;
            }
            self.next.set(end);
            Some(start)
        }

        /// Makes `[next, next + bytes)` available, growing memory if needed.
        pub fn reserve(&self, bytes: usize) -> bool {
            if self.end.get() == 0 {
                let top = core::arch::wasm32::memory_size(0) * PAGE;
                self.next.set(top);
                self.end.set(top);
            }
            let Some(wanted) = self.next.get().checked_add(bytes) else {
                return false;
            };
            if wanted <= self.end.get() {
                return true;
            }
            let pages = (wanted - self.end.get()).div_ceil(PAGE);
            if core::arch::wasm32::memory_grow(0, pages) == usize::MAX {
                return false;
            }
            self.end.set(self.end.get() + pages * PAGE);
            true
        }
    }

    unsafe impl GlobalAlloc for Arena {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if let Some(at) = self.fit(layout) {
                return at as *mut u8;
            }
            // Room for the block and its alignment; then it fits.
            match layout.size().checked_add(layout.align()) {
                Some(bytes) if self.reserve(bytes) => self
                    .fit(layout)
                    .map_or(core::ptr::null_mut(), |at| at as *mut u8),
                _ => core::ptr::null_mut(),
            }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            if ptr as usize + layout.size() == self.next.get() {
                self.next.set(ptr as usize);
            }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let at = ptr as usize;
            let last = at + layout.size() == self.next.get();
            if new_size <= layout.size() {
                // Shrinks where it is; the last block gives its tail back.
                if last {
                    self.next.set(at + new_size);
                }
                return ptr;
            }
            if last && self.reserve(new_size - layout.size()) {
                self.next.set(at + new_size);
                return ptr;
            }
            let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
                return core::ptr::null_mut();
            };
            let new = unsafe { self.alloc(new_layout) };
            if !new.is_null() {
                unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
            }
            new
        }
    }
}

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
            // Free memory in the image, so that a typical call never grows memory.
            ARENA.reserve(KEEP_FREE);
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
