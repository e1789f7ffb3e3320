//! ANP's origin proof: a signature over an ANP request object (`method`, `meta`, `body`) that
//! travels inside the request (`params.auth.origin_proof` of an ANP 1.2 `anp.negotiate`), so
//! the sender is proven whatever carried the request. It is an RFC 9421 signature whose
//! covered components are the method, a logical target URI (`anp://agent/<target DID>`) and
//! the digest of the canonical JSON of the object; the key is one of `meta.sender_did`'s.
//!
//! The `anp` crate checks the signature and that the key belongs to the sender's DID document
//! ([`anp::proof::verify_rfc9421_origin_proof`]). What it leaves to the verifier is decided
//! here, with the rules of [`DidWba`]'s HTTP signatures:
//! - **Addressed to this agent**: `meta.target.did` is a `did:wba` DID of one of the
//!   `allowed_domains` (its host, port aside), as a legacy credential must sign one of them.
//! - **Fresh**: `created` is required, at most `max_age_minutes` old and at most the clock skew
//!   ahead; an `expires` in the past refuses it.
//! - **Once**: its nonce is required and spent in the same memory as the HTTP signatures'
//!   (per DID), after the signature verified, so a forgery spends nothing.

use anp::proof::{
    Rfc9421OriginProof, Rfc9421OriginProofVerificationOptions, verify_rfc9421_origin_proof,
};
use serde_json::Value;

use crate::did_wba::{CLOCK_SKEW, DidWba, DidWbaError};

/// An ANP request object and the origin proof it carries.
#[derive(Debug, Clone, Copy)]
pub struct OriginRequest<'a> {
    /// The request's method (`anp.negotiate`).
    pub method: &'a str,
    /// Its `meta`: `sender_did` and `target` are read.
    pub meta: &'a Value,
    /// Its `body`, as sent.
    pub body: &'a Value,
    /// The proof: `contentDigest`, `signatureInput`, `signature` (snake_case names are read too).
    pub proof: &'a Value,
}

impl OriginRequest<'_> {
    /// The DID the proof claims to be signed by (`meta.sender_did`), before anything is
    /// verified. Only `did:wba` DIDs are taken.
    pub fn claimed_did(&self) -> Result<String, DidWbaError> {
        let did = self
            .meta
            .get("sender_did")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("an origin proof needs meta.sender_did"))?;
        if !did.starts_with("did:wba:") {
            return Err(malformed(&format!("{did:?} is not a did:wba DID")));
        }
        Ok(did.to_owned())
    }

    fn proof(&self) -> Result<Rfc9421OriginProof, DidWbaError> {
        let member = |camel: &str, snake: &str| {
            self.proof
                .get(camel)
                .or_else(|| self.proof.get(snake))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| malformed(&format!("the origin proof has no {camel}")))
        };
        Ok(Rfc9421OriginProof {
            content_digest: member("contentDigest", "content_digest")?,
            signature_input: member("signatureInput", "signature_input")?,
            signature: member("signature", "signature")?,
        })
    }

    /// The domain `meta.target.did` names: the host of a `did:wba` DID, port aside.
    fn target_domain(&self) -> Result<String, DidWbaError> {
        let did = self
            .meta
            .get("target")
            .and_then(|t| t.get("did"))
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("an origin proof needs meta.target.did"))?;
        let host = did
            .strip_prefix("did:wba:")
            .map(|rest| rest.split(':').next().unwrap_or_default())
            .filter(|host| !host.is_empty())
            .ok_or_else(|| malformed(&format!("the target {did:?} is not a did:wba DID")))?;
        // A port is percent-encoded in a did:wba host (`example.com%3A8800`).
        let host = host.replace("%3A", ":").replace("%3a", ":");
        Ok(host
            .rsplit_once(':')
            .map_or(host.as_str(), |(name, _port)| name)
            .to_ascii_lowercase())
    }
}

impl DidWba {
    /// Verifies `request`'s origin proof against `document`, the DID document of
    /// [`OriginRequest::claimed_did`]; answers the verified DID (see the module docs).
    pub fn verify_origin(
        &self,
        request: &OriginRequest<'_>,
        document: &Value,
    ) -> Result<String, DidWbaError> {
        let did = request.claimed_did()?;
        let domain = request.target_domain()?;
        if !self
            .domains()
            .iter()
            .any(|d| d.eq_ignore_ascii_case(&domain))
        {
            return Err(DidWbaError::Refused(format!(
                "the origin proof is addressed to {domain}, not to this agent"
            )));
        }
        let proof = request.proof()?;
        let options = Rfc9421OriginProofVerificationOptions {
            did_document: Some(document.clone()),
            expected_signer_did: Some(did.clone()),
            ..Rfc9421OriginProofVerificationOptions::default()
        };
        let verified = verify_rfc9421_origin_proof(
            &proof,
            request.method,
            request.meta,
            request.body,
            options,
        )
        .map_err(|e| DidWbaError::Refused(format!("the origin proof does not verify: {e}")))?;
        let input = verified.parsed_signature_input;
        let now = unix_now();
        let created = input
            .created
            .ok_or_else(|| malformed("the origin proof's signature has no created time"))?;
        let max_age = i64::try_from(self.max_age().as_secs()).unwrap_or(i64::MAX);
        let skew = i64::try_from(CLOCK_SKEW.as_secs()).unwrap_or(i64::MAX);
        if created < now.saturating_sub(max_age) || created > now.saturating_add(skew) {
            return Err(DidWbaError::Refused(
                "the origin proof's created time is outside the signature window".to_owned(),
            ));
        }
        if input.expires.is_some_and(|expires| expires < now) {
            return Err(DidWbaError::Refused("the origin proof expired".to_owned()));
        }
        let nonce = input
            .nonce
            .ok_or_else(|| malformed("the origin proof's signature has no nonce"))?;
        self.spend_nonce(&did, &nonce)?;
        Ok(did)
    }
}

