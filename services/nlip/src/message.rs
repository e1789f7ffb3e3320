//! The ECMA-430 message model: a first submessage plus ordered submessages.

use std::fmt;

use base64::Engine as _;
use serde_json::Value;

/// The value of `MessageType` reserved for control messages (ECMA-430 §5.1.1).
pub const CONTROL: &str = "control";

/// What a written-down message shows in place of an authentication token's content.
pub const REDACTED: &str = "<redacted>";

/// The `format` field (ECMA-430 §5.3, table 1), plus the legacy `error` format that
/// older clients send. Values are case-insensitive on input and lowercase on output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Text,
    Token,
    Structured,
    Binary,
    Location,
    Generic,
    /// Not in the standard; accepted on input from pre-standard clients, never emitted by Parley.
    Error,
}

impl Format {
    /// Every format, in the order of the standard's table.
    pub const ALL: [Format; 7] = [
        Format::Text,
        Format::Token,
        Format::Structured,
        Format::Binary,
        Format::Location,
        Format::Generic,
        Format::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Token => "token",
            Format::Structured => "structured",
            Format::Binary => "binary",
            Format::Location => "location",
            Format::Generic => "generic",
            Format::Error => "error",
        }
    }

    /// Case-insensitive lookup; `None` for anything outside the standard (and `error`).
    pub fn parse(s: &str) -> Option<Format> {
        // Nearly every peer sends the canonical spelling: that needs neither trimming nor
        // case folding (this runs for every part of every message).
        if let Some(f) = Format::ALL.into_iter().find(|f| f.as_str() == s) {
            return Some(f);
        }
        let s = s.trim();
        Format::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A content field. JSON carries any JSON value; bindings that can carry raw bytes
/// (CBOR over WebSocket) produce [`Content::Bytes`], which JSON renders as base64.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Json(Value),
    Bytes(Vec<u8>),
}

impl Content {
    /// The content as text, when it is a JSON string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Content::Json(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// The content as JSON; bytes become a base64 string (ECMA-432 text binding).
    pub fn to_json(&self) -> Value {
        match self {
            Content::Json(v) => v.clone(),
            Content::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        }
    }

    /// Raw bytes of binary content: the bytes themselves, or a base64 string decoded.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        match self {
            Content::Bytes(b) => Some(b.clone()),
            Content::Json(Value::String(s)) => {
                base64::engine::general_purpose::STANDARD.decode(s).ok()
            }
            Content::Json(_) => None,
        }
    }
}

impl From<Value> for Content {
    fn from(v: Value) -> Self {
        Content::Json(v)
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Json(Value::String(s.to_owned()))
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Json(Value::String(s))
    }
}

/// One submessage (ECMA-430 §5.2).
#[derive(Debug, Clone, PartialEq)]
pub struct Submessage {
    pub label: Option<String>,
    pub format: Format,
    pub subformat: String,
    pub content: Content,
}

impl Submessage {
    pub fn new(format: Format, subformat: impl Into<String>, content: impl Into<Content>) -> Self {
        Submessage {
            label: None,
            format,
            subformat: subformat.into(),
            content: content.into(),
        }
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// What kind of token this is, when it is one.
    pub fn token_kind(&self) -> Option<TokenKind> {
        (self.format == Format::Token).then(|| TokenKind::of(&self.subformat))
    }

    /// Equality as ECMA-430 §6.2 defines it for echoed tokens: format, subformat, content.
    pub fn same_token(&self, other: &Submessage) -> bool {
        self.format == other.format
            && self.subformat == other.subformat
            && self.content == other.content
    }
}

/// Token classes of ECMA-430 §6.2, matched by prefix and case-insensitively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `conversation`, `conversation_<creator>`.
    Conversation,
    /// `authentication…`, and `authorization…` as the Python reference SDK spells it.
    Authentication,
    /// Any other application token.
    Other,
}

impl TokenKind {
    pub fn of(subformat: &str) -> TokenKind {
        let s = subformat.trim().to_ascii_lowercase();
        if s.starts_with("conversation") {
            TokenKind::Conversation
        } else if s.starts_with("authentication") || s.starts_with("authorization") {
            TokenKind::Authentication
        } else {
            TokenKind::Other
        }
    }
}

/// An NLIP message: the first submessage's fields plus the ordered submessages.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `None` means a data message; `Some("control")` (any case on input) a control message.
    /// Other values are kept verbatim so that a peer's own message types survive a round trip.
    pub messagetype: Option<String>,
    pub format: Format,
    pub subformat: String,
    pub content: Content,
    /// Not defined by ECMA-430 for the first submessage, but sent by the Python SDK; kept.
    pub label: Option<String>,
    pub submessages: Vec<Submessage>,
}

