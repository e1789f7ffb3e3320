//! The JSON binding on the hot path: messages read straight from the bytes and written
//! straight into a buffer, without a `serde_json::Value` of the message.
//!
//! Reading is one serde pass over the document. Each key is classified as it is read
//! ([`Field::of`]), string fields are borrowed from the input where they need no unescaping,
//! content is parsed into the `Value` that becomes the message's content, unknown keys are
//! skipped, and each submessage is read the same way as it comes. What is found goes into a
//! [`Found`], whose checks are those of the generic decoder, so both accept and refuse the
//! same messages with the same errors. (Parsing the top level into entries of `Value`s
//! first, then looking fields up and copying their strings out, cost almost twice the
//! instructions.)
//!
//! Writing follows [`super::to_json_value`]'s layout key by key; strings are escaped by
//! [`write_str`], which copies the text between escapes in one piece.

use std::borrow::Cow;

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess};
use serde_json::Value;

use super::{DecodeError, Field, Found, Kinded, not_an_array, not_an_object};
use crate::message::{Content, Format, Message, Submessage};
use crate::validate::{Part, ValidationError};

/// Decodes and validates a JSON message: syntax errors anywhere in the document first
/// ([`DecodeError::Json`]), then the first problem in the order of [`Found::into_message`].
pub(super) fn read_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    // serde_json checks each string of a byte slice for UTF-8 on its own, which was a sixth
    // of the cost of decoding a small message. A body that is UTF-8 as a whole (as all valid
    // JSON is) is checked once instead and parsed as a `str`, whose strings need no more
    // checks; anything else is parsed as bytes, and fails exactly as it always has.
    match std::str::from_utf8(bytes) {
        Ok(text) => read(serde_json::Deserializer::from_str(text)),
        Err(_) => read(serde_json::Deserializer::from_slice(bytes)),
    }
}

fn read<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
) -> Result<Message, DecodeError> {
    let mut found = Found::new(Part::Message);
    let top = Expect(PartOf(&mut found))
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top))
        .map_err(DecodeError::Json)?;
    top.map_err(|kind| not_an_object(Part::Message, kind))?;
    Ok(found.into_message()?)
}

/// What [`Expect`] makes of the JSON type it wants. The defaults take any other type as
/// "the wrong kind": read in full, then reported by its kind.
trait Wanted<'de>: Sized {
    type Value;

    fn string(self, _: &str) -> Kinded<Self::Value> {
        Err("a string")
    }

    /// A string that needs no unescaping, borrowed from the input.
    fn borrowed_string(self, s: &'de str) -> Kinded<Self::Value> {
        self.string(s)
    }

    fn boolean(self, _: bool) -> Kinded<Self::Value> {
        Err("a boolean")
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Kinded<Self::Value>, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Err("an object"))
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kinded<Self::Value>, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Err("an array"))
    }
}

/// Reads one JSON value of any type where a field expects one type (`W`). A value of
/// another type is no serde error: the field's error says what was found, in the same words
/// as the generic decoder, and only after the whole document has parsed. Everything is read
/// through `deserialize_any`, as a `Value` would be, so that the syntax accepted (UTF-8,
/// escapes, number range, the nesting limit) stays exactly `Value`'s.
struct Expect<W>(W);

impl<'de, W: Wanted<'de>> DeserializeSeed<'de> for Expect<W> {
    type Value = Kinded<W::Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, W: Wanted<'de>> de::Visitor<'de> for Expect<W> {
    type Value = Kinded<W::Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(self.0.borrowed_string(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.string(v))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(self.0.boolean(v))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err("a number"))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err("null"))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.object(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.array(seq)
    }
}

/// A value that is not kept (an unknown key's, or a wrong kind's).
///
/// Not `serde::de::IgnoredAny`: serde_json skips that without checking UTF-8, escapes,
/// number range or nesting depth, so documents that have always been refused as malformed
/// (a `1e400` or a lone surrogate under an unknown key) would have been accepted.
struct Skip;

impl<'de> Wanted<'de> for Skip {
    type Value = ();
}

impl<'de> de::Deserialize<'de> for Skip {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Expect(Skip).deserialize(d).map(|_| Skip)
    }
}

/// A string field (messagetype, format, subformat, label).
struct AString;

impl<'de> Wanted<'de> for AString {
    type Value = Cow<'de, str>;

    fn string(self, s: &str) -> Kinded<Self::Value> {
        Ok(Cow::Owned(s.to_owned()))
    }
    fn borrowed_string(self, s: &'de str) -> Kinded<Self::Value> {
        Ok(Cow::Borrowed(s))
    }
}

/// The legacy `control` flag.
struct ABoolean;

impl<'de> Wanted<'de> for ABoolean {
    type Value = bool;

    fn boolean(self, b: bool) -> Kinded<bool> {
        Ok(b)
    }
}

/// The message, or one submessage: its fields, collected into a [`Found`]. That is filled
/// in place rather than returned: it is a few hundred bytes, and serde's layers copied it
/// on the way out.
struct PartOf<'f, 'de>(&'f mut Found<'de>);

