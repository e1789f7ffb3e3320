//! What the NLIP client trusts and presents over `https://` and `wss://`: the platform's root
//! certificates (rustls-platform-verifier, as reqwest uses them) plus a private deployment's CA
//! (`--ca-cert`), and a client certificate for peers that ask for mutual TLS.

use std::sync::{Arc, OnceLock};

use rustls::ClientConfig;
use rustls_platform_verifier::Verifier;

use super::{TlsError, certificates, key_error, private_key, provider, rustls_error};
use crate::config::tls::ClientTlsSettings;

/// The client's TLS configurations: one for HTTP (ALPN `h2` and `http/1.1`), one for
/// WebSocket (HTTP/1.1 only: the upgrade is an HTTP/1.1 request). The default trusts the
/// platform's roots and presents no certificate.
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// `None`: the default, built when a connection first needs it.
    configs: Option<Arc<Configs>>,
}

#[derive(Debug)]
pub(crate) struct Configs {
    pub(crate) http: ClientConfig,
    pub(crate) ws: Arc<ClientConfig>,
}

impl ClientTls {
    /// The configuration `settings` names: its files are read now.
    pub fn new(settings: &ClientTlsSettings) -> Result<ClientTls, TlsError> {
        let ClientTlsSettings {
            ca_cert,
            client_cert,
            client_key,
        } = settings;
        if ca_cert.is_none() && client_cert.is_none() && client_key.is_none() {
            return Ok(ClientTls::default());
        }
        Ok(ClientTls {
            configs: Some(Arc::new(build(settings)?)),
        })
    }

    /// The configurations; without settings, the defaults, built once per process on first
    /// use (reading the platform's root store is not a per-connection cost). A failure to
    /// build them is returned, and tried again on the next connection.
    pub(crate) fn configs(&self) -> Result<Arc<Configs>, TlsError> {
        static DEFAULT: OnceLock<Arc<Configs>> = OnceLock::new();
        if let Some(configs) = &self.configs {
            return Ok(Arc::clone(configs));
        }
        if let Some(configs) = DEFAULT.get() {
            return Ok(Arc::clone(configs));
        }
        let built = Arc::new(build(&ClientTlsSettings::default())?);
        Ok(Arc::clone(DEFAULT.get_or_init(|| built)))
    }
}

fn build(settings: &ClientTlsSettings) -> Result<Configs, TlsError> {
    let provider = provider();
    let extra = match &settings.ca_cert {
        Some(path) => certificates("tls.client.ca_cert", path)?,
        None => Vec::new(),
    };
    let verifier = Verifier::new_with_extra_roots(extra, provider.clone()).map_err(
        rustls_error("tls.client.ca_cert", "the trusted certificates"),
    )?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rustls_error("tls.client", "the TLS versions"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match (&settings.client_cert, &settings.client_key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert_path), Some(key_path)) => {
            let certs = certificates("tls.client.client_cert", cert_path)?;
            let key = private_key("tls.client.client_key", key_path)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(key_error(
                    "tls.client.client_key",
                    "the client certificate and key",
                    cert_path,
                    key_path,
                ))?
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(TlsError::Unpaired {
                setting: "tls.client.client_cert",
            });
        }
    };
    let mut ws = config.clone();
    ws.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Configs {
        http: config,
        ws: Arc::new(ws),
    })
}

/// The TLS failure behind a failed connection, when one is: rustls's error, found in the
/// error's chain (behind reqwest's, hyper's and tungstenite's errors, and inside I/O errors,
/// whose `source` skips the error they wrap).
pub fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(rustls) = e.downcast_ref::<rustls::Error>() {
            return Some(rustls.to_string());
        }
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _),
            None => e.source(),
        };
    }
    None
}
