//! JSON and CBOR (RFC 8949) codecs.
//!
//! Decoding is lenient where real peers differ (key capitalization, the legacy
//! `control: true`, unknown keys ignored) and strict where meaning is at stake (missing
//! or ill-typed required fields, duplicate keys that differ only in case). Encoding is
//! canonical: lowercase keys, absent fields omitted, submessages omitted when empty.

use base64::Engine as _;
use ciborium::Value as Cbor;
use serde_json::{Map, Value};

use crate::message::{CONTROL, Content, Format, Message, Submessage};
use crate::validate::{Part, ValidationError, subformat_rule, validate};

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

/// Decodes a JSON message (any key capitalization) and validates it.
pub fn from_json_slice(bytes: &[u8]) -> Result<Message, DecodeError> {
    let top: TopLevel = serde_json::from_slice(bytes).map_err(DecodeError::Json)?;
    let entries = match &top {
        TopLevel::Object(entries) => entries.iter().map(|(k, v)| (k.0.as_ref(), v)).collect(),
        TopLevel::Other(kind) => return Err(not_an_object(Part::Message, kind).into()),
    };
    Ok(decode_fields(Fields {
        part: Part::Message,
        entries,
    })?)
}

/// The top level of a JSON document as [`from_json_slice`] reads it. A message's handful of
/// keys is looked up case-insensitively by scanning, so its entries are kept in a `Vec`: a
/// `Value` would build a map and hash every key into it first. Parts below the top level
/// (content, submessages) are ordinary `Value`s. Like a CBOR map, and unlike a `Value`, a key
/// that appears twice is refused rather than silently replaced by the later one.
enum TopLevel<'de> {
    /// Keys borrow from the input where they need no unescaping.
    Object(Vec<(Key<'de>, Value)>),
    /// Not an object; what it is instead, in [`Node::kind`]'s words.
    Other(&'static str),
}

/// An object key, borrowed from the input bytes when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Visit)
    }
}

impl<'de> serde::Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel<'de>, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(entry) = map.next_entry::<Key<'de>, Value>()? {
                    entries.push(entry);
                }
                Ok(TopLevel::Object(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TopLevel<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TopLevel::Other("an array"))
            }
            fn visit_bool<E>(self, _: bool) -> Result<TopLevel<'de>, E> {
                Ok(TopLevel::Other("a boolean"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<TopLevel<'de>, E> {
                Ok(TopLevel::Other("a number"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<TopLevel<'de>, E> {
                Ok(TopLevel::Other("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<TopLevel<'de>, E> {
                Ok(TopLevel::Other("a number"))
            }
            fn visit_str<E>(self, _: &str) -> Result<TopLevel<'de>, E> {
                Ok(TopLevel::Other("a string"))
            }
            fn visit_unit<E>(self) -> Result<TopLevel<'de>, E> {
                Ok(TopLevel::Other("null"))
            }
        }
        d.deserialize_any(Top)
    }
}

/// Builds a message from an already parsed JSON value and validates it.
pub fn from_json_value(value: &Value) -> Result<Message, ValidationError> {
    decode_message(value)
}

/// Decodes one CBOR item and validates it. Trailing bytes after the item are an error.
pub fn from_cbor_slice(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut reader = bytes;
    let value: Cbor =
        ciborium::de::from_reader(&mut reader).map_err(|e| DecodeError::Cbor(e.to_string()))?;
    if !reader.is_empty() {
        return Err(DecodeError::Cbor(format!(
            "{} trailing bytes after the message",
            reader.len()
        )));
    }
    Ok(decode_message(&value)?)
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

/// Canonical JSON bytes: the same document as [`to_json_value`], written directly without
/// building the intermediate value (this is on every reply's path).
pub fn to_json_vec(message: &Message) -> Vec<u8> {
    // serde_json starts at 128 bytes; most replies are a little longer.
    let mut out = Vec::with_capacity(256);
    serde_json::to_writer(&mut out, &Canonical(message)).expect("a message always serializes");
    out
}

/// Serializes a message in canonical form (lowercase keys, absent fields omitted).
struct Canonical<'a>(&'a Message);
struct CanonicalSub<'a>(&'a Submessage);
struct CanonicalContent<'a>(&'a Content);

impl serde::Serialize for CanonicalContent<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Content::Json(v) => v.serialize(s),
            Content::Bytes(b) => {
                s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
            }
        }
    }
}

