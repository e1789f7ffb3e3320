//! The peers file: peers the operator declares in a TOML file rather than in the store, each
//! with what names it (an API key's digest, a client certificate's name, a JWT subject, an ANP
//! `did:wba` DID) and what
//! it may do. Read once, at start, and checked whole: a file with one bad entry is refused, with
//! an error naming the file and the entry.
//!
//! ```toml
//! [[peers]]
//! id = "billing"
//! key_digest = "0123456789abcdef:<64 hex digits>"   # what `parley peers keygen` prints
//! negotiate = true
//! capabilities = ["getProductInfo"]
//!
//! [[peers]]
//! id = "warehouse"
//! key_file = "/run/secrets/warehouse_key"   # the whole key; only its digest is kept
//! certificate = "warehouse.example"         # the name its client certificate gives
//! subject = "https://issuer.example warehouse"
//! did = "did:wba:warehouse.example:agents:stock"   # its ANP identity (DID-WBA)
//! talk = true
//! protocols = "*"
//! ```
//!
//! `key_digest` and `key_file` are alternatives: a digest can sit in a file under version
//! control, a key file suits a secret mounted by an orchestrator (a compose secret). A relative
//! `key_file` is relative to the peers file. The key read from it is kept as its digest only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parley_auth::{ApiKey, Grants, Scope, StoredKey};
use serde::Deserialize;

/// Most characters of a peer id.
pub const MAX_PEER_ID: usize = 128;

/// A peers file, read and checked.
#[derive(Debug, Clone, Default)]
pub struct PeersFile {
    peers: Vec<FilePeer>,
    by_key_id: HashMap<String, usize>,
    by_certificate: HashMap<String, usize>,
    by_subject: HashMap<String, usize>,
    by_did: HashMap<String, usize>,
}

/// One declared peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePeer {
    pub id: String,
    /// Its API key, as its digest.
    pub key: Option<StoredKey>,
    /// The name a verified client certificate gives (mutual TLS).
    pub certificate: Option<String>,
    /// The JWT subject that names it (its issuer and `sub`, as the server writes them).
    pub subject: Option<String>,
    /// The `did:wba` DID whose verified DID-WBA signatures name it (ANP peers).
    pub did: Option<String>,
    pub grants: Grants,
}

/// Why a peers file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PeersFileError {
    #[error("cannot read the peers file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the peers file {} is not valid: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    #[error("the peers file {}, {entry}: {message}", path.display())]
    Entry {
        path: PathBuf,
        /// `peer "ID"`, or `entry N` (from 1) when its id is the problem.
        entry: String,
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    peers: Vec<PeerSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeerSpec {
    id: String,
    key_digest: Option<String>,
    key_file: Option<PathBuf>,
    certificate: Option<String>,
    subject: Option<String>,
    did: Option<String>,
    #[serde(default)]
    negotiate: bool,
    #[serde(default)]
    talk: bool,
    #[serde(default)]
    capabilities: Scope,
    #[serde(default)]
    protocols: Scope,
}

/// Reads and checks the peers file at `path`.
pub fn load(path: &Path) -> Result<PeersFile, PeersFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PeersFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text)
}

/// Checks a peers file's text; `path` names it in errors and anchors relative key files.
pub fn parse(path: &Path, text: &str) -> Result<PeersFile, PeersFileError> {
    let spec: FileSpec = toml::from_str(text).map_err(|e| PeersFileError::Syntax {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })?;
    let base = path.parent().unwrap_or(Path::new(""));
    let mut file = PeersFile::default();
    let mut ids = HashMap::new();
    for (n, spec) in spec.peers.into_iter().enumerate() {
        let id = spec.id.clone();
        let entry = |message: String, named: bool| PeersFileError::Entry {
            path: path.to_owned(),
            entry: if named {
                format!("peer {id:?}")
            } else {
                format!("entry {}", n + 1)
            },
            message,
        };
        check_peer_id(&id).map_err(|m| entry(m, false))?;
        if let Some(first) = ids.insert(id.clone(), n + 1) {
            return Err(entry(format!("the id is entry {first}'s too"), true));
        }
        let peer = peer(spec, base).map_err(|m| entry(m, true))?;
        file.add(peer).map_err(|m| entry(m, true))?;
    }
    Ok(file)
}

