//! API keys: `parley_<key id>_<secret>`, 16 hex digits of key id (public, how the store finds
//! the key) and 32 random bytes of secret (base64url). The store keeps the key id and the
//! SHA-256 of the secret, never the secret: a key is printed once, when it is made. A presented
//! key is found by its id and its secret's digest compared in constant time. The secret is
//! 256 random bits, so a plain digest is as strong as a slow one here (a slow hash protects
//! guessable passwords, and nothing about these keys is guessable).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "parley_";
const ID_HEX: usize = 16;
const SECRET_BYTES: usize = 32;

/// A key as a peer presents it. `Debug` and `Display` do not show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    key_id: String,
    secret: String,
}

/// What the store keeps of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// The key's public id (16 hex digits).
    pub key_id: String,
    /// SHA-256 of the secret, 64 hex digits.
    pub digest: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("an API key looks like parley_<16 hex digits>_<43 characters>; this is not one")]
    Malformed,
    #[error(
        "a key digest looks like <16 hex digits>:<64 hex digits> (key id, SHA-256 of the secret); this is not one"
    )]
    MalformedDigest,
    #[error("the system's random number generator failed: {0}")]
    Random(String),
}

impl ApiKey {
    /// A new key from the system's random number generator.
    pub fn generate() -> Result<ApiKey, KeyError> {
        let mut id = [0u8; ID_HEX / 2];
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut id).map_err(|e| KeyError::Random(e.to_string()))?;
        getrandom::fill(&mut secret).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(ApiKey {
            key_id: hex::encode(id),
            secret: URL_SAFE_NO_PAD.encode(secret),
        })
    }

    /// Reads a presented key (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<ApiKey, KeyError> {
        let rest = text
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(KeyError::Malformed)?;
        let (key_id, secret) = rest.split_once('_').ok_or(KeyError::Malformed)?;
        let id_ok = lower_hex(key_id, ID_HEX);
        let secret_ok = URL_SAFE_NO_PAD
            .decode(secret)
            .is_ok_and(|bytes| bytes.len() == SECRET_BYTES);
        if !id_ok || !secret_ok {
            return Err(KeyError::Malformed);
        }
        Ok(ApiKey {
            key_id: key_id.to_owned(),
            secret: secret.to_owned(),
        })
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The whole key, secret included: what is printed once and what a client sends.
    pub fn reveal(&self) -> String {
        format!("{PREFIX}{}_{}", self.key_id, self.secret)
    }

    /// What the store keeps of this key.
    pub fn stored(&self) -> StoredKey {
        StoredKey {
            key_id: self.key_id.clone(),
            digest: hex::encode(Sha256::digest(self.secret.as_bytes())),
        }
    }
}

impl StoredKey {
    /// Reads `<key id>:<digest>`, the form a peers file holds (see [`fmt::Display`]).
    pub fn parse(text: &str) -> Result<StoredKey, KeyError> {
        let (key_id, digest) = text
            .trim()
            .split_once(':')
            .ok_or(KeyError::MalformedDigest)?;
        if !lower_hex(key_id, ID_HEX) || !lower_hex(digest, 64) {
            return Err(KeyError::MalformedDigest);
        }
        Ok(StoredKey {
            key_id: key_id.to_owned(),
            digest: digest.to_owned(),
        })
    }

    /// Whether `presented` is this key: same id, and its secret's digest equal in constant time.
    pub fn matches(&self, presented: &ApiKey) -> bool {
        let digest = Sha256::digest(presented.secret.as_bytes());
        let Ok(expected) = hex::decode(&self.digest) else {
            return false;
        };
        self.key_id == presented.key_id && bool::from(expected.ct_eq(digest.as_slice()))
    }
}

/// `<key id>:<digest>`: what a peers file's `key_digest` holds. Nothing in it is secret.
impl fmt::Display for StoredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key_id, self.digest)
    }
}

/// `len` lower-case hex digits.
fn lower_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({PREFIX}{}_…)", self.key_id)
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}_…", self.key_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_reads_back_and_matches_only_its_stored_form() {
        let key = ApiKey::generate().expect("random");
        let text = key.reveal();
        let read = ApiKey::parse(&format!(" {text}\n")).expect("reads back");
        assert_eq!(read, key);
        let stored = key.stored();
        assert!(stored.matches(&read));
        assert_eq!(stored.digest.len(), 64);
        assert!(
            !stored.digest.contains(&key.secret),
            "only the digest is kept"
        );

        let other = ApiKey::generate().expect("random");
        assert!(!stored.matches(&other));
        let same_id = ApiKey {
            key_id: key.key_id.clone(),
            secret: other.secret.clone(),
        };
        assert!(!stored.matches(&same_id), "the secret decides, not the id");
    }

    #[test]
    fn what_is_not_a_key_is_refused_and_the_secret_is_never_displayed() {
        for bad in [
            "",
            "Bearer x",
            "parley_",
            "parley_0123456789abcdef",
            "parley_0123456789ABCDEF_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "parley_0123456789abcdef_short",
            "sk_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(ApiKey::parse(bad), Err(KeyError::Malformed), "{bad:?}");
        }
        let key = ApiKey::generate().expect("random");
        assert!(!format!("{key} {key:?}").contains(&key.secret));
    }

    #[test]
    fn a_stored_key_reads_back_from_its_written_form_and_nothing_else() {
        let key = ApiKey::generate().expect("random");
        let stored = key.stored();
        let text = stored.to_string();
        assert_eq!(text, format!("{}:{}", key.key_id(), stored.digest));
        assert_eq!(StoredKey::parse(&format!(" {text}\n")), Ok(stored.clone()));
        assert!(StoredKey::parse(&text).expect("reads").matches(&key));
        let digest = &stored.digest;
        for bad in [
            String::new(),
            key.reveal(),
            digest.clone(),
            format!("{}:{}", key.key_id(), &digest[1..]),
            format!("0123456789ABCDEF:{digest}"),
            format!("{}:{}", key.key_id(), "A".repeat(64)),
            format!("{}x:{}", &key.key_id()[1..], digest),
        ] {
            assert_eq!(
                StoredKey::parse(&bad),
                Err(KeyError::MalformedDigest),
                "{bad:?}"
            );
        }
    }
}
