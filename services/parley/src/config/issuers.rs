//! `[[access.issuers]]`: the OAuth 2.0 authorization servers whose access tokens (JWTs) name
//! peers, and where their signing keys are published. Read from the configuration file only: a
//! list of tables has no convenient flag form.

use std::collections::HashSet;
use std::path::PathBuf;

use parley_auth::jwt::Algorithm;
use serde::Deserialize;

use super::{ConfigError, invalid};

/// One trusted issuer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSettings {
    /// The `iss` its tokens carry, exactly.
    pub issuer: String,
    /// The audience a token must name (`aud`), usually this agent's URL or id; unset: not checked.
    #[serde(default)]
    pub audience: Option<String>,
    /// Its key set (JWKS, RFC 7517) in a file…
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// …or at a URL (`https://`; `http://` only for a local host, as for model end-points).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Algorithms accepted (`RS256`, `ES256`, `EdDSA`, …); empty: every asymmetric one.
    #[serde(default)]
    pub algorithms: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    #[serde(default = "default_leeway_s")]
    pub leeway_s: u64,
    /// Least time between two loads of the key set, in seconds: a token signed by a key not
    /// yet known makes Parley load the set again (key rotation), at most this often.
    #[serde(default = "default_refresh_s")]
    pub refresh_interval_s: u64,
}

fn default_leeway_s() -> u64 {
    30
}

fn default_refresh_s() -> u64 {
    60
}

/// Where an issuer's keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    File(PathBuf),
    Url(url::Url),
}

impl IssuerSettings {
    /// Where the keys come from (after [`validate`]).
    pub fn source(&self) -> Result<KeySource, ConfigError> {
        match (&self.jwks_file, &self.jwks_url) {
            (Some(path), None) => Ok(KeySource::File(path.clone())),
            (None, Some(url)) => {
                let parsed = url::Url::parse(url).map_err(|e| {
                    invalid(
                        "access.issuers.jwks_url",
                        format!("{url:?} is not a URL: {e}"),
                    )
                })?;
                let allowed = parsed.scheme() == "https"
                    || (parsed.scheme() == "http" && crate::model_endpoint::is_local(&parsed));
                if !allowed {
                    return Err(invalid(
                        "access.issuers.jwks_url",
                        format!(
                            "{url} must be https:// (http:// only for a host on this machine or network)"
                        ),
                    ));
                }
                Ok(KeySource::Url(parsed))
            }
            _ => Err(invalid(
                "access.issuers",
                format!(
                    "issuer {:?} needs exactly one of jwks_file and jwks_url",
                    self.issuer
                ),
            )),
        }
    }

    /// The accepted algorithms, read.
    pub fn algorithms(&self) -> Result<Vec<Algorithm>, ConfigError> {
        self.algorithms
            .iter()
            .map(|name| {
                name.parse::<Algorithm>().map_err(|_| {
                    invalid(
                        "access.issuers.algorithms",
                        format!("{name:?} is not a JWS algorithm (RS256, ES256, EdDSA, …)"),
                    )
                })
            })
            .collect()
    }
}

/// Checks every issuer: a name, one key source, known algorithms, bounded times, no issuer twice.
pub fn validate(issuers: &[IssuerSettings]) -> Result<(), ConfigError> {
    let mut seen = HashSet::new();
    for issuer in issuers {
        if issuer.issuer.trim().is_empty() {
            return Err(invalid("access.issuers.issuer", "must not be empty"));
        }
        if !seen.insert(issuer.issuer.as_str()) {
            return Err(invalid(
                "access.issuers",
                format!("issuer {:?} is listed twice", issuer.issuer),
            ));
        }
        issuer.source()?;
        issuer.algorithms()?;
        if issuer.leeway_s > 300 {
            return Err(invalid("access.issuers.leeway_s", "at most 300 seconds"));
        }
        if issuer.refresh_interval_s == 0 {
            return Err(invalid(
                "access.issuers.refresh_interval_s",
                "at least 1 second",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(toml_text: &str) -> Vec<IssuerSettings> {
        #[derive(Deserialize)]
        struct File {
            issuers: Vec<IssuerSettings>,
        }
        toml::from_str::<File>(toml_text).expect("toml").issuers
    }

    #[test]
    fn issuers_need_one_key_source_a_safe_url_and_known_algorithms() {
        let ok = read(
            r#"
            [[issuers]]
            issuer = "https://idp.example"
            jwks_url = "https://idp.example/.well-known/jwks.json"
            algorithms = ["ES256", "RS256"]
            [[issuers]]
            issuer = "local"
            jwks_url = "http://keycloak:8080/certs"
            "#,
        );
        validate(&ok).expect("valid");
        assert_eq!(ok[0].leeway_s, 30);

        for (bad, setting) in [
            (r#"issuer = "a""#, "access.issuers"),
            (
                r#"issuer = "a"
                jwks_file = "k.json"
                jwks_url = "https://a/k""#,
                "access.issuers",
            ),
            (
                r#"issuer = "a"
                jwks_url = "http://idp.example.com/k""#,
                "access.issuers.jwks_url",
            ),
            (
                r#"issuer = "a"
                jwks_file = "k.json"
                algorithms = ["none"]"#,
                "access.issuers.algorithms",
            ),
            (
                r#"issuer = " "
                jwks_file = "k.json""#,
                "access.issuers.issuer",
            ),
        ] {
            let issuers = read(&format!("[[issuers]]\n{bad}"));
            match validate(&issuers) {
                Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let twice = read(
            "[[issuers]]\nissuer = \"a\"\njwks_file = \"k\"\n[[issuers]]\nissuer = \"a\"\njwks_file = \"k\"",
        );
        assert!(validate(&twice).is_err());
    }
}