/// One entry, checked on its own.
fn peer(spec: PeerSpec, base: &Path) -> Result<FilePeer, String> {
    let key = match (spec.key_digest, spec.key_file) {
        (Some(_), Some(_)) => return Err("give key_digest or key_file, not both".into()),
        (Some(digest), None) => {
            Some(StoredKey::parse(&digest).map_err(|e| format!("key_digest: {e}"))?)
        }
        (None, Some(file)) => Some(key_from_file(&base.join(file))?),
        (None, None) => None,
    };
    for (field, value) in [
        ("certificate", &spec.certificate),
        ("subject", &spec.subject),
        ("did", &spec.did),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(format!("{field} must not be empty"));
        }
    }
    if let Some(did) = &spec.did
        && !did.starts_with("did:wba:")
    {
        return Err(format!("did: {did:?} is not a did:wba DID"));
    }
    let grants = Grants {
        negotiate: spec.negotiate,
        talk: spec.talk,
        capabilities: spec.capabilities,
        protocols: spec.protocols,
    };
    check_grants(&grants)?;
    Ok(FilePeer {
        id: spec.id,
        key,
        certificate: spec.certificate,
        subject: spec.subject,
        did: spec.did,
        grants,
    })
}

/// The digest of the key in `path`; the key itself is dropped here.
fn key_from_file(path: &Path) -> Result<StoredKey, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("key_file: cannot read {}: {e}", path.display()))?;
    let key = ApiKey::parse(&text)
        .map_err(|e| format!("key_file: {} does not hold a key: {e}", path.display()))?;
    Ok(key.stored())
}

impl PeersFile {
    /// Adds a checked peer; a key id, certificate, subject or DID already another peer's is
    /// refused.
    fn add(&mut self, peer: FilePeer) -> Result<(), String> {
        let at = self.peers.len();
        let taken = |index: &HashMap<String, usize>, value: &Option<String>| {
            value
                .as_ref()
                .and_then(|v| index.get(v))
                .map(|&i| self.peers[i].id.clone())
        };
        let key_id = peer.key.as_ref().map(|k| k.key_id.clone());
        for (what, index, value) in [
            ("key id", &self.by_key_id, &key_id),
            ("certificate", &self.by_certificate, &peer.certificate),
            ("subject", &self.by_subject, &peer.subject),
            ("DID", &self.by_did, &peer.did),
        ] {
            if let Some(other) = taken(index, value) {
                return Err(format!("its {what} is peer {other:?}'s too"));
            }
        }
        for (index, value) in [
            (&mut self.by_key_id, key_id),
            (&mut self.by_certificate, peer.certificate.clone()),
            (&mut self.by_subject, peer.subject.clone()),
            (&mut self.by_did, peer.did.clone()),
        ] {
            if let Some(value) = value {
                index.insert(value, at);
            }
        }
        self.peers.push(peer);
        Ok(())
    }

    /// The peer whose API key has this public id.
    pub fn by_key_id(&self, key_id: &str) -> Option<&FilePeer> {
        self.by_key_id.get(key_id).map(|&i| &self.peers[i])
    }

    /// The peer a verified client certificate with this name is.
    pub fn by_certificate(&self, name: &str) -> Option<&FilePeer> {
        self.by_certificate.get(name).map(|&i| &self.peers[i])
    }

    /// The peer a JWT with this subject is.
    pub fn by_subject(&self, subject: &str) -> Option<&FilePeer> {
        self.by_subject.get(subject).map(|&i| &self.peers[i])
    }

    /// The peer a verified DID-WBA signature of this DID is.
    pub fn by_did(&self, did: &str) -> Option<&FilePeer> {
        self.by_did.get(did).map(|&i| &self.peers[i])
    }

    /// Every peer, in the file's order.
    pub fn peers(&self) -> &[FilePeer] {
        &self.peers
    }
}

/// One `[[peers]]` entry of a peers file, as [`parse`] reads it back: what `parley peers keygen`
/// prints for the operator to paste. Holds the key's digest, never the key.
pub fn entry(peer: &FilePeer) -> String {
    #[derive(serde::Serialize)]
    struct Entry<'a> {
        id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        key_digest: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        certificate: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        subject: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        did: Option<&'a str>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        negotiate: bool,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        talk: bool,
        #[serde(skip_serializing_if = "nothing")]
        capabilities: &'a Scope,
        #[serde(skip_serializing_if = "nothing")]
        protocols: &'a Scope,
    }
    #[derive(serde::Serialize)]
    struct File<'a> {
        peers: [Entry<'a>; 1],
    }
    fn nothing(scope: &&Scope) -> bool {
        **scope == Scope::Nothing
    }
    let file = File {
        peers: [Entry {
            id: &peer.id,
            key_digest: peer.key.as_ref().map(ToString::to_string),
            certificate: peer.certificate.as_deref(),
            subject: peer.subject.as_deref(),
            did: peer.did.as_deref(),
            negotiate: peer.grants.negotiate,
            talk: peer.grants.talk,
            capabilities: &peer.grants.capabilities,
            protocols: &peer.grants.protocols,
        }],
    };
    toml::to_string(&file).expect("an entry of strings, booleans and lists serializes")
}

