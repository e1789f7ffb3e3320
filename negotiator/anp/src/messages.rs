//! ANP meta-protocol messages (seed 002), with the JSON field names exactly as the seed spells them.
//!
//! | message | discriminator | fields |
//! | --- | --- | --- |
//! | [`Hello`] (`sourceHello`, `destinationHello`) | `"type"` (as in the seed) | `version`, `metaProtocol` { `version`, `supportedCapabilities`, `protocolHash`?, `candidateProtocols`?, `selectedProtocol`?, `knownProtocolHashes`? } |
//! | [`ProtocolNegotiation`] | `"action": "protocolNegotiation"` | `sequenceId`, `candidateProtocols`, `modificationSummary`?, `status` |
//! | [`CodeGeneration`] | `"action": "codeGeneration"` | `status`: `generated` / `error` |
//! | [`TestCasesNegotiation`] | `"action": "testCasesNegotiation"` | `testCases`, `modificationSummary`?, `status` |
//! | [`FixErrorNegotiation`] | `"action": "fixErrorNegotiation"` | `errorDescription`, `status` |
//! | [`NaturalLanguageNegotiation`] | `"action": "naturalLanguageNegotiation"` | `type` (`REQUEST`/`RESPONSE`), `messageId`, `message` |
//!
//! Negotiation statuses are `negotiating`, `accepted`, `rejected` and `timeout` (the last is not in
//! seed 002's list but is sent by AgentConnect, the one public implementation, so peers use it).
//!
//! # Decisions
//! - **Hello tagging.** The seed writes hello messages with `"type": "sourceHello"` and a
//!   top-level `version`, unlike every other message, which uses `action`. Parley writes the
//!   seed's form and reads both (`"action": "sourceHello"` too), so a peer that tags everything
//!   with `action` still interoperates.
//! - **Offered protocols.** A `sourceHello` offers protocols for reuse in the seed's fields:
//!   `protocolHash` (one hash) and `candidateProtocols` (URIs or hashes); Parley writes the
//!   hashes as canonical lowercase hex, and a peer that knows only the seed reads them. The
//!   receiver answers with `selectedProtocol` set to one it also holds (0-RTT).
//!   `knownProtocolHashes`, a list some Parley peers send, is read too;
//!   [`MetaProtocolInfo::offered_hashes`] merges all three.
//! - **Versions.** Both `version`s of a hello (the message's and the `metaProtocol`'s) must
//!   have this side's major version ([`version_supported`]); a hello that does not is refused
//!   with [`NegotiationError::UnsupportedVersion`](crate::NegotiationError).
//! - **Unknown fields** of hello messages ("other fields omitted" in the seed) are kept in
//!   `extra` so they round-trip; the negotiation messages ignore unknown fields.
//! - **Parsing never panics.** [`MetaMessage::from_value`] turns every malformed input — unknown
//!   action, unknown status, wrong field type, a `negotiating` proposal with no text — into a
//!   [`MessageError`].

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::hash::ProtocolHash;

/// The meta-protocol version Parley speaks.
pub const META_PROTOCOL_VERSION: &str = "1.0";

/// Optional meta-protocol capabilities named by the seed.
pub mod capability {
    pub const NATURAL_LANGUAGE_PROTOCOL: &str = "naturalLanguageProtocol";
    pub const VERIFICATION_PROTOCOL: &str = "verificationProtocol";
    pub const NATURAL_LANGUAGE_NEGOTIATION: &str = "naturalLanguageNegotiation";
    pub const TEST_CASES_NEGOTIATION: &str = "testCasesNegotiation";
    pub const FIX_ERROR_NEGOTIATION: &str = "fixErrorNegotiation";
    /// Every capability Parley implements, and so announces: all the seed names but the
    /// verification protocol.
    pub const ALL: [&str; 4] = [
        NATURAL_LANGUAGE_PROTOCOL,
        NATURAL_LANGUAGE_NEGOTIATION,
        TEST_CASES_NEGOTIATION,
        FIX_ERROR_NEGOTIATION,
    ];
}

/// A message that is not a valid meta-protocol message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid meta-protocol message: {0}")]
pub struct MessageError(pub String);

/// Status of a negotiation exchange (protocol, test cases or error fixing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetaStatus {
    Negotiating,
    Accepted,
    Rejected,
    Timeout,
}

/// Status of a `codeGeneration` message. `error` is a failure, never a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeGenerationStatus {
    Generated,
    Error,
}

/// `type` of a `naturalLanguageNegotiation` message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NlMessageType {
    Request,
    Response,
}

