//! JSON and CBOR (RFC 8949) codecs.
//!
//! Decoding is lenient where real peers differ (key capitalization, the legacy
//! `control: true`, unknown keys ignored) and strict where meaning is at stake (missing
//! or ill-typed required fields, duplicate keys that differ only in case). Encoding is
//! canonical: lowercase keys, absent fields omitted, submessages omitted when empty.
//!
//! Three readers share one set of checks. JSON and CBOR bytes, on every request's path, are
//! each read in a single pass, by the serde visitors of the private `json` module and by the
//! head-by-head reader of `cbor`; parsed JSON values go through the `Node` trait. All of
//! them classify each key of a part once into a `Found`, whose checks then run in a fixed
//! order, so that the same document gets the same message or the same first error from any
//! of them. `json` and `cbor` also write their bytes directly.

mod cbor;
mod json;

use std::borrow::Cow;

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

/// Decodes a JSON message (any key capitalization) and validates it. Malformed JSON
/// anywhere in the document is [`DecodeError::Json`], whatever else is wrong with it.
pub fn from_json_slice(bytes: &[u8]) -> Result<Message, DecodeError> {
    json::read_message(bytes)
}

/// Builds a message from an already parsed JSON value and validates it.
pub fn from_json_value(value: &Value) -> Result<Message, ValidationError> {
    decode_message(value)
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
    json::write_message(&mut out, message);
    out
}

/// Canonical CBOR bytes; binary content becomes a CBOR byte string (ECMA-432 §9).
pub fn to_cbor_vec(message: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    cbor::write_message(&mut out, message);
    out
}

/// What the generic decoder needs from a parsed document: a JSON value (and, in the tests,
/// the CBOR reader's item tree).
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

fn decode_message<N: Node>(node: &N) -> Result<Message, ValidationError> {
    Found::in_node(node, Part::Message)?.into_message()
}

fn decode_submessage<N: Node>(node: &N, part: Part) -> Result<Submessage, ValidationError> {
    Found::in_node(node, part)?.into_submessage()
}

/// A field of a message or of a submessage, as both decoders recognize keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    MessageType,
    Control,
    Format,
    Subformat,
    Content,
    Label,
    Submessages,
}

impl Field {
    const ALL: [Field; 7] = [
        Field::MessageType,
        Field::Control,
        Field::Format,
        Field::Subformat,
        Field::Content,
        Field::Label,
        Field::Submessages,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::MessageType => "messagetype",
            Field::Control => "control",
            Field::Format => "format",
            Field::Subformat => "subformat",
            Field::Content => "content",
            Field::Label => "label",
            Field::Submessages => "submessages",
        }
    }

    /// The field a key names in `part`, in any capitalization; `None` for an unknown key.
    /// A submessage has no message type, control flag or submessages of its own: those
    /// keys are unknown there, and ignored like any other.
    fn of(key: &str, part: Part) -> Option<Field> {
        // Every key of every message comes through here, so the names are told apart by
        // length first: one or two comparisons per key instead of up to seven.
        let candidates: &[Field] = match (key.len(), part) {
            (5, _) => &[Field::Label],
            (6, _) => &[Field::Format],
            // Content first: every message has it, the legacy control flag is rare.
            (7, Part::Message) => &[Field::Content, Field::Control],
            (7, Part::Sub(_)) => &[Field::Content],
            (9, _) => &[Field::Subformat],
            (11, Part::Message) => &[Field::MessageType, Field::Submessages],
            _ => &[],
        };
        candidates.iter().copied().find(|f| f.is_named(key))
    }

    /// `key` is the field's name in any capitalization. A name is lowercase ASCII letters
    /// only, so a key's byte matches when it equals the name's once its lowercase bit (0x20)
    /// is set: `eq_ignore_ascii_case`, in fewer instructions.
    fn is_named(self, key: &str) -> bool {
        let name = self.name();
        name.len() == key.len() && name.bytes().zip(key.bytes()).all(|(n, k)| (k | 0x20) == n)
    }
}

