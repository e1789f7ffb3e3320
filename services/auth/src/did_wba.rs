//! ANP's DID-WBA authentication (ANP-02): a peer proves it holds a key of its `did:wba` DID
//! document, either with an RFC 9421 HTTP Message Signature (`Signature-Input` and `Signature`
//! headers, the `keyid` naming the DID's verification method, a `Content-Digest` binding the
//! body) or with the legacy `Authorization: DIDWba did="…", nonce="…", timestamp="…",
//! verification_method="…", signature="…"` header, which signs the service's domain.
//!
//! The `anp` crate decides every signature, time window and DID-document rule
//! ([`anp::authentication::DidWbaVerifier`]); this module gives it the request and the DID
//! document the server resolved, and keeps what must outlive one request: the nonces seen.
//!
//! # Decisions
//! - **Resolution is the caller's.** [`claimed_did`] names the DID a credential claims, the
//!   server fetches its document with its own HTTP client and limits, and [`DidWba::verify`]
//!   checks the credential against it. No lock is held while a document is fetched.
//! - **One bounded nonce memory for every request** ([`DidWba`] is shared): a nonce (per DID) is
//!   accepted once within the signature window (`max_age_minutes`, plus the minute of clock skew
//!   the verifier tolerates). At most `max_nonces` are remembered; when that many are in the
//!   window, further signed requests are refused until some expire, never admitted unchecked.
//! - **Only signed nonces are remembered.** `anp`'s verifier records a legacy header's nonce
//!   before it checks the signature; the legacy signature is checked first here, so a forged
//!   header cannot fill the memory or spend a peer's nonce.
//! - **The verifier's access token is not handed out.** `anp` issues a JWT after a successful
//!   check; it is signed with a random key made at start and dropped: a peer authenticates every
//!   request (a bearer on this server is an API key or a trusted issuer's JWT).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use anp;
use anp::authentication::{
    DidWbaVerifier, DidWbaVerifierConfig, extract_auth_header_parts, extract_signature_metadata,
    verify_auth_header_signature,
};
use serde_json::Value;

/// How far in the future a signature's time may be (the verifier's fixed tolerance).
pub(crate) const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// What the operator decides about DID-WBA (`[access.did_wba]`, read by the server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DidWbaSettings {
    /// The domains this agent answers as: a credential signed for another domain is refused.
    pub allowed_domains: Vec<String>,
    /// How old a signature may be, in minutes.
    pub max_age_minutes: u32,
    /// Most nonces remembered at once (see the module docs).
    pub max_nonces: usize,
}

/// Why a DID-WBA credential proves nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DidWbaError {
    /// The credential cannot be read (no key id, not a `DIDWba` header, a DID of another method).
    #[error("the DID-WBA credential is malformed: {0}")]
    Malformed(String),
    /// The signature, its time, its nonce, its domain or the DID document refuse it.
    #[error("the DID-WBA credential is refused: {0}")]
    Refused(String),
    /// Too many signed requests within the window to remember their nonces.
    #[error(
        "too many signed requests within the signature window to check them for replay; try again later"
    )]
    Busy,
    /// The verifier could not be set up (no randomness).
    #[error("the DID-WBA verifier cannot start: {0}")]
    Setup(String),
}

/// A request as its DID-WBA credential signed it.
#[derive(Debug, Clone)]
pub struct SignedRequest<'a> {
    /// Its method (`POST`, `GET`).
    pub method: &'a str,
    /// Its target URI as the peer addressed it (`https://agent.example/nlip`).
    pub url: &'a str,
    /// The host it was addressed to, without port: checked against the allowed domains, and
    /// what a legacy header signs.
    pub domain: &'a str,
    /// Its headers (names as sent; for a legacy credential, `Authorization` alone).
    pub headers: BTreeMap<String, String>,
    /// Its body, when the credential may cover one (`Content-Digest`).
    pub body: Option<&'a [u8]>,
}

