//! `[access.did_wba]`: ANP's DID-WBA authentication (ANP-02). Off by default; on, a request
//! signed with a `did:wba` DID's key (an HTTP Message Signature, or the legacy `DIDWba`
//! `Authorization` header) names that DID's peer. The DID's document is fetched from the host
//! the DID names (`https://`, certificates verified), within a time and size limit, and kept for
//! a while.
//!
//! ```toml
//! [access.did_wba]
//! enabled = true
//! allowed_domains = ["agent.example.com"]   # the domains this agent answers as
//! # resolve_http_hosts = ["localhost"]      # DIDs of these hosts are fetched over http://
//! ```

use serde::Deserialize;

use super::{ConfigError, invalid};

/// The `[access.did_wba]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DidWbaSettings {
    /// Whether DID-WBA credentials are taken (off: a `DIDWba` header is refused as an unknown
    /// scheme, and signature headers are ignored).
    pub enabled: bool,
    /// The domains (host names, without port) this agent answers as: a credential signed for
    /// another domain is refused. Required when enabled.
    pub allowed_domains: Vec<String>,
    /// How old a signature may be, in minutes (its nonce is remembered that long, and a minute
    /// more).
    pub max_signature_age_minutes: u32,
    /// Most nonces remembered at once; when that many signed requests fall within the window,
    /// further ones are refused until some expire.
    pub max_nonces: usize,
    /// How long fetching a DID document may take, in milliseconds.
    pub resolve_timeout_ms: u64,
    /// How long a fetched DID document is used before it is fetched again, in seconds (0: every
    /// request fetches it).
    pub document_ttl_s: u64,
    /// Most bytes of a DID document.
    pub max_document_bytes: usize,
    /// Most DID documents kept at once.
    pub max_cached_documents: usize,
    /// Hosts (as a DID names them, without port) whose documents are fetched over plain
    /// `http://`: a private deployment's or a test's; every other host is fetched over https.
    pub resolve_http_hosts: Vec<String>,
    /// When not empty, only DIDs of these hosts are accepted (and fetched); empty: any host.
    pub did_hosts: Vec<String>,
}

impl Default for DidWbaSettings {
    fn default() -> Self {
        DidWbaSettings {
            enabled: false,
            allowed_domains: Vec::new(),
            max_signature_age_minutes: 5,
            max_nonces: 100_000,
            resolve_timeout_ms: 5_000,
            document_ttl_s: 300,
            max_document_bytes: 64 * 1024,
            max_cached_documents: 10_000,
            resolve_http_hosts: Vec::new(),
            did_hosts: Vec::new(),
        }
    }
}

/// The `[access.did_wba]` flags of `parley serve`; each also reads a `PARLEY_*` variable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DidWbaArgs {
    /// Take ANP DID-WBA credentials (HTTP Message Signatures, `Authorization: DIDWba …`)
    /// (`--did-wba` alone means true) [default: false]
    #[arg(
        long,
        env = "PARLEY_DID_WBA",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub did_wba: Option<bool>,
    /// The domains this agent answers as, for DID-WBA (comma-separated)
    #[arg(
        long,
        env = "PARLEY_DID_WBA_DOMAINS",
        value_delimiter = ',',
        value_name = "DOMAIN"
    )]
    pub did_wba_domains: Vec<String>,
    /// Hosts whose DID documents are fetched over plain http (comma-separated)
    #[arg(
        long,
        env = "PARLEY_DID_WBA_RESOLVE_HTTP_HOSTS",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    pub did_wba_resolve_http_hosts: Vec<String>,
}

impl DidWbaArgs {
    /// Sets what the flags give over what the file said.
    pub(super) fn apply(&self, settings: &mut DidWbaSettings) {
        if let Some(enabled) = self.did_wba {
            settings.enabled = enabled;
        }
        if !self.did_wba_domains.is_empty() {
            settings.allowed_domains.clone_from(&self.did_wba_domains);
        }
        if !self.did_wba_resolve_http_hosts.is_empty() {
            settings
                .resolve_http_hosts
                .clone_from(&self.did_wba_resolve_http_hosts);
        }
    }
}

