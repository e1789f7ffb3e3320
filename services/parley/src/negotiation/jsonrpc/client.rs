//! The caller's side: [`RpcLink`], JSON-RPC requests to a peer's negotiation end-point, found
//! through ANP discovery when the peer is named by its base URL.
//!
//! Discovery (ANP-08, then ANP-07): `GET /.well-known/agent-descriptions`, a `CollectionPage`
//! whose items are agent descriptions (inline when an item carries its `interfaces`, else
//! fetched by `@id`), walked in order and through its `next` pages until a description has a
//! `MetaProtocolInterface` of profile `anp.meta.negotiation.v1`; relative URLs are resolved
//! against the document that holds them. The walk is bounded (pages, descriptions, bytes and
//! time per document) and a page leading back to one already read ends it.

use parley_anp::rpc::{NegotiationResult, PROFILE, RpcError};
use parley_store::Direction;
use serde_json::{Value, json};

use crate::client::{ClientError, Credential, names_a_host};
use crate::tls::ClientTls;

/// Why a JSON-RPC exchange with a peer failed (its JSON-RPC errors are answers, not these).
#[derive(Debug, thiserror::Error)]
pub enum RpcLinkError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("ANP discovery at {url} failed: {reason}")]
    Discovery { url: String, reason: String },
    #[error("{url} answered HTTP {status} without a JSON-RPC response: {body}")]
    NotJsonRpc {
        url: String,
        status: u16,
        body: String,
    },
}

/// A peer's JSON-RPC negotiation end-point.
#[derive(Debug)]
pub struct RpcLink {
    http: reqwest::Client,
    /// What every request presents (a bearer token's header, or a fresh DID-WBA signature).
    credential: Option<Credential>,
    /// The end-point requests go to.
    pub endpoint: url::Url,
    next_id: u64,
    /// Every request and response, in order.
    pub transcript: Vec<(Direction, Value)>,
}

/// Where discovery starts for `url`, when it names the agent rather than an end-point: its
/// `/.well-known/agent-descriptions` for a URL without a path, the URL itself for a discovery
/// page or an agent description (a path ending in `.json`); `None` for any other path, which
/// is the end-point itself.
pub fn discovery_url(url: &url::Url) -> Option<url::Url> {
    let path = url.path();
    if path.is_empty() || path == "/" {
        return url.join(super::describe::DISCOVERY_PATH).ok();
    }
    (path.ends_with(super::describe::DISCOVERY_PATH) || path.ends_with(".json"))
        .then(|| url.clone())
}

impl RpcLink {
    /// The negotiation end-point of the agent at `url` (see [`discovery_url`]; without a
    /// scheme, `http://`), trusting and presenting what `tls` says over `https://`; every
    /// JSON-RPC request presents `credential`, when there is one.
    pub async fn connect(
        url: &str,
        tls: &ClientTls,
        credential: Option<&Credential>,
    ) -> Result<RpcLink, RpcLinkError> {
        let invalid = |reason: String| ClientError::Url {
            url: url.to_owned(),
            reason,
        };
        let given = if names_a_host(url) {
            format!("http://{url}")
        } else {
            url.to_owned()
        };
        let parsed = url::Url::parse(&given).map_err(|e| invalid(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "unsupported scheme {:?}; use http(s)",
                parsed.scheme()
            ))
            .into());
        }
        let mut builder = reqwest::Client::builder();
        if parsed.scheme() == "https" {
            builder = builder
                .tls_backend_preconfigured(tls.configs().map_err(ClientError::from)?.http.clone());
        }
        let http = builder.build().map_err(ClientError::Http)?;
        let endpoint = match discovery_url(&parsed) {
            Some(start) => discover(&http, start).await?,
            None => parsed,
        };
        Ok(RpcLink {
            http,
            credential: credential.cloned(),
            endpoint,
            next_id: 0,
            transcript: Vec::new(),
        })
    }

    /// Calls `method` with `params`: the result, or the peer's JSON-RPC error.
    pub async fn call(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, RpcError>, RpcLinkError> {
        self.next_id += 1;
        let id = format!("parley-{}", self.next_id);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.transcript.push((Direction::Outbound, request.clone()));
        let body = serde_json::to_vec(&request).expect("a JSON value serializes");
        let mut post = self
            .http
            .post(self.endpoint.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(credential) = &self.credential {
            for (name, value) in credential.headers("POST", &self.endpoint, Some(&body))? {
                post = post.header(name, value);
            }
        }
        let response = post.body(body).send().await.map_err(ClientError::Http)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(ClientError::Http)?;
        let not_rpc = || RpcLinkError::NotJsonRpc {
            url: self.endpoint.to_string(),
            status,
            body: String::from_utf8_lossy(&body).chars().take(200).collect(),
        };
        let answer: Value = serde_json::from_slice(&body).map_err(|_| not_rpc())?;
        if answer.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(not_rpc());
        }
        self.transcript.push((Direction::Inbound, answer.clone()));
        if let Some(error) = answer.get("error") {
            return Ok(Err(RpcError::from_value(error).ok_or_else(not_rpc)?));
        }
        answer.get("result").cloned().map(Ok).ok_or_else(not_rpc)
    }

    /// `anp.get_capabilities`.
    pub async fn capabilities(&mut self) -> Result<Result<Value, RpcError>, RpcLinkError> {
        let params = json!({"meta": {"profile": parley_anp::rpc::CORE_PROFILE}, "body": {}});
        self.call(parley_anp::rpc::method::GET_CAPABILITIES, params)
            .await
    }

    /// `anp.negotiate` with `body` (the profile, security profile and content type Parley
    /// speaks go in `meta`).
    pub async fn negotiate(
        &mut self,
        body: Value,
    ) -> Result<Result<NegotiationResult, RpcError>, RpcLinkError> {
        let params = json!({
            "meta": {
                "profile": PROFILE,
                "security_profile": parley_anp::rpc::SECURITY_PROFILE,
                "content_type": parley_anp::rpc::CONTENT_TYPE,
            },
            "body": body,
        });
        let endpoint = self.endpoint.to_string();
        match self
            .call(parley_anp::rpc::method::NEGOTIATE, params)
            .await?
        {
            Ok(result) => {
                serde_json::from_value(result)
                    .map(Ok)
                    .map_err(|e| RpcLinkError::NotJsonRpc {
                        url: endpoint,
                        status: 200,
                        body: format!("a result that is not a NegotiationResult: {e}"),
                    })
            }
            Err(e) => Ok(Err(e)),
        }
    }
}

