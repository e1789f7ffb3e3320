//! [`ProtocolHash`]: the name of an agreed protocol.
//!
//! The hash is SHA-256 over the **exact UTF-8 bytes** of the protocol text — no trimming, no
//! newline normalisation, no markdown canonicalisation. Two texts that differ by one trailing
//! space are two protocols. That is deliberate: the hash is what 0-RTT looks up, and both sides
//! must be able to compute it from the bytes they exchanged without agreeing on any other rule.
//!
//! # Textual forms
//! - Canonical (what [`Display`](std::fmt::Display), [`ProtocolHash::to_hex`] and serde produce):
//!   64 lowercase hex digits, no prefix, e.g. `9f86d0…0a08`.
//! - Accepted by [`FromStr`] and serde: the bare form, or the same prefixed
//!   with `sha256:`; both the prefix and the hex digits may be in any case
//!   (`SHA256:9F86D0…` parses). Surrounding whitespace is refused, as is any other length.
//! - [`ProtocolHash::prefixed`] gives `sha256:<hex>` for places that want the algorithm named.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// SHA-256 of a protocol text. See the module docs for the textual forms.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolHash([u8; 32]);

/// A string that is not a protocol hash in any accepted form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid protocol hash {input:?}: expected 64 hex digits, optionally prefixed with `sha256:`"
)]
pub struct HashParseError {
    /// The offending input, truncated to 80 characters.
    pub input: String,
}

impl ProtocolHash {
    /// Hashes the exact UTF-8 bytes of `text`.
    pub fn of(text: &str) -> Self {
        Self(Sha256::digest(text.as_bytes()).into())
    }

    /// Wraps a raw digest.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The canonical form: 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// `sha256:` followed by the canonical form.
    pub fn prefixed(&self) -> String {
        format!("sha256:{}", self.to_hex())
    }

    /// True when `text` hashes to this value.
    pub fn matches(&self, text: &str) -> bool {
        Self::of(text) == *self
    }
}

impl fmt::Display for ProtocolHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ProtocolHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProtocolHash({})", self.to_hex())
    }
}

impl ProtocolHash {
    /// `s` without its optional `sha256:` label (any case): the hex digits a hash, or a prefix
    /// of one, is written with.
    pub fn hex_digits(s: &str) -> &str {
        match s.get(..7) {
            Some(label) if label.eq_ignore_ascii_case("sha256:") => &s[7..],
            _ => s,
        }
    }
}

impl FromStr for ProtocolHash {
    type Err = HashParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || HashParseError {
            input: s.chars().take(80).collect(),
        };
        let digits = ProtocolHash::hex_digits(s);
        if digits.len() != 64 {
            return Err(err());
        }
        // `hex` accepts both cases; the length check above already refused anything else.
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| err())?;
        Ok(Self(bytes))
    }
}

impl Serialize for ProtocolHash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ProtocolHash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_digits_drop_the_label_in_any_case_and_keep_prefixes() {
        assert_eq!(ProtocolHash::hex_digits("SHA256:78f5"), "78f5");
        assert_eq!(ProtocolHash::hex_digits("sha256:78f5"), "78f5");
        assert_eq!(ProtocolHash::hex_digits("78f5"), "78f5");
        assert_eq!(ProtocolHash::hex_digits("sha256"), "sha256");
    }

    // SHA-256("abc"), FIPS 180-2 appendix B.1.
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn hashes_exact_bytes() {
        let h = ProtocolHash::of("abc");
        assert_eq!(h.to_hex(), ABC);
        assert_eq!(h.to_string(), ABC);
        assert_ne!(ProtocolHash::of("abc\n"), h);
        assert!(h.matches("abc"));
    }

    #[test]
    fn parses_every_accepted_form() {
        let h = ProtocolHash::of("abc");
        for form in [
            ABC.to_owned(),
            ABC.to_uppercase(),
            format!("sha256:{ABC}"),
            format!("SHA256:{}", ABC.to_uppercase()),
            format!("Sha256:{ABC}"),
        ] {
            assert_eq!(form.parse::<ProtocolHash>(), Ok(h), "{form}");
        }
        assert_eq!(h.prefixed(), format!("sha256:{ABC}"));
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "",
            "sha256:",
            &ABC[1..],
            &format!("{ABC}0"),
            &format!(" {ABC}"),
            &format!("sha1:{ABC}"),
            &format!("sha256:{}", &ABC[..63]),
            &"g".repeat(64),
            "sha256:é",
        ] {
            assert!(bad.parse::<ProtocolHash>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn serde_uses_canonical_form() {
        let h = ProtocolHash::of("abc");
        assert_eq!(
            serde_json::to_value(h).expect("serialises"),
            serde_json::json!(ABC)
        );
        let back: ProtocolHash =
            serde_json::from_value(serde_json::json!(format!("SHA256:{ABC}"))).expect("parses");
        assert_eq!(back, h);
    }
}
