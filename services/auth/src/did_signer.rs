//! DID-WBA from the client's side (ANP-02): a [`DidSigner`] holds a `did:wba` DID document and
//! the private key of one of its verification methods, and signs each HTTP request it is given
//! with an RFC 9421 HTTP Message Signature (`Signature-Input`, `Signature`, and `Content-Digest`
//! over a body), a fresh nonce and the current time each. A server that takes DID-WBA (such as
//! [`crate::did_wba::DidWba`]) resolves the DID and checks the signature.
//!
//! The key is checked against the document when the signer is made: a request signed with a
//! key the document does not hold would be refused by every server, so the mismatch is an
//! error at start rather than a 401 later.

use std::collections::BTreeMap;

use anp::PrivateKeyMaterial;
use anp::authentication::{generate_http_signature_headers, verify_http_message_signature};
use serde_json::Value;

use crate::did_wba::DidWbaError;

/// A DID-WBA identity that signs requests (see the module docs). `Debug` never shows the key.
pub struct DidSigner {
    did: String,
    document: Value,
    key: PrivateKeyMaterial,
}

impl std::fmt::Debug for DidSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DidSigner")
            .field("did", &self.did)
            .finish_non_exhaustive()
    }
}

impl DidSigner {
    /// A signer for `document` (a `did:wba` DID document, JSON) with the PEM private key
    /// `key_pem`, which must be the key of one of the document's verification methods.
    pub fn new(document: &str, key_pem: &str) -> Result<DidSigner, DidWbaError> {
        let document: Value = serde_json::from_str(document)
            .map_err(|e| malformed(&format!("the DID document is not JSON: {e}")))?;
        let did = document
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| id.starts_with("did:wba:"))
            .ok_or_else(|| malformed("the DID document's id is not a did:wba DID"))?
            .to_owned();
        let key = PrivateKeyMaterial::from_pem(key_pem)
            .map_err(|e| malformed(&format!("the private key is not a PEM key: {e}")))?;
        let signer = DidSigner { did, document, key };
        // A request signed once, and checked against the document as a server would.
        let url = "https://parley.invalid/";
        let headers = signer.sign("GET", url, None)?;
        verify_http_message_signature(&signer.document, "GET", url, &headers, None).map_err(
            |_| malformed("the private key is not the key of any of the DID document's methods"),
        )?;
        Ok(signer)
    }

    /// The DID this signer speaks for.
    pub fn did(&self) -> &str {
        &self.did
    }

    /// The headers that sign a `method` request to `url` with `body` (a `Content-Digest` when
    /// there is one).
    pub fn sign(
        &self,
        method: &str,
        url: &str,
        body: Option<&[u8]>,
    ) -> Result<BTreeMap<String, String>, DidWbaError> {
        generate_http_signature_headers(
            &self.document,
            url,
            method,
            &self.key,
            None,
            body,
            Default::default(),
        )
        .map_err(|e| malformed(&format!("the request cannot be signed: {e}")))
    }
}

fn malformed(why: &str) -> DidWbaError {
    DidWbaError::Malformed(why.to_owned())
}

#[cfg(test)]
mod tests {
    use anp::authentication::{DidDocumentOptions, create_did_wba_document};

    use super::*;
    use crate::did_wba::{DidWba, DidWbaSettings, SignedRequest, claimed_did};

    fn bundle() -> (String, String) {
        let options = DidDocumentOptions {
            path_segments: vec!["agents".into(), "alice".into()],
            ..DidDocumentOptions::default()
        };
        let bundle = create_did_wba_document("agent-a.example", options).expect("a document");
        let document = bundle.did_document.to_string();
        (document, bundle.keys["key-1"].private_key_pem.clone())
    }

    #[tokio::test]
    async fn what_a_signer_signs_a_server_verifies() {
        let (document, key) = bundle();
        let signer = DidSigner::new(&document, &key).expect("a signer");
        let url = "https://agent-b.example/nlip";
        let headers = signer.sign("POST", url, Some(b"{}")).expect("signed");
        let request = SignedRequest {
            method: "POST",
            url,
            domain: "agent-b.example",
            headers,
            body: Some(b"{}"),
        };
        assert_eq!(claimed_did(&request).as_deref(), Ok(signer.did()));
        let verifier = DidWba::new(&DidWbaSettings {
            allowed_domains: vec!["agent-b.example".into()],
            max_age_minutes: 5,
            max_nonces: 10,
        })
        .expect("a verifier");
        let document: Value = serde_json::from_str(&document).expect("JSON");
        assert_eq!(
            verifier.verify(&request, &document).await.as_deref(),
            Ok(signer.did())
        );
        assert!(!format!("{signer:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_key_the_document_does_not_hold_is_refused_at_once() {
        let (document, _) = bundle();
        let (_, other_key) = bundle();
        let err = DidSigner::new(&document, &other_key).expect_err("another key");
        assert!(err.to_string().contains("not the key"), "{err}");
        assert!(DidSigner::new("{}", &other_key).is_err());
        assert!(DidSigner::new(&document, "not a key").is_err());
    }
}