impl DidWbaSettings {
    /// Checks the settings when DID-WBA is enabled: domains to answer as, bounded limits, host
    /// names without scheme, path or port.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.allowed_domains.is_empty() {
            return Err(invalid(
                "access.did_wba.allowed_domains",
                "name the domains this agent answers as (a signature for another one is refused)",
            ));
        }
        for (setting, hosts) in [
            ("access.did_wba.allowed_domains", &self.allowed_domains),
            (
                "access.did_wba.resolve_http_hosts",
                &self.resolve_http_hosts,
            ),
            ("access.did_wba.did_hosts", &self.did_hosts),
        ] {
            for host in hosts {
                let plain = !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
                if !plain {
                    return Err(invalid(
                        setting,
                        format!("{host:?} is not a host name (no scheme, port or path)"),
                    ));
                }
            }
        }
        let bounds: [(&'static str, u64, u64, u64); 5] = [
            (
                "access.did_wba.max_signature_age_minutes",
                u64::from(self.max_signature_age_minutes),
                1,
                60,
            ),
            (
                "access.did_wba.max_nonces",
                self.max_nonces as u64,
                1,
                10_000_000,
            ),
            (
                "access.did_wba.resolve_timeout_ms",
                self.resolve_timeout_ms,
                1,
                60_000,
            ),
            (
                "access.did_wba.max_document_bytes",
                self.max_document_bytes as u64,
                256,
                4 * 1024 * 1024,
            ),
            (
                "access.did_wba.max_cached_documents",
                self.max_cached_documents as u64,
                1,
                1_000_000,
            ),
        ];
        for (setting, value, least, most) in bounds {
            if !(least..=most).contains(&value) {
                return Err(invalid(setting, format!("between {least} and {most}")));
            }
        }
        if self.document_ttl_s > 86_400 {
            return Err(invalid(
                "access.did_wba.document_ttl_s",
                "at most 86400 seconds",
            ));
        }
        Ok(())
    }

    /// What `parley_auth::did_wba` needs of these settings.
    pub fn verifier(&self) -> parley_auth::did_wba::DidWbaSettings {
        parley_auth::did_wba::DidWbaSettings {
            allowed_domains: self.allowed_domains.clone(),
            max_age_minutes: self.max_signature_age_minutes,
            max_nonces: self.max_nonces,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{ServeArgs, Settings};

    #[test]
    fn did_wba_is_off_by_default_and_checked_when_on() {
        let s = Settings::default();
        assert!(!s.access.did_wba.enabled);
        let s: Settings = toml::from_str(
            "[access.did_wba]\nenabled = true\nallowed_domains = [\"agent.example\"]\nresolve_http_hosts = [\"localhost\"]\n",
        )
        .expect("valid");
        s.access.did_wba.validate().expect("valid");
        assert_eq!(s.access.did_wba.document_ttl_s, 300);

        for (bad, setting) in [
            ("enabled = true", "access.did_wba.allowed_domains"),
            (
                "enabled = true\nallowed_domains = [\"https://agent.example\"]",
                "access.did_wba.allowed_domains",
            ),
            (
                "enabled = true\nallowed_domains = [\"a\"]\nresolve_http_hosts = [\"localhost:8080\"]",
                "access.did_wba.resolve_http_hosts",
            ),
            (
                "enabled = true\nallowed_domains = [\"a\"]\nmax_nonces = 0",
                "access.did_wba.max_nonces",
            ),
            (
                "enabled = true\nallowed_domains = [\"a\"]\nresolve_timeout_ms = 0",
                "access.did_wba.resolve_timeout_ms",
            ),
        ] {
            let s: Settings = toml::from_str(&format!("[access.did_wba]\n{bad}")).expect("toml");
            match s.access.did_wba.validate() {
                Err(crate::config::ConfigError::Invalid { setting: s, .. }) => {
                    assert_eq!(s, setting, "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(toml::from_str::<Settings>("[access.did_wba]\nenable = true\n").is_err());

        let mut args = ServeArgs::default();
        args.access.did_wba.did_wba = Some(true);
        let err = Settings::load(&args).expect_err("no domains");
        assert!(err.to_string().contains("allowed_domains"), "{err}");
        args.access.did_wba.did_wba_domains = vec!["agent.example".into()];
        let s = Settings::load(&args).expect("valid");
        assert!(s.access.did_wba.enabled);
        assert_eq!(s.access.did_wba.allowed_domains, ["agent.example"]);
    }
}
