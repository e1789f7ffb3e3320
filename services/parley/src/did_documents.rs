//! The DID documents of `did:wba` DIDs (ANP-02), fetched for DID-WBA authentication: a DID
//! `did:wba:host%3Aport:seg1:seg2` is published at `https://host:port/seg1/seg2/did.json`, a DID
//! without path segments at `https://host/.well-known/did.json`. Fetched with the server's own
//! HTTP client (the platform's roots and `[tls.client]`'s CA, certificates verified), within
//! `resolve_timeout_ms` and `max_document_bytes`, and kept `document_ttl_s`; a host of
//! `resolve_http_hosts` is fetched over plain http (a private deployment's, a test's). When
//! `did_hosts` is set, DIDs of other hosts are refused before anything is fetched.
//!
//! A document that is not found, too large, not JSON or not the DID's is an error, and not
//! remembered: the credential naming it is refused (401), and the next one fetches again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::did_wba::DidWbaSettings;
use crate::tls::ClientTls;

/// Why a DID's document could not be had.
#[derive(Debug, thiserror::Error)]
pub enum DidDocumentError {
    #[error("{did:?} is not a did:wba DID this agent resolves: {reason}")]
    Unresolvable { did: String, reason: String },
    #[error("cannot fetch the DID document {url}: {message}")]
    Fetch { url: String, message: String },
    #[error("the DID document at {url} is not valid: {message}")]
    Invalid { url: String, message: String },
}

/// Fetches and keeps DID documents (see the module docs).
#[derive(Debug)]
pub struct DidDocuments {
    http: reqwest::Client,
    http_hosts: Vec<String>,
    did_hosts: Vec<String>,
    ttl: Duration,
    max_bytes: usize,
    max_cached: usize,
    cached: Mutex<HashMap<String, (Instant, Arc<Value>)>>,
}

impl DidDocuments {
    pub fn new(settings: &DidWbaSettings, tls: &ClientTls) -> Result<DidDocuments, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.resolve_timeout_ms))
            .redirect(reqwest::redirect::Policy::none());
        if let Ok(configs) = tls.configs() {
            builder = builder.tls_backend_preconfigured(configs.http.clone());
        }
        Ok(DidDocuments {
            http: builder.build()?,
            http_hosts: settings.resolve_http_hosts.clone(),
            did_hosts: settings.did_hosts.clone(),
            ttl: Duration::from_secs(settings.document_ttl_s),
            max_bytes: settings.max_document_bytes,
            max_cached: settings.max_cached_documents,
            cached: Mutex::default(),
        })
    }

    /// The document of `did`: kept, or fetched and kept.
    pub async fn resolve(&self, did: &str) -> Result<Arc<Value>, DidDocumentError> {
        {
            let cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, document)) = cached.get(did)
                && at.elapsed() < self.ttl
            {
                return Ok(Arc::clone(document));
            }
        }
        let url = self.url_of(did)?;
        let document = Arc::new(self.fetch(&url).await?);
        if document.get("id").and_then(Value::as_str) != Some(did) {
            return Err(DidDocumentError::Invalid {
                url: url.to_string(),
                message: format!("its id is not {did:?}"),
            });
        }
        if !self.ttl.is_zero() {
            let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
            if cached.len() >= self.max_cached {
                cached.retain(|_, (at, _)| at.elapsed() < self.ttl);
                if cached.len() >= self.max_cached {
                    cached.clear();
                }
            }
            cached.insert(did.to_owned(), (Instant::now(), Arc::clone(&document)));
        }
        Ok(document)
    }

    /// Where `did`'s document is published (see the module docs).
    pub fn url_of(&self, did: &str) -> Result<url::Url, DidDocumentError> {
        let unresolvable = |reason: &str| DidDocumentError::Unresolvable {
            did: did.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = did
            .strip_prefix("did:wba:")
            .ok_or_else(|| unresolvable("not a did:wba DID"))?;
        let mut parts = rest.split(':');
        let authority = parts
            .next()
            .unwrap_or_default()
            .replace("%3A", ":")
            .replace("%3a", ":");
        let segments: Vec<&str> = parts.collect();
        let plain = |text: &str| {
            !text.is_empty()
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '~'))
        };
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority.as_str(), None),
        };
        if !plain(host) || port.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(unresolvable("its host is not a host name (and port)"));
        }
        if segments
            .iter()
            .any(|s| !plain(s) || s.chars().all(|c| c == '.'))
        {
            return Err(unresolvable(
                "a path segment is empty or holds other than letters, digits, `.`, `-`, `_`, `~`",
            ));
        }
        if !self.did_hosts.is_empty() && !self.did_hosts.iter().any(|h| h == host) {
            return Err(unresolvable(
                "its host is not among access.did_wba.did_hosts",
            ));
        }
        let scheme = if self.http_hosts.iter().any(|h| h == host) {
            "http"
        } else {
            "https"
        };
        let path = if segments.is_empty() {
            ".well-known".to_owned()
        } else {
            segments.join("/")
        };
        url::Url::parse(&format!("{scheme}://{authority}/{path}/did.json"))
            .map_err(|e| unresolvable(&e.to_string()))
    }

    /// The JSON at `url`, of at most `max_bytes`.
    async fn fetch(&self, url: &url::Url) -> Result<Value, DidDocumentError> {
        let failed = |message: String| DidDocumentError::Fetch {
            url: url.to_string(),
            message,
        };
        let mut response = self
            .http
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/did+json, application/json",
            )
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| failed(crate::error::chain(&e)))?;
        let too_large = || failed(format!("larger than {} bytes", self.max_bytes));
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(crate::error::chain(&e)))?
        {
            if bytes.len() + chunk.len() > self.max_bytes {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).map_err(|e| DidDocumentError::Invalid {
            url: url.to_string(),
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn documents(settings: DidWbaSettings) -> DidDocuments {
        DidDocuments::new(&settings, &ClientTls::default()).expect("a client")
    }

    #[test]
    fn dids_map_to_their_documents_urls() {
        let d = documents(DidWbaSettings {
            resolve_http_hosts: vec!["localhost".into()],
            ..DidWbaSettings::default()
        });
        let url = |did: &str| d.url_of(did).map(|u| u.to_string());
        assert_eq!(
            url("did:wba:example.com").expect("a url"),
            "https://example.com/.well-known/did.json"
        );
        assert_eq!(
            url("did:wba:example.com%3A8443:user:alice").expect("a url"),
            "https://example.com:8443/user/alice/did.json"
        );
        assert_eq!(
            url("did:wba:localhost%3A8080:agents:e1_abc").expect("a url"),
            "http://localhost:8080/agents/e1_abc/did.json"
        );
        for bad in [
            "did:web:example.com",
            "did:wba:",
            "did:wba:exa/mple.com",
            "did:wba:example.com::x",
            "did:wba:example.com:..%2F",
            "did:wba:example.com:..:x",
            "did:wba:example.com%3Ahttp",
            "did:wba:user@example.com",
        ] {
            assert!(url(bad).is_err(), "{bad}");
        }
        let only = documents(DidWbaSettings {
            did_hosts: vec!["partner.example".into()],
            ..DidWbaSettings::default()
        });
        assert!(only.url_of("did:wba:partner.example:a").is_ok());
        assert!(only.url_of("did:wba:other.example:a").is_err());
    }
}