/// A value of the type a field wants, or the kind of value found instead (in the words of
/// [`Node::kind`]), for the error message.
type Kinded<T> = Result<T, &'static str>;

/// A field that should hold a string.
type Text<'a> = Kinded<Cow<'a, str>>;

/// What a part's key-by-key pass found under one field.
///
/// `get`, `required` and the `*_field` checks below are `inline(always)`: as calls, moving
/// their large `Result`s in and out cost almost a tenth of decoding a small message.
enum Slot<T> {
    Absent,
    Once(T),
    /// The key appeared more than once, in any capitalization.
    Repeated,
}

impl<T> Slot<T> {
    fn put(&mut self, value: T) {
        *self = match self {
            Slot::Absent => Slot::Once(value),
            Slot::Once(_) | Slot::Repeated => Slot::Repeated,
        };
    }

    #[inline(always)]
    fn get(self, part: Part, field: Field) -> Result<Option<T>, ValidationError> {
        match self {
            Slot::Absent => Ok(None),
            Slot::Once(value) => Ok(Some(value)),
            Slot::Repeated => Err(ValidationError::new(
                part.field(field.name()),
                "appears more than once (keys are case-insensitive)",
            )),
        }
    }

    /// Back to absent if the key appeared once (for the JSON reader's submessages).
    fn forget(&mut self) {
        if let Slot::Once(_) = self {
            *self = Slot::Absent;
        }
    }

    #[inline(always)]
    fn required(self, part: Part, field: Field) -> Result<T, ValidationError> {
        self.get(part, field)?
            .ok_or_else(|| ValidationError::new(part.field(field.name()), "is required"))
    }
}

/// The fields of one part (the message, or one submessage), as a single pass over its keys
/// found them: each key is classified once, and a value of the wrong type is recorded as the
/// kind it is rather than refused on the spot. The checks then run in one fixed order, in
/// [`Found::into_message`] and [`Found::into_submessage`], so that a part with several
/// problems reports the same one whatever order its keys come in and whichever decoder read
/// it ([`Found::in_node`] for parsed JSON values and CBOR items, the JSON reader in
/// [`json`] straight from the bytes).
struct Found<'a> {
    part: Part,
    messagetype: Slot<Text<'a>>,
    control: Slot<Result<bool, &'static str>>,
    format: Slot<Text<'a>>,
    subformat: Slot<Text<'a>>,
    /// Only CBOR content can fail to convert.
    content: Slot<Result<Content, ValidationError>>,
    label: Slot<Text<'a>>,
    /// Decoded when found; a submessage's problems come after all of the message's own.
    submessages: Slot<Result<Vec<Submessage>, ValidationError>>,
}

impl<'a> Found<'a> {
    fn new(part: Part) -> Self {
        Found {
            part,
            messagetype: Slot::Absent,
            control: Slot::Absent,
            format: Slot::Absent,
            subformat: Slot::Absent,
            content: Slot::Absent,
            label: Slot::Absent,
            submessages: Slot::Absent,
        }
    }

    fn forget(&mut self, field: Field) {
        match field {
            Field::MessageType => self.messagetype.forget(),
            Field::Control => self.control.forget(),
            Field::Format => self.format.forget(),
            Field::Subformat => self.subformat.forget(),
            Field::Content => self.content.forget(),
            Field::Label => self.label.forget(),
            Field::Submessages => self.submessages.forget(),
        }
    }

