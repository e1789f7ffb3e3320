//! The mandatory exchanges of ECMA-430 §6 as pure functions over messages, plus the
//! shape of Parley's NLIP error messages.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::message::{Content, Format, Message, Submessage};

/// The label of the structured part that carries an error's machine-readable fields.
pub const ERROR_LABEL: &str = "error";

/// Applies §6.2 and §6.3 to a reply before it is sent:
/// every token the request carried is echoed with the exact same format, subformat and
/// content (unless `is_own` says this end-point created it, or the reply already carries
/// it), and a control request gets a control reply.
pub fn finish_reply(
    request: &Message,
    mut reply: Message,
    is_own: impl Fn(&Submessage) -> bool,
) -> Message {
    // Keyed by §6.2's equality, so echoing N tokens costs O(N), not O(N²).
    let mut carried: HashSet<TokenKey> = reply.tokens().map(TokenKey::of).collect();
    let mut echoed = Vec::new();
    for token in request.tokens() {
        if !is_own(token) && carried.insert(TokenKey::of(token)) {
            echoed.push(token.clone());
        }
    }
    reply.submessages.extend(echoed);
    if request.is_control() {
        reply = reply.into_control();
    }
    reply
}

/// A token's identity as [`Submessage::same_token`] compares it: format, subformat and content.
#[derive(PartialEq, Eq, Hash)]
struct TokenKey<'a> {
    format: Format,
    subformat: &'a str,
    content: ContentKey<'a>,
}

/// Token content as a hash key: text and bytes as they are, other JSON by a canonical text
/// (object keys sorted), so values that compare equal have equal keys.
#[derive(PartialEq, Eq, Hash)]
enum ContentKey<'a> {
    Text(&'a str),
    Json(String),
    Bytes(&'a [u8]),
}

impl<'a> TokenKey<'a> {
    fn of(token: &'a Submessage) -> Self {
        let content = match &token.content {
            Content::Json(Value::String(s)) => ContentKey::Text(s),
            Content::Json(v) => {
                let mut text = String::new();
                canonical(v, &mut text);
                ContentKey::Json(text)
            }
            Content::Bytes(b) => ContentKey::Bytes(b),
        };
        TokenKey {
            format: token.format,
            subformat: &token.subformat,
            content,
        }
    }
}

/// `value` as JSON text with every object's keys in sorted order. Decoded messages have a
/// bounded nesting depth, so the recursion is bounded too.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Machine-readable fields of an NLIP error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorInfo {
    /// Stable snake_case code a client can act on, e.g. `invalid_message`.
    pub code: String,
    /// Human-readable description, also sent as the text part.
    pub message: String,
    /// The offending field, when there is one.
    pub field: Option<String>,
    /// For a refusal that says "not now": milliseconds after which the same request may pass.
    pub retry_after_ms: Option<u64>,
}

impl ErrorInfo {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorInfo {
            code: code.into(),
            message: message.into(),
            field: None,
            retry_after_ms: None,
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// Renders the error as an NLIP message: a text part in `language` that any client can
    /// show, and a `structured`/`json` submessage labelled `error` with the code. The
    /// messagetype is `error`, as in the ECMA-432 example; [`finish_reply`] turns it into a
    /// control message when it answers a control request.
    pub fn to_message(&self, language: &str) -> Message {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(field) = &self.field {
            body["field"] = Value::String(field.clone());
        }
        if let Some(ms) = self.retry_after_ms {
            body["retry_after_ms"] = Value::from(ms);
        }
        Message::text(language, self.message.clone())
            .with_messagetype("error")
            .with_submessage(
                Submessage::new(Format::Structured, "json", body).with_label(ERROR_LABEL),
            )
    }

