//! DID-WBA credentials (ANP-02) as an [`Access`] scheme: the request's signature is checked by
//! `parley_auth::did_wba` against the DID document `crate::did_documents` fetched, and the
//! verified DID names the peers-file entry with that `did` (its id and grants), or else a peer
//! named by the DID with the anonymous grants, as a client certificate without an entry is.
//! A credential that proves nothing is `unauthenticated`, never anonymous.
//!
//! Which requests take this path is decided from the head alone, so requests without DID-WBA
//! headers cost one header lookup more: a `Signature-Input` header (an HTTP Message Signature,
//! which takes precedence over any `Authorization`) or an `Authorization: DIDWba …` header, when
//! `[access.did_wba]` is on. A signature covering the body (`Content-Digest`) is checked with
//! the body: `POST /nlip` and `POST /anp/rpc` read it before resolving such a caller.
//!
//! The signed target URI is the request's as this listener received it (`http` or `https` by
//! the listener's TLS, the `Host` or HTTP/2 authority, the path and query): a proxy in front
//! that changes any of them must pass them through unchanged for signatures to verify.

use std::collections::BTreeMap;

use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use parley_auth::did_wba::{DidWba, SignedRequest, claimed_did};
use parley_auth::origin_proof::OriginRequest;
use serde_json::Value;

use super::{Access, Principal, Scheme};
use crate::did_documents::DidDocuments;
use crate::error::ApiError;

/// The scheme's name in the audit log and in errors.
pub const SCHEME: &str = "did-wba";

/// The HTTP Message Signature header whose presence selects this scheme.
const SIGNATURE_INPUT: &str = "signature-input";

/// What DID-WBA needs at run time: the verifier (with its nonce memory) and the documents.
#[derive(Debug)]
pub struct DidWbaAccess {
    verifier: DidWba,
    documents: DidDocuments,
}

impl DidWbaAccess {
    pub fn new(verifier: DidWba, documents: DidDocuments) -> DidWbaAccess {
        DidWbaAccess {
            verifier,
            documents,
        }
    }
}

/// Whether an `Authorization` value is a legacy DID-WBA credential.
pub fn is_legacy(authorization: &str) -> bool {
    authorization
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("didwba "))
}

impl Access {
    /// Whether the request's head presents a DID-WBA credential this agent takes.
    pub fn presents_did_wba(&self, headers: &HeaderMap) -> bool {
        self.did_wba.is_some()
            && (headers.contains_key(SIGNATURE_INPUT)
                || headers
                    .get(header::AUTHORIZATION)
                    .and_then(|h| h.to_str().ok())
                    .is_some_and(is_legacy))
    }

    /// Whether the request's credential is an HTTP Message Signature, which may cover the body:
    /// its caller is resolved once the body is read.
    pub fn did_wba_signs_body(&self, headers: &HeaderMap) -> bool {
        self.did_wba.is_some() && headers.contains_key(SIGNATURE_INPUT)
    }