    /// The pass over a parsed JSON value or CBOR item. Content and submessages are converted
    /// as they are found; their errors wait for their turn like any other.
    fn in_node<N: Node>(node: &'a N, part: Part) -> Result<Self, ValidationError> {
        let entries = node
            .entries()
            .ok_or_else(|| not_an_object(part, node.kind()))?;
        let mut found = Found::new(part);
        for (key, value) in entries {
            let Some(field) = Field::of(key, part) else {
                continue;
            };
            let text = || value.text().map(Cow::Borrowed).ok_or_else(|| value.kind());
            match field {
                Field::MessageType => found.messagetype.put(text()),
                Field::Control => found
                    .control
                    .put(value.boolean().ok_or_else(|| value.kind())),
                Field::Format => found.format.put(text()),
                Field::Subformat => found.subformat.put(text()),
                Field::Content => found.content.put(value.content(|| part.field("content"))),
                Field::Label => found.label.put(text()),
                Field::Submessages => found.submessages.put(match value.items() {
                    None => Err(not_an_array(part, Field::Submessages, value.kind())),
                    Some(items) => items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| decode_submessage(item, Part::Sub(i)))
                        .collect(),
                }),
            }
        }
        Ok(found)
    }

    /// Checks the fields in order and builds the message, which must then pass [`validate`].
    fn into_message(self) -> Result<Message, ValidationError> {
        let part = self.part;
        let mut messagetype = text_field(self.messagetype, part, Field::MessageType)?;
        // Pre-standard clients say `control: true` instead of `messagetype: control`.
        match self.control.get(part, Field::Control)? {
            None | Some(Ok(false)) => {}
            Some(Ok(true)) => messagetype = Some(CONTROL.to_owned()),
            Some(Err(kind)) => {
                return Err(ValidationError::new(
                    part.field("control"),
                    format!("must be a boolean, found {kind}"),
                ));
            }
        }
        let format = format_field(self.format, part)?;
        let subformat = subformat_field(self.subformat, part, format)?;
        let content = self.content.required(part, Field::Content)??;
        let label = text_field(self.label, part, Field::Label)?;
        let submessages = self
            .submessages
            .get(part, Field::Submessages)?
            .transpose()?
            .unwrap_or_default();
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

    /// Checks a submessage's fields in order; [`validate`] checks it with its message.
    fn into_submessage(self) -> Result<Submessage, ValidationError> {
        let part = self.part;
        let format = format_field(self.format, part)?;
        let label = text_field(self.label, part, Field::Label)?;
        let subformat = subformat_field(self.subformat, part, format)?;
        let content = self.content.required(part, Field::Content)??;
        Ok(Submessage {
            label,
            format,
            subformat,
            content,
        })
    }
}

/// An optional string field.
#[inline(always)]
fn text_field(
    slot: Slot<Text<'_>>,
    part: Part,
    field: Field,
) -> Result<Option<String>, ValidationError> {
    match slot.get(part, field)? {
        None => Ok(None),
        Some(text) => text
            .map(|s| Some(s.into_owned()))
            .map_err(|kind| not_a_string(part, field, kind)),
    }
}

#[inline(always)]
fn format_field(slot: Slot<Text<'_>>, part: Part) -> Result<Format, ValidationError> {
    let s = slot
        .required(part, Field::Format)?
        .map_err(|kind| not_a_string(part, Field::Format, kind))?;
    Format::parse(&s).ok_or_else(|| {
        ValidationError::new(part.field("format"), format!("{s:?} is not an NLIP format"))
            .allowed("text, token, structured, binary, location, generic")
    })
}

#[inline(always)]
fn subformat_field(
    slot: Slot<Text<'_>>,
    part: Part,
    format: Format,
) -> Result<String, ValidationError> {
    slot.required(part, Field::Subformat)?
        .map(Cow::into_owned)
        .map_err(|kind| not_a_string(part, Field::Subformat, kind).allowed(subformat_rule(format)))
}

fn not_a_string(part: Part, field: Field, kind: &str) -> ValidationError {
    ValidationError::new(
        part.field(field.name()),
        format!("must be a string, found {kind}"),
    )
}

