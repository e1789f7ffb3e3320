//! Format and subformat rules of ECMA-430 §5.3, with errors that name the field, the
//! problem and what is allowed.

use std::fmt;

use serde_json::Value;

use crate::message::{Content, Format, Message, Submessage};

/// Why a message is not a valid NLIP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Path of the offending field, e.g. `submessages[1].subformat`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
    /// What would have been accepted, when that can be said briefly.
    pub allowed: Option<String>,
}

impl ValidationError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        ValidationError {
            field: field.into(),
            problem: problem.into(),
            allowed: None,
        }
    }

    pub fn allowed(mut self, allowed: impl Into<String>) -> Self {
        self.allowed = Some(allowed.into());
        self
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)?;
        if let Some(allowed) = &self.allowed {
            write!(f, " (allowed: {allowed})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationError {}

/// The `<content>` part of a binary subformat. The standard's table names audio, image,
/// sensor and generic; its own examples use video, so video is accepted too.
pub const BINARY_CONTENT_KINDS: [&str; 5] = ["audio", "image", "video", "sensor", "generic"];

/// Checks a whole message, first submessage and every submessage.
pub fn validate(message: &Message) -> Result<(), ValidationError> {
    if let Some(t) = &message.messagetype
        && t.trim().is_empty()
    {
        return Err(ValidationError::new("messagetype", "must not be empty")
            .allowed("\"control\", or any other non-empty string for a data message"));
    }
    check_part(
        Part::Message,
        message.format,
        &message.subformat,
        &message.content,
        message.label.as_deref(),
    )?;
    for (i, sub) in message.submessages.iter().enumerate() {
        validate_submessage(Part::Sub(i), sub)?;
    }
    Ok(())
}

/// Which part of a message a field belongs to; error paths are only formatted on failure.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part {
    Message,
    Sub(usize),
}

impl Part {
    /// The path of one of the part's fields: `content`, `submessages[2].format`.
    pub(crate) fn field(self, name: &str) -> String {
        match self {
            Part::Message => name.to_owned(),
            Part::Sub(i) => format!("submessages[{i}].{name}"),
        }
    }

    /// The part itself: `message`, `submessages[2]`.
    pub(crate) fn describe(self) -> String {
        match self {
            Part::Message => "message".to_owned(),
            Part::Sub(i) => format!("submessages[{i}]"),
        }
    }
}

fn validate_submessage(prefix: Part, sub: &Submessage) -> Result<(), ValidationError> {
    check_part(
        prefix,
        sub.format,
        &sub.subformat,
        &sub.content,
        sub.label.as_deref(),
    )
}

fn check_part(
    prefix: Part,
    format: Format,
    subformat: &str,
    content: &Content,
    label: Option<&str>,
) -> Result<(), ValidationError> {
    check_subformat_and_label(prefix, format, subformat, label)?;
    let field = |name: &str| prefix.field(name);
    let sub = subformat.trim();
    let bad_subformat = |why: &str| {
        Err(ValidationError::new(
            field("subformat"),
            format!("{subformat:?} {why} for format {format}"),
        )
        .allowed(subformat_rule(format)))
    };
    match format {
        Format::Text => {
            if !sub
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' ' | '.'))
            {
                return bad_subformat("is not a language name");
            }
            require_string(|| field("content"), content, || "text".into())?;
        }
        Format::Token => {
            if sub.chars().any(char::is_whitespace) {
                return bad_subformat("contains white space");
            }
        }
        Format::Structured => {
            if sub.chars().any(char::is_whitespace) {
                return bad_subformat("contains white space");
            }
            let lower = sub.to_ascii_lowercase();
            if matches!(lower.as_str(), "uri" | "xml" | "html") {
                require_string(
                    || field("content"),
                    content,
                    || format!("structured/{lower}"),
                )?;
            }
        }
        Format::Binary => {
            if let Some(why) = binary_subformat_problem(sub) {
                return bad_subformat(why);
            }
            if !is_binary_content(content) {
                return Err(ValidationError::new(
                    field("content"),
                    "binary content must be raw bytes or a base64 string",
                ));
            }
        }
        Format::Location => {
            let lower = sub.to_ascii_lowercase();
            match lower.as_str() {
                "text" => require_string(|| field("content"), content, || "location/text".into())?,
                "gps" => check_gps(&field("content"), content)?,
                _ => return bad_subformat("is not a location subformat"),
            }
        }
        Format::Generic | Format::Error => {}
    }
    Ok(())
}

/// A part's subformat is not blank and its label, when present, is at most 1024 bytes.
fn check_subformat_and_label(
    prefix: Part,
    format: Format,
    subformat: &str,
    label: Option<&str>,
) -> Result<(), ValidationError> {
    if subformat.trim().is_empty() {
        return Err(
            ValidationError::new(prefix.field("subformat"), "must not be empty")
                .allowed(subformat_rule(format)),
        );
    }
    match label {
        Some(label) if label.len() > 1024 => Err(ValidationError::new(
            prefix.field("label"),
            "is longer than 1024 bytes",
        )),
        _ => Ok(()),
    }
}

