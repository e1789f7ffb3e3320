//! A plain reference decoder for the codec tests: a message read out of a tree that a
//! well-kept crate parsed (serde_json's `Value`, ciborium's `Value`), by looking its fields up
//! one after another in the order the codec checks them. Of the crate it uses only the rules
//! a decoder applies to what it found: [`Format::parse`], [`subformat_rule`] and [`validate`].
//!
//! The production readers make one pass over the bytes and keep no tree; the tests hold them
//! to this: the same message, or the same first error, for the same document.

use base64::Engine as _;
use parley_nlip::validate::subformat_rule;
use parley_nlip::{
    Content, DecodeError, Format, Message, Submessage, ValidationError, from_cbor_slice, validate,
};

/// How deep CBOR content may nest once it is JSON.
const MAX_CONTENT_DEPTH: usize = 128;

/// A parsed document, as the reference decoder looks at it.
pub trait Tree: Sized {
    /// What the value is, in the words of its encoding ("a string", "a text string").
    fn kind(&self) -> &'static str;
    /// The entries of a map whose keys are all text; `None` for anything else.
    fn entries(&self) -> Option<Vec<(&str, &Self)>>;
    fn text(&self) -> Option<&str>;
    fn boolean(&self) -> Option<bool>;
    fn items(&self) -> Option<&[Self]>;
    /// The value as a part's content, or why it cannot be content.
    fn content(&self) -> Result<Content, String>;
}

impl Tree for serde_json::Value {
    fn kind(&self) -> &'static str {
        use serde_json::Value as J;
        match self {
            J::Null => "null",
            J::Bool(_) => "a boolean",
            J::Number(_) => "a number",
            J::String(_) => "a string",
            J::Array(_) => "an array",
            J::Object(_) => "an object",
        }
    }
    fn entries(&self) -> Option<Vec<(&str, &Self)>> {
        let map = self.as_object()?;
        Some(map.iter().map(|(k, v)| (k.as_str(), v)).collect())
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
    fn content(&self) -> Result<Content, String> {
        Ok(Content::Json(self.clone()))
    }
}

impl Tree for ciborium::Value {
    fn kind(&self) -> &'static str {
        use ciborium::Value as C;
        match self {
            C::Null => "null",
            C::Bool(_) => "a boolean",
            C::Integer(_) | C::Float(_) => "a number",
            C::Text(_) => "a text string",
            C::Bytes(_) => "a byte string",
            C::Array(_) => "an array",
            C::Map(_) => "a map",
            C::Tag(..) => "a tagged item",
            other => panic!("ciborium read an item the reference does not know: {other:?}"),
        }
    }
    fn entries(&self) -> Option<Vec<(&str, &Self)>> {
        let map = self.as_map()?;
        map.iter().map(|(k, v)| Some((k.as_text()?, v))).collect()
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
    fn content(&self) -> Result<Content, String> {
        match self {
            ciborium::Value::Bytes(bytes) => Ok(Content::Bytes(bytes.clone())),
            other => json_of(other, 0).map(Content::Json),
        }
    }
}

/// CBOR content as JSON, `level` below the content itself. JSON has no byte strings, non-text
/// keys, NaN or 128-bit integers: nested byte strings become base64, the rest is refused;
/// tags are dropped, and count as a level.
fn json_of(value: &ciborium::Value, level: usize) -> Result<serde_json::Value, String> {
    use ciborium::Value as C;
    use serde_json::Value as J;
    if level > MAX_CONTENT_DEPTH {
        return Err(format!(
            "content is nested more than {MAX_CONTENT_DEPTH} levels deep"
        ));
    }
    Ok(match value {
        C::Null => J::Null,
        C::Bool(b) => J::Bool(*b),
        C::Integer(i) => {
            let i = i128::from(*i);
            if let Ok(i) = i64::try_from(i) {
                J::from(i)
            } else if let Ok(u) = u64::try_from(i) {
                J::from(u)
            } else {
                return Err(format!("integer {i} does not fit in 64 bits"));
            }
        }
        C::Float(f) => serde_json::Number::from_f64(*f)
            .map(J::Number)
            .ok_or_else(|| format!("number {f} has no JSON form"))?,
        C::Text(s) => J::String(s.clone()),
        C::Bytes(b) => J::String(base64::engine::general_purpose::STANDARD.encode(b)),
        C::Array(items) => J::Array(
            items
                .iter()
                .map(|item| json_of(item, level + 1))
                .collect::<Result<_, _>>()?,
        ),
        C::Map(entries) => {
            let mut map = serde_json::Map::new();
            for (k, v) in entries {
                let k = k
                    .as_text()
                    .ok_or("content has a map key that is not a text string")?;
                map.insert(k.to_owned(), json_of(v, level + 1)?);
            }
            J::Object(map)
        }
        C::Tag(_, inner) => json_of(inner, level + 1)?,
        other => panic!("ciborium read an item the reference does not know: {other:?}"),
    })
}