    /// The principal of a request that [`presents_did_wba`](Access::presents_did_wba), with its
    /// body when one was read; `tls`: whether the listener speaks https.
    pub async fn did_wba_request(
        &self,
        head: &Parts,
        tls: bool,
        body: Option<&[u8]>,
    ) -> Result<Principal, ApiError> {
        let unauthenticated = |why: &str| ApiError::Unauthenticated(why.to_owned());
        let authority = head
            .uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| head.headers.get(header::HOST)?.to_str().ok())
            .ok_or_else(|| unauthenticated("a DID-WBA signed request names its host"))?;
        let authority = authority
            .parse::<axum::http::uri::Authority>()
            .map_err(|_| unauthenticated("the request's host is not a host name"))?;
        let domain = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let signed = head.headers.contains_key(SIGNATURE_INPUT);
        if !signed {
            let credential = head
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            return self.did_wba_credential(credential, domain).await;
        }
        let scheme = if tls { "https" } else { "http" };
        let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = format!("{scheme}://{}{path}", authority.as_str());
        // The signature's headers; an `Authorization` beside it is not its credential.
        let headers: BTreeMap<String, String> = head
            .headers
            .iter()
            .filter(|(name, _)| *name != header::AUTHORIZATION)
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let request = SignedRequest {
            method: head.method.as_str(),
            url: &url,
            domain,
            headers,
            body,
        };
        self.did_wba(&request).await
    }

    /// The principal of a legacy DID-WBA credential (`DIDWba did="…", nonce="…", …`) addressed
    /// to `domain` (the host the peer reached this agent at, without port), wherever the peer
    /// carried it: an `Authorization` header, or a message's authentication token.
    pub async fn did_wba_credential(
        &self,
        credential: &str,
        domain: &str,
    ) -> Result<Principal, ApiError> {
        if !is_legacy(credential) {
            return Err(ApiError::Unauthenticated(
                "a DID-WBA credential reads DIDWba did=\"…\", nonce=\"…\", timestamp=\"…\", verification_method=\"…\", signature=\"…\"".to_owned(),
            ));
        }
        self.did_wba(&SignedRequest::legacy(credential, domain))
            .await
    }

    /// Whether this agent takes DID-WBA credentials.
    pub fn takes_did_wba(&self) -> bool {
        self.did_wba.is_some()
    }

    /// The principal of a legacy DID-WBA credential carried inside an NLIP message, where the
    /// host the peer reached is not at hand: it must be addressed to one of `allowed_domains`
    /// (the signature is checked before its nonce is spent, so trying each costs no nonce).
    pub async fn did_wba_in_message(&self, credential: &str) -> Result<Principal, ApiError> {
        let domains = match &self.did_wba {
            Some(did_wba) => did_wba.verifier.domains().to_vec(),
            None => Vec::new(),
        };
        let mut refused =
            ApiError::Unauthenticated("this agent does not take DID-WBA credentials".to_owned());
        for domain in &domains {
            match self.did_wba_credential(credential, domain).await {
                Ok(principal) => return Ok(principal),
                Err(e) => refused = e,
            }
        }
        Err(refused)
    }

    /// The principal an ANP request's origin proof proves (`params.auth.origin_proof`, signed
    /// over `method`, `params.meta` and `params.body`); `None` when the request carries no proof
    /// or this agent takes no DID-WBA. A proof that proves nothing is `unauthenticated`.
    pub async fn origin_proven(
        &self,
        method: &str,
        params: &serde_json::Map<String, Value>,
    ) -> Result<Option<Principal>, ApiError> {
        let Some(did_wba) = &self.did_wba else {
            return Ok(None);
        };
        let Some(proof) = params.get("auth").and_then(|a| a.get("origin_proof")) else {
            return Ok(None);
        };
        let empty = Value::Object(serde_json::Map::new());
        let request = OriginRequest {
            method,
            meta: params.get("meta").unwrap_or(&empty),
            body: params.get("body").unwrap_or(&empty),
            proof,
        };
        let did = request.claimed_did().map_err(|e| refused(&e))?;
        let document = did_wba.document(&did).await?;
        let verified = did_wba
            .verifier
            .verify_origin(&request, &document)
            .map_err(|e| refused(&e))?;
        Ok(Some(self.did_principal(&verified)))
    }

    /// Resolves the claimed DID's document (no lock held), then verifies the credential.
    async fn did_wba(&self, request: &SignedRequest<'_>) -> Result<Principal, ApiError> {
        let Some(did_wba) = &self.did_wba else {
            return Err(ApiError::Unauthenticated(
                "this agent does not take DID-WBA credentials".to_owned(),
            ));
        };
        let did = claimed_did(request).map_err(|e| refused(&e))?;
        let document = did_wba.document(&did).await?;
        let verified = did_wba
            .verifier
            .verify(request, &document)
            .await
            .map_err(|e| refused(&e))?;
        Ok(self.did_principal(&verified))
    }

    /// The peer a verified DID names: its peers-file entry, or a peer named by the DID with the
    /// anonymous grants.
    fn did_principal(&self, did: &str) -> Principal {
        let entry = self.file.by_did(did);
        self.declared_or_named(entry, did, Scheme::DidWba)
    }
}

impl DidWbaAccess {
    /// The DID document of `did`, fetched (no lock held) or cached.
    async fn document(&self, did: &str) -> Result<std::sync::Arc<Value>, ApiError> {
        self.documents.resolve(did).await.map_err(|e| refused(&e))
    }
}

/// A credential that proves nothing: `unauthenticated`, never anonymous.
fn refused(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::Unauthenticated(e.to_string())
}