impl<'de> Wanted<'de> for PartOf<'_, 'de> {
    type Value = ();

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Kinded<()>, A::Error> {
        let found = self.0;
        let part = found.part;
        // The spelling of each field's last key, for submessages (see below).
        let mut spellings = [None; Field::ALL.len()];
        while let Some(key) = map.next_key_seed(FieldKey(part))? {
            let Some((field, spelling)) = key else {
                map.next_value::<Skip>()?;
                continue;
            };
            // Submessages used to be read as a `serde_json::Value`, in which a key repeated
            // with the very same spelling replaces the earlier value instead of being refused
            // (only spellings that differ in case are two keys there). That is kept: the
            // earlier value is forgotten. The message itself refuses any repeat.
            if let Part::Sub(_) = part
                && spellings[field as usize].replace(spelling) == Some(spelling)
            {
                found.forget(field);
            }
            match field {
                Field::MessageType => found.messagetype.put(map.next_value_seed(Expect(AString))?),
                Field::Control => found.control.put(map.next_value_seed(Expect(ABoolean))?),
                Field::Format => found.format.put(map.next_value_seed(Expect(AString))?),
                Field::Subformat => found.subformat.put(map.next_value_seed(Expect(AString))?),
                // Any JSON value is content; it moves into the message as parsed.
                Field::Content => found.content.put(Ok(Content::Json(map.next_value()?))),
                Field::Label => found.label.put(map.next_value_seed(Expect(AString))?),
                Field::Submessages => found.submessages.put(
                    map.next_value_seed(Expect(Submessages))?
                        .unwrap_or_else(|kind| Err(not_an_array(part, field, kind))),
                ),
            }
        }
        Ok(Ok(()))
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kinded<()>, A::Error> {
        // A message that is an array has always had its items skipped unchecked, so that one
        // holding, say, invalid UTF-8 is reported as not an object rather than as malformed
        // JSON; that is kept. A submessage that is an array is checked like any other value.
        if let Part::Message = self.0.part {
            while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        } else {
            while seq.next_element::<Skip>()?.is_some() {}
        }
        Ok(Err("an array"))
    }
}

/// A key of a part, classified as it is read (after unescaping; never copied): the field it
/// names, if any, and for a submessage how the name is spelled.
struct FieldKey(Part);

/// Which letters of a field's key are capitals. With the field, this is the key exactly:
/// a key only names a field when it is the field's (ASCII) name in some capitalization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spelling(u16);

impl<'de> DeserializeSeed<'de> for FieldKey {
    type Value = Option<(Field, Spelling)>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> de::Visitor<'de> for FieldKey {
    type Value = Option<(Field, Spelling)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        let Some(field) = Field::of(key, self.0) else {
            return Ok(None);
        };
        // Only submessages need the spelling; the message's is left at 0.
        let mut capitals = 0;
        if let Part::Sub(_) = self.0 {
            for (i, b) in key.bytes().enumerate() {
                if b.is_ascii_uppercase() {
                    capitals |= 1 << i;
                }
            }
        }
        Ok(Some((field, Spelling(capitals))))
    }
}

/// The `submessages` array, each item decoded as it is read.
struct Submessages;

impl<'de> Wanted<'de> for Submessages {
    type Value = Result<Vec<Submessage>, ValidationError>;

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kinded<Self::Value>, A::Error> {
        let mut subs = Ok(Vec::new());
        for i in 0.. {
            let mut found = Found::new(Part::Sub(i));
            let Some(item) = seq.next_element_seed(Expect(PartOf(&mut found)))? else {
                break;
            };
            // The first submessage that fails is the error, as in the generic decoder; the
            // ones after it are still read, for syntax errors.
            if let Ok(list) = &mut subs {
                match item
                    .map_err(|kind| not_an_object(Part::Sub(i), kind))
                    .and_then(|()| found.into_submessage())
                {
                    Ok(sub) => list.push(sub),
                    Err(e) => subs = Err(e),
                }
            }
        }
        Ok(Ok(subs))
    }
}

/// Writes the canonical JSON of a message: lowercase keys in [`super::to_json_value`]'s
/// order, absent fields and empty submessages omitted, no white space. The output is
/// byte for byte what `serde_json::to_vec(&to_json_value(message))` gives.
pub(super) fn write_message(out: &mut Vec<u8>, message: &Message) {
    out.push(b'{');
    if let Some(t) = &message.messagetype {
        out.extend_from_slice(b"\"messagetype\":");
        write_str(out, t);
        out.push(b',');
    }
    write_part(out, message.format, &message.subformat, &message.content);
    if let Some(label) = &message.label {
        out.extend_from_slice(b",\"label\":");
        write_str(out, label);
    }
    if !message.submessages.is_empty() {
        out.extend_from_slice(b",\"submessages\":[");
        for (i, sub) in message.submessages.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'{');
            if let Some(label) = &sub.label {
                out.extend_from_slice(b"\"label\":");
                write_str(out, label);
                out.push(b',');
            }
            write_part(out, sub.format, &sub.subformat, &sub.content);
            out.push(b'}');
        }
        out.push(b']');
    }
    out.push(b'}');
}

