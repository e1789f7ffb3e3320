//! NLIP (ECMA-430) messages: the model, validation, and the JSON and CBOR codecs.
//!
//! # Layout
//! - [`message`]: [`Message`], [`Submessage`], [`Format`], [`Content`], token kinds.
//! - [`validate`](mod@validate): the format/subformat rules of §5.3, with [`ValidationError`]s that name
//!   the field, the problem and what is allowed.
//! - [`codec`]: JSON and CBOR (ECMA-432) decoding, one single-pass reader per encoding that
//!   shares its field checks with the other, and canonical encoding, one writer per encoding.
//! - [`exchange`]: the mandatory exchanges of §6 (token echo, control replies) and the
//!   shape of NLIP error messages.
//!
//! # Invariants
//! - No IO and no async: every function here is a pure transformation, so the server,
//!   the client and the tests share one definition of what a valid message is.
//! - Input is lenient where real peers differ (key and value capitalization, the legacy
//!   `control: true`, unknown keys); output is canonical (lowercase keys, absent fields
//!   omitted), which is what the Python reference SDK can read.
//! - Every decoded message has passed [`validate::validate`].

pub mod codec;
pub mod exchange;
pub mod message;
pub mod validate;

pub use codec::{
    DecodeError, from_cbor_slice, from_json_slice, from_json_value, to_cbor_vec, to_json_value,
    to_json_vec,
};
pub use exchange::{ERROR_LABEL, ErrorInfo, finish_reply};
pub use message::{CONTROL, Content, Format, Message, REDACTED, Submessage, TokenKind};
pub use validate::{ValidationError, validate};

/// The language subformat used when the peer gave none (ECMA-430 requires English).
pub const DEFAULT_LANGUAGE: &str = "english";