fn malformed(why: &str) -> DidWbaError {
    DidWbaError::Malformed(why.to_owned())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use anp::PrivateKeyMaterial;
    use anp::authentication::{DidDocumentOptions, create_did_wba_document};
    use anp::proof::{Rfc9421OriginProofGenerationOptions, generate_rfc9421_origin_proof};
    use serde_json::json;

    use super::*;
    use crate::did_wba::DidWbaSettings;

    fn identity() -> (Value, PrivateKeyMaterial, String) {
        let options = DidDocumentOptions {
            path_segments: vec!["agents".into(), "alice".into()],
            ..DidDocumentOptions::default()
        };
        let bundle = create_did_wba_document("agent-a.example", options).expect("a document");
        let key =
            PrivateKeyMaterial::from_pem(&bundle.keys["key-1"].private_key_pem).expect("a key");
        let did = bundle.did_document["id"]
            .as_str()
            .expect("an id")
            .to_owned();
        (bundle.did_document, key, did)
    }

    fn verifier() -> DidWba {
        DidWba::new(&DidWbaSettings {
            allowed_domains: vec!["agent-b.example".into()],
            max_age_minutes: 5,
            max_nonces: 100,
        })
        .expect("a verifier")
    }

    fn meta(sender: &str, target: &str) -> Value {
        json!({
            "profile": "anp.meta.negotiation.v1",
            "sender_did": sender,
            "target": {"kind": "agent", "did": target},
        })
    }

    fn prove(
        key: &PrivateKeyMaterial,
        did: &str,
        meta: &Value,
        body: &Value,
        options: Rfc9421OriginProofGenerationOptions,
    ) -> Value {
        let proof = generate_rfc9421_origin_proof(
            "anp.negotiate",
            meta,
            body,
            key,
            &format!("{did}#key-1"),
            options,
        )
        .expect("a proof");
        serde_json::to_value(proof).expect("JSON")
    }

    fn fresh(nonce: &str) -> Rfc9421OriginProofGenerationOptions {
        Rfc9421OriginProofGenerationOptions {
            nonce: Some(nonce.to_owned()),
            ..Rfc9421OriginProofGenerationOptions::default()
        }
    }

    #[test]
    fn a_proof_verifies_once_and_only_as_signed() {
        let (document, key, did) = identity();
        let verifier = verifier();
        let meta = meta(&did, "did:wba:agent-b.example%3A8443:agents:parley");
        let body = json!({"mode": "structured_selection", "intent": {}});
        let proof = prove(&key, &did, &meta, &body, fresh("n-1"));
        let request = OriginRequest {
            method: "anp.negotiate",
            meta: &meta,
            body: &body,
            proof: &proof,
        };
        assert_eq!(verifier.verify_origin(&request, &document), Ok(did.clone()));
        assert!(
            verifier.verify_origin(&request, &document).is_err(),
            "a replay is refused"
        );

        let other_body = json!({"mode": "natural_language_protocol_drafting", "intent": {}});
        let proof = prove(&key, &did, &meta, &body, fresh("n-2"));
        let tampered = OriginRequest {
            body: &other_body,
            proof: &proof,
            ..request
        };
        assert!(verifier.verify_origin(&tampered, &document).is_err());
        // The forgery spent nothing: the same proof on its own object still verifies.
        let untouched = OriginRequest {
            proof: &proof,
            ..request
        };
        assert_eq!(
            verifier.verify_origin(&untouched, &document),
            Ok(did.clone())
        );

        let (_, other_key, _) = identity();
        let forged = prove(&other_key, &did, &meta, &body, fresh("n-3"));
        let forged = OriginRequest {
            proof: &forged,
            ..request
        };
        assert!(verifier.verify_origin(&forged, &document).is_err());
    }

    #[test]
    fn a_proof_for_another_agent_or_out_of_time_is_refused() {
        let (document, key, did) = identity();
        let verifier = verifier();
        let body = json!({"intent": {}});
        let elsewhere = meta(&did, "did:wba:agent-c.example:agents:parley");
        let proof = prove(&key, &did, &elsewhere, &body, fresh("e-1"));
        let request = OriginRequest {
            method: "anp.negotiate",
            meta: &elsewhere,
            body: &body,
            proof: &proof,
        };
        assert!(
            matches!(verifier.verify_origin(&request, &document), Err(DidWbaError::Refused(m)) if m.contains("agent-c.example"))
        );

        let here = meta(&did, "did:wba:agent-b.example:agents:parley");
        let old = Rfc9421OriginProofGenerationOptions {
            created: Some(unix_now() - 3600),
            ..fresh("e-2")
        };
        let proof = prove(&key, &did, &here, &body, old);
        let stale = OriginRequest {
            meta: &here,
            proof: &proof,
            ..request
        };
        assert!(verifier.verify_origin(&stale, &document).is_err());

        let expired = Rfc9421OriginProofGenerationOptions {
            expires: Some(unix_now() - 10),
            ..fresh("e-3")
        };
        let expired = prove(&key, &did, &here, &body, expired);
        let expired = OriginRequest {
            meta: &here,
            proof: &expired,
            ..request
        };
        assert!(
            matches!(verifier.verify_origin(&expired, &document), Err(DidWbaError::Refused(m)) if m.contains("expired"))
        );

        let unsigned = json!({"contentDigest": "x"});
        let unsigned = OriginRequest {
            meta: &here,
            proof: &unsigned,
            ..request
        };
        assert!(matches!(
            verifier.verify_origin(&unsigned, &document),
            Err(DidWbaError::Malformed(_))
        ));
    }
}