/// How far discovery walks a peer's directory: pages, descriptions fetched, bytes per
/// document, and time per fetch. A directory is walked, not trusted.
const MAX_PAGES: usize = 16;
const MAX_DESCRIPTIONS: usize = 64;
const MAX_DOCUMENT_BYTES: usize = 1 << 20;
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Follows discovery from `start` to the negotiation end-point: an agent description's
/// `MetaProtocolInterface`, or the first one among the descriptions a discovery page lists,
/// its `next` pages included (see the module docs).
async fn discover(http: &reqwest::Client, start: url::Url) -> Result<url::Url, RpcLinkError> {
    let mut url = start.clone();
    let mut page = fetch(http, &url).await?;
    if page.get("@type").and_then(Value::as_str) != Some("CollectionPage") {
        return meta_interface(&url, &page)
            .ok_or_else(|| failed(&url, "the agent description has no MetaProtocolInterface"));
    }
    let mut seen = std::collections::HashSet::from([url.clone()]);
    let mut fetched = 0;
    let mut skipped = None;
    loop {
        let items = page.get("items").and_then(Value::as_array);
        for item in items.into_iter().flatten() {
            if item.get("interfaces").is_some() {
                if let Some(endpoint) = meta_interface(&url, item) {
                    return Ok(endpoint);
                }
                continue;
            }
            let Some(id) = item.get("@id").and_then(Value::as_str) else {
                continue;
            };
            fetched += 1;
            if fetched > MAX_DESCRIPTIONS {
                return Err(failed(
                    &start,
                    &format!(
                        "no MetaProtocolInterface in the first {MAX_DESCRIPTIONS} agent descriptions listed"
                    ),
                ));
            }
            let at = url.join(id).map_err(|e| failed(&url, &e.to_string()))?;
            // One listed agent that cannot be read does not hide the others.
            match fetch(http, &at).await {
                Ok(description) => {
                    if let Some(endpoint) = meta_interface(&at, &description) {
                        return Ok(endpoint);
                    }
                }
                Err(e) => skipped = Some(e),
            }
        }
        let Some(next) = next_page(&page) else {
            break;
        };
        let next = url.join(next).map_err(|e| failed(&url, &e.to_string()))?;
        if !seen.insert(next.clone()) {
            return Err(failed(
                &next,
                "the discovery pages lead back to a page already read",
            ));
        }
        if seen.len() > MAX_PAGES {
            return Err(failed(
                &start,
                &format!("no MetaProtocolInterface within {MAX_PAGES} discovery pages"),
            ));
        }
        page = fetch(http, &next).await?;
        url = next;
    }
    Err(skipped.unwrap_or_else(|| {
        failed(
            &start,
            "no agent description listed has a MetaProtocolInterface of profile anp.meta.negotiation.v1",
        )
    }))
}

/// A discovery page's `next` page: a URL, or an object naming one (`@id` or `url`).
fn next_page(page: &Value) -> Option<&str> {
    let next = page.get("next")?;
    next.as_str()
        .or_else(|| next.get("@id").and_then(Value::as_str))
        .or_else(|| next.get("url").and_then(Value::as_str))
}

/// The negotiation end-point `description` (read at `at`) names: its first
/// `MetaProtocolInterface` of this binding's profile.
fn meta_interface(at: &url::Url, description: &Value) -> Option<url::Url> {
    let interface = description
        .get("interfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|i| {
            i.get("type").and_then(Value::as_str) == Some("MetaProtocolInterface")
                && i.get("profile").and_then(Value::as_str) == Some(PROFILE)
        })?;
    let target = interface.get("url").and_then(Value::as_str)?;
    at.join(target).ok()
}

/// A discovery document: JSON of at most [`MAX_DOCUMENT_BYTES`], within [`FETCH_TIMEOUT`].
async fn fetch(http: &reqwest::Client, url: &url::Url) -> Result<Value, RpcLinkError> {
    let mut response = http
        .get(url.clone())
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(ClientError::Http)?;
    let status = response.status();
    if !status.is_success() {
        return Err(failed(url, &format!("HTTP {}", status.as_u16())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ClientError::Http)? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(failed(
                url,
                &format!("the document is larger than {MAX_DOCUMENT_BYTES} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| failed(url, &format!("not JSON: {e}")))
}

fn failed(url: &url::Url, reason: &str) -> RpcLinkError {
    RpcLinkError::Discovery {
        url: url.to_string(),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_start_discovery_and_end_points_do_not() {
        let at =
            |s: &str| discovery_url(&url::Url::parse(s).expect("a URL")).map(|u| u.to_string());
        assert_eq!(
            at("http://a:1").as_deref(),
            Some("http://a:1/.well-known/agent-descriptions")
        );
        assert_eq!(
            at("http://a:1/agents/parley/ad.json").as_deref(),
            Some("http://a:1/agents/parley/ad.json")
        );
        assert_eq!(at("http://a:1/anp/rpc"), None);
    }
}
