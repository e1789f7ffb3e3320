//! The listeners' TLS configuration: TLS 1.3 (1.2 too when `tls.min_version = "1.2"`), ALPN
//! `h2` and `http/1.1`, client certificates verified against `tls.client_ca` when it is set.
//!
//! The configuration is swapped whole when its files change (checked every
//! `tls.reload_interval_ms`) or on SIGHUP: connections accepted afterwards get the new one,
//! open connections keep theirs, and files that do not load are logged and the configuration
//! in force is kept.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::{TlsError, certificates, key_error, private_key, provider, rustls_error};
use crate::config::tls::{ClientAuth, TlsSettings, TlsVersion};

/// The TLS configuration of the listeners, and the files it was loaded from.
#[derive(Debug)]
pub struct ServerTls {
    settings: TlsSettings,
    current: RwLock<Arc<ServerConfig>>,
    /// The files' modification times when they were last loaded (or found not to load).
    stamps: Mutex<Vec<Option<SystemTime>>>,
}

impl ServerTls {
    /// Loads the configuration `settings` names (its `cert` and `key` must be set).
    pub fn load(settings: &TlsSettings) -> Result<ServerTls, TlsError> {
        let stamps = Mutex::new(stamps(settings));
        Ok(ServerTls {
            current: RwLock::new(Arc::new(build(settings)?)),
            settings: settings.clone(),
            stamps,
        })
    }

    /// An acceptor with the configuration in force.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        tokio_rustls::TlsAcceptor::from(config)
    }

    /// Loads the files again; on failure the configuration in force stays, and the failure
    /// is logged.
    pub fn reload(&self, why: &'static str) {
        *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) = stamps(&self.settings);
        match build(&self.settings) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
                tracing::info!(why, "TLS certificate reloaded: new connections use it");
            }
            Err(e) => tracing::error!(
                why,
                error = %e,
                "TLS certificate not reloaded: the files do not load; the one in force is kept"
            ),
        }
    }

    /// Starts watching: SIGHUP reloads at once, a change of the files' modification times at
    /// the next check. The signal handler is in place when this returns; the watch ends with
    /// the returned handle.
    pub fn watch(self: &Arc<Self>) -> tokio_util::task::AbortOnDropHandle<()> {
        let hangup = hangup_signal();
        let tls = Arc::clone(self);
        let every = Duration::from_millis(self.settings.reload_interval_ms);
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            let mut hangup = hangup;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = recv(&mut hangup) => tls.reload("SIGHUP"),
                    _ = tick.tick() => {
                        let changed = {
                            let seen = tls.stamps.lock().unwrap_or_else(PoisonError::into_inner);
                            *seen != stamps(&tls.settings)
                        };
                        if changed {
                            tls.reload("the files changed");
                        }
                    }
                }
            }
        }))
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

#[cfg(unix)]
fn hangup_signal() -> Hangup {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler: TLS files are reloaded when they change only");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangup_signal() -> Hangup {
    None
}

/// The next SIGHUP; never, without a handler.
async fn recv(hangup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(signal) = hangup
        && signal.recv().await.is_some()
    {
        return;
    }
    #[cfg(not(unix))]
    let _ = hangup;
    std::future::pending::<()>().await;
}

/// The files a configuration is loaded from.
fn files(settings: &TlsSettings) -> impl Iterator<Item = &PathBuf> {
    [&settings.cert, &settings.key, &settings.client_ca]
        .into_iter()
        .flatten()
}

fn stamps(settings: &TlsSettings) -> Vec<Option<SystemTime>> {
    files(settings)
        .map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
        .collect()
}

/// The server configuration `settings` names.
fn build(settings: &TlsSettings) -> Result<ServerConfig, TlsError> {
    let (Some(cert_path), Some(key_path)) = (&settings.cert, &settings.key) else {
        return Err(TlsError::Unpaired {
            setting: "tls.cert",
        });
    };
    let certs = certificates("tls.cert", cert_path)?;
    let key = private_key("tls.key", key_path)?;
    let provider = provider();
    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::V1_3 => &[&rustls::version::TLS13],
        TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(rustls_error("tls.min_version", "the TLS versions"))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("tls.client_ca", path)? {
                roots
                    .add(cert)
                    .map_err(rustls_error("tls.client_ca", "a client CA certificate"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match settings.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier.build().map_err(|e| TlsError::Rustls {
                setting: "tls.client_ca",
                what: "the client CA",
                source: rustls::Error::General(e.to_string()),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(key_error(
        "tls.key",
        "the certificate and key",
        cert_path,
        key_path,
    ))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
