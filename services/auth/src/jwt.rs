//! OAuth 2.0 access tokens as JWTs (RFC 9068's shape), checked against the issuers the operator
//! trusts: the token's signature by a key of its issuer's JWKS (chosen by `kid`), its `iss`,
//! `aud` (when the issuer names one), `exp` and `nbf`. What the token grants is read from its
//! `scope` (space-separated) or `scp` (a list): `parley:negotiate`, `parley:talk`,
//! `parley:capability:NAME` (or `:*`), `parley:protocol:HASH` (or `:*`); a peers-file entry naming
//! the token's subject takes precedence over its scopes (the server decides that). Symmetric
//! (`HS*`) algorithms are refused unless an issuer allows them explicitly: a JWKS is published,
//! and a shared secret in it would let anyone sign.

pub use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::Jwk;
pub use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde::Deserialize;

use crate::{Grants, Scope};

/// An issuer the operator trusts, and its keys.
#[derive(Debug, Clone)]
pub struct Issuer {
    /// The `iss` claim its tokens carry.
    pub issuer: String,
    /// The `aud` a token must name (one of them), when set.
    pub audience: Option<String>,
    /// Its signing keys (RFC 7517 key set).
    pub keys: JwkSet,
    /// Algorithms accepted from it; empty: every asymmetric algorithm.
    pub algorithms: Vec<Algorithm>,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    pub leeway_s: u64,
}

/// Who a verified token names and what it grants by its scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    pub issuer: String,
    pub subject: String,
    pub scopes: Vec<String>,
    /// When the token expires (`exp`, seconds since the Unix epoch).
    pub expires_at: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    #[error("not a JWT: {0}")]
    Malformed(String),
    #[error("the token's issuer is not trusted here")]
    UnknownIssuer,
    #[error("no key of the issuer matches the token's key id")]
    UnknownKey,
    #[error("algorithm {0:?} is not accepted from this issuer")]
    Algorithm(Algorithm),
    #[error("the token is not valid: {0}")]
    Invalid(String),
}

#[derive(Debug, Deserialize)]
struct Unverified {
    iss: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
}

const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Checks `token` against `issuers`; the issuer is the one its (not yet trusted) `iss` names, and
/// nothing of the token is believed until its signature verified with that issuer's key.
pub fn verify(issuers: &[Issuer], token: &str) -> Result<VerifiedToken, JwtError> {
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| JwtError::Malformed(e.to_string()))?;
    let claimed = unverified_issuer(token)?;
    let issuer = issuers
        .iter()
        .find(|i| i.issuer == claimed)
        .ok_or(JwtError::UnknownIssuer)?;
    let accepted: &[Algorithm] = if issuer.algorithms.is_empty() {
        &ASYMMETRIC
    } else {
        &issuer.algorithms
    };
    if !accepted.contains(&header.alg) {
        return Err(JwtError::Algorithm(header.alg));
    }
    let jwk = key_for(&issuer.keys, header.kid.as_deref())?;
    let key = DecodingKey::from_jwk(jwk).map_err(|e| JwtError::Invalid(e.to_string()))?;
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[&issuer.issuer]);
    match &issuer.audience {
        Some(aud) => validation.set_audience(&[aud]),
        None => validation.validate_aud = false,
    }
    validation.set_required_spec_claims(&["exp", "iss", "sub"]);
    validation.validate_nbf = true;
    validation.leeway = issuer.leeway_s;
    let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
        .map_err(|e| JwtError::Invalid(e.to_string()))?;
    let claims = data.claims;
    let scopes = match (claims.scope, claims.scp) {
        (Some(s), _) => s.split_whitespace().map(str::to_owned).collect(),
        (None, Some(list)) => list,
        (None, None) => Vec::new(),
    };
    Ok(VerifiedToken {
        issuer: issuer.issuer.clone(),
        subject: claims.sub,
        scopes,
        expires_at: claims.exp,
    })
}

/// The key the header's `kid` names; a key set of one key serves tokens without a `kid`.
fn key_for<'a>(keys: &'a JwkSet, kid: Option<&str>) -> Result<&'a Jwk, JwtError> {
    match kid {
        Some(kid) => keys.find(kid).ok_or(JwtError::UnknownKey),
        None if keys.keys.len() == 1 => Ok(&keys.keys[0]),
        None => Err(JwtError::UnknownKey),
    }
}