impl Message {
    pub fn new(format: Format, subformat: impl Into<String>, content: impl Into<Content>) -> Self {
        Message {
            messagetype: None,
            format,
            subformat: subformat.into(),
            content: content.into(),
            label: None,
            submessages: Vec::new(),
        }
    }

    /// A text message in the given language subformat (e.g. `english`).
    pub fn text(language: impl Into<String>, text: impl Into<String>) -> Self {
        Message::new(Format::Text, language, Content::from(text.into()))
    }

    /// A structured JSON message.
    pub fn json(value: Value) -> Self {
        Message::new(Format::Structured, "json", Content::Json(value))
    }

    /// Marks this message as a control message (ECMA-430 §5.1.1).
    pub fn into_control(mut self) -> Self {
        self.messagetype = Some(CONTROL.to_owned());
        self
    }

    pub fn with_messagetype(mut self, messagetype: impl Into<String>) -> Self {
        self.messagetype = Some(messagetype.into());
        self
    }

    pub fn with_submessage(mut self, sub: Submessage) -> Self {
        self.submessages.push(sub);
        self
    }

    pub fn is_control(&self) -> bool {
        self.messagetype
            .as_deref()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case(CONTROL))
    }

    /// The first submessage's text, when it is a text message.
    pub fn text_content(&self) -> Option<&str> {
        (self.format == Format::Text)
            .then(|| self.content.as_str())
            .flatten()
    }

    /// All token submessages, in order.
    pub fn tokens(&self) -> impl Iterator<Item = &Submessage> {
        self.submessages
            .iter()
            .filter(|s| s.format == Format::Token)
    }

    /// This message as it may be written down: the content of every authentication token
    /// (credentials, session tokens) replaced by `<redacted>`. Borrowed when there is none.
    pub fn redacted(&self) -> std::borrow::Cow<'_, Message> {
        let is_secret = |format: Format, subformat: &str| {
            format == Format::Token && TokenKind::of(subformat) == TokenKind::Authentication
        };
        let top = is_secret(self.format, &self.subformat);
        if !top
            && !self
                .submessages
                .iter()
                .any(|s| is_secret(s.format, &s.subformat))
        {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut copy = self.clone();
        if top {
            copy.content = Content::from(REDACTED);
        }
        for sub in &mut copy.submessages {
            if is_secret(sub.format, &sub.subformat) {
                sub.content = Content::from(REDACTED);
            }
        }
        std::borrow::Cow::Owned(copy)
    }

    /// The first token of a kind, if any.
    pub fn token(&self, kind: TokenKind) -> Option<&Submessage> {
        self.tokens().find(|s| s.token_kind() == Some(kind))
    }

    /// Submessages that are not tokens, in order.
    pub fn payload_submessages(&self) -> impl Iterator<Item = &Submessage> {
        self.submessages
            .iter()
            .filter(|s| s.format != Format::Token)
    }

    /// The language a reply to this message should use: the subformat of the first text
    /// part the peer sent, so that clients that only read their own language keep working.
    pub fn reply_language(&self) -> &str {
        if self.format == Format::Text {
            return &self.subformat;
        }
        self.submessages
            .iter()
            .find(|s| s.format == Format::Text)
            .map_or(crate::DEFAULT_LANGUAGE, |s| s.subformat.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_authentication_tokens_and_nothing_else() {
        let plain = Message::text("english", "hi").with_submessage(Submessage::new(
            Format::Token,
            "conversation",
            "c-1",
        ));
        assert!(matches!(plain.redacted(), std::borrow::Cow::Borrowed(_)));

        let secret = plain
            .clone()
            .with_submessage(Submessage::new(Format::Token, "authorization", "parley_x"))
            .with_submessage(Submessage::new(Format::Token, "Authentication_a1", "pls_y"));
        let written = secret.redacted();
        let contents: Vec<_> = written
            .tokens()
            .map(|t| t.content.as_str().unwrap_or_default())
            .collect();
        assert_eq!(contents, ["c-1", REDACTED, REDACTED]);
        assert_eq!(written.text_content(), Some("hi"));
        assert_eq!(secret.submessages[1].content.as_str(), Some("parley_x"));

        let top = Message::new(Format::Token, "authentication", "k");
        assert_eq!(top.redacted().content.as_str(), Some(REDACTED));
    }
}