impl serde::Serialize for CanonicalSub<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let sub = self.0;
        let mut map = s.serialize_map(None)?;
        if let Some(label) = &sub.label {
            map.serialize_entry("label", label)?;
        }
        map.serialize_entry("format", sub.format.as_str())?;
        map.serialize_entry("subformat", &sub.subformat)?;
        map.serialize_entry("content", &CanonicalContent(&sub.content))?;
        map.end()
    }
}

impl serde::Serialize for Canonical<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let m = self.0;
        let mut map = s.serialize_map(None)?;
        if let Some(t) = &m.messagetype {
            map.serialize_entry("messagetype", t)?;
        }
        map.serialize_entry("format", m.format.as_str())?;
        map.serialize_entry("subformat", &m.subformat)?;
        map.serialize_entry("content", &CanonicalContent(&m.content))?;
        if let Some(label) = &m.label {
            map.serialize_entry("label", label)?;
        }
        if !m.submessages.is_empty() {
            let subs: Vec<CanonicalSub<'_>> = m.submessages.iter().map(CanonicalSub).collect();
            map.serialize_entry("submessages", &subs)?;
        }
        map.end()
    }
}

/// Canonical CBOR bytes; binary content becomes a CBOR byte string (ECMA-432 §9).
pub fn to_cbor_vec(message: &Message) -> Vec<u8> {
    let mut map: Vec<(Cbor, Cbor)> = Vec::with_capacity(6);
    let key = |k: &str| Cbor::Text(k.to_owned());
    if let Some(t) = &message.messagetype {
        map.push((key("messagetype"), Cbor::Text(t.clone())));
    }
    map.push((key("format"), Cbor::Text(message.format.to_string())));
    map.push((key("subformat"), Cbor::Text(message.subformat.clone())));
    map.push((key("content"), content_to_cbor(&message.content)));
    if let Some(label) = &message.label {
        map.push((key("label"), Cbor::Text(label.clone())));
    }
    if !message.submessages.is_empty() {
        let subs = message
            .submessages
            .iter()
            .map(|s| {
                let mut m = Vec::with_capacity(4);
                if let Some(label) = &s.label {
                    m.push((key("label"), Cbor::Text(label.clone())));
                }
                m.push((key("format"), Cbor::Text(s.format.to_string())));
                m.push((key("subformat"), Cbor::Text(s.subformat.clone())));
                m.push((key("content"), content_to_cbor(&s.content)));
                Cbor::Map(m)
            })
            .collect();
        map.push((key("submessages"), Cbor::Array(subs)));
    }
    let mut out = Vec::with_capacity(128);
    ciborium::ser::into_writer(&Cbor::Map(map), &mut out)
        .expect("writing CBOR into a Vec cannot fail");
    out
}

fn content_to_cbor(content: &Content) -> Cbor {
    match content {
        Content::Bytes(b) => Cbor::Bytes(b.clone()),
        Content::Json(v) => json_to_cbor(v),
    }
}

fn json_to_cbor(v: &Value) -> Cbor {
    match v {
        Value::Null => Cbor::Null,
        Value::Bool(b) => Cbor::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Cbor::Integer(i.into())
            } else if let Some(u) = n.as_u64() {
                Cbor::Integer(u.into())
            } else {
                Cbor::Float(n.as_f64().expect("a JSON number is i64, u64 or f64"))
            }
        }
        Value::String(s) => Cbor::Text(s.clone()),
        Value::Array(a) => Cbor::Array(a.iter().map(json_to_cbor).collect()),
        Value::Object(o) => Cbor::Map(
            o.iter()
                .map(|(k, v)| (Cbor::Text(k.clone()), json_to_cbor(v)))
                .collect(),
        ),
    }
}

/// What the decoder needs from a parsed document, so JSON and CBOR share one decoder.
trait Node: Sized {
    fn kind(&self) -> &'static str;
    fn entries(&self) -> Option<Vec<(&str, &Self)>>;
    fn text(&self) -> Option<&str>;
    fn boolean(&self) -> Option<bool>;
    fn items(&self) -> Option<&[Self]>;
    /// `field` names the part in an error; it is only called when there is one.
    fn content(&self, field: impl FnOnce() -> String) -> Result<Content, ValidationError>;
}