/// The payload's `iss`, read without checking anything: only to pick whose keys to check with.
pub fn unverified_issuer(token: &str) -> Result<String, JwtError> {
    use base64::Engine;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| JwtError::Malformed("expected three dot-separated parts".into()))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|e| JwtError::Malformed(format!("payload: {e}")))?;
    let claims: Unverified =
        serde_json::from_slice(&bytes).map_err(|e| JwtError::Malformed(format!("payload: {e}")))?;
    claims.iss.ok_or(JwtError::UnknownIssuer)
}

impl VerifiedToken {
    /// What the token's scopes grant (scopes other than `parley:…` ones are ignored).
    pub fn grants(&self) -> Grants {
        let mut grants = Grants::default();
        let mut capabilities = Vec::new();
        let mut protocols = Vec::new();
        for scope in &self.scopes {
            let Some(rest) = scope.strip_prefix("parley:") else {
                continue;
            };
            match rest.split_once(':') {
                None if rest == "negotiate" => grants.negotiate = true,
                None if rest == "talk" => grants.talk = true,
                Some(("capability", name)) if !name.is_empty() => capabilities.push(name),
                Some(("protocol", hash)) if !hash.is_empty() => protocols.push(hash),
                _ => {}
            }
        }
        grants.capabilities = Scope::of(capabilities);
        grants.protocols = Scope::of(protocols);
        grants
    }

    /// The peer id a token names: its subject qualified by its issuer.
    pub fn peer_id(&self) -> String {
        format!("{}#{}", self.issuer, self.subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Signer, now};
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    fn signer(kid: &str) -> Signer {
        Signer::new(kid)
    }

    fn issuer(keys: Vec<Jwk>) -> Issuer {
        Issuer {
            issuer: "https://idp.example".into(),
            audience: Some("parley".into()),
            keys: JwkSet { keys },
            algorithms: Vec::new(),
            leeway_s: 0,
        }
    }

    fn token(s: &Signer, kid: &str, claims: serde_json::Value) -> String {
        s.sign_as(kid, &claims)
    }

    fn claims() -> serde_json::Value {
        json!({
            "iss": "https://idp.example", "sub": "agent-b", "aud": "parley",
            "exp": now() + 300, "scope": "openid parley:negotiate parley:capability:weather"
        })
    }

    #[test]
    fn a_token_signed_by_its_issuer_names_its_subject_and_grants_its_scopes() {
        let s = signer("k1");
        let issuers = [issuer(vec![s.jwk()])];
        let verified = verify(&issuers, &token(&s, "k1", claims())).expect("valid");
        assert_eq!(verified.subject, "agent-b");
        assert_eq!(verified.peer_id(), "https://idp.example#agent-b");
        let grants = verified.grants();
        assert!(grants.negotiate && !grants.talk);
        assert_eq!(grants.capabilities, Scope::of(["weather"]));
        assert_eq!(grants.protocols, Scope::Nothing);

        let mut listed = claims();
        listed["scope"] = serde_json::Value::Null;
        listed["scp"] = json!(["parley:talk", "parley:protocol:*"]);
        let grants = verify(&issuers, &token(&s, "k1", listed))
            .expect("valid")
            .grants();
        assert!(grants.talk);
        assert_eq!(grants.protocols, Scope::All);
    }

    #[test]
    fn forged_expired_foreign_and_misaddressed_tokens_are_refused() {
        let s = signer("k1");
        let forger = signer("k1");
        let issuers = [issuer(vec![s.jwk()])];
        let refused = |t: String| verify(&issuers, &t).expect_err("refused");

        assert!(matches!(
            refused(token(&forger, "k1", claims())),
            JwtError::Invalid(_)
        ));
        assert_eq!(refused(token(&s, "k9", claims())), JwtError::UnknownKey);
        let mut c = claims();
        c["exp"] = json!(now() - 60);
        assert!(matches!(refused(token(&s, "k1", c)), JwtError::Invalid(_)));
        let mut c = claims();
        c["aud"] = json!("someone-else");
        assert!(matches!(refused(token(&s, "k1", c)), JwtError::Invalid(_)));
        let mut c = claims();
        c["iss"] = json!("https://evil.example");
        assert_eq!(refused(token(&s, "k1", c)), JwtError::UnknownIssuer);
        let mut c = claims();
        c["nbf"] = json!(now() + 600);
        assert!(matches!(refused(token(&s, "k1", c)), JwtError::Invalid(_)));

        let hs = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(),
            &EncodingKey::from_secret(b"guessable"),
        )
        .expect("sign");
        assert_eq!(refused(hs), JwtError::Algorithm(Algorithm::HS256));
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(claims().to_string())
        );
        assert!(matches!(refused(none), JwtError::Malformed(_)));
        assert!(matches!(refused("parley_x".into()), JwtError::Malformed(_)));
    }
}