/// `protocolNegotiation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolNegotiation {
    pub sequence_id: u64,
    /// The full candidate protocol text (markdown). Required when `negotiating`; with `accepted`
    /// it names the accepted text (empty = the last proposal).
    #[serde(default)]
    pub candidate_protocols: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modification_summary: Option<String>,
    pub status: MetaStatus,
}

/// `codeGeneration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeGeneration {
    pub status: CodeGenerationStatus,
}

/// `testCasesNegotiation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestCasesNegotiation {
    /// The full test cases text (markdown, in the format of the protocol's `# Test Cases`).
    #[serde(default)]
    pub test_cases: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modification_summary: Option<String>,
    pub status: MetaStatus,
}

/// `fixErrorNegotiation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FixErrorNegotiation {
    #[serde(default)]
    pub error_description: String,
    pub status: MetaStatus,
}

/// `naturalLanguageNegotiation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NaturalLanguageNegotiation {
    #[serde(rename = "type")]
    pub message_type: NlMessageType,
    pub message_id: String,
    pub message: String,
}

/// `metaProtocol` of a hello message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaProtocolInfo {
    pub version: String,
    #[serde(default)]
    pub supported_capabilities: Vec<String>,
    /// The seed's single hash of a previously agreed protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_hash: Option<String>,
    /// The seed's protocol identifiers offered for reuse (URIs or hashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_protocols: Option<Vec<String>>,
    /// The seed's `destinationHello` answer: the identifier (here: hash) chosen for reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_protocol: Option<String>,
    /// Hashes of protocols the sender already holds, as some Parley peers send them (read only;
    /// see the module docs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_protocol_hashes: Vec<String>,
}

/// Whether this side speaks meta-protocol `version`: the same major version as
/// [`META_PROTOCOL_VERSION`] (`1`, `1.0`, `1.2`), minor versions being compatible.
pub fn version_supported(version: &str) -> bool {
    let major = |v: &str| v.trim().split('.').next().map(str::to_owned);
    let ours = major(META_PROTOCOL_VERSION);
    let all_digits = version
        .trim()
        .split('.')
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
    all_digits && major(version) == ours
}

impl MetaProtocolInfo {
    /// Parley's view: version 1.0, every capability it implements, and the given protocols
    /// offered for reuse in the seed's fields: the first as `protocolHash`, all of them as
    /// `candidateProtocols` (bare hex, as the seed writes a hash).
    pub fn parley(known: impl IntoIterator<Item = ProtocolHash>) -> Self {
        let known: Vec<String> = known.into_iter().map(|h| h.to_hex()).collect();
        Self {
            version: META_PROTOCOL_VERSION.to_owned(),
            supported_capabilities: capability::ALL.iter().map(|c| (*c).to_owned()).collect(),
            protocol_hash: known.first().cloned(),
            candidate_protocols: (!known.is_empty()).then_some(known),
            selected_protocol: None,
            known_protocol_hashes: Vec::new(),
        }
    }

    /// The version of the meta-protocol this hello speaks, when this side does not: the
    /// message's own `version` or the `metaProtocol`'s.
    pub fn unsupported_version<'a>(&'a self, message_version: &'a str) -> Option<&'a str> {
        [message_version, self.version.as_str()]
            .into_iter()
            .find(|v| !version_supported(v))
    }

    /// Every protocol hash the sender offers, from `knownProtocolHashes`, `protocolHash` and
    /// those `candidateProtocols` entries that parse as hashes (URIs are skipped), deduplicated
    /// in that order.
    pub fn offered_hashes(&self) -> Vec<ProtocolHash> {
        let mut out: Vec<ProtocolHash> = Vec::new();
        // Linear in the number offered, however many a peer sends.
        let mut seen = std::collections::HashSet::new();
        let all = self
            .known_protocol_hashes
            .iter()
            .chain(self.protocol_hash.iter())
            .chain(self.candidate_protocols.iter().flatten());
        for s in all {
            if let Ok(h) = s.parse::<ProtocolHash>()
                && seen.insert(h)
            {
                out.push(h);
            }
        }
        out
    }

    /// 0-RTT on the receiving side: the first offered hash (see
    /// [`MetaProtocolInfo::offered_hashes`]) that `known` says this side holds.
    pub fn select(&self, known: impl Fn(&ProtocolHash) -> bool) -> Option<ProtocolHash> {
        self.offered_hashes().into_iter().find(|h| known(h))
    }