/// The message in `tree`, validated.
pub fn decode<T: Tree>(tree: &T) -> Result<Message, ValidationError> {
    let part = Part(None);
    let entries = part.entries(tree)?;
    let mut messagetype = part.string(&entries, "messagetype")?;
    // The legacy flag: `control: true` makes a control message.
    if let Some(flag) = part.lookup(&entries, "control")? {
        match flag.boolean() {
            Some(true) => messagetype = Some("control".to_owned()),
            Some(false) => {}
            None => return Err(part.wrong_kind("control", "a boolean", flag)),
        }
    }
    let format = part.format(&entries)?;
    let subformat = part.subformat(&entries, format)?;
    let content = part.content(&entries)?;
    let label = part.string(&entries, "label")?;
    let submessages = match part.lookup(&entries, "submessages")? {
        None => Vec::new(),
        Some(list) => list
            .items()
            .ok_or_else(|| part.wrong_kind("submessages", "an array", list))?
            .iter()
            .enumerate()
            .map(|(i, item)| decode_submessage(item, Part(Some(i))))
            .collect::<Result<_, _>>()?,
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

/// A submessage knows no message type, control flag or submessages: those keys are ignored.
fn decode_submessage<T: Tree>(tree: &T, part: Part) -> Result<Submessage, ValidationError> {
    let entries = part.entries(tree)?;
    let format = part.format(&entries)?;
    let label = part.string(&entries, "label")?;
    let subformat = part.subformat(&entries, format)?;
    let content = part.content(&entries)?;
    Ok(Submessage {
        label,
        format,
        subformat,
        content,
    })
}

/// The message (`None`) or one submessage, for the paths that errors name.
#[derive(Clone, Copy)]
struct Part(Option<usize>);

impl Part {
    fn path(self, name: &str) -> String {
        match self.0 {
            None => name.to_owned(),
            Some(i) => format!("submessages[{i}].{name}"),
        }
    }

    fn entries<T: Tree>(self, tree: &T) -> Result<Vec<(&str, &T)>, ValidationError> {
        tree.entries().ok_or_else(|| {
            let part = self
                .0
                .map_or("message".to_owned(), |i| format!("submessages[{i}]"));
            ValidationError::new(
                part,
                format!("must be an object with text keys, found {}", tree.kind()),
            )
        })
    }

    /// The one value under `name`, whose key is `name` in any ASCII capitalization.
    fn lookup<'a, T>(
        self,
        entries: &[(&str, &'a T)],
        name: &str,
    ) -> Result<Option<&'a T>, ValidationError> {
        let mut values = entries
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|&(_, value)| value);
        match (values.next(), values.next()) {
            (_, Some(_)) => Err(ValidationError::new(
                self.path(name),
                "appears more than once (keys are case-insensitive)",
            )),
            (value, None) => Ok(value),
        }
    }

    fn required<'a, T>(
        self,
        entries: &[(&str, &'a T)],
        name: &str,
    ) -> Result<&'a T, ValidationError> {
        self.lookup(entries, name)?
            .ok_or_else(|| ValidationError::new(self.path(name), "is required"))
    }

    fn wrong_kind<T: Tree>(self, name: &str, wanted: &str, value: &T) -> ValidationError {
        ValidationError::new(
            self.path(name),
            format!("must be {wanted}, found {}", value.kind()),
        )
    }

    fn string<T: Tree>(
        self,
        entries: &[(&str, &T)],
        name: &str,
    ) -> Result<Option<String>, ValidationError> {
        let Some(value) = self.lookup(entries, name)? else {
            return Ok(None);
        };
        match value.text() {
            Some(text) => Ok(Some(text.to_owned())),
            None => Err(self.wrong_kind(name, "a string", value)),
        }
    }

    fn format<T: Tree>(self, entries: &[(&str, &T)]) -> Result<Format, ValidationError> {
        let value = self.required(entries, "format")?;
        let text = value
            .text()
            .ok_or_else(|| self.wrong_kind("format", "a string", value))?;
        Format::parse(text).ok_or_else(|| {
            ValidationError::new(
                self.path("format"),
                format!("{text:?} is not an NLIP format"),
            )
            .allowed("text, token, structured, binary, location, generic")
        })
    }

    fn subformat<T: Tree>(
        self,
        entries: &[(&str, &T)],
        format: Format,
    ) -> Result<String, ValidationError> {
        let value = self.required(entries, "subformat")?;
        let text = value.text().ok_or_else(|| {
            self.wrong_kind("subformat", "a string", value)
                .allowed(subformat_rule(format))
        })?;
        Ok(text.to_owned())
    }

    fn content<T: Tree>(self, entries: &[(&str, &T)]) -> Result<Content, ValidationError> {
        self.required(entries, "content")?
            .content()
            .map_err(|problem| ValidationError::new(self.path("content"), problem))
    }
}

/// Where [`from_cbor_slice`] and the reference disagree on `bytes`, if they do. When ciborium
/// reads one item and nothing after it, the message must be the one the reference decodes
/// from that item, or the error the same; otherwise the bytes are malformed CBOR.
pub fn cbor_disagreement(bytes: &[u8]) -> Option<String> {
    let ours = from_cbor_slice(bytes);
    let mut rest = bytes;
    let reference = match ciborium::from_reader::<ciborium::Value, _>(&mut rest) {
        Ok(item) if rest.is_empty() => Some(decode(&item)),
        _ => None,
    };
    let agree = match (&ours, &reference) {
        (Ok(ours), Some(Ok(reference))) => ours == reference,
        (Err(DecodeError::Invalid(ours)), Some(Err(reference))) => ours == reference,
        (Err(DecodeError::Cbor(_)), None) => true,
        _ => false,
    };
    (!agree).then(|| format!("{bytes:02x?}: {ours:?}, but the reference makes {reference:?}"))
}
