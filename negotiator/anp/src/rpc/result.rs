//! The draft's `NegotiationResult`, the protocol artifacts it carries, and its digest.
//!
//! # The digest
//! `negotiationDigest` is `sha-256:` and the unpadded base64url of SHA-256 over the canonical
//! JSON ([`canonical_json`]) of the object [`DigestInput`] describes: the negotiation's id, the
//! agreed protocol's hash, the two parties (the caller as it named itself, the target's
//! end-point), the end-point the protocol is called at, and `validUntil`. Those are what a
//! cached result asserts: which protocol, between whom, where, until when; two results that
//! differ in any of them have different digests, and a caller recomputes the digest from the
//! result alone. It is not a signature: nothing in it proves who computed it.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::ProtocolHash;

/// `result` of `anp.negotiate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NegotiationResult {
    pub negotiation_id: String,
    /// `accepted`, `rejected` or `needs_more_information`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<Selected>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negotiation_digest: Option<String>,
    /// Counter-proposals (with `needs_more_information`): protocols the target would agree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl NegotiationResult {
    pub const ACCEPTED: &str = "accepted";
    pub const REJECTED: &str = "rejected";
    pub const NEEDS_MORE_INFORMATION: &str = "needs_more_information";

    /// The agreed protocol's hash, from `selected.protocolArtifact`.
    pub fn agreed(&self) -> Option<ProtocolHash> {
        let selected = self.selected.as_ref()?;
        super::params::parse_hash(&selected.protocol_artifact).ok()
    }
}

/// `selected`: where and how the agreed protocol is called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selected {
    /// The Agent Description interface the calls go to.
    pub interface: String,
    /// The protocol of that interface (`NLIP`).
    pub protocol: String,
    pub profile: String,
    pub security_profile: String,
    pub content_type: String,
    /// The end-point the calls go to.
    pub url: String,
    /// The agreed protocol: `sha256:<hex>`, the SHA-256 of its document's exact text.
    pub protocol_artifact: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
}

/// A protocol artifact (the draft's §10.2): a protocol document and its names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// `sha256:<hex>`.
    pub protocol_artifact: String,
    /// The same SHA-256 in the draft's digest form, `sha-256:<base64url>`.
    pub digest: String,
    pub content_type: String,
    /// The document's exact text.
    pub document: String,
    /// What this artifact changed from the caller's draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modification_summary: Option<String>,
}

impl Artifact {
    /// The artifact of the protocol document `text`.
    pub fn of(text: &str, modification_summary: Option<String>) -> Artifact {
        Artifact {
            protocol_artifact: ProtocolHash::of(text).prefixed(),
            digest: digest_of_text(text),
            content_type: "text/markdown".into(),
            document: text.to_owned(),
            modification_summary,
        }
    }
}

/// What a negotiation digest covers (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct DigestInput<'a> {
    pub negotiation_id: &'a str,
    pub protocol: &'a ProtocolHash,
    /// `meta.sender_did`, when the caller named itself.
    pub caller: Option<&'a str>,
    /// The target's negotiation end-point.
    pub target: &'a str,
    /// `selected.url`.
    pub endpoint: &'a str,
    pub valid_until: &'a str,
}

/// `sha-256:<base64url>` of the canonical JSON of `input`.
pub fn negotiation_digest(input: &DigestInput<'_>) -> String {
    let object = json!({
        "caller": input.caller,
        "endpoint": input.endpoint,
        "negotiationId": input.negotiation_id,
        "protocol": input.protocol.prefixed(),
        "target": input.target,
        "validUntil": input.valid_until,
    });
    digest_of_bytes(canonical_json(&object).as_bytes())
}

/// `sha-256:<base64url>` of a protocol document's exact text: its protocol hash in the draft's
/// digest form.
pub fn digest_of_text(text: &str) -> String {
    digest_of_bytes(text.as_bytes())
}

fn digest_of_bytes(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    format!(
        "sha-256:{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

/// `value` as canonical JSON: object members sorted by key (UTF-16 code units, as RFC 8785
/// orders them), no whitespace, strings escaped as `serde_json` escapes them (which is RFC
/// 8785's escaping). Numbers are written as `serde_json` writes them: RFC 8785's form for the
/// integers hashed here; floating-point values are not canonicalised.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(member, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth_without_whitespace() {
        let v = json!({"b": [ {"z": 1, "a": null} ], "a": "x\n", "é": true, "Z": 2});
        assert_eq!(
            canonical_json(&v),
            r#"{"Z":2,"a":"x\n","b":[{"a":null,"z":1}],"é":true}"#
        );
    }

    #[test]
    fn the_digest_changes_with_each_input_and_only_with_them() {
        let hash = ProtocolHash::of("# doc");
        let input = DigestInput {
            negotiation_id: "n1",
            protocol: &hash,
            caller: Some("did:wba:example.com:caller"),
            target: "http://a/anp/rpc",
            endpoint: "http://a/nlip",
            valid_until: "2026-01-01T00:00:00Z",
        };
        let d = negotiation_digest(&input);
        assert!(
            d.starts_with("sha-256:") && d.len() == "sha-256:".len() + 43,
            "{d}"
        );
        assert_eq!(d, negotiation_digest(&input.clone()));
        let later = DigestInput {
            valid_until: "2026-01-01T00:00:01Z",
            ..input.clone()
        };
        assert_ne!(d, negotiation_digest(&later));
        let anonymous = DigestInput {
            caller: None,
            ..input.clone()
        };
        assert_ne!(d, negotiation_digest(&anonymous));
        let other = ProtocolHash::of("# other");
        assert_ne!(
            d,
            negotiation_digest(&DigestInput {
                protocol: &other,
                ..input
            })
        );
    }

    #[test]
    fn an_artifact_names_its_document_both_ways() {
        let a = Artifact::of("# doc", None);
        let hash = ProtocolHash::of("# doc");
        assert_eq!(a.protocol_artifact, hash.prefixed());
        assert_eq!(super::super::params::parse_hash(&a.digest), Ok(hash));
        let v = serde_json::to_value(&a).expect("serializes");
        assert_eq!(v["contentType"], "text/markdown");
        assert!(v.get("modificationSummary").is_none());
    }
}
