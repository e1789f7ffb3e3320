//! Certificates made at test time: a CA, server certificates for `localhost` and 127.0.0.1,
//! client certificates, all signed by the CA and written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};

/// A test CA whose key signs the certificates it issues.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A certificate and its key as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificate, DER: what a peer presenting it sends.
    pub der: Vec<u8>,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// Writes the CA certificate to `dir/name` and returns its path.
    pub fn write_cert(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.cert_pem).expect("write the CA certificate");
        path
    }

    /// A server certificate for `localhost` and 127.0.0.1 with common name `name` and serial
    /// number `serial`, written to `dir/<file>.pem` and `dir/<file>.key`.
    pub fn server(&self, dir: &Path, file: &str, name: &str, serial: u64) -> CertFiles {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("valid names");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, dir, file, name, serial)
    }

    /// A client certificate with common name `name`, written to `dir/<file>.pem` and `.key`.
    pub fn client(&self, dir: &Path, file: &str, name: &str) -> CertFiles {
        let mut params = CertificateParams::default();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, dir, file, name, 1)
    }

    fn issue(
        &self,
        mut params: CertificateParams,
        dir: &Path,
        file: &str,
        name: &str,
        serial: u64,
    ) -> CertFiles {
        params.distinguished_name = dn(name);
        params.serial_number = Some(SerialNumber::from(serial));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        let files = CertFiles {
            cert: dir.join(format!("{file}.pem")),
            key: dir.join(format!("{file}.key")),
            der: cert.der().to_vec(),
        };
        write_atomically(&files.cert, &cert.pem());
        write_atomically(&files.key, &key.serialize_pem());
        files
    }
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// Writes `text` to a temporary file beside `path`, then renames it over `path`, as certificate
/// tools do: a reader sees the old file or the new one, never half of one.
fn write_atomically(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).expect("write a PEM file");
    std::fs::rename(&staged, path).expect("move the PEM file in place");
}
