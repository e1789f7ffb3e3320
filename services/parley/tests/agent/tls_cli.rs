//! `parley serve` with a certificate and `parley send https://…`: trusted with `--ca-cert` (or
//! `PARLEY_CA_CERT`), refused with a certificate error without it; a key that is not the
//! certificate's stops `serve` before it listens.

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::support::{BIN, spawn_serve, utf8};

/// A CA certificate and a server certificate for 127.0.0.1 it signed, with their keys, in `dir`:
/// `(ca.pem, server.pem, server.key, other.key)`, `other.key` the key of no certificate here.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "Parley CLI test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("a key");
    let ca_cert = ca.self_signed(&ca_key).expect("the CA");
    let issuer = Issuer::new(ca, ca_key);
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("names");
    let server_key = KeyPair::generate().expect("a key");
    let server_cert = server.signed_by(&server_key, &issuer).expect("signed");
    let other = KeyPair::generate().expect("a key");
    let files = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
        dir.join("other.key"),
    );
    std::fs::write(&files.0, ca_cert.pem()).expect("write");
    std::fs::write(&files.1, server_cert.pem()).expect("write");
    std::fs::write(&files.2, server_key.serialize_pem()).expect("write");
    std::fs::write(&files.3, other.serialize_pem()).expect("write");
    files
}

#[test]
fn send_over_https_trusts_the_ca_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key, _) = certificates(dir.path());
    let (mut server, url) = spawn_serve(&dir.path().join("data"), |c| {
        c.args(["--tls-cert", utf8(&cert)])
            .env("PARLEY_TLS_KEY", &key);
    });
    assert!(url.starts_with("https://"), "{url}");

    let trusted = Command::new(BIN)
        .args(["send", &url, "hello", "--ca-cert", utf8(&ca)])
        .output()
        .expect("parley runs");
    let err = String::from_utf8_lossy(&trusted.stderr);
    assert!(trusted.status.success(), "{err}");
    assert!(!trusted.stdout.is_empty());

    let from_env = Command::new(BIN)
        .args(["send", &url, "hello"])
        .env("PARLEY_CA_CERT", &ca)
        .output()
        .expect("parley runs");
    assert!(from_env.status.success());

    let untrusted = Command::new(BIN)
        .args(["send", &url, "hello"])
        .env_remove("PARLEY_CA_CERT")
        .output()
        .expect("parley runs");
    assert!(!untrusted.status.success());
    let err = String::from_utf8_lossy(&untrusted.stderr);
    assert!(
        err.contains("TLS with") && err.contains("certificate") && err.contains("--ca-cert"),
        "{err}"
    );

    let plaintext = Command::new(BIN)
        .args(["send", &url.replacen("https://", "http://", 1), "hello"])
        .output()
        .expect("parley runs");
    assert!(!plaintext.status.success(), "plaintext is refused");

    server.kill().expect("stop the server");
    server.wait().expect("reaped");
}

#[test]
fn serve_refuses_a_key_that_is_not_the_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, cert, _, other) = certificates(dir.path());
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upload-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--tls-cert", utf8(&cert), "--tls-key", utf8(&other)])
        .output()
        .expect("parley runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tls.key") && err.contains("is not the key of the certificate"),
        "{err}"
    );
    assert!(!err.contains("parley is listening"), "{err}");
}
