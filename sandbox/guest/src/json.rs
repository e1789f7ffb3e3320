//! The handler's result as JSON text, written straight from QuickJS's values.
//!
//! QuickJS's `JSON.stringify` builds a key array and quoted key strings for every object and
//! checks every value for `toJSON` through the prototype chain; for a handler's typical result (a
//! few small plain objects) that was over a third of a call. This writer covers plain data, which
//! is what handlers return: objects whose prototype is `Object.prototype`, arrays whose prototype
//! is `Array.prototype`, own data properties only, no `toJSON` anywhere, strings that are valid
//! UTF-16, numbers, booleans and null. It reads properties without running any code, so when it
//! meets anything else (a getter, a proxy, a `Date`, a class instance, a `toJSON`, a hole, a
//! BigInt, a lone surrogate, nesting deeper than [`MAX_DEPTH`]) it gives up having had no effect,
//! and the caller runs `JSON.stringify` instead, with its exact semantics and errors.
//!
//! What it writes parses to the same JSON value as `JSON.stringify`'s text; the text itself can
//! differ in number formatting (`1e21` is written out in full), which the host does not see: it
//! parses the text.

use std::fmt::Write as _;
use std::mem::MaybeUninit;

use rquickjs::{Ctx, Object, Type, Value, qjs};

/// Deeper results go to `JSON.stringify` (which also reports cycles).
const MAX_DEPTH: usize = 64;

/// `Ok(None)`: not plain data; nothing was run, use `JSON.stringify`.
type Written = rquickjs::Result<Option<()>>;

pub(crate) struct Writer<'a, 'js> {
    ctx: &'a Ctx<'js>,
    object_proto: Object<'js>,
    array_proto: Object<'js>,
    object_class: qjs::JSClassID,
    array_class: qjs::JSClassID,
    to_json: Atom<'a, 'js>,
    pub(crate) out: Vec<u8>,
}

/// An atom freed on drop.
struct Atom<'a, 'js>(&'a Ctx<'js>, qjs::JSAtom);

impl Drop for Atom<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: the atom was created in this context and is freed once.
        unsafe { qjs::JS_FreeAtom(self.0.as_raw().as_ptr(), self.1) }
    }
}

impl<'a, 'js> Writer<'a, 'js> {
    /// A writer for results built from these two prototypes (captured by the prelude before the
    /// handler ran). `None` when either prototype carries a `toJSON` or `Array.prototype` no
    /// longer inherits from `Object.prototype`: then no array or object is plain.
    pub(crate) fn new(
        ctx: &'a Ctx<'js>,
        object_proto: Object<'js>,
        array_proto: Object<'js>,
    ) -> rquickjs::Result<Option<Self>> {
        let name = "toJSON";
        // SAFETY: a valid context and a byte string of the given length.
        let atom = unsafe {
            qjs::JS_NewAtomLen(
                ctx.as_raw().as_ptr(),
                name.as_ptr().cast(),
                name.len() as qjs::size_t,
            )
        };
        let to_json = Atom(ctx, atom);
        // SAFETY: JS_GetClassID only reads the value's tag and object header.
        let (object_class, array_class) = unsafe {
            (
                qjs::JS_GetClassID(object_proto.as_raw()),
                qjs::JS_GetClassID(array_proto.as_raw()),
            )
        };
        let writer = Writer {
            ctx,
            object_proto,
            array_proto,
            object_class,
            array_class,
            to_json,
            out: Vec::with_capacity(512),
        };
        let inherits = writer.array_proto.get_prototype().as_ref() == Some(&writer.object_proto);
        if !inherits
            || writer.has_own(&writer.object_proto, writer.to_json.1)?
            || writer.has_own(&writer.array_proto, writer.to_json.1)?
        {
            return Ok(None);
        }
        Ok(Some(writer))
    }

    fn raw_ctx(&self) -> *mut qjs::JSContext {
        self.ctx.as_raw().as_ptr()
    }

    /// Whether `object` has an own property `atom`, without running any code (no getter, and
    /// only plain objects and arrays reach here, never a proxy).
    fn has_own(&self, object: &Object<'js>, atom: qjs::JSAtom) -> rquickjs::Result<bool> {
        // SAFETY: a null descriptor asks only whether the property exists.
        let found = unsafe {
            qjs::JS_GetOwnProperty(self.raw_ctx(), std::ptr::null_mut(), object.as_raw(), atom)
        };
        match found {
            n if n < 0 => Err(rquickjs::Error::Exception),
            0 => Ok(false),
            _ => Ok(true),
        }
    }

