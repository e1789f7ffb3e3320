//! What the JSON and CBOR readers share: how a key names a field ([`Field::of`]), what one
//! pass over a part's keys found ([`Found`]), and the checks that turn that into a message or
//! a submessage, in one fixed order. Both readers fill a `Found` as they go and leave every
//! decision to it, so the same document gets the same message, or the same first error, in
//! either encoding.

use std::borrow::Cow;

use crate::message::{CONTROL, Content, Format, Message, Submessage};
use crate::validate::{Part, ValidationError, subformat_rule, validate};

/// A field of a message or of a submessage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    MessageType,
    Control,
    Format,
    Subformat,
    Content,
    Label,
    Submessages,
}

impl Field {
    pub(super) const ALL: [Field; 7] = [
        Field::MessageType,
        Field::Control,
        Field::Format,
        Field::Subformat,
        Field::Content,
        Field::Label,
        Field::Submessages,
    ];

    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn of(key: &str, part: Part) -> Option<Field> {
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

/// A value of the type a field wants, or the kind of value found instead ("a number",
/// "an array", in the words of the encoding), for the error message.
pub(super) type Kinded<T> = Result<T, &'static str>;

/// A field that should hold a string.
pub(super) type Text<'a> = Kinded<Cow<'a, str>>;

/// What a part's key-by-key pass found under one field.
///
/// `get`, `required` and the `*_field` checks below are `inline(always)`: as calls, moving
/// their large `Result`s in and out costs almost a tenth of decoding a small message.
pub(super) enum Slot<T> {
    Absent,
    Once(T),
    /// The key appeared more than once, in any capitalization.
    Repeated,
}

impl<T> Slot<T> {
    pub(super) fn put(&mut self, value: T) {
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
/// problems reports the same one whatever order its keys come in and whichever encoding
/// carried it.
pub(super) struct Found<'a> {
    pub(super) part: Part,
    pub(super) messagetype: Slot<Text<'a>>,
    pub(super) control: Slot<Kinded<bool>>,
    pub(super) format: Slot<Text<'a>>,
    pub(super) subformat: Slot<Text<'a>>,
    /// Only CBOR content can fail to convert.
    pub(super) content: Slot<Result<Content, ValidationError>>,
    pub(super) label: Slot<Text<'a>>,
    /// Decoded when found; a submessage's problems come after all of the message's own.
    pub(super) submessages: Slot<Result<Vec<Submessage>, ValidationError>>,
}

impl<'a> Found<'a> {
    pub(super) fn new(part: Part) -> Self {
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

    /// Back to absent if `field`'s key appeared once (for the JSON reader's submessages).
    pub(super) fn forget(&mut self, field: Field) {
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

    /// Checks the fields in order and builds the message, which must then pass [`validate`].
    pub(super) fn into_message(self) -> Result<Message, ValidationError> {
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
    pub(super) fn into_submessage(self) -> Result<Submessage, ValidationError> {
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

pub(super) fn not_an_array(part: Part, field: Field, kind: &str) -> ValidationError {
    ValidationError::new(
        part.field(field.name()),
        format!("must be an array, found {kind}"),
    )
}

/// The error for a part that is not an object (map).
pub(super) fn not_an_object(part: Part, kind: &str) -> ValidationError {
    ValidationError::new(
        part.describe(),
        format!("must be an object with text keys, found {kind}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
