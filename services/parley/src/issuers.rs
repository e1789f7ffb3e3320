//! The OAuth 2.0 issuers this agent trusts, with their signing keys loaded: what turns a bearer
//! JWT into a verified subject and scopes (`parley_auth::jwt` decides; this module keeps the
//! keys). Keys come from a JWKS file or URL, loaded at start and loaded again, at most every
//! `refresh_interval_s`, when a token names a key not yet known (the issuer rotated its keys).
//! An issuer whose URL does not answer at start is kept with no keys, a warning logged: its
//! tokens are refused until a load succeeds, and the other issuers and credentials keep working.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use parley_auth::jwt::{self, Issuer, JwkSet, JwtError, VerifiedToken};

use crate::config::issuers::{IssuerSettings, KeySource};
use crate::tls::ClientTls;

/// How long fetching a key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes a key set may have.
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The trusted issuers (see the module docs).
#[derive(Debug)]
pub struct Issuers {
    entries: Vec<Entry>,
    http: reqwest::Client,
}

#[derive(Debug)]
struct Entry {
    source: KeySource,
    refresh: Duration,
    current: RwLock<Arc<Issuer>>,
    last_load: Mutex<Option<Instant>>,
}

/// Why an issuer's keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum IssuersError {
    #[error("cannot read the key set {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot fetch the key set {url}: {message}")]
    Fetch { url: String, message: String },
    #[error("the key set from {origin} is not a JWKS: {message}")]
    Parse { origin: String, message: String },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