/// What is wrong with a binary subformat, unless it is `<content>/<encoding>` (the encoding
/// may start with a dot) with one of the [`BINARY_CONTENT_KINDS`].
fn binary_subformat_problem(sub: &str) -> Option<&'static str> {
    let Some((kind, encoding)) = sub.split_once('/') else {
        return Some("is not of the form <content>/<encoding>");
    };
    if !BINARY_CONTENT_KINDS
        .iter()
        .any(|k| k.eq_ignore_ascii_case(kind))
    {
        return Some("names an unknown binary content kind");
    }
    let encoding = encoding.strip_prefix('.').unwrap_or(encoding);
    (encoding.is_empty() || encoding.chars().any(char::is_whitespace)).then_some("has no encoding")
}

/// Binary content is raw bytes, or a base64 string (empty included).
fn is_binary_content(content: &Content) -> bool {
    match content {
        Content::Bytes(_) => true,
        Content::Json(Value::String(s)) => s.is_empty() || content.to_bytes().is_some(),
        Content::Json(_) => false,
    }
}

/// The field name and the kind are only formatted when the check fails: this runs on
/// every message.
fn require_string(
    field: impl FnOnce() -> String,
    content: &Content,
    what: impl FnOnce() -> String,
) -> Result<(), ValidationError> {
    match content {
        Content::Json(Value::String(_)) => Ok(()),
        _ => Err(ValidationError::new(
            field(),
            format!("{} content must be a string", what()),
        )),
    }
}

/// GPS content: `{"latitude": f, "longitude": f}` (also `lat`/`lon`), or `"lat,lon"` text.
fn check_gps(field: &str, content: &Content) -> Result<(), ValidationError> {
    let err = || {
        ValidationError::new(field, "is not a GPS location")
            .allowed("{\"latitude\": -90..90, \"longitude\": -180..180} or the string \"lat,lon\"")
    };
    let (lat, lon) = match content {
        Content::Json(Value::Object(map)) => {
            let get = |a: &str, b: &str| {
                map.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(a) || k.eq_ignore_ascii_case(b))
                    .and_then(|(_, v)| v.as_f64())
            };
            (
                get("latitude", "lat").ok_or_else(err)?,
                get("longitude", "lon").ok_or_else(err)?,
            )
        }
        Content::Json(Value::String(s)) => {
            let (a, b) = s.split_once(',').ok_or_else(err)?;
            (
                a.trim().parse::<f64>().map_err(|_| err())?,
                b.trim().parse::<f64>().map_err(|_| err())?,
            )
        }
        _ => return Err(err()),
    };
    if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
        return Err(err());
    }
    Ok(())
}

/// A one-line description of what a format's subformat may be, for error messages.
pub fn subformat_rule(format: Format) -> &'static str {
    match format {
        Format::Text => "a language name such as english",
        Format::Token => "<prefix>_<suffix>, e.g. conversation, authentication_<id>",
        Format::Structured => "json, uri, xml, html, or a programming language name",
        Format::Binary => {
            "<content>/<encoding> with content audio, image, video, sensor or generic"
        }
        Format::Location => "text or gps",
        Format::Generic => "the name of an extension both end-points support",
        Format::Error => "any non-empty string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(format: Format, subformat: &str, content: Value) -> Result<(), ValidationError> {
        validate(&Message::new(format, subformat, Content::Json(content)))
    }

    #[test]
    fn accepts_each_format_with_its_subformat_rules() {
        check(Format::Text, "english", json!("hi")).expect("text");
        check(Format::Text, "en-US", json!("hi")).expect("text with region");
        check(Format::Token, "conversation_9.2.3.5", json!("abc")).expect("token");
        check(Format::Structured, "JSON", json!({"a": 1})).expect("structured json");
        check(Format::Structured, "uri", json!("https://x/y")).expect("uri");
        check(Format::Structured, "python", json!("print(1)")).expect("program");
        check(Format::Binary, "image/.png", json!("aGVsbG8=")).expect("binary");
        check(Format::Location, "GPS", json!({"lat": 46.2, "lon": 6.1})).expect("gps");
        check(Format::Location, "gps", json!("46.2, 6.1")).expect("gps text");
        check(Format::Location, "text", json!("Geneva")).expect("location text");
        check(Format::Generic, "x-mine", json!([1, 2])).expect("generic");
    }

    #[test]
    fn rejects_with_field_problem_and_allowed_values() {
        let err = check(Format::Binary, "picture/png", json!("aGVsbG8=")).expect_err("kind");
        assert_eq!(err.field, "subformat");
        assert!(err.problem.contains("unknown binary content kind"), "{err}");
        assert!(err.allowed.as_deref().is_some_and(|a| a.contains("audio")));

        let err = check(Format::Text, "english", json!(42)).expect_err("text number");
        assert_eq!(err.to_string(), "content: text content must be a string");

        let err = check(Format::Location, "gps", json!({"lat": 123, "lon": 0})).expect_err("lat");
        assert_eq!(err.field, "content");

        let err = check(Format::Binary, "image/png", json!({"x": 1})).expect_err("binary obj");
        assert!(err.problem.contains("base64"));

        let msg = Message::text("english", "hi").with_submessage(Submessage::new(
            Format::Location,
            "moon",
            "x",
        ));
        let err = validate(&msg).expect_err("submessage");
        assert_eq!(err.field, "submessages[0].subformat");
    }
}
