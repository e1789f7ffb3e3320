//! The `[tls]` table: TLS on the listeners (certificate, key, client certificates) and the
//! trust of the server's own outgoing calls (`[tls.client]`).

use std::path::PathBuf;

use clap::ValueEnum;
use serde::Deserialize;

use super::{ConfigError, invalid};

/// TLS on both listeners (NLIP and uploads). Without `cert` and `key` they speak plaintext;
/// with them, only TLS.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// The server's certificate chain (PEM), its own certificate first.
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates are verified against: mutual TLS.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: whether a client must present a certificate.
    pub client_auth: ClientAuth,
    /// The oldest TLS version accepted.
    pub min_version: TlsVersion,
    /// How often the certificate, key and client CA files are checked for changes, in
    /// milliseconds (a change is loaded for new connections; SIGHUP loads them at once).
    pub reload_interval_ms: u64,
    /// The trust of the server's own outgoing calls (capabilities bound to other agents).
    pub client: ClientTlsSettings,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            cert: None,
            key: None,
            client_ca: None,
            client_auth: ClientAuth::Required,
            min_version: TlsVersion::V1_3,
            reload_interval_ms: 5_000,
            client: ClientTlsSettings::default(),
        }
    }
}

/// Whether a client of a listener with a client CA must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A client without a verified certificate is refused in the handshake.
    #[default]
    Required,
    /// A client may connect without one (it is then known by its address only); one it
    /// presents must verify.
    Optional,
}

/// The oldest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum, Default)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    #[value(name = "1.2")]
    V1_2,
    #[default]
    #[serde(rename = "1.3")]
    #[value(name = "1.3")]
    V1_3,
}

/// What an NLIP client trusts and presents: the platform's roots plus `ca_cert`, and a client
/// certificate for peers that ask for one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTlsSettings {
    /// CA certificates (PEM) trusted besides the platform's roots (a private deployment's CA).
    pub ca_cert: Option<PathBuf>,
    /// A client certificate chain (PEM), for peers that ask for mutual TLS.
    pub client_cert: Option<PathBuf>,
    /// The private key of `client_cert` (PEM).
    pub client_key: Option<PathBuf>,
}

/// The `[tls]` flags of `parley serve`; each also reads a `PARLEY_*` environment variable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// The server's certificate chain (PEM): both listeners then speak TLS only
    #[arg(long, env = "PARLEY_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM)
    #[arg(long, env = "PARLEY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates are verified against (mutual TLS)
    #[arg(long, env = "PARLEY_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: must a client present a certificate [default: required]
    #[arg(long, env = "PARLEY_TLS_CLIENT_AUTH")]
    pub tls_client_auth: Option<ClientAuth>,
    /// Oldest TLS version accepted [default: 1.3]
    #[arg(long, env = "PARLEY_TLS_MIN_VERSION")]
    pub tls_min_version: Option<TlsVersion>,
    /// CA certificates (PEM) the server's outgoing calls trust besides the platform's roots
    #[arg(long, env = "PARLEY_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Client certificate (PEM) of the server's outgoing calls, for peers that require one
    #[arg(long, env = "PARLEY_CLIENT_CERT", value_name = "FILE")]
    pub client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM)
    #[arg(long, env = "PARLEY_CLIENT_KEY", value_name = "FILE")]
    pub client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// Sets what the flags give over what the file said.
    pub(super) fn apply(&self, tls: &mut TlsSettings) {
        let set = |field: &mut Option<PathBuf>, flag: &Option<PathBuf>| {
            if flag.is_some() {
                field.clone_from(flag);
            }
        };
        set(&mut tls.cert, &self.tls_cert);
        set(&mut tls.key, &self.tls_key);
        set(&mut tls.client_ca, &self.tls_client_ca);
        set(&mut tls.client.ca_cert, &self.ca_cert);
        set(&mut tls.client.client_cert, &self.client_cert);
        set(&mut tls.client.client_key, &self.client_key);
        if let Some(auth) = self.tls_client_auth {
            tls.client_auth = auth;
        }
        if let Some(version) = self.tls_min_version {
            tls.min_version = version;
        }
    }
}

impl TlsSettings {
    /// Whether the listeners speak TLS.
    pub fn enabled(&self) -> bool {
        self.cert.is_some()
    }

    /// Checks that the settings go together and that the files load: readable, PEM, the key
    /// the certificate's (the server configuration is built once and dropped).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err(invalid("tls.key", "tls.cert needs its key")),
            (None, Some(_)) => return Err(invalid("tls.cert", "tls.key needs its certificate")),
            _ => {}
        }
        if self.client_ca.is_some() && self.cert.is_none() {
            return Err(invalid(
                "tls.client_ca",
                "client certificates need TLS: set tls.cert and tls.key",
            ));
        }
        if self.reload_interval_ms == 0 {
            return Err(invalid("tls.reload_interval_ms", "must be positive"));
        }
        if self.enabled() {
            crate::tls::ServerTls::load(self).map_err(|e| invalid(e.setting(), e.to_string()))?;
        }
        self.client
            .validate()
            .map_err(|e| invalid(e.setting(), e.to_string()))?;
        Ok(())
    }
}

impl ClientTlsSettings {
    /// Builds the client's TLS configuration once, so that a bad file is refused at start.
    pub fn validate(&self) -> Result<(), crate::tls::TlsError> {
        crate::tls::ClientTls::new(self).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    #[test]
    fn the_file_takes_a_tls_table_and_a_lone_certificate_is_refused() {
        let settings: Settings = toml::from_str(
            "[tls]\nmin_version = \"1.2\"\nclient_auth = \"optional\"\nreload_interval_ms = 1000\n\
             [tls.client]\nca_cert = \"/etc/parley/ca.pem\"\n",
        )
        .expect("valid");
        assert_eq!(settings.tls.min_version, super::TlsVersion::V1_2);
        assert_eq!(settings.tls.client_auth, super::ClientAuth::Optional);
        assert!(!settings.tls.enabled());

        let mut lone = Settings::default();
        lone.tls.cert = Some("/etc/parley/cert.pem".into());
        let err = lone.validate().expect_err("no key");
        assert!(err.to_string().contains("tls.key"), "{err}");
        let err = toml::from_str::<Settings>("[tls]\nmin_version = \"1.1\"\n").expect_err("1.1");
        assert!(err.to_string().contains("min_version"), "{err}");
    }
}