impl<'a> SignedRequest<'a> {
    /// A legacy `DIDWba …` credential on its own (a header value, or carried in a message),
    /// addressed to `domain`.
    pub fn legacy(credential: &str, domain: &'a str) -> SignedRequest<'a> {
        SignedRequest {
            method: "GET",
            url: "",
            domain,
            headers: BTreeMap::from([("Authorization".to_owned(), credential.to_owned())]),
            body: None,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The legacy header, when the request carries no HTTP signature.
    fn legacy_header(&self) -> Option<&str> {
        if self.header("Signature-Input").is_some() {
            return None;
        }
        self.header("Authorization")
    }
}

/// The DID a request's credential claims, before anything is verified: the DID of an HTTP
/// signature's `keyid`, else the legacy header's `did`. Only `did:wba` DIDs are taken.
pub fn claimed_did(request: &SignedRequest<'_>) -> Result<String, DidWbaError> {
    let did = if let Some(credential) = request.legacy_header() {
        extract_auth_header_parts(credential)
            .map_err(|e| DidWbaError::Malformed(e.to_string()))?
            .did
    } else {
        let metadata = extract_signature_metadata(&request.headers)
            .map_err(|e| DidWbaError::Malformed(e.to_string()))?;
        let did = metadata.keyid.split('#').next().unwrap_or_default();
        did.to_owned()
    };
    if !did.starts_with("did:wba:") {
        return Err(DidWbaError::Malformed(format!(
            "{did:?} is not a did:wba DID"
        )));
    }
    Ok(did)
}

/// The verifier shared by every request (see the module docs).
pub struct DidWba {
    config: DidWbaVerifierConfig,
    nonces: Arc<Nonces>,
}

impl std::fmt::Debug for DidWba {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DidWba")
            .field("allowed_domains", &self.config.allowed_domains)
            .field("max_age_minutes", &self.config.timestamp_expiration_minutes)
            .finish_non_exhaustive()
    }
}

impl DidWba {
    pub fn new(settings: &DidWbaSettings) -> Result<DidWba, DidWbaError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| DidWbaError::Setup(e.to_string()))?;
        let max_age = Duration::from_secs(u64::from(settings.max_age_minutes) * 60);
        let nonces = Arc::new(Nonces {
            seen: Mutex::default(),
            keep: max_age + CLOCK_SKEW,
            max: settings.max_nonces,
        });
        let memory = Arc::clone(&nonces);
        let config = DidWbaVerifierConfig {
            jwt_private_key: Some(hex::encode(secret)),
            jwt_algorithm: "HS256".to_owned(),
            timestamp_expiration_minutes: i64::from(settings.max_age_minutes),
            allowed_domains: Some(settings.allowed_domains.clone()),
            emit_authentication_info_header: false,
            emit_legacy_authorization_header: false,
            require_nonce_for_http_signatures: true,
            external_nonce_validator: Some(Arc::new(move |did: &str, nonce: &str| {
                memory.fresh(did, nonce)
            })),
            ..DidWbaVerifierConfig::default()
        };
        Ok(DidWba { config, nonces })
    }

    /// The service domains this agent answers as (`allowed_domains`): what a legacy credential
    /// carried inside a message may be addressed to.
    pub fn domains(&self) -> &[String] {
        self.config.allowed_domains.as_deref().unwrap_or_default()
    }

    /// How old a signature may be (`max_age_minutes`).
    pub(crate) fn max_age(&self) -> Duration {
        let minutes = u64::try_from(self.config.timestamp_expiration_minutes).unwrap_or(0);
        Duration::from_secs(minutes * 60)
    }

    /// Spends `nonce` of `did` in the nonce memory: refused when it was spent within the
    /// window, busy when the memory is full.
    pub(crate) fn spend_nonce(&self, did: &str, nonce: &str) -> Result<(), DidWbaError> {
        if self.nonces.fresh(did, nonce) {
            return Ok(());
        }
        if self.nonces.is_full() {
            return Err(DidWbaError::Busy);
        }
        Err(DidWbaError::Refused(format!(
            "the nonce {nonce:?} was used already"
        )))
    }

    /// Verifies `request`'s credential against `document`, the DID document of
    /// [`claimed_did`]; answers the verified DID.
    pub async fn verify(
        &self,
        request: &SignedRequest<'_>,
        document: &Value,
    ) -> Result<String, DidWbaError> {
        if let Some(credential) = request.legacy_header() {
            verify_auth_header_signature(credential, document, request.domain)
                .map_err(|e| DidWbaError::Refused(e.to_string()))?;
        }
        // The verifier is per request and cheap; what must be shared (the nonces) is behind
        // its own short lock, taken inside the check.
        let mut verifier = DidWbaVerifier::new(self.config.clone());
        let verified = verifier
            .verify_request_with_did_document(
                request.method,
                request.url,
                &request.headers,
                request.body,
                Some(request.domain),
                document,
            )
            .await;
        match verified {
            Ok(success) => Ok(success.did),
            Err(e) if e.message.to_ascii_lowercase().contains("nonce") && self.nonces.is_full() => {
                Err(DidWbaError::Busy)
            }
            Err(e) => Err(DidWbaError::Refused(e.message)),
        }
    }
}

/// The nonces accepted within the window, by `did:nonce`.
#[derive(Debug)]
struct Nonces {
    seen: Mutex<HashMap<String, Instant>>,
    keep: Duration,
    max: usize,
}

