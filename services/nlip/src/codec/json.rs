//! The JSON reader: one serde pass over the document, from bytes or from a parsed
//! `serde_json::Value` (a deserializer too), without a `Value` of the message.
//!
//! Each key is classified as it is read ([`Field::of`]), string fields are borrowed from the
//! input where they need no unescaping, content is parsed into the `Value` that becomes the
//! message's content, unknown keys are skipped, and each submessage is read the same way as
//! it comes. What is found goes into a [`Found`], whose checks decide the message or the
//! error. Parsing the document into `Value`s first and copying fields out of them takes
//! almost twice the instructions for a small message.

pub(super) mod write;

use std::borrow::Cow;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess};
use serde_json::Value;

use super::DecodeError;
use super::fields::{Field, Found, Kinded, not_an_array, not_an_object};
use crate::message::{Content, Message, Submessage};
use crate::validate::{Part, ValidationError};

/// Decodes and validates a JSON message: syntax errors anywhere in the document first
/// ([`DecodeError::Json`]), then the first problem in the order of [`Found::into_message`].
pub(super) fn read_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    // serde_json checks each string of a byte slice for UTF-8 on its own, a sixth of the
    // cost of decoding a small message. A body that is UTF-8 as a whole (as all valid JSON
    // is) is checked once instead and parsed as a `str`, whose strings need no more checks;
    // anything else is parsed as bytes, and fails where its bytes are not UTF-8.
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

/// Decodes and validates a message from a parsed JSON value, with the same visitors as
/// [`read_message`]: the same message or the same first problem as from its bytes.
pub(super) fn read_value(value: &Value) -> Result<Message, ValidationError> {
    let mut found = Found::new(Part::Message);
    // A `Value` deserializer fails only when a visitor leaves an array or object unread, and
    // every visitor here reads them to their end.
    let top = Expect(PartOf(&mut found))
        .deserialize(value)
        .expect("every visitor reads a parsed value to its end");
    top.map_err(|kind| not_an_object(Part::Message, kind))?;
    found.into_message()
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
/// another type is no serde error: the field's error says what was found, and only after the
/// whole document has parsed. Everything is read through `deserialize_any`, as a `Value`
/// would be, so that the syntax accepted (UTF-8, escapes, number range, the nesting limit)
/// is exactly `Value`'s.
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
/// number range or nesting depth, and a document with a `1e400` or a lone surrogate under an
/// unknown key is malformed JSON like any other.
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
            // In a submessage, a key repeated with the very same spelling replaces the earlier
            // value, as it does in a JSON object parsed into a map (only spellings that differ
            // in case are two keys, and refused): the earlier value is forgotten. The message
            // itself refuses any repeat.
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
        // A message that is an array has its items skipped unchecked: one holding, say,
        // invalid UTF-8 is reported as not an object rather than as malformed JSON. A
        // submessage that is an array is checked like any other value.
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
            // The first submessage that fails is the error; the ones after it are still
            // read, for syntax errors.
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
