//! The JSON writer: the canonical document written straight into a buffer, byte for byte
//! what `serde_json::to_vec(&to_json_value(message))` gives, without building the value.
//! Strings are escaped by [`write_str`], which copies the text between escapes in one piece.

use base64::Engine as _;
use serde_json::Value;

use crate::message::{Content, Format, Message};

/// Writes the canonical JSON of a message: lowercase keys in [`to_json_value`]'s order, absent
/// fields and empty submessages omitted, no white space.
///
/// [`to_json_value`]: crate::to_json_value
pub(in crate::codec) fn message(out: &mut Vec<u8>, message: &Message) {
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
/// serde_json looks every byte up in a table, which is most of the cost of writing a
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