/// The fields the message and its submessages share: format, subformat, content.
fn write_part(out: &mut Vec<u8>, format: Format, subformat: &str, content: &Content) {
    // Format names are lowercase letters: nothing to escape.
    out.extend_from_slice(b"\"format\":\"");
    out.extend_from_slice(format.as_str().as_bytes());
    out.extend_from_slice(b"\",\"subformat\":");
    write_str(out, subformat);
    out.extend_from_slice(b",\"content\":");
    match content {
        Content::Json(value) => write_value(out, value),
        Content::Bytes(bytes) => {
            write_str(
                out,
                &base64::engine::general_purpose::STANDARD.encode(bytes),
            );
        }
    }
}

/// A JSON value as serde_json writes it compactly. Strings (object keys included) go
/// through [`write_str`]; numbers are left to serde_json, whose number formatting is not
/// worth repeating.
fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            serde_json::to_writer(&mut *out, n).expect("writing JSON into a Vec cannot fail");
        }
    }
}

/// Writes a JSON string, escaped exactly as serde_json escapes it: `"` and `\` with a
/// backslash, the control characters below U+0020 as `\b \f \n \r \t` or `\u00xx`
/// (lowercase hex), and nothing else (not U+007F, not U+2028). The tests check every ASCII
/// character against serde_json.
///
/// serde_json looks every byte up in a table, which was most of the cost of writing a
/// reply; here the text between two escapes is copied in one piece, and the search for the
/// next byte to escape reads eight bytes at a time.
fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let mut rest = s.as_bytes();
    while let Some(at) = find_escape(rest) {
        out.extend_from_slice(&rest[..at]);
        write_escape(out, rest[at]);
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

/// The position of the first byte that must be escaped in a JSON string, if any.
fn find_escape(bytes: &[u8]) -> Option<usize> {
    let (words, tail) = bytes.as_chunks::<8>();
    for (i, word) in words.iter().enumerate() {
        let flags = escape_flags(u64::from_le_bytes(*word));
        if flags != 0 {
            // Little-endian: the lowest flag is the first byte in the string.
            return Some(i * 8 + flags.trailing_zeros() as usize / 8);
        }
    }
    // The last few bytes as one more word, padded with spaces (which need no escape).
    let mut last = [b' '; 8];
    last[..tail.len()].copy_from_slice(tail);
    let flags = escape_flags(u64::from_le_bytes(last));
    (flags != 0).then(|| words.len() * 8 + flags.trailing_zeros() as usize / 8)
}

/// Sets the high bit of each byte of `word` that is a control character, `"` or `\`
/// (the classic "has a byte less than n / equal to zero" tests). Bytes above the first
/// flagged one may be flagged spuriously by a borrow; the first one is always exact, and
/// nothing is flagged when no byte qualifies. UTF-8 bytes of other characters (0x80 and up)
/// are never flagged.
fn escape_flags(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Control bytes and `"` in one test: flipping bit 1 turns `"` (0x22) into 0x20, keeps
    // control bytes below 0x20 and every other byte above 0x20, so both are "below 0x21".
    let control_or_quote = (word ^ (ONES * 0x02)).wrapping_sub(ONES * 0x21);
    let backslash = (word ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES);
    (control_or_quote | backslash) & !word & HIGH
}

fn write_escape(out: &mut Vec<u8>, byte: u8) {
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let (hi, lo) = (HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]);
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hi, lo]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_json_string(s: &str) -> Vec<u8> {
        serde_json::to_vec(s).expect("a string serializes")
    }

    fn written(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_str(&mut out, s);
        out
    }

    #[test]
    fn every_ascii_character_is_escaped_as_serde_json_escapes_it() {
        for c in (0u8..=0x7f).map(char::from) {
            // Alone, and at every offset within and across an eight-byte word.
            for before in 0..17 {
                let s = format!("{}{c}{}", "a".repeat(before), "b".repeat(17 - before));
                assert_eq!(written(&s), serde_json_string(&s), "{s:?}");
            }
        }
    }

    #[test]
    fn strings_with_many_escapes_and_non_ascii_text_match_serde_json() {
        let samples = [
            "",
            "plain",
            "exactly8",
            "say \"hi\"",
            "C:\\path\\to\\file",
            "\"\"\"\"\"\"\"\"\"\\\\\\\\",
            "line\nbreak\r\n\ttab\u{8}\u{c}\u{0}\u{1f}\u{7f}",
            "päivää, 你好, emoji 🦀 and U+2028 \u{2028} U+2029 \u{2029}",
            "ÿÿÿÿÿÿÿÿ\"ÿÿÿÿÿÿÿ",
            "\u{1}\u{2}\u{3}\u{4}\u{5}\u{6}\u{7}\u{b}\u{e}\u{f}\u{10}\u{1b}",
        ];
        for s in samples {
            assert_eq!(written(s), serde_json_string(s), "{s:?}");
        }
    }
}