impl Node for Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
    fn entries(&self) -> Option<Vec<(&str, &Self)>> {
        self.as_object()
            .map(|o| o.iter().map(|(k, v)| (k.as_str(), v)).collect())
    }
    fn text(&self) -> Option<&str> {
        self.as_str()
    }
    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }
    fn items(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
    fn content(&self, _field: impl FnOnce() -> String) -> Result<Content, ValidationError> {
        Ok(Content::Json(self.clone()))
    }
}

impl Node for Cbor {
    fn kind(&self) -> &'static str {
        match self {
            Cbor::Null => "null",
            Cbor::Bool(_) => "a boolean",
            Cbor::Integer(_) | Cbor::Float(_) => "a number",
            Cbor::Text(_) => "a text string",
            Cbor::Bytes(_) => "a byte string",
            Cbor::Array(_) => "an array",
            Cbor::Map(_) => "a map",
            Cbor::Tag(..) => "a tagged item",
            _ => "an unsupported CBOR item",
        }
    }
    fn entries(&self) -> Option<Vec<(&str, &Self)>> {
        let map = self.as_map()?;
        // A map with a non-text key cannot be an NLIP message; report it as "not a map".
        map.iter()
            .map(|(k, v)| k.as_text().map(|k| (k, v)))
            .collect()
    }
    fn text(&self) -> Option<&str> {
        self.as_text()
    }
    fn boolean(&self) -> Option<bool> {
        self.as_bool()
    }
    fn items(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
    fn content(&self, field: impl FnOnce() -> String) -> Result<Content, ValidationError> {
        match self {
            Cbor::Bytes(b) => Ok(Content::Bytes(b.clone())),
            other => cbor_to_json(other, 0)
                .map(Content::Json)
                .map_err(|problem| ValidationError::new(field(), problem)),
        }
    }
}

/// JSON has no byte strings, non-text keys, NaN or 128-bit integers; those are refused
/// (nested byte strings become base64, as the text binding carries them).
fn cbor_to_json(v: &Cbor, depth: usize) -> Result<Value, String> {
    if depth > 128 {
        return Err("content is nested more than 128 levels deep".into());
    }
    Ok(match v {
        Cbor::Null => Value::Null,
        Cbor::Bool(b) => Value::Bool(*b),
        Cbor::Integer(i) => {
            let i = i128::from(*i);
            if let Ok(i) = i64::try_from(i) {
                Value::from(i)
            } else if let Ok(u) = u64::try_from(i) {
                Value::from(u)
            } else {
                return Err(format!("integer {i} does not fit in 64 bits"));
            }
        }
        Cbor::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("number {f} has no JSON form"))?,
        Cbor::Text(s) => Value::String(s.clone()),
        Cbor::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Cbor::Array(a) => Value::Array(
            a.iter()
                .map(|x| cbor_to_json(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Cbor::Map(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let k = k
                    .as_text()
                    .ok_or("content has a map key that is not a text string")?;
                out.insert(k.to_owned(), cbor_to_json(v, depth + 1)?);
            }
            Value::Object(out)
        }
        Cbor::Tag(_, inner) => cbor_to_json(inner, depth + 1)?,
        _ => return Err("content holds an unsupported CBOR item".into()),
    })
}

/// The fields of one part, looked up case-insensitively.
struct Fields<'a, N> {
    part: Part,
    entries: Vec<(&'a str, &'a N)>,
}

impl<'a, N: Node> Fields<'a, N> {
    fn of(node: &'a N, part: Part) -> Result<Self, ValidationError> {
        let entries = node
            .entries()
            .ok_or_else(|| not_an_object(part, node.kind()))?;
        Ok(Fields { part, entries })
    }

    fn path(&self, name: &str) -> String {
        self.part.field(name)
    }

