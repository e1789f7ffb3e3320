//! One seed-002 frame: a 1-byte header whose top two bits are the protocol type, then the
//! protocol data (UTF-8 JSON, or UTF-8 text for natural language).
//!
//! AgentConnect's generated application code sends bare JSON with no header byte. Its first
//! byte, `{` (0x7B), reads as protocol type 01 (application), so a frame that starts with `{`
//! is taken whole as an application message, and is answered the same way ([`Frame::bare`]).
//! The six reserved bits are ignored on input and sent as zero.

use serde_json::Value;

/// The protocol type of a frame (seed 002's `PT` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolType {
    /// 00: meta-protocol messages (hello, negotiation, code generation, …).
    Meta,
    /// 01: messages of the agreed application protocol.
    Application,
    /// 10: natural language.
    NaturalLanguage,
    /// 11: the verification protocol (Parley does not implement it).
    Verification,
}

impl ProtocolType {
    /// The header byte of this type (reserved bits zero).
    pub fn header(self) -> u8 {
        let bits = match self {
            ProtocolType::Meta => 0,
            ProtocolType::Application => 1,
            ProtocolType::NaturalLanguage => 2,
            ProtocolType::Verification => 3,
        };
        bits << 6
    }

    /// The type a header byte names.
    pub fn of(header: u8) -> ProtocolType {
        match header >> 6 {
            0 => ProtocolType::Meta,
            1 => ProtocolType::Application,
            2 => ProtocolType::NaturalLanguage,
            _ => ProtocolType::Verification,
        }
    }

    /// The name used in logs and error messages.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolType::Meta => "meta",
            ProtocolType::Application => "application",
            ProtocolType::NaturalLanguage => "natural language",
            ProtocolType::Verification => "verification",
        }
    }
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    pub kind: ProtocolType,
    /// The protocol data, without the header byte.
    pub data: &'a [u8],
    /// An application frame sent as bare JSON, without a header byte.
    pub bare: bool,
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("an empty frame: a seed-002 frame has a 1-byte header and then its data")]
    Empty,
}

impl<'a> Frame<'a> {
    /// Reads a frame; any non-empty byte string is one.
    pub fn decode(bytes: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        match bytes.split_first() {
            None => Err(FrameError::Empty),
            Some((b'{', _)) => Ok(Frame {
                kind: ProtocolType::Application,
                data: bytes,
                bare: true,
            }),
            Some((&header, data)) => Ok(Frame {
                kind: ProtocolType::of(header),
                data,
                bare: false,
            }),
        }
    }

    /// The data as JSON.
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(self.data)
    }
}

/// A frame of `kind` carrying `data`.
pub fn encode(kind: ProtocolType, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(kind.header());
    out.extend_from_slice(data);
    out
}

/// A frame of `kind` carrying `value` as JSON.
pub fn encode_json(kind: ProtocolType, value: &Value) -> Vec<u8> {
    encode(
        kind,
        &serde_json::to_vec(value).expect("a JSON value serializes"),
    )
}

/// An application answer in the form the request came in: bare JSON when the request was
/// bare, else with the application header.
pub fn encode_application(value: &Value, bare: bool) -> Vec<u8> {
    if bare {
        serde_json::to_vec(value).expect("a JSON value serializes")
    } else {
        encode_json(ProtocolType::Application, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_the_type() {
        for kind in [
            ProtocolType::Meta,
            ProtocolType::Application,
            ProtocolType::NaturalLanguage,
            ProtocolType::Verification,
        ] {
            let bytes = encode(kind, b"{}");
            let frame = Frame::decode(&bytes).expect("a frame");
            assert_eq!(frame.kind, kind);
            assert_eq!(frame.data, b"{}");
            assert!(!frame.bare);
        }
        assert_eq!(ProtocolType::Application.header(), 0x40);
        // Reserved bits are ignored.
        let frame = Frame::decode(&[0x81, b'h', b'i']).expect("a frame");
        assert_eq!(frame.kind, ProtocolType::NaturalLanguage);
        assert_eq!(frame.data, b"hi");
    }

    #[test]
    fn bare_json_is_an_application_frame_and_is_answered_bare() {
        let frame = Frame::decode(br#"{"a":1}"#).expect("a frame");
        assert_eq!(frame.kind, ProtocolType::Application);
        assert!(frame.bare);
        assert_eq!(frame.json().expect("JSON")["a"], 1);
        let answer = encode_application(&serde_json::json!({"b": 2}), true);
        assert_eq!(answer, br#"{"b":2}"#);
        let answer = encode_application(&serde_json::json!({"b": 2}), false);
        assert_eq!(answer[0], 0x40);
    }

    #[test]
    fn an_empty_frame_is_refused() {
        assert_eq!(Frame::decode(&[]), Err(FrameError::Empty));
        // A header alone is a frame with no data.
        assert_eq!(Frame::decode(&[0]).expect("a frame").data, b"");
    }
}