impl Issuers {
    /// Loads every issuer's keys; a file that cannot be read is an error, a URL that does not
    /// answer only a warning (see the module docs).
    pub async fn load(
        settings: &[IssuerSettings],
        tls: &ClientTls,
    ) -> Result<Issuers, IssuersError> {
        let mut builder = reqwest::Client::builder().timeout(FETCH_TIMEOUT);
        if let Ok(configs) = tls.configs() {
            builder = builder.tls_backend_preconfigured(configs.http.clone());
        }
        let http = builder.build().map_err(|e| IssuersError::Fetch {
            url: String::new(),
            message: e.to_string(),
        })?;
        let mut entries = Vec::with_capacity(settings.len());
        for s in settings {
            let source = s.source()?;
            let keys = match fetch(&http, &source).await {
                Ok(keys) => keys,
                Err(e @ IssuersError::Fetch { .. }) => {
                    tracing::warn!(issuer = s.issuer, error = %e, "the issuer's keys are not loaded yet; its tokens are refused until they are");
                    JwkSet { keys: Vec::new() }
                }
                Err(e) => return Err(e),
            };
            let issuer = Issuer {
                issuer: s.issuer.clone(),
                audience: s.audience.clone(),
                keys,
                algorithms: s.algorithms()?,
                leeway_s: s.leeway_s,
            };
            entries.push(Entry {
                source,
                refresh: Duration::from_secs(s.refresh_interval_s),
                current: RwLock::new(Arc::new(issuer)),
                last_load: Mutex::new(Some(Instant::now())),
            });
        }
        Ok(Issuers { entries, http })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Verifies a bearer JWT against the issuer its `iss` names, loading that issuer's keys
    /// again once when the token's key is not among them (and the last load is old enough).
    pub async fn verify(&self, token: &str) -> Result<VerifiedToken, JwtError> {
        let claimed = jwt::unverified_issuer(token)?;
        let entry = self
            .entries
            .iter()
            .find(|e| e.snapshot().issuer == claimed)
            .ok_or(JwtError::UnknownIssuer)?;
        match jwt::verify(std::slice::from_ref(&*entry.snapshot()), token) {
            Err(JwtError::UnknownKey) if entry.may_reload() => {
                match fetch(&self.http, &entry.source).await {
                    Ok(keys) => entry.replace_keys(keys),
                    Err(e) => {
                        tracing::warn!(issuer = claimed, error = %e, "reloading the issuer's keys failed")
                    }
                }
                jwt::verify(std::slice::from_ref(&*entry.snapshot()), token)
            }
            other => other,
        }
    }
}

impl Entry {
    fn snapshot(&self) -> Arc<Issuer> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether a reload is due, claiming it when it is (one caller reloads, others go on).
    fn may_reload(&self) -> bool {
        let mut last = self.last_load.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|at| at.elapsed() >= self.refresh);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    fn replace_keys(&self, keys: JwkSet) {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let mut issuer = (**current).clone();
        issuer.keys = keys;
        *current = Arc::new(issuer);
    }
}

async fn fetch(http: &reqwest::Client, source: &KeySource) -> Result<JwkSet, IssuersError> {
    let (origin, bytes) = match source {
        KeySource::File(path) => {
            let bytes = tokio::fs::read(path)
                .await
                .map_err(|source| IssuersError::Read {
                    path: path.clone(),
                    source,
                })?;
            (path.display().to_string(), bytes)
        }
        KeySource::Url(url) => {
            let failed = |message: String| IssuersError::Fetch {
                url: url.to_string(),
                message,
            };
            let response = http
                .get(url.clone())
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| failed(crate::error::chain(&e)))?;
            if response
                .content_length()
                .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
            {
                return Err(failed(format!("larger than {MAX_JWKS_BYTES} bytes")));
            }
            let bytes = response.bytes().await.map_err(|e| failed(e.to_string()))?;
            (url.to_string(), bytes.to_vec())
        }
    };
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(IssuersError::Parse {
            origin,
            message: format!("larger than {MAX_JWKS_BYTES} bytes"),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| IssuersError::Parse {
        origin,
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_auth::testing::{Signer, now};
    use serde_json::json;

    fn settings(
        issuer: &str,
        file: Option<&std::path::Path>,
        url: Option<String>,
    ) -> IssuerSettings {
        IssuerSettings {
            issuer: issuer.into(),
            audience: None,
            jwks_file: file.map(Into::into),
            jwks_url: url,
            algorithms: Vec::new(),
            leeway_s: 0,
            refresh_interval_s: 1,
        }
    }

    fn claims(iss: &str) -> serde_json::Value {
        json!({"iss": iss, "sub": "agent-b", "exp": now() + 60, "scope": "parley:talk"})
    }

    /// A JWKS end-point whose key set the test swaps.
    async fn jwks_server(keys: Arc<RwLock<serde_json::Value>>) -> String {
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let keys = Arc::clone(&keys);
                async move { axum::Json(keys.read().expect("lock").clone()) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/jwks")
    }

    #[tokio::test]
    async fn tokens_verify_against_a_file_and_a_url_whose_keys_rotate() {
        let dir = tempfile::tempdir().expect("dir");
        let file_signer = Signer::new("f1");
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, json!({"keys": [file_signer.jwk()]}).to_string()).expect("write");

        let old = Signer::new("k1");
        let rotated = Signer::new("k2");
        let published = Arc::new(RwLock::new(json!({"keys": [old.jwk()]})));
        let url = jwks_server(Arc::clone(&published)).await;

        let issuers = Issuers::load(
            &[
                settings("file-idp", Some(&path), None),
                settings("url-idp", None, Some(url)),
            ],
            &ClientTls::default(),
        )
        .await
        .expect("loaded");

        let from_file = issuers.verify(&file_signer.sign(&claims("file-idp"))).await;
        assert_eq!(from_file.expect("valid").subject, "agent-b");
        assert!(issuers.verify(&old.sign(&claims("url-idp"))).await.is_ok());
        assert_eq!(
            issuers.verify(&old.sign(&claims("file-idp"))).await,
            Err(JwtError::UnknownKey),
            "each issuer trusts its own keys only"
        );
        assert_eq!(
            issuers.verify(&old.sign(&claims("nobody"))).await,
            Err(JwtError::UnknownIssuer)
        );

        *published.write().expect("lock") = json!({"keys": [rotated.jwk()]});
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let token = rotated.sign(&claims("url-idp"));
        assert!(issuers.verify(&token).await.is_ok(), "a new key is loaded");
        assert_eq!(
            issuers
                .verify(&Signer::new("k3").sign(&claims("url-idp")))
                .await,
            Err(JwtError::UnknownKey),
            "within the refresh interval an unknown key does not load the set again"
        );
    }

    #[tokio::test]
    async fn an_unreadable_key_file_stops_the_start_and_a_silent_url_does_not() {
        let missing = std::path::Path::new("/nonexistent/jwks.json");
        let err = Issuers::load(&[settings("a", Some(missing), None)], &ClientTls::default())
            .await
            .expect_err("a missing file");
        assert!(err.to_string().contains("/nonexistent/jwks.json"), "{err}");

        let dead = "http://127.0.0.1:9/jwks".to_owned();
        let issuers = Issuers::load(&[settings("b", None, Some(dead))], &ClientTls::default())
            .await
            .expect("starts");
        let token = Signer::new("k").sign(&claims("b"));
        assert_eq!(issuers.verify(&token).await, Err(JwtError::UnknownKey));
    }
}