    fn get(&self, name: &str) -> Result<Option<&'a N>, ValidationError> {
        let mut found = None;
        for (k, v) in &self.entries {
            if k.eq_ignore_ascii_case(name) {
                if found.is_some() {
                    return Err(ValidationError::new(
                        self.path(name),
                        "appears more than once (keys are case-insensitive)",
                    ));
                }
                found = Some(*v);
            }
        }
        Ok(found)
    }

    fn required(&self, name: &str) -> Result<&'a N, ValidationError> {
        self.get(name)?
            .ok_or_else(|| ValidationError::new(self.path(name), "is required"))
    }

    fn opt_text(&self, name: &str) -> Result<Option<String>, ValidationError> {
        match self.get(name)? {
            None => Ok(None),
            Some(v) => v.text().map(|s| Some(s.to_owned())).ok_or_else(|| {
                ValidationError::new(
                    self.path(name),
                    format!("must be a string, found {}", v.kind()),
                )
            }),
        }
    }

    fn format(&self) -> Result<Format, ValidationError> {
        let v = self.required("format")?;
        let s = v.text().ok_or_else(|| {
            ValidationError::new(
                self.path("format"),
                format!("must be a string, found {}", v.kind()),
            )
        })?;
        Format::parse(s).ok_or_else(|| {
            ValidationError::new(self.path("format"), format!("{s:?} is not an NLIP format"))
                .allowed("text, token, structured, binary, location, generic")
        })
    }

    fn subformat(&self, format: Format) -> Result<String, ValidationError> {
        let v = self.required("subformat")?;
        v.text().map(str::to_owned).ok_or_else(|| {
            ValidationError::new(
                self.path("subformat"),
                format!("must be a string, found {}", v.kind()),
            )
            .allowed(subformat_rule(format))
        })
    }

    fn content(&self) -> Result<Content, ValidationError> {
        self.required("content")?.content(|| self.path("content"))
    }
}

/// The error for a part that is not an object (map).
fn not_an_object(part: Part, kind: &str) -> ValidationError {
    ValidationError::new(
        part.describe(),
        format!("must be an object with text keys, found {kind}"),
    )
}

fn decode_message<N: Node>(node: &N) -> Result<Message, ValidationError> {
    decode_fields(Fields::of(node, Part::Message)?)
}

fn decode_fields<N: Node>(f: Fields<'_, N>) -> Result<Message, ValidationError> {
    let mut messagetype = f.opt_text("messagetype")?;
    // Pre-standard clients say `control: true` instead of `messagetype: control`.
    if let Some(control) = f.get("control")? {
        match control.boolean() {
            Some(true) => messagetype = Some(CONTROL.to_owned()),
            Some(false) => {}
            None => {
                return Err(ValidationError::new(
                    "control",
                    format!("must be a boolean, found {}", control.kind()),
                ));
            }
        }
    }
    let format = f.format()?;
    let subformat = f.subformat(format)?;
    let content = f.content()?;
    let label = f.opt_text("label")?;
    let submessages = match f.get("submessages")? {
        None => Vec::new(),
        Some(v) => {
            let items = v.items().ok_or_else(|| {
                ValidationError::new(
                    "submessages",
                    format!("must be an array, found {}", v.kind()),
                )
            })?;
            items
                .iter()
                .enumerate()
                .map(|(i, item)| decode_submessage(item, Part::Sub(i)))
                .collect::<Result<_, _>>()?
        }
    };
    let message = Message {
        messagetype,
        format,
        subformat,
        content,
        label,
        submessages,
    };
    validate(&message)?;
    Ok(message)
}