fn not_an_array(part: Part, field: Field, kind: &str) -> ValidationError {
    ValidationError::new(
        part.field(field.name()),
        format!("must be an array, found {kind}"),
    )
}

/// The error for a part that is not an object (map).
fn not_an_object(part: Part, kind: &str) -> ValidationError {
    ValidationError::new(
        part.describe(),
        format!("must be an object with text keys, found {kind}"),
    )
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
            ciborium::ser::into_writer(&ciborium::Value::Array(vec![]), &mut out).expect("write");
            out
        };
        assert!(
            from_cbor_slice(&not_map)
                .expect_err("array")
                .is_invalid_message()
        );
    }

    #[test]
    fn every_field_is_recognized_in_any_capitalization_where_it_belongs() {
        let submessage_fields = [
            Field::Format,
            Field::Subformat,
            Field::Content,
            Field::Label,
        ];
        for field in Field::ALL {
            let name = field.name();
            let capitalized = name[..1].to_uppercase() + &name[1..];
            for key in [name.to_owned(), name.to_uppercase(), capitalized] {
                assert_eq!(Field::of(&key, Part::Message), Some(field), "{key}");
                let in_sub = submessage_fields.contains(&field).then_some(field);
                assert_eq!(Field::of(&key, Part::Sub(3)), in_sub, "{key}");
            }
        }
        for key in [
            "",
            "formats",
            "forma",
            "f0rmat",
            "ſubformat",
            "KONTENT",
            "label ",
            "@ontrol",
        ] {
            assert_eq!(Field::of(key, Part::Message), None, "{key:?}");
        }
    }

    #[test]
    fn json_bytes_and_parsed_values_decode_alike_errors_included() {
        let docs = [
            r#"{"content": "a", "CONTENT": "b"}"#,
            r#"{"Submessages": 5, "subformat": 7, "format": "text", "content": "x"}"#,
            r#"{"control": "yes", "messagetype": 5}"#,
            r#"{"MessageType": "x", "messageTYPE": "y", "format": 7}"#,
            r#"{"format": "text", "subformat": "english", "content": 5,
                "submessages": [{"format": "token"}]}"#,
            r#"{"format": "location", "subformat": "gps", "content": {"lat": 1, "lon": 2},
                "label": 7}"#,
            r#"{"messagetype": "", "format": "text", "subformat": "english", "content": "x"}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "control": true,
                "Label": "l", "unknown": {"deep": [1, 2, {"x": null}]}}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "control": 1}"#,
            r#"{"format": "Text ", "SUBFORMAT": "en-US", "content": "x"}"#,
            r#"{"form\u0061t": "text", "subformat": "english", "content": "x"}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "submessages": null}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
                {"format": "token", "subformat": "a", "Subformat": "b", "content": "c"}]}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
                1, {"format": "video"}]}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
                {"format": "video"}, 1]}"#,
            r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
                {"format": "token", "subformat": "conversation", "content": "c",
                 "control": "x", "submessages": 1, "messagetype": 2},
                {"Label": "l", "format": "structured", "subformat": "json",
                 "content": {"a": [1, {"b": null}]}}]}"#,
            r#"{"format": "binary", "subformat": "image/png", "content": "not base64!"}"#,
        ];
        for doc in docs {
            let value: Value = serde_json::from_str(doc).expect("well-formed");
            match (from_json_slice(doc.as_bytes()), from_json_value(&value)) {
                (Ok(direct), Ok(generic)) => assert_eq!(direct, generic, "{doc}"),
                (Err(DecodeError::Invalid(direct)), Err(generic)) => {
                    assert_eq!(direct, generic, "{doc}");
                }
                (direct, generic) => panic!("{doc}: {direct:?} but {generic:?}"),
            }
        }
    }

    #[test]
    fn values_that_are_not_kept_must_still_be_well_formed() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let docs = [
            // Under an unknown key: out of range, a lone surrogate, nested too deep.
            r#"{"format": "text", "subformat": "english", "content": "x", "x": 1e400}"#.to_owned(),
            r#"{"format": "text", "subformat": "english", "content": "x", "x": "\ud800"}"#
                .to_owned(),
            format!(r#"{{"format": "text", "subformat": "english", "content": "x", "x": {deep}}}"#),
            // In a field of the wrong type, or a submessage's unknown key.
            r#"{"format": "text", "subformat": [1e400], "content": "x"}"#.to_owned(),
            r#"{"format": "text", "subformat": "english", "content": "x",
                "submessages": [{"format": "token", "x": "\udfff"}]}"#
                .to_owned(),
            // A syntax error comes first, whatever else is wrong.
            r#"{"format": 7, "format": "text""#.to_owned(),
            r#"{"subformat": 7} x"#.to_owned(),
        ];
        for doc in docs {
            let result = from_json_slice(doc.as_bytes());
            assert!(
                matches!(result, Err(DecodeError::Json(_))),
                "{doc}: {result:?}"
            );
        }
        let invalid_utf8 = b"{\"format\": \"text\", \"subformat\": \"english\", \"content\": \"x\", \"x\": \"\xff\"}";
        assert!(matches!(
            from_json_slice(invalid_utf8),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn json_quirks_of_the_first_reader_are_kept() {
        // Submessages were read as `Value`s, in which a key repeated verbatim replaces the
        // earlier value; in the message itself any repeat is refused.
        let m = from_json_slice(
            br#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
                {"format": "token", "subformat": "a b", "subform\u0061t": "conversation",
                 "content": 1, "content": "c"}]}"#,
        )
        .expect("the last value counts");
        assert_eq!(m.submessages[0].subformat, "conversation");
        assert_eq!(m.submessages[0].content, Content::from("c"));
        let err = from_json_slice(
            br#"{"format": "text", "subformat": "english", "content": "x", "content": "x"}"#,
        )
        .expect_err("repeated");
        assert!(
            err.to_string().contains("content: appears more than once"),
            "{err}"
        );
        // A top-level array's items were skipped unchecked: it is not an object either way.
        for doc in [&b"[1e400]"[..], b"[\"\xff\"]"] {
            let err = from_json_slice(doc).expect_err("an array");
            assert!(err.to_string().contains("found an array"), "{err}");
        }
    }

    #[test]
    fn json_bytes_are_what_serde_json_writes_of_the_canonical_value() {
        let texts = [
            "",
            "plain",
            "exactly8",
            "say \"hi\" and \\ back",
            "\"\\\"\\\"\\\"\\\"\\",
            "tab\tnewline\ncarriage\rback\u{8}feed\u{c}nul\u{0}unit\u{1f}del\u{7f}",
            "päivää, 你好, 🦀, U+2028 \u{2028} and U+2029 \u{2029}",
            "0123456789abcdef0123456789abcdef\"",
        ];
        let mut messages = vec![Message::new(
            Format::Binary,
            "image/png",
            Content::Bytes(vec![0, 1, 2, 254, 255]),
        )];
        for t in texts {
            let mut m = Message::text("english", t)
                .with_messagetype(format!("x{t}"))
                .with_submessage(Submessage::new(Format::Token, "conversation", t).with_label(t))
                .with_submessage(Submessage::new(
                    Format::Generic,
                    "x",
                    json!({t: [t, 1, -2, 3.5, 1e300, u64::MAX, true, false, null, {}, []],
                           "n": {t: {"deeper": t}}}),
                ));
            m.label = Some(t.to_owned());
            messages.push(m);
            messages.push(Message::json(json!([t, {t: t}])).into_control());
        }
        for m in messages {
            let expected = serde_json::to_vec(&to_json_value(&m)).expect("json");
            let text = String::from_utf8_lossy(&expected);
            assert_eq!(to_json_vec(&m), expected, "{text}");
        }
    }
}