impl Nonces {
    /// Whether `nonce` is new for `did` within the window; remembers it when it is.
    fn fresh(&self, did: &str, nonce: &str) -> bool {
        let key = format!("{did}:{nonce}");
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = seen.get(&key)
            && now.duration_since(*at) <= self.keep
        {
            return false;
        }
        if seen.len() >= self.max {
            seen.retain(|_, at| now.duration_since(*at) <= self.keep);
            if seen.len() >= self.max {
                return false;
            }
        }
        seen.insert(key, now);
        true
    }

    fn is_full(&self) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.len() >= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anp::PrivateKeyMaterial;
    use anp::authentication::{
        DidDocumentOptions, create_did_wba_document, generate_auth_header,
        generate_http_signature_headers,
    };

    fn identity() -> (Value, PrivateKeyMaterial) {
        let options = DidDocumentOptions {
            path_segments: vec!["agents".into(), "alice".into()],
            ..DidDocumentOptions::default()
        };
        let bundle = create_did_wba_document("agent-a.example", options).expect("a document");
        let pem = &bundle.keys["key-1"].private_key_pem;
        let key = PrivateKeyMaterial::from_pem(pem).expect("a key");
        (bundle.did_document, key)
    }

    fn settings(max_nonces: usize) -> DidWbaSettings {
        DidWbaSettings {
            allowed_domains: vec!["agent-b.example".into()],
            max_age_minutes: 5,
            max_nonces,
        }
    }

    fn signed<'a>(
        document: &Value,
        key: &PrivateKeyMaterial,
        url: &'a str,
        body: &'a [u8],
    ) -> SignedRequest<'a> {
        let headers = generate_http_signature_headers(
            document,
            url,
            "POST",
            key,
            None,
            Some(body),
            Default::default(),
        )
        .expect("signed");
        SignedRequest {
            method: "POST",
            url,
            domain: "agent-b.example",
            headers,
            body: Some(body),
        }
    }

    #[tokio::test]
    async fn signatures_verify_once_and_forgeries_do_not() {
        let (document, key) = identity();
        let did = document["id"].as_str().expect("an id").to_owned();
        let verifier = DidWba::new(&settings(100)).expect("a verifier");
        let url = "https://agent-b.example/nlip";

        let request = signed(&document, &key, url, b"{}");
        assert_eq!(claimed_did(&request), Ok(did.clone()));
        assert_eq!(verifier.verify(&request, &document).await, Ok(did.clone()));
        assert!(
            matches!(verifier.verify(&request, &document).await, Err(DidWbaError::Refused(m)) if m.contains("Nonce")),
            "a replay is refused"
        );

        let mut tampered = signed(&document, &key, url, b"{}");
        tampered.body = Some(b"{\"x\":1}");
        assert!(verifier.verify(&tampered, &document).await.is_err());

        let (_, other_key) = identity();
        let forged = signed(&document, &other_key, url, b"{}");
        assert!(verifier.verify(&forged, &document).await.is_err());

        let mut elsewhere = signed(&document, &key, url, b"{}");
        elsewhere.domain = "agent-c.example";
        assert!(verifier.verify(&elsewhere, &document).await.is_err());

        let legacy = generate_auth_header(&document, "agent-b.example", &key, "1.1")
            .expect("a legacy header");
        let request = SignedRequest::legacy(&legacy, "agent-b.example");
        assert_eq!(claimed_did(&request), Ok(did.clone()));
        assert_eq!(verifier.verify(&request, &document).await, Ok(did));
        assert!(verifier.verify(&request, &document).await.is_err());

        let forged = generate_auth_header(&document, "agent-b.example", &other_key, "1.1")
            .expect("a legacy header");
        assert!(
            verifier
                .verify(
                    &SignedRequest::legacy(&forged, "agent-b.example"),
                    &document
                )
                .await
                .is_err()
        );
        assert!(matches!(
            claimed_did(&SignedRequest::legacy("Bearer x", "agent-b.example")),
            Err(DidWbaError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn a_full_nonce_memory_refuses_rather_than_forgets() {
        let (document, key) = identity();
        let verifier = DidWba::new(&settings(1)).expect("a verifier");
        let url = "https://agent-b.example/anp/rpc";
        let first = signed(&document, &key, url, b"[]");
        assert!(verifier.verify(&first, &document).await.is_ok());
        let second = signed(&document, &key, url, b"[]");
        assert_eq!(
            verifier.verify(&second, &document).await,
            Err(DidWbaError::Busy)
        );
        assert!(
            verifier.verify(&first, &document).await.is_err(),
            "still remembered"
        );
    }
}
