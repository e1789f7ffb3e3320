//! A JWT signer for tests: an ES256 key made at run time, its public JWK, and tokens signed
//! with it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

/// A signing key and its key id.
#[allow(missing_debug_implementations)]
pub struct Signer {
    kid: String,
    key: EncodingKey,
    jwk: Jwk,
}

impl Signer {
    /// A new P-256 key named `kid`.
    pub fn new(kid: &str) -> Signer {
        let pair =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a P-256 key pair");
        let point = pair.public_key_raw();
        let (x, y) = point[1..].split_at(32);
        let jwk = serde_json::json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        });
        Signer {
            kid: kid.to_owned(),
            key: EncodingKey::from_ec_der(&pair.serialize_der()),
            jwk: serde_json::from_value(jwk).expect("a JWK"),
        }
    }

    /// The public key, as a JWKS lists it.
    pub fn jwk(&self) -> Jwk {
        self.jwk.clone()
    }

    /// `claims` signed, the header naming this key.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        self.sign_as(&self.kid, claims)
    }

    /// `claims` signed by this key, the header naming key `kid` (a forgery when it is another
    /// key's id).
    pub fn sign_as(&self, kid: &str, claims: &serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, claims, &self.key).expect("signed")
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
