//! The model end-point of the `openai` reasoner, as start-up sees it: whether it may be called
//! without an API key, and a probe of whether it answers.
//!
//! # Which end-points need a key
//! An end-point on this machine or this network is called without a key when none is
//! configured: local model servers (Ollama, vLLM, llama.cpp) usually want none. "Local" is a
//! loopback, private, link-local or unique-local address; `localhost`; a host name of one
//! label (a container or compose service such as `ollama`); or a name ending in `.local`,
//! `.internal` or `.localhost` (`host.docker.internal`). Any other end-point is a hosted
//! service, and start-up refuses it without a key (`openai.api_key`): every request would be
//! refused. An operator whose remote gateway really takes no key sets any placeholder key.

use std::time::Duration;

use crate::config::OpenAiSettings;
use crate::server::ModelEndpoint;

/// Whether the model end-point `url` may be called without an API key (see the module docs).
pub fn is_local(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Some(url::Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local()
        }
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            !name.contains('.')
                || [".local", ".internal", ".localhost"]
                    .iter()
                    .any(|suffix| name.ends_with(suffix))
        }
        None => false,
    }
}

/// How long the start-up probe of the model end-point waits.
const MODEL_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Asks the model end-point for its models (`GET {base_url}/models`) once, and says what it
/// found, in the log too. Never fatal: a model server started after this one is used as soon
/// as it answers; until then every model request fails, and the warning here says so at start
/// rather than at the first message. Any answer but 401/403 counts as reachable (some
/// compatible servers have no `/models`).
pub async fn probe(openai: &OpenAiSettings) -> ModelEndpoint {
    let endpoint = crate::startup::redacted(&openai.base_url);
    let url = format!("{}/models", openai.base_url.trim_end_matches('/'));
    let client = match reqwest::Client::builder()
        .timeout(MODEL_PROBE_TIMEOUT)
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!(error = %crate::error::chain(&e), "cannot probe the model end-point");
            return ModelEndpoint::Unreachable;
        }
    };
    let mut request = client.get(&url);
    if let Some(key) = openai.api_key.as_deref().filter(|k| !k.is_empty()) {
        request = request.bearer_auth(key);
    }
    match request.send().await {
        Ok(resp) if matches!(resp.status().as_u16(), 401 | 403) => {
            tracing::warn!(
                %endpoint,
                status = resp.status().as_u16(),
                "the model end-point refuses the API key: every model request will fail"
            );
            ModelEndpoint::Unauthorized
        }
        Ok(resp) => {
            tracing::info!(%endpoint, status = resp.status().as_u16(), "model end-point reachable");
            ModelEndpoint::Reachable
        }
        Err(e) => {
            tracing::warn!(
                %endpoint,
                error = %crate::error::chain(&e),
                "the model end-point does not answer: model requests will fail until it does"
            );
            ModelEndpoint::Unreachable
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(url: &str) -> bool {
        is_local(&url::Url::parse(url).expect("a URL"))
    }

    #[test]
    fn local_end_points_need_no_key_and_hosted_ones_do() {
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://localhost:8000/v1",
            "http://[::1]:8000/v1",
            "http://10.1.2.3/v1",
            "http://192.168.0.7:11434/v1",
            "http://ollama:11434/v1",
            "http://host.docker.internal:11434/v1",
            "http://gpu-box.local/v1",
        ] {
            assert!(local(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://example.com/v1",
            "http://8.8.8.8/v1",
            "https://models.internal.example.org/v1",
        ] {
            assert!(!local(url), "{url}");
        }
    }
}