    /// The `destinationHello` answering this (source) hello: Parley's capabilities, and
    /// `selectedProtocol` set to the first offered hash `known` holds (0-RTT), if any.
    pub fn answer(&self, known: impl Fn(&ProtocolHash) -> bool) -> MetaMessage {
        let mut info = MetaProtocolInfo::parley([]);
        info.selected_protocol = self.select(known).map(|h| h.to_hex());
        MetaMessage::destination_hello(info)
    }

    /// `selectedProtocol` as a hash, when it is one.
    pub fn selected_hash(&self) -> Option<ProtocolHash> {
        self.selected_protocol
            .as_deref()
            .and_then(|s| s.parse().ok())
    }

    pub fn supports(&self, capability: &str) -> bool {
        self.supported_capabilities.iter().any(|c| c == capability)
    }
}

/// `sourceHello` / `destinationHello` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    /// Message format version (`"1.0"`).
    #[serde(default = "default_version")]
    pub version: String,
    pub meta_protocol: MetaProtocolInfo,
    /// Fields the seed leaves out ("other fields omitted"), kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn default_version() -> String {
    META_PROTOCOL_VERSION.to_owned()
}

/// Any meta-protocol message (NLIP control content; ANP protocol type `00`).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaMessage {
    SourceHello(Hello),
    DestinationHello(Hello),
    ProtocolNegotiation(ProtocolNegotiation),
    CodeGeneration(CodeGeneration),
    TestCasesNegotiation(TestCasesNegotiation),
    FixErrorNegotiation(FixErrorNegotiation),
    NaturalLanguageNegotiation(NaturalLanguageNegotiation),
}

