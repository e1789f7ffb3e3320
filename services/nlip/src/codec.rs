//! JSON and CBOR (RFC 8949) codecs.
//!
//! Decoding is lenient where real peers differ (key capitalization, the legacy
//! `control: true`, unknown keys ignored) and strict where meaning is at stake (missing
//! or ill-typed required fields, duplicate keys that differ only in case). Encoding is
//! canonical: lowercase keys, absent fields omitted, submessages omitted when empty.
//!
//! There is one reader per encoding, each a single pass over the input that keeps no
//! intermediate tree of the document:
//! - `json`: serde visitors driven by serde_json, over bytes ([`from_json_slice`]) or over an
//!   already parsed `serde_json::Value` ([`from_json_value`]), which is a serde deserializer
//!   too;
//! - `cbor`: ciborium-ll's head decoder, strings borrowed from the input.
//!
//! Both classify each key of a part once and record what they find in a `fields::Found`,
//! whose checks then run in one fixed order, so that the same document gets the same message
//! or the same first error from either. Each encoding also has a writer (`json::write`,
//! `cbor::write`) that writes the canonical bytes straight into a buffer.

mod cbor;
mod fields;
mod json;

use serde_json::{Map, Value};

use crate::message::{Message, Submessage};
use crate::validate::ValidationError;

/// Why bytes could not be turned into a message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not JSON at all.
    #[error("malformed JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// The bytes are not a single well-formed CBOR item.
    #[error("malformed CBOR: {0}")]
    Cbor(String),
    /// Well-formed JSON/CBOR, but not a valid NLIP message.
    #[error("invalid NLIP message: {0}")]
    Invalid(#[from] ValidationError),
}

impl DecodeError {
    /// True when the syntax was fine and only the NLIP rules failed.
    pub fn is_invalid_message(&self) -> bool {
        matches!(self, DecodeError::Invalid(_))
    }
}

/// Decodes a JSON message (any key capitalization) and validates it. Malformed JSON
/// anywhere in the document is [`DecodeError::Json`], whatever else is wrong with it.
pub fn from_json_slice(bytes: &[u8]) -> Result<Message, DecodeError> {
    json::read_message(bytes)
}

/// Builds a message from an already parsed JSON value and validates it.
pub fn from_json_value(value: &Value) -> Result<Message, ValidationError> {
    json::read_value(value)
}

/// Decodes one CBOR item and validates it. Trailing bytes after the item are an error.
pub fn from_cbor_slice(bytes: &[u8]) -> Result<Message, DecodeError> {
    cbor::read_message(bytes)
}

/// The canonical JSON form of a message.
pub fn to_json_value(message: &Message) -> Value {
    let mut map = Map::new();
    if let Some(t) = &message.messagetype {
        map.insert("messagetype".into(), Value::String(t.clone()));
    }
    map.insert("format".into(), Value::String(message.format.to_string()));
    map.insert("subformat".into(), Value::String(message.subformat.clone()));
    map.insert("content".into(), message.content.to_json());
    if let Some(label) = &message.label {
        map.insert("label".into(), Value::String(label.clone()));
    }
    if !message.submessages.is_empty() {
        let subs = message.submessages.iter().map(sub_to_json).collect();
        map.insert("submessages".into(), Value::Array(subs));
    }
    Value::Object(map)
}

fn sub_to_json(sub: &Submessage) -> Value {
    let mut map = Map::new();
    if let Some(label) = &sub.label {
        map.insert("label".into(), Value::String(label.clone()));
    }
    map.insert("format".into(), Value::String(sub.format.to_string()));
    map.insert("subformat".into(), Value::String(sub.subformat.clone()));
    map.insert("content".into(), sub.content.to_json());
    Value::Object(map)
}

/// Canonical JSON bytes: the same document as [`to_json_value`], byte for byte what
/// `serde_json::to_vec` makes of it, written directly without building the intermediate
/// value (this is on every reply's path).
pub fn to_json_vec(message: &Message) -> Vec<u8> {
    // serde_json starts at 128 bytes; most replies are a little longer.
    let mut out = Vec::with_capacity(256);
    json::write::message(&mut out, message);
    out
}

/// Canonical CBOR bytes; binary content becomes a CBOR byte string (ECMA-432 §9).
pub fn to_cbor_vec(message: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    cbor::write::message(&mut out, message);
    out
}