    /// Reads the error fields back out of a message, if it is a Parley-style error.
    pub fn from_message(message: &Message) -> Option<ErrorInfo> {
        let part = message.submessages.iter().find(|s| {
            s.format == Format::Structured
                && s.label
                    .as_deref()
                    .is_some_and(|l| l.eq_ignore_ascii_case(ERROR_LABEL))
        })?;
        let crate::Content::Json(body) = &part.content else {
            return None;
        };
        Some(ErrorInfo {
            code: body.get("code")?.as_str()?.to_owned(),
            message: body
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            field: body.get("field").and_then(Value::as_str).map(str::to_owned),
            retry_after_ms: body.get("retry_after_ms").and_then(Value::as_u64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TokenKind;

    fn token(sub: &str, content: &str) -> Submessage {
        Submessage::new(Format::Token, sub, content)
    }

    #[test]
    fn tokens_equal_as_section_6_2_compares_them_are_echoed_once() {
        let json_token = |content: serde_json::Value| {
            Submessage::new(Format::Token, "group", crate::Content::Json(content))
        };
        let request = Message::text("english", "hi")
            .with_submessage(json_token(json!({"a": 1, "b": [1, {"c": 2, "d": 3}]})))
            .with_submessage(json_token(json!({"b": [1, {"d": 3, "c": 2}], "a": 1})))
            .with_submessage(json_token(json!("1")))
            .with_submessage(json_token(json!(1)))
            .with_submessage(Submessage::new(
                Format::Token,
                "group",
                crate::Content::Bytes(b"1".to_vec()),
            ))
            .with_submessage(token("group", "x"))
            .with_submessage(token("group", "x"));
        let out = finish_reply(&request, Message::text("english", "hello"), |_| false);
        let echoed: Vec<_> = out.tokens().map(|t| t.content.clone()).collect();
        assert_eq!(
            echoed,
            vec![
                crate::Content::Json(json!({"a": 1, "b": [1, {"c": 2, "d": 3}]})),
                crate::Content::Json(json!("1")),
                crate::Content::Json(json!(1)),
                crate::Content::Bytes(b"1".to_vec()),
                crate::Content::Json(json!("x")),
            ]
        );
    }

    #[test]
    fn every_foreign_token_is_echoed_once_and_own_tokens_are_not() {
        let request = Message::text("english", "hi")
            .with_submessage(token("conversation_peer", "c-1"))
            .with_submessage(token("authorization", "secret"))
            .with_submessage(token("group_7", "g"))
            .with_submessage(token("conversation_parley", "mine"));
        let reply = Message::text("english", "hello").with_submessage(token("group_7", "g"));
        let out = finish_reply(&request, reply, |t| t.subformat == "conversation_parley");
        let subs: Vec<_> = out
            .tokens()
            .map(|t| (t.subformat.as_str(), t.content.as_str()))
            .collect();
        assert_eq!(
            subs,
            vec![
                ("group_7", Some("g")),
                ("conversation_peer", Some("c-1")),
                ("authorization", Some("secret")),
            ]
        );
        assert_eq!(
            out.token(TokenKind::Authentication)
                .map(|t| t.subformat.as_str()),
            Some("authorization")
        );
        assert!(!out.is_control());
    }

    #[test]
    fn control_requests_get_control_replies_even_for_errors() {
        let request = Message::text("english", "ping").into_control();
        let reply = ErrorInfo::new("x", "y").to_message("english");
        assert_eq!(reply.messagetype.as_deref(), Some("error"));
        assert!(finish_reply(&request, reply, |_| false).is_control());
    }

    #[test]
    fn error_messages_round_trip_their_fields() {
        let info = ErrorInfo::new("invalid_message", "format: is required").with_field("format");
        let msg = info.to_message("english");
        assert_eq!(msg.text_content(), Some("format: is required"));
        assert_eq!(ErrorInfo::from_message(&msg), Some(info));
        let later = ErrorInfo::new("rate_limited", "not now").with_retry_after_ms(1500);
        assert_eq!(
            ErrorInfo::from_message(&later.to_message("english")),
            Some(later)
        );
        assert_eq!(
            ErrorInfo::from_message(&Message::text("english", "x")),
            None
        );
    }
}