fn decode_submessage<N: Node>(node: &N, part: Part) -> Result<Submessage, ValidationError> {
    let f = Fields::of(node, part)?;
    let format = f.format()?;
    Ok(Submessage {
        label: f.opt_text("label")?,
        format,
        subformat: f.subformat(format)?,
        content: f.content()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TokenKind;
    use serde_json::json;

    #[test]
    fn keys_and_values_are_case_insensitive_and_output_is_lowercase() {
        let m = from_json_value(&json!({
            "MessageType": "Control", "FORMAT": "Text", "SubFormat": "English", "Content": "hi",
            "Submessages": [{"Label": "x", "Format": "TOKEN", "Subformat": "conversation_7", "Content": "c1"}]
        }))
        .expect("valid");
        assert!(m.is_control());
        assert_eq!(m.format, Format::Text);
        assert_eq!(m.submessages[0].token_kind(), Some(TokenKind::Conversation));
        assert_eq!(
            to_json_value(&m),
            json!({"messagetype": "Control", "format": "text", "subformat": "English", "content": "hi",
                   "submessages": [{"label": "x", "format": "token", "subformat": "conversation_7", "content": "c1"}]})
        );
    }

    #[test]
    fn legacy_control_flag_and_error_format_are_accepted() {
        let m = from_json_value(
            &json!({"control": true, "format": "error", "subformat": "x", "content": "boom"}),
        )
        .expect("valid");
        assert!(m.is_control());
        assert_eq!(m.format, Format::Error);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!([1]), "message", "must be an object"),
            (
                json!({"format": "text", "subformat": "english"}),
                "content",
                "is required",
            ),
            (
                json!({"format": "video", "subformat": "x", "content": 1}),
                "format",
                "not an NLIP format",
            ),
            (
                json!({"format": "text", "subformat": 7, "content": "x"}),
                "subformat",
                "must be a string",
            ),
            (
                json!({"format": "text", "Format": "text", "subformat": "english", "content": "x"}),
                "format",
                "more than once",
            ),
            (
                json!({"format": "text", "subformat": "english", "content": "x", "submessages": {}}),
                "submessages",
                "must be an array",
            ),
            (
                json!({"format": "text", "subformat": "english", "content": "x", "submessages": [{"format": "text"}]}),
                "submessages[0].subformat",
                "is required",
            ),
            (
                json!({"format": "text", "subformat": "english", "content": "x", "submessages": [
                    {"format": "token", "subformat": "conversation", "content": "c"}, "nope"]}),
                "submessages[1]",
                "must be an object",
            ),
            (
                json!({"format": "text", "subformat": "english", "content": "x", "submessages": [
                    {"format": "location", "subformat": "text", "content": 3}]}),
                "submessages[0].content",
                "location/text content must be a string",
            ),
            (
                json!({"format": "text", "subformat": "english", "content": 5}),
                "content",
                "text content must be a string",
            ),
            (
                json!({"format": "text", "subformat": "english", "content": "x", "control": "yes"}),
                "control",
                "must be a boolean",
            ),
        ];
        for (input, field, problem) in cases {
            let err = from_json_value(&input).expect_err("invalid");
            assert_eq!(err.field, field, "{input}");
            assert!(err.problem.contains(problem), "{input}: {err}");
        }
    }

    #[test]
    fn json_bytes_that_are_no_message_object_say_what_they_are() {
        let cases: [(&[u8], &str, &str); 6] = [
            (b"[1, {\"a\": 2}]", "message", "found an array"),
            (b"\"text\"", "message", "found a string"),
            (b"12.5", "message", "found a number"),
            (b"null", "message", "found null"),
            (
                br#"{"format": "text", "subformat": "english", "content": "a", "content": "b"}"#,
                "content",
                "more than once",
            ),
            (
                br#"{"format": "text", "subformat": "english", "content": "a", "submessages": [7]}"#,
                "submessages[0]",
                "found a number",
            ),
        ];
        for (bytes, field, problem) in cases {
            let text = String::from_utf8_lossy(bytes);
            match from_json_slice(bytes) {
                Err(DecodeError::Invalid(e)) => {
                    assert_eq!(e.field, field, "{text}");
                    assert!(e.problem.contains(problem), "{text}: {e}");
                }
                other => panic!("{text}: expected an invalid message, got {other:?}"),
            }
        }
        // A key with escapes is unescaped before it is matched.
        let escaped =
            from_json_slice(br#"{"form\u0061t": "text", "SubFormat": "english", "content": "hi"}"#)
                .expect("escaped keys decode");
        assert_eq!(escaped.format, Format::Text);
        assert!(matches!(
            from_json_slice(b"{\"format\": "),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn cbor_byte_strings_are_binary_content() {
        let m = Message::new(
            Format::Binary,
            "image/png",
            Content::Bytes(vec![0, 1, 2, 255]),
        );
        let back = from_cbor_slice(&to_cbor_vec(&m)).expect("round trip");
        assert_eq!(back, m);
        assert_eq!(to_json_value(&m)["content"], json!("AAEC/w=="));
        assert_eq!(
            to_json_vec(&m),
            serde_json::to_vec(&to_json_value(&m)).expect("json")
        );
    }

    #[test]
    fn cbor_decoding_reports_garbage_and_trailing_bytes() {
        assert!(matches!(
            from_cbor_slice(&[0xff, 0x00]),
            Err(DecodeError::Cbor(_))
        ));
        let mut bytes = to_cbor_vec(&Message::text("english", "hi"));
        bytes.push(0);
        let err = from_cbor_slice(&bytes).expect_err("trailing");
        assert!(err.to_string().contains("trailing"));
        let not_map = {
            let mut out = Vec::new();
            ciborium::ser::into_writer(&Cbor::Array(vec![]), &mut out).expect("write");
            out
        };
        assert!(
            from_cbor_slice(&not_map)
                .expect_err("array")
                .is_invalid_message()
        );
    }
}