/// A peer id: 1 to [`MAX_PEER_ID`] characters, letters, digits and `.`, `_`, `-`, `@`, `:`
/// (what names a peer in logs, conversations and the audit, so nothing that needs quoting).
pub fn check_peer_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.chars().count() <= MAX_PEER_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@' | ':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a peer id (1-{MAX_PEER_ID} characters: letters, digits, `.`, `_`, `-`, `@`, `:`)"
        ))
    }
}

/// Grants that name only what can exist: capability names of the capabilities file's form,
/// protocol hashes of 64 lower-case hex digits.
pub fn check_grants(grants: &Grants) -> Result<(), String> {
    if let Scope::Only(names) = &grants.capabilities {
        for name in names {
            parley_capabilities::check_capability_name(name)
                .map_err(|m| format!("capabilities: {m}"))?;
        }
    }
    if let Scope::Only(hashes) = &grants.protocols {
        for hash in hashes {
            check_protocol_hash(hash)?;
        }
    }
    Ok(())
}

fn check_protocol_hash(hash: &str) -> Result<(), String> {
    let ok = hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "protocols: {hash:?} is not a protocol hash (64 lower-case hex digits) or \"*\""
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str =
        "0123456789abcdef:b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9";

    fn check(text: &str) -> Result<PeersFile, PeersFileError> {
        parse(Path::new("/etc/parley/peers.toml"), text)
    }

    /// The message of a refused file, which must name the file.
    fn refused(text: &str) -> String {
        let message = check(text).expect_err("refused").to_string();
        assert!(message.contains("/etc/parley/peers.toml"), "{message}");
        message
    }

    #[test]
    fn peers_are_found_by_key_id_certificate_subject_and_did() {
        let file = check(&format!(
            r#"
            [[peers]]
            id = "billing"
            key_digest = "{DIGEST}"
            negotiate = true
            capabilities = ["getProductInfo", "stock-level"]

            [[peers]]
            id = "warehouse"
            certificate = "warehouse.example"
            subject = "https://issuer.example warehouse"
            did = "did:wba:warehouse.example:agents:stock"
            talk = true
            protocols = "*"
            "#
        ))
        .expect("a valid file");
        let billing = file.by_key_id("0123456789abcdef").expect("by key id");
        assert_eq!(billing.id, "billing");
        assert_eq!(billing.key, Some(StoredKey::parse(DIGEST).expect("digest")));
        assert!(billing.grants.negotiate && !billing.grants.talk);
        assert_eq!(
            billing.grants.capabilities,
            Scope::of(["getProductInfo", "stock-level"])
        );
        assert_eq!(billing.grants.protocols, Scope::Nothing);
        let warehouse = file.by_certificate("warehouse.example").expect("by name");
        assert_eq!(warehouse.id, "warehouse");
        assert_eq!(warehouse.key, None);
        assert_eq!(warehouse.grants.protocols, Scope::All);
        assert_eq!(
            file.by_subject("https://issuer.example warehouse"),
            Some(warehouse)
        );
        assert_eq!(
            file.by_did("did:wba:warehouse.example:agents:stock"),
            Some(warehouse)
        );
        assert_eq!(file.by_did("did:wba:warehouse.example"), None);
        assert_eq!(file.by_key_id("ffffffffffffffff"), None);
        assert_eq!(file.by_certificate("billing"), None);
        assert_eq!(file.peers().len(), 2);
        assert_eq!(check("").expect("an empty file").peers().len(), 0);
    }

    #[test]
    fn a_key_file_is_read_and_only_its_digest_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = ApiKey::generate().expect("random");
        std::fs::write(
            dir.path().join("billing_key"),
            format!("{}\n", key.reveal()),
        )
        .expect("write");
        std::fs::write(dir.path().join("not_a_key"), "hunter2").expect("write");
        let path = dir.path().join("peers.toml");
        let text = "[[peers]]\nid = \"billing\"\nkey_file = \"billing_key\"\n";
        let file = parse(&path, text).expect("a valid file");
        let peer = file.by_key_id(key.key_id()).expect("by the key's id");
        assert_eq!(peer.key, Some(key.stored()));
        assert!(
            !format!("{file:?}").contains(&key.reveal()),
            "the key is not kept"
        );

        let bad = parse(&path, &text.replace("billing_key", "not_a_key"))
            .expect_err("not a key")
            .to_string();
        assert!(
            bad.contains("peer \"billing\"") && bad.contains("not_a_key"),
            "{bad}"
        );
        assert!(!bad.contains("hunter2"), "{bad}");
        let missing = parse(&path, &text.replace("billing_key", "absent"))
            .expect_err("no such file")
            .to_string();
        assert!(missing.contains("cannot read"), "{missing}");
    }

    #[test]
    fn an_entry_reads_back_as_the_peer_it_was_written_from() {
        let key = ApiKey::generate().expect("random");
        let peer = FilePeer {
            id: "billing".into(),
            key: Some(key.stored()),
            certificate: None,
            subject: Some("https://issuer.example billing".into()),
            did: Some("did:wba:billing.example".into()),
            grants: Grants {
                negotiate: true,
                talk: false,
                capabilities: Scope::of(["getProductInfo"]),
                protocols: Scope::All,
            },
        };
        let text = entry(&peer);
        assert!(text.starts_with("[[peers]]\nid = \"billing\"\n"), "{text}");
        assert!(
            !text.contains("talk") && !text.contains(&key.reveal()),
            "{text}"
        );
        let file = check(&text).expect("reads back");
        assert_eq!(file.peers(), [peer]);
        let bare = FilePeer {
            id: "x".into(),
            key: None,
            certificate: None,
            subject: None,
            did: None,
            grants: Grants::default(),
        };
        assert_eq!(entry(&bare), "[[peers]]\nid = \"x\"\n");
    }

    #[test]
    fn duplicates_are_refused_naming_both_entries() {
        let twice = |field: &str, a: &str, b: &str| {
            format!(
                "[[peers]]\nid = \"a\"\n{field} = \"{a}\"\n[[peers]]\nid = \"b\"\n{field} = \"{b}\"\n"
            )
        };
        let other_digest = format!("0123456789abcdef:{}", "0".repeat(64));
        let key = refused(&twice("key_digest", DIGEST, &other_digest));
        assert!(
            key.contains("peer \"b\": its key id is peer \"a\"'s too"),
            "{key}"
        );
        let cert = refused(&twice("certificate", "x.example", "x.example"));
        assert!(
            cert.contains("its certificate is peer \"a\"'s too"),
            "{cert}"
        );
        let subject = refused(&twice("subject", "iss sub", "iss sub"));
        assert!(
            subject.contains("its subject is peer \"a\"'s too"),
            "{subject}"
        );
        let did = refused(&twice("did", "did:wba:a.example", "did:wba:a.example"));
        assert!(did.contains("its DID is peer \"a\"'s too"), "{did}");
        let id = refused("[[peers]]\nid = \"a\"\n[[peers]]\nid = \"a\"\n");
        assert!(id.contains("peer \"a\": the id is entry 1's too"), "{id}");
    }

    #[test]
    fn malformed_entries_are_refused_with_what_is_wrong() {
        for (text, expected) in [
            (
                "[[peers]]\nid = \"a\"\nkey_digest = \"abc\"",
                "key_digest: a key digest looks like",
            ),
            (
                &format!("[[peers]]\nid = \"a\"\nkey_digest = \"{DIGEST}\"\nkey_file = \"k\""),
                "not both",
            ),
            (
                "[[peers]]\nid = \"a\"\nadmin = true",
                "unknown field `admin`",
            ),
            ("[[peer]]\nid = \"a\"", "unknown field `peer`"),
            ("[[peers]]\nkey_digest = \"x\"", "missing field `id`"),
            (
                "[[peers]]\nid = \"a b\"",
                "entry 1: \"a b\" is not a peer id",
            ),
            ("[[peers]]\nid = \"\"", "entry 1: \"\" is not a peer id"),
            (
                "[[peers]]\nid = \"a\"\ncapabilities = [\"get weather\"]",
                "not a valid capability name",
            ),
            (
                "[[peers]]\nid = \"a\"\ncapabilities = \"weather\"",
                "expected \"*\" or a list",
            ),
            (
                "[[peers]]\nid = \"a\"\nprotocols = [\"ABC\"]",
                "is not a protocol hash",
            ),
            (
                "[[peers]]\nid = \"a\"\ncertificate = \" \"",
                "certificate must not be empty",
            ),
            ("[[peers]]\nid = \"a\"\nnegotiate = \"yes\"", "invalid type"),
            (
                "[[peers]]\nid = \"a\"\ndid = \"did:web:a.example\"",
                "is not a did:wba DID",
            ),
        ] {
            let message = refused(text);
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }
}
