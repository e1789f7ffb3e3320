//! TLS, on rustls with the aws-lc-rs provider (the one reqwest brings): the listeners' server
//! configuration, reloaded when its files change (`server`); the identity a client certificate
//! gives a connection (`identity`); what the NLIP client trusts and presents (`client`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

mod client;
mod identity;
mod server;

pub use client::{ClientTls, tls_failure};
pub use identity::identity_of;
pub use server::ServerTls;

/// Why a TLS configuration could not be built from its files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {message}", path.display())]
    Read {
        setting: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("{} holds no PEM {what}", path.display())]
    Empty {
        setting: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    #[error("the key in {} is not the key of the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        setting: &'static str,
        cert: PathBuf,
        key: PathBuf,
    },
    #[error("{what} refused: {source}")]
    Rustls {
        setting: &'static str,
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    #[error("{setting} and its key go together: give both or neither")]
    Unpaired { setting: &'static str },
}

impl TlsError {
    /// The setting the error is about, as the configuration names it.
    pub fn setting(&self) -> &'static str {
        match self {
            TlsError::Read { setting, .. }
            | TlsError::Empty { setting, .. }
            | TlsError::KeyMismatch { setting, .. }
            | TlsError::Rustls { setting, .. }
            | TlsError::Unpaired { setting } => setting,
        }
    }
}

/// The one crypto provider of Parley's TLS, server and client.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Every certificate of a PEM file (at least one).
fn certificates(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |e: rustls_pki_types::pem::Error| TlsError::Read {
        setting,
        path: path.to_owned(),
        message: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            setting,
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The private key of a PEM file.
fn private_key(setting: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            setting,
            path: path.to_owned(),
            what: "private key",
        },
        e => TlsError::Read {
            setting,
            path: path.to_owned(),
            message: e.to_string(),
        },
    })
}

/// What a rustls error on `what` (read for `setting`) becomes.
fn rustls_error(
    setting: &'static str,
    what: &'static str,
) -> impl FnOnce(rustls::Error) -> TlsError {
    move |source| TlsError::Rustls {
        setting,
        what,
        source,
    }
}

/// What rustls's error on a certificate and its key becomes: [`TlsError::KeyMismatch`] naming
/// both files when the key is not the certificate's, otherwise [`TlsError::Rustls`].
fn key_error(
    setting: &'static str,
    what: &'static str,
    cert: &Path,
    key: &Path,
) -> impl FnOnce(rustls::Error) -> TlsError {
    move |source| match source {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            setting,
            cert: cert.to_owned(),
            key: key.to_owned(),
        },
        source => rustls_error(setting, what)(source),
    }
}
