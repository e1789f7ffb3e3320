//! The CBOR writer: the canonical message written with ciborium-ll's encoder, the same bytes
//! ciborium writes for the same item (shortest heads, floats in the shortest form that keeps
//! their value).

use ciborium_ll::{Encoder, Header, simple};
use serde_json::Value;

use crate::message::{Content, Format, Message};

/// Canonical CBOR bytes of `message`: the layout of [`to_json_value`], binary content as a
/// byte string (ECMA-432 §9).
///
/// [`to_json_value`]: crate::to_json_value
pub(in crate::codec) fn message(out: &mut Vec<u8>, message: &Message) {
    let mut enc = Encoder::from(out);
    let fields = 3
        + usize::from(message.messagetype.is_some())
        + usize::from(message.label.is_some())
        + usize::from(!message.submessages.is_empty());
    head(&mut enc, Header::Map(Some(fields)));
    if let Some(t) = &message.messagetype {
        text(&mut enc, "messagetype");
        text(&mut enc, t);
    }
    body(
        &mut enc,
        message.format,
        &message.subformat,
        &message.content,
    );
    if let Some(label) = &message.label {
        text(&mut enc, "label");
        text(&mut enc, label);
    }
    if !message.submessages.is_empty() {
        text(&mut enc, "submessages");
        head(&mut enc, Header::Array(Some(message.submessages.len())));
        for sub in &message.submessages {
            head(
                &mut enc,
                Header::Map(Some(3 + usize::from(sub.label.is_some()))),
            );
            if let Some(label) = &sub.label {
                text(&mut enc, "label");
                text(&mut enc, label);
            }
            body(&mut enc, sub.format, &sub.subformat, &sub.content);
        }
    }
}

type Out<'a> = Encoder<&'a mut Vec<u8>>;

/// The three entries every message and submessage has.
fn body(enc: &mut Out<'_>, format: Format, subformat: &str, value: &Content) {
    text(enc, "format");
    text(enc, format.as_str());
    text(enc, "subformat");
    text(enc, subformat);
    text(enc, "content");
    content(enc, value);
}

// Writing into a `Vec` cannot fail.
fn head(enc: &mut Out<'_>, header: Header) {
    let _ = enc.push(header);
}

fn text(enc: &mut Out<'_>, s: &str) {
    let _ = enc.text(s, None);
}

fn content(enc: &mut Out<'_>, content: &Content) {
    match content {
        Content::Bytes(b) => {
            let _ = enc.bytes(b, None);
        }
        Content::Json(v) => json(enc, v),
    }
}

fn json(enc: &mut Out<'_>, v: &Value) {
    match v {
        Value::Null => head(enc, Header::Simple(simple::NULL)),
        Value::Bool(b) => head(
            enc,
            Header::Simple(if *b { simple::TRUE } else { simple::FALSE }),
        ),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                head(enc, Header::Positive(u));
            } else if let Some(i) = n.as_i64() {
                // Negative: CBOR carries -1 - n.
                head(enc, Header::Negative(!(i as u64)));
            } else {
                head(
                    enc,
                    Header::Float(n.as_f64().expect("a JSON number is i64, u64 or f64")),
                );
            }
        }
        Value::String(s) => text(enc, s),
        Value::Array(a) => {
            head(enc, Header::Array(Some(a.len())));
            for x in a {
                json(enc, x);
            }
        }
        Value::Object(o) => {
            head(enc, Header::Map(Some(o.len())));
            for (k, x) in o {
                text(enc, k);
                json(enc, x);
            }
        }
    }
}
