//! The name a verified client certificate gives its peer: the subject's common name, or
//! without one the certificate's first subject alternative name (DNS name, URI or e-mail).

use rustls_pki_types::CertificateDer;
use x509_cert::Certificate;
use x509_cert::der::asn1::{Ia5StringRef, PrintableStringRef, Utf8StringRef};
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode as _, Tag, Tagged as _};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use crate::peer::PeerIdentity;

/// `id-at-commonName`.
const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
/// `id-ce-subjectAltName`.
const SUBJECT_ALT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");

/// The identity of the peer that presented `cert` (its own certificate, verified in the
/// handshake); `None` when the certificate names nothing this reads.
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<PeerIdentity> {
    let cert = Certificate::from_der(cert.as_ref()).ok()?;
    common_name(&cert)
        .or_else(|| first_alt_name(&cert))
        .map(PeerIdentity::client_certificate)
}

fn common_name(cert: &Certificate) -> Option<String> {
    let subject = &cert.tbs_certificate.subject;
    subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter(|atv| atv.oid == COMMON_NAME)
        .find_map(|atv| {
            let value = &atv.value;
            let text = match value.tag() {
                Tag::Utf8String => Utf8StringRef::try_from(value).ok()?.as_str().to_owned(),
                Tag::PrintableString => PrintableStringRef::try_from(value)
                    .ok()?
                    .as_str()
                    .to_owned(),
                Tag::Ia5String => Ia5StringRef::try_from(value).ok()?.as_str().to_owned(),
                _ => return None,
            };
            (!text.is_empty()).then_some(text)
        })
}

fn first_alt_name(cert: &Certificate) -> Option<String> {
    let extensions = cert.tbs_certificate.extensions.as_ref()?;
    let san = extensions.iter().find(|e| e.extn_id == SUBJECT_ALT_NAME)?;
    let names = SubjectAltName::from_der(san.extn_value.as_bytes()).ok()?;
    names.0.iter().find_map(|name| match name {
        GeneralName::DnsName(s)
        | GeneralName::UniformResourceIdentifier(s)
        | GeneralName::Rfc822Name(s) => Some(s.as_str().to_owned()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn certificate(common_name: Option<&str>, alt_names: &[&str]) -> CertificateDer<'static> {
        let mut params = CertificateParams::new(
            alt_names
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        )
        .expect("names");
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = common_name {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let key = KeyPair::generate().expect("a key");
        params
            .self_signed(&key)
            .expect("a certificate")
            .der()
            .clone()
    }

    #[test]
    fn the_common_name_names_the_peer_else_the_first_alternative_name() {
        let named = |cert| identity_of(&cert).map(|id| id.name().to_owned());
        assert_eq!(
            named(certificate(Some("alice-agent"), &["alice.example"])),
            Some("alice-agent".to_owned())
        );
        assert_eq!(
            named(certificate(None, &["bob.example", "other.example"])),
            Some("bob.example".to_owned())
        );
        assert_eq!(named(certificate(None, &[])), None);
        assert_eq!(named(CertificateDer::from(vec![1, 2, 3])), None);
    }
}
