//! Session tokens: what this agent hands a peer that authenticated inside an NLIP message
//! (ECMA-430 §6.2.2, an `authentication` token submessage carrying its credential), so that the
//! peer's next messages carry this token instead of the credential. `pls_` then 32 random bytes
//! (base64url). The token is opaque to the peer and means something only to the agent that made
//! it: the agent keeps what it stands for, keyed by the token's SHA-256, never the token.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::KeyError;

const PREFIX: &str = "pls_";
const SECRET_BYTES: usize = 32;

/// A session token as minted. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken(String);

impl SessionToken {
    /// A new token from the system's random number generator.
    pub fn generate() -> Result<SessionToken, KeyError> {
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut secret).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(SessionToken(format!(
            "{PREFIX}{}",
            URL_SAFE_NO_PAD.encode(secret)
        )))
    }

    /// The token's text, as the peer receives it.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// The key under which the agent keeps this token's session.
    pub fn digest(&self) -> SessionDigest {
        SessionDigest::of(&self.0)
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(…)")
    }
}

/// The SHA-256 of a presented session token: how sessions are looked up, so that the lookup's
/// timing tells nothing about the tokens kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionDigest([u8; 32]);

impl SessionDigest {
    /// The digest of `presented` (whatever the peer sent; an unknown text finds no session).
    pub fn of(presented: &str) -> SessionDigest {
        SessionDigest(Sha256::digest(presented.trim().as_bytes()).into())
    }
}

/// Whether `text` has the form of a session token (it may still be unknown or expired).
pub fn looks_like_session(text: &str) -> bool {
    text.trim().starts_with(PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_opaque_and_found_by_their_digest() {
        let a = SessionToken::generate().expect("random");
        let b = SessionToken::generate().expect("random");
        assert_ne!(a, b);
        assert!(looks_like_session(a.reveal()));
        assert_eq!(a.reveal().len(), PREFIX.len() + 43);
        assert_eq!(a.digest(), SessionDigest::of(a.reveal()));
        assert_eq!(a.digest(), SessionDigest::of(&format!(" {} ", a.reveal())));
        assert_ne!(a.digest(), b.digest());
        assert_eq!(format!("{a:?}"), "SessionToken(…)");
        assert!(!looks_like_session("parley_0123_abc"));
    }
}