impl MetaMessage {
    /// The `action` (or hello `type`) string of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            MetaMessage::SourceHello(_) => "sourceHello",
            MetaMessage::DestinationHello(_) => "destinationHello",
            MetaMessage::ProtocolNegotiation(_) => "protocolNegotiation",
            MetaMessage::CodeGeneration(_) => "codeGeneration",
            MetaMessage::TestCasesNegotiation(_) => "testCasesNegotiation",
            MetaMessage::FixErrorNegotiation(_) => "fixErrorNegotiation",
            MetaMessage::NaturalLanguageNegotiation(_) => "naturalLanguageNegotiation",
        }
    }

    /// Parses and checks a message. Never panics, whatever the input.
    pub fn from_value(value: Value) -> Result<Self, MessageError> {
        let Value::Object(mut obj) = value else {
            return Err(MessageError("expected a JSON object".into()));
        };
        let tag = match obj.get("action") {
            Some(Value::String(a)) => a.clone(),
            Some(_) => return Err(MessageError("`action` must be a string".into())),
            None => match obj.get("type") {
                Some(Value::String(t)) if t == "sourceHello" || t == "destinationHello" => {
                    t.clone()
                }
                _ => {
                    return Err(MessageError(
                        "missing `action` (or hello `type`) field".into(),
                    ));
                }
            },
        };
        fn body<T: serde::de::DeserializeOwned>(
            tag: &str,
            obj: Map<String, Value>,
        ) -> Result<T, MessageError> {
            serde_json::from_value(Value::Object(obj))
                .map_err(|e| MessageError(format!("{tag}: {e}")))
        }
        let msg = match tag.as_str() {
            "sourceHello" | "destinationHello" => {
                obj.remove("action");
                obj.remove("type");
                let hello: Hello = body(&tag, obj)?;
                if tag == "sourceHello" {
                    MetaMessage::SourceHello(hello)
                } else {
                    MetaMessage::DestinationHello(hello)
                }
            }
            "protocolNegotiation" => MetaMessage::ProtocolNegotiation(body(&tag, obj)?),
            "codeGeneration" => MetaMessage::CodeGeneration(body(&tag, obj)?),
            "testCasesNegotiation" => MetaMessage::TestCasesNegotiation(body(&tag, obj)?),
            "fixErrorNegotiation" => MetaMessage::FixErrorNegotiation(body(&tag, obj)?),
            "naturalLanguageNegotiation" => {
                MetaMessage::NaturalLanguageNegotiation(body(&tag, obj)?)
            }
            other => {
                let shown: String = other.chars().take(64).collect();
                return Err(MessageError(format!("unknown action {shown:?}")));
            }
        };
        msg.check()?;
        Ok(msg)
    }

    /// Parses a message from JSON bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, MessageError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| MessageError(format!("not JSON: {e}")))?;
        Self::from_value(value)
    }

    /// The JSON object, with the fields in the seed's order.
    pub fn to_value(&self) -> Value {
        fn tagged<T: Serialize>(key: &str, tag: &str, body: &T) -> Value {
            let mut obj = Map::new();
            obj.insert(key.to_owned(), Value::String(tag.to_owned()));
            // Serialising these plain structs cannot fail: every field is a string, number,
            // enum or JSON value.
            if let Ok(Value::Object(fields)) = serde_json::to_value(body) {
                obj.extend(fields);
            }
            Value::Object(obj)
        }
        match self {
            MetaMessage::SourceHello(h) | MetaMessage::DestinationHello(h) => {
                // The seed's order: version, type, metaProtocol, then the rest.
                let mut obj = Map::new();
                obj.insert("version".into(), Value::String(h.version.clone()));
                obj.insert("type".into(), Value::String(self.kind().to_owned()));
                if let Ok(meta) = serde_json::to_value(&h.meta_protocol) {
                    obj.insert("metaProtocol".into(), meta);
                }
                for (k, v) in &h.extra {
                    obj.entry(k.clone()).or_insert_with(|| v.clone());
                }
                Value::Object(obj)
            }
            MetaMessage::ProtocolNegotiation(m) => tagged("action", self.kind(), m),
            MetaMessage::CodeGeneration(m) => tagged("action", self.kind(), m),
            MetaMessage::TestCasesNegotiation(m) => tagged("action", self.kind(), m),
            MetaMessage::FixErrorNegotiation(m) => tagged("action", self.kind(), m),
            MetaMessage::NaturalLanguageNegotiation(m) => tagged("action", self.kind(), m),
        }
    }

    /// Rules the seed states in prose, beyond field types.
    fn check(&self) -> Result<(), MessageError> {
        match self {
            MetaMessage::ProtocolNegotiation(m)
                if m.status == MetaStatus::Negotiating
                    && m.candidate_protocols.trim().is_empty() =>
            {
                Err(MessageError(
                    "protocolNegotiation: `candidateProtocols` is required while negotiating"
                        .into(),
                ))
            }
            MetaMessage::TestCasesNegotiation(m)
                if m.status == MetaStatus::Negotiating && m.test_cases.trim().is_empty() =>
            {
                Err(MessageError(
                    "testCasesNegotiation: `testCases` is required while negotiating".into(),
                ))
            }
            MetaMessage::FixErrorNegotiation(m)
                if m.status == MetaStatus::Negotiating && m.error_description.trim().is_empty() =>
            {
                Err(MessageError(
                    "fixErrorNegotiation: `errorDescription` is required while negotiating".into(),
                ))
            }
            _ => Ok(()),
        }
    }

    // --- constructors -------------------------------------------------------------------------

    pub fn source_hello(meta: MetaProtocolInfo) -> Self {
        MetaMessage::SourceHello(Hello {
            version: META_PROTOCOL_VERSION.to_owned(),
            meta_protocol: meta,
            extra: Map::new(),
        })
    }

    pub fn destination_hello(meta: MetaProtocolInfo) -> Self {
        MetaMessage::DestinationHello(Hello {
            version: META_PROTOCOL_VERSION.to_owned(),
            meta_protocol: meta,
            extra: Map::new(),
        })
    }

    pub fn protocol_negotiation(
        sequence_id: u64,
        candidate_protocols: impl Into<String>,
        modification_summary: Option<String>,
        status: MetaStatus,
    ) -> Self {
        MetaMessage::ProtocolNegotiation(ProtocolNegotiation {
            sequence_id,
            candidate_protocols: candidate_protocols.into(),
            modification_summary,
            status,
        })
    }

    pub fn code_generation(status: CodeGenerationStatus) -> Self {
        MetaMessage::CodeGeneration(CodeGeneration { status })
    }

    pub fn test_cases_negotiation(
        test_cases: impl Into<String>,
        modification_summary: Option<String>,
        status: MetaStatus,
    ) -> Self {
        MetaMessage::TestCasesNegotiation(TestCasesNegotiation {
            test_cases: test_cases.into(),
            modification_summary,
            status,
        })
    }

    pub fn fix_error_negotiation(error_description: impl Into<String>, status: MetaStatus) -> Self {
        MetaMessage::FixErrorNegotiation(FixErrorNegotiation {
            error_description: error_description.into(),
            status,
        })
    }

    pub fn natural_language(
        message_type: NlMessageType,
        message_id: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        MetaMessage::NaturalLanguageNegotiation(NaturalLanguageNegotiation {
            message_type,
            message_id: message_id.into(),
            message: message.into(),
        })
    }
}