    /// An own data property's value; `None` for a missing property or an accessor.
    fn own_data(
        &self,
        object: &Object<'js>,
        atom: qjs::JSAtom,
    ) -> rquickjs::Result<Option<Value<'js>>> {
        let mut desc = MaybeUninit::<qjs::JSPropertyDescriptor>::uninit();
        // SAFETY: on success QuickJS fills every field of the descriptor with owned values, which
        // are wrapped (and so freed) below.
        unsafe {
            let found =
                qjs::JS_GetOwnProperty(self.raw_ctx(), desc.as_mut_ptr(), object.as_raw(), atom);
            if found < 0 {
                return Err(rquickjs::Error::Exception);
            }
            if found == 0 {
                return Ok(None);
            }
            let desc = desc.assume_init();
            let value = Value::from_raw(self.ctx.clone(), desc.value);
            drop(Value::from_raw(self.ctx.clone(), desc.getter));
            drop(Value::from_raw(self.ctx.clone(), desc.setter));
            if (desc.flags as u32 & qjs::JS_PROP_TMASK) == qjs::JS_PROP_GETSET {
                return Ok(None);
            }
            Ok(Some(value))
        }
    }

    /// Writes `value`; `Ok(None)` (with `out` in an unspecified state) when it is not plain data.
    pub(crate) fn value(&mut self, value: &Value<'js>, depth: usize) -> Written {
        match value.type_of() {
            Type::Null => self.out.extend_from_slice(b"null"),
            Type::Bool => {
                let text: &[u8] = if value.as_bool() == Some(true) {
                    b"true"
                } else {
                    b"false"
                };
                self.out.extend_from_slice(text);
            }
            Type::Int => {
                let n = value.as_int().unwrap_or_default();
                self.integer(i64::from(n));
            }
            Type::Float => self.number(value.as_float().unwrap_or(f64::NAN)),
            Type::String => return self.string_value(value),
            Type::Object | Type::Array => {
                let Some(object) = value.as_object() else {
                    return Ok(None);
                };
                if depth >= MAX_DEPTH {
                    return Ok(None);
                }
                return self.object(object, depth + 1);
            }
            // Undefined, functions and symbols are left out of objects (the caller checks with
            // `skipped`); at the top level and anything else (BigInt, errors, promises, proxies)
            // is JSON.stringify's business.
            _ => return Ok(None),
        }
        Ok(Some(()))
    }

    /// What `JSON.stringify` leaves out of an object, and writes as `null` in an array.
    fn skipped(value: &Value<'js>) -> bool {
        matches!(
            value.type_of(),
            Type::Undefined | Type::Symbol | Type::Function | Type::Constructor
        )
    }

    fn integer(&mut self, n: i64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = n.unsigned_abs();
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        if n < 0 {
            self.out.push(b'-');
        }
        self.out.extend_from_slice(&digits[at..]);
    }

    fn number(&mut self, n: f64) {
        /// Integers up to this size are exact in a double.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        if !n.is_finite() {
            self.out.extend_from_slice(b"null");
        } else if n == 0.0 {
            // Also -0, which JSON.stringify writes as 0.
            self.out.push(b'0');
        } else if n.fract() == 0.0 && n.abs() <= EXACT {
            self.integer(n as i64);
        } else {
            // Rust's shortest round-trip form; never an exponent, so always valid JSON.
            let mut text = String::new();
            let _ = write!(text, "{n}");
            self.out.extend_from_slice(text.as_bytes());
        }
    }

    fn string_value(&mut self, value: &Value<'js>) -> Written {
        let mut len: qjs::size_t = 0;
        // SAFETY: a valid context and value; the text is handed to `c_string`, which frees it.
        unsafe {
            let ptr = qjs::JS_ToCStringLen2(self.raw_ctx(), &mut len, value.as_raw(), false);
            self.c_string(ptr, len)
        }
    }

    fn key(&mut self, atom: qjs::JSAtom) -> Written {
        let mut len: qjs::size_t = 0;
        // SAFETY: as in `string_value`.
        unsafe {
            let ptr = qjs::JS_AtomToCStringLen(self.raw_ctx(), &mut len, atom);
            self.c_string(ptr, len)
        }
    }

    /// Writes text QuickJS converted to UTF-8 as a JSON string, and frees it. `None` for text that
    /// is not valid UTF-8: a lone surrogate comes out that way, and JSON.stringify escapes it.
    ///
    /// # Safety
    /// `ptr` is null (the conversion failed) or QuickJS's text of `len` bytes, not yet freed.
    unsafe fn c_string(&mut self, ptr: *const std::ffi::c_char, len: qjs::size_t) -> Written {
        if ptr.is_null() {
            return Err(rquickjs::Error::Exception);
        }
        // SAFETY: per the contract, `len` bytes at `ptr`, freed once below.
        unsafe {
            let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len as usize);
            let valid = std::str::from_utf8(bytes).is_ok();
            if valid {
                self.quoted(bytes);
            }
            qjs::JS_FreeCString(self.raw_ctx(), ptr);
            Ok(valid.then_some(()))
        }
    }

    /// A JSON string literal, escaped as JSON.stringify escapes (quote, backslash, controls).
    fn quoted(&mut self, bytes: &[u8]) {
        self.out.push(b'"');
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let escape: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0..=0x1f => b"",
                _ => continue,
            };
            self.out.extend_from_slice(&bytes[start..i]);
            if escape.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                self.out.extend_from_slice(b"\\u00");
                self.out.push(HEX[usize::from(b >> 4)]);
                self.out.push(HEX[usize::from(b & 0xf)]);
            } else {
                self.out.extend_from_slice(escape);
            }
            start = i + 1;
        }
        self.out.extend_from_slice(&bytes[start..]);
        self.out.push(b'"');
    }

    fn object(&mut self, object: &Object<'js>, depth: usize) -> Written {
        // SAFETY: reads the object's class id only.
        let class = unsafe { qjs::JS_GetClassID(object.as_raw()) };
        let is_array = class == self.array_class;
        if !is_array && class != self.object_class {
            return Ok(None);
        }
        let expected = if is_array {
            &self.array_proto
        } else {
            &self.object_proto
        };
        if object.get_prototype().as_ref() != Some(expected)
            || self.has_own(object, self.to_json.1)?
        {
            return Ok(None);
        }
        if is_array {
            self.array(object, depth)
        } else {
            self.plain(object, depth)
        }
    }

    fn array(&mut self, array: &Object<'js>, depth: usize) -> Written {
        let mut len = 0i64;
        // SAFETY: `length` of an array is a data property; no code runs.
        if unsafe { qjs::JS_GetLength(self.raw_ctx(), array.as_raw(), &mut len) } < 0 {
            return Err(rquickjs::Error::Exception);
        }
        let Ok(len) = u32::try_from(len) else {
            return Ok(None);
        };
        self.out.push(b'[');
        for i in 0..len {
            if i > 0 {
                self.out.push(b',');
            }
            // SAFETY: a valid context; the atom is freed by the guard.
            let atom = Atom(self.ctx, unsafe {
                qjs::JS_NewAtomUInt32(self.raw_ctx(), i)
            });
            // A hole (or an accessor) would be read through the prototype chain.
            let Some(element) = self.own_data(array, atom.1)? else {
                return Ok(None);
            };
            if Self::skipped(&element) {
                self.out.extend_from_slice(b"null");
            } else if self.value(&element, depth)?.is_none() {
                return Ok(None);
            }
        }
        self.out.push(b']');
        Ok(Some(()))
    }

    fn plain(&mut self, object: &Object<'js>, depth: usize) -> Written {
        let mut tab: *mut qjs::JSPropertyEnum = std::ptr::null_mut();
        let mut len: u32 = 0;
        let flags = (qjs::JS_GPN_STRING_MASK | qjs::JS_GPN_ENUM_ONLY) as i32;
        // SAFETY: on success `tab` holds `len` entries until JS_FreePropertyEnum.
        if unsafe {
            qjs::JS_GetOwnPropertyNames(self.raw_ctx(), &mut tab, &mut len, object.as_raw(), flags)
        } < 0
        {
            return Err(rquickjs::Error::Exception);
        }
        let result = (|| {
            // SAFETY: see above.
            let entries = unsafe { std::slice::from_raw_parts(tab, len as usize) };
            self.out.push(b'{');
            let mut first = true;
            for entry in entries {
                let Some(value) = self.own_data(object, entry.atom)? else {
                    return Ok(None);
                };
                if Self::skipped(&value) {
                    continue;
                }
                if !first {
                    self.out.push(b',');
                }
                first = false;
                if self.key(entry.atom)?.is_none() {
                    return Ok(None);
                }
                self.out.push(b':');
                if self.value(&value, depth)?.is_none() {
                    return Ok(None);
                }
            }
            self.out.push(b'}');
            Ok(Some(()))
        })();
        // SAFETY: frees the table and its atoms exactly once.
        unsafe { qjs::JS_FreePropertyEnum(self.raw_ctx(), tab, len) };
        result
    }
}