impl fmt::Display for MetaMessage {
    /// A one-line summary for logs: the kind and the status, never the protocol text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaMessage::ProtocolNegotiation(m) => write!(
                f,
                "protocolNegotiation(seq={}, status={:?}, {} bytes)",
                m.sequence_id,
                m.status,
                m.candidate_protocols.len()
            ),
            MetaMessage::CodeGeneration(m) => write!(f, "codeGeneration({:?})", m.status),
            MetaMessage::TestCasesNegotiation(m) => {
                write!(f, "testCasesNegotiation({:?})", m.status)
            }
            MetaMessage::FixErrorNegotiation(m) => {
                write!(f, "fixErrorNegotiation({:?})", m.status)
            }
            other => f.write_str(other.kind()),
        }
    }
}

impl Serialize for MetaMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for MetaMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        MetaMessage::from_value(value).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_status_is_an_error() {
        let err = MetaMessage::from_value(json!({
            "action": "protocolNegotiation", "sequenceId": 0,
            "candidateProtocols": "x", "status": "maybe"
        }))
        .expect_err("unknown status");
        assert!(err.0.contains("maybe"), "{err}");
    }

    #[test]
    fn negotiating_needs_text() {
        assert!(
            MetaMessage::from_value(json!({
                "action": "protocolNegotiation", "sequenceId": 0, "status": "negotiating"
            }))
            .is_err()
        );
        // Terminal statuses may omit it.
        assert!(
            MetaMessage::from_value(json!({
                "action": "protocolNegotiation", "sequenceId": 3, "status": "rejected"
            }))
            .is_ok()
        );
    }

    #[test]
    fn hello_accepts_action_tag_and_writes_type_tag() {
        let m = MetaMessage::from_value(json!({
            "action": "sourceHello",
            "metaProtocol": { "version": "1.0", "supportedCapabilities": [] }
        }))
        .expect("valid");
        let v = m.to_value();
        assert_eq!(v["type"], "sourceHello");
        assert!(v.get("action").is_none());
    }

    #[test]
    fn answering_a_hello_selects_a_known_hash() {
        let a = ProtocolHash::of("a");
        let b = ProtocolHash::of("b");
        let offer = MetaProtocolInfo::parley([a, b]);
        let MetaMessage::DestinationHello(reply) = offer.answer(|h| *h == b) else {
            panic!("a destinationHello");
        };
        assert_eq!(reply.meta_protocol.selected_hash(), Some(b));
        let MetaMessage::DestinationHello(reply) = offer.answer(|_| false) else {
            panic!("a destinationHello");
        };
        assert_eq!(reply.meta_protocol.selected_protocol, None);
    }

    #[test]
    fn versions_of_the_same_major_are_spoken() {
        for ok in ["1", "1.0", "1.2", " 1.0 "] {
            assert!(version_supported(ok), "{ok}");
        }
        for refused in ["2.0", "0.9", "", "1.x", "v1", "1..0"] {
            assert!(!version_supported(refused), "{refused}");
        }
        let info = MetaProtocolInfo {
            version: "2.0".into(),
            ..MetaProtocolInfo::parley([])
        };
        assert_eq!(info.unsupported_version("1.0"), Some("2.0"));
        assert_eq!(
            MetaProtocolInfo::parley([]).unsupported_version("3"),
            Some("3")
        );
        assert_eq!(
            MetaProtocolInfo::parley([]).unsupported_version("1.0"),
            None
        );
    }

    #[test]
    fn parleys_hello_offers_in_the_seeds_fields_and_not_verification() {
        let a = ProtocolHash::of("a");
        let value = MetaMessage::source_hello(MetaProtocolInfo::parley([a])).to_value();
        assert_eq!(value["metaProtocol"]["protocolHash"], a.to_hex());
        assert_eq!(value["metaProtocol"]["candidateProtocols"][0], a.to_hex());
        assert!(value["metaProtocol"].get("knownProtocolHashes").is_none());
        let caps = value["metaProtocol"]["supportedCapabilities"].to_string();
        assert!(!caps.contains(capability::VERIFICATION_PROTOCOL), "{caps}");
        let none = MetaMessage::source_hello(MetaProtocolInfo::parley([])).to_value();
        assert!(none["metaProtocol"].get("protocolHash").is_none());
        assert!(none["metaProtocol"].get("candidateProtocols").is_none());
    }

    #[test]
    fn offered_hashes_merge_all_sources() {
        let a = ProtocolHash::of("a");
        let b = ProtocolHash::of("b");
        let info = MetaProtocolInfo {
            protocol_hash: Some(b.prefixed()),
            candidate_protocols: Some(vec!["https://example.com/p/1".into(), a.to_hex()]),
            known_protocol_hashes: vec![a.to_hex()],
            ..MetaProtocolInfo::parley([])
        };
        assert_eq!(info.offered_hashes(), vec![a, b]);
    }
}
