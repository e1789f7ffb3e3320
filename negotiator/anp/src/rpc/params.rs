//! What `anp.negotiate` carries, checked: [`NegotiateParams::read`] turns `params` into the
//! values the server acts on, or the error the request earns.
//!
//! Which error: a member of the wrong type, or one the draft requires missing (`params.meta`,
//! its `profile`, `params.body`, `body.intent`) is `-32602`; a well-formed request asking
//! for what Parley does not offer gets the draft's code — another `meta.profile` 1603, a
//! security profile other than `transport-protected` 1604, a content type other than
//! `application/json` 1605, another `mode` 1602.

use serde_json::{Map, Value};

use super::envelope::{AnpCode, RpcError};
use super::{CONTENT_TYPE, PROFILE, SECURITY_PROFILE};
use crate::ProtocolHash;

/// `body.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The caller offers protocols by hash; the target selects one it serves (0-RTT reuse).
    StructuredSelection,
    /// The caller sends a draft (or names what it needs); the target evaluates it, builds and
    /// verifies a handler, and agrees, counter-proposes or rejects.
    NaturalLanguageProtocolDrafting,
}

impl Mode {
    pub const STRUCTURED_SELECTION: &str = "structured_selection";
    pub const DRAFTING: &str = "natural_language_protocol_drafting";

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::StructuredSelection => Self::STRUCTURED_SELECTION,
            Mode::NaturalLanguageProtocolDrafting => Self::DRAFTING,
        }
    }
}

/// One entry of `body.candidateProtocols`: a protocol named by its hash, carrying its document
/// for drafting, and — when the caller offers a result it cached — the result's validity.
///
/// Accepted forms: a string (`sha256:<hex>`, bare hex, or `sha-256:<base64url>`, the draft's
/// digest form of the same SHA-256), or an object with the hash in `protocolArtifact`,
/// `protocol_id` or `digest`, the document in `document` (or `text`), and optionally
/// `validUntil` and `negotiationDigest` from an earlier result.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The protocol's hash: given, or computed from `document`.
    pub hash: ProtocolHash,
    pub document: Option<String>,
    /// An earlier result's `validUntil`, as given (RFC 3339); the server compares it.
    pub valid_until: Option<String>,
}

/// `anp.negotiate`'s parameters, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NegotiateParams {
    /// `body.negotiation_id`, when given.
    pub negotiation_id: Option<String>,
    pub mode: Mode,
    /// `meta.sender_did`, when given: the caller as it names itself (unauthenticated).
    pub sender: Option<String>,
    /// `body.intent.name`.
    pub intent_name: Option<String>,
    /// `body.intent.description`.
    pub intent_description: Option<String>,
    /// `body.requiredCapabilities`.
    pub required_capabilities: Vec<String>,
    pub candidates: Vec<Candidate>,
    /// `body.constraints.allowNaturalLanguageFallback` (default false).
    pub allow_drafting: bool,
}

/// Longest accepted `negotiation_id`, `sender_did` or intent string.
const MAX_LABEL: usize = 512;

impl NegotiateParams {
    /// Reads `params`, keeping at most `max_candidates` candidates (more is `-32602`).
    pub fn read(params: &Map<String, Value>, max_candidates: usize) -> Result<Self, RpcError> {
        let meta = object(params, "meta", "params")?.ok_or_else(|| missing("params.meta"))?;
        check_meta(meta)?;
        let body = object(params, "body", "params")?.ok_or_else(|| missing("params.body"))?;
        let intent = object(body, "intent", "body")?.ok_or_else(|| missing("body.intent"))?;
        check_caller(body)?;
        let mode = match string(body, "mode", "body")? {
            None => Mode::StructuredSelection,
            Some(Mode::STRUCTURED_SELECTION) => Mode::StructuredSelection,
            Some(Mode::DRAFTING) => Mode::NaturalLanguageProtocolDrafting,
            Some(other) => {
                let shown: String = other.chars().take(80).collect();
                return Err(RpcError::anp(
                    AnpCode::UnsupportedNegotiationMode,
                    format!("negotiation mode {shown:?} is not supported"),
                    Some(serde_json::json!({
                        "supportedModes": [Mode::STRUCTURED_SELECTION, Mode::DRAFTING]
                    })),
                ));
            }
        };
        let constraints = object(body, "constraints", "body")?;
        let allow_drafting = match constraints.map(|c| c.get("allowNaturalLanguageFallback")) {
            None | Some(None) => false,
            Some(Some(Value::Bool(b))) => *b,
            Some(Some(_)) => {
                return Err(RpcError::invalid_params(
                    "constraints.allowNaturalLanguageFallback is a boolean",
                ));
            }
        };
        Ok(NegotiateParams {
            negotiation_id: label(body, "negotiation_id", "body")?,
            mode,
            sender: label(meta, "sender_did", "meta")?,
            intent_name: label(intent, "name", "intent")?,
            intent_description: string(intent, "description", "intent")?.map(str::to_owned),
            required_capabilities: strings(body, "requiredCapabilities")?,
            candidates: candidates(body, max_candidates)?,
            allow_drafting,
        })
    }

    /// The first candidate that carries its document.
    pub fn draft(&self) -> Option<&Candidate> {
        self.candidates.iter().find(|c| c.document.is_some())
    }
}

/// `meta.profile` must be this binding's; a security profile or content type, when named,
/// one Parley offers.
fn check_meta(meta: &Map<String, Value>) -> Result<(), RpcError> {
    match string(meta, "profile", "meta")? {
        None => return Err(missing("meta.profile")),
        Some(PROFILE) => {}
        Some(other) => {
            return Err(RpcError::anp(
                AnpCode::UnsupportedCandidateProfile,
                format!("profile {other:?} is not negotiated here: anp.negotiate takes {PROFILE}"),
                Some(serde_json::json!({"supportedProfiles": [PROFILE]})),
            ));
        }
    }
    if let Some(p) = string(meta, "security_profile", "meta")?
        && p != SECURITY_PROFILE
    {
        return Err(unsupported_security(p));
    }
    if let Some(t) = string(meta, "content_type", "meta")?
        && !is_json(t)
    {
        return Err(unsupported_content_type(t));
    }
    Ok(())
}

/// What the caller supports and requires must include what Parley offers.
fn check_caller(body: &Map<String, Value>) -> Result<(), RpcError> {
    if let Some(caller) = object(body, "callerCapabilities", "body")? {
        let security = strings(caller, "supportedSecurityProfiles")?;
        if !security.is_empty() && !security.iter().any(|p| p == SECURITY_PROFILE) {
            return Err(unsupported_security(&security.join(", ")));
        }
        let types = strings(caller, "supportedContentTypes")?;
        if !types.is_empty() && !types.iter().any(|t| is_json(t)) {
            return Err(unsupported_content_type(&types.join(", ")));
        }
    }
    if let Some(constraints) = object(body, "constraints", "body")?
        && let Some(p) = string(constraints, "requiredSecurityProfile", "constraints")?
        && p != SECURITY_PROFILE
    {
        return Err(unsupported_security(p));
    }
    Ok(())
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(CONTENT_TYPE)
}

fn unsupported_security(given: &str) -> RpcError {
    RpcError::anp(
        AnpCode::UnsupportedSecurityProfile,
        format!(
            "security profile {given:?} is not offered: this agent offers {SECURITY_PROFILE} only"
        ),
        Some(serde_json::json!({"supportedSecurityProfiles": [SECURITY_PROFILE]})),
    )
}

fn unsupported_content_type(given: &str) -> RpcError {
    RpcError::anp(
        AnpCode::UnsupportedContentType,
        format!("content type {given:?} is not offered: this agent speaks {CONTENT_TYPE}"),
        Some(serde_json::json!({"supportedContentTypes": [CONTENT_TYPE]})),
    )
}

fn candidates(body: &Map<String, Value>, max: usize) -> Result<Vec<Candidate>, RpcError> {
    let items = match body.get("candidateProtocols") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "body.candidateProtocols is an array",
            ));
        }
    };
    if items.len() > max {
        return Err(RpcError::invalid_params(format!(
            "body.candidateProtocols offers {} protocols; at most {max} are read",
            items.len()
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            Candidate::read(item)
                .map_err(|why| RpcError::invalid_params(format!("candidateProtocols[{i}]: {why}")))
        })
        .collect()
}

impl Candidate {
    /// Reads one candidate (see the type's docs for the forms).
    pub fn read(value: &Value) -> Result<Candidate, String> {
        let object = match value {
            Value::String(s) => {
                return Ok(Candidate {
                    hash: parse_hash(s)?,
                    document: None,
                    valid_until: None,
                });
            }
            Value::Object(object) => object,
            _ => return Err("a candidate is a protocol hash or an artifact object".into()),
        };
        let text = |key: &str| match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`{key}` is a string")),
        };
        let named = ["protocolArtifact", "protocol_id", "digest"]
            .into_iter()
            .map(&text)
            .collect::<Result<Vec<_>, _>>()?;
        let document = text("document")?.or(text("text")?);
        let given = named.into_iter().flatten().next();
        let hash = match (given, &document) {
            (Some(h), Some(doc)) => {
                let hash = parse_hash(&h)?;
                if !hash.matches(doc) {
                    return Err(format!(
                        "the document's SHA-256 is {}, not the hash given ({h})",
                        ProtocolHash::of(doc).prefixed()
                    ));
                }
                hash
            }
            (Some(h), None) => parse_hash(&h)?,
            (None, Some(doc)) => ProtocolHash::of(doc),
            (None, None) => {
                return Err(
                    "an artifact names its protocol (protocolArtifact) or carries its document"
                        .into(),
                );
            }
        };
        Ok(Candidate {
            hash,
            document,
            valid_until: text("validUntil")?,
        })
    }
}

/// A protocol hash in Parley's form (`sha256:<hex>`, bare hex) or the draft's digest form
/// (`sha-256:<base64url>`).
pub fn parse_hash(s: &str) -> Result<ProtocolHash, String> {
    if let Some(b64) = s
        .strip_prefix("sha-256:")
        .or_else(|| s.strip_prefix("SHA-256:"))
    {
        use base64::Engine as _;
        let trimmed = b64.trim_end_matches('=');
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(trimmed)
            .map_err(|_| format!("{:?} is not base64url", shorten(s)))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| format!("{:?} is not a SHA-256 digest", shorten(s)))?;
        return Ok(ProtocolHash::from_bytes(bytes));
    }
    s.parse::<ProtocolHash>().map_err(|e| e.to_string())
}

fn shorten(s: &str) -> String {
    s.chars().take(80).collect()
}

fn missing(what: &str) -> RpcError {
    RpcError::invalid_params(format!("{what} is required"))
}

fn object<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    owner: &str,
) -> Result<Option<&'a Map<String, Value>>, RpcError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{owner}.{key} is an object"
        ))),
    }
}

fn string<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    owner: &str,
) -> Result<Option<&'a str>, RpcError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{owner}.{key} is a string"
        ))),
    }
}

/// A short string member (an id, a name).
fn label(map: &Map<String, Value>, key: &str, owner: &str) -> Result<Option<String>, RpcError> {
    match string(map, key, owner)? {
        Some(s) if s.len() > MAX_LABEL => Err(RpcError::invalid_params(format!(
            "{owner}.{key} is longer than {MAX_LABEL} bytes"
        ))),
        s => Ok(s.map(str::to_owned)),
    }
}

fn strings(map: &Map<String, Value>, key: &str) -> Result<Vec<String>, RpcError> {
    let bad = || RpcError::invalid_params(format!("{key} is an array of strings"));
    match map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(params: Value) -> Result<NegotiateParams, RpcError> {
        let Value::Object(map) = params else {
            panic!("params are an object")
        };
        NegotiateParams::read(&map, 8)
    }

    fn base(body: Value) -> Value {
        json!({"meta": {"profile": PROFILE}, "body": body})
    }

    fn code(params: Value) -> i64 {
        read(params).expect_err("refused").code
    }

    #[test]
    fn reads_a_structured_selection() {
        let text = "# doc";
        let hash = ProtocolHash::of(text);
        let p = read(base(json!({
            "negotiation_id": "n1",
            "intent": {"name": "product_info"},
            "candidateProtocols": [hash.prefixed(), {"protocolArtifact": hash.to_hex(), "validUntil": "2026-01-01T00:00:00Z"}]
        })))
        .expect("read");
        assert_eq!(p.mode, Mode::StructuredSelection);
        assert_eq!(p.negotiation_id.as_deref(), Some("n1"));
        assert_eq!(p.candidates.len(), 2);
        assert_eq!(p.candidates[0].hash, hash);
        assert_eq!(
            p.candidates[1].valid_until.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert!(p.draft().is_none());
    }

    #[test]
    fn reads_the_digest_form_and_documents() {
        use base64::Engine as _;
        let text = "# doc";
        let hash = ProtocolHash::of(text);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.as_bytes());
        assert_eq!(parse_hash(&format!("sha-256:{b64}")), Ok(hash));
        let p = read(base(json!({
            "mode": Mode::DRAFTING,
            "intent": {"description": "what I need"},
            "candidateProtocols": [{"digest": format!("sha-256:{b64}"), "document": text}]
        })))
        .expect("read");
        assert_eq!(p.mode, Mode::NaturalLanguageProtocolDrafting);
        assert_eq!(p.draft().and_then(|c| c.document.as_deref()), Some(text));
        let wrong =
            json!({"protocolArtifact": ProtocolHash::of("other").prefixed(), "document": text});
        assert!(
            Candidate::read(&wrong).is_err(),
            "a hash that is not the document's"
        );
    }

    #[test]
    fn refusals_get_the_drafts_codes() {
        assert_eq!(
            code(json!({"body": {"intent": {}}})),
            RpcError::INVALID_PARAMS
        );
        assert_eq!(
            code(json!({"meta": {}, "body": {"intent": {}}})),
            RpcError::INVALID_PARAMS
        );
        assert_eq!(
            code(base(json!({}))),
            RpcError::INVALID_PARAMS,
            "intent is required"
        );
        assert_eq!(
            code(base(json!({"intent": {}, "candidateProtocols": ["nope"]}))),
            RpcError::INVALID_PARAMS
        );
        assert_eq!(
            code(base(
                json!({"intent": {}, "candidateProtocols": vec!["x"; 9]})
            )),
            RpcError::INVALID_PARAMS
        );
        assert_eq!(code(base(json!({"intent": {}, "mode": "telepathy"}))), 1602);
        assert_eq!(
            code(json!({"meta": {"profile": "anp.rpc.v1"}, "body": {"intent": {}}})),
            1603
        );
        assert_eq!(
            code(
                json!({"meta": {"profile": PROFILE, "security_profile": "direct-e2ee"}, "body": {"intent": {}}})
            ),
            1604
        );
        assert_eq!(
            code(base(
                json!({"intent": {}, "constraints": {"requiredSecurityProfile": "direct-e2ee"}})
            )),
            1604
        );
        assert_eq!(
            code(base(
                json!({"intent": {}, "callerCapabilities": {"supportedContentTypes": ["text/plain"]}})
            )),
            1605
        );
        assert_eq!(
            code(
                json!({"meta": {"profile": PROFILE, "content_type": "application/cbor"}, "body": {"intent": {}}})
            ),
            1605
        );
        let ok = json!({"meta": {"profile": PROFILE, "content_type": "application/json; charset=utf-8"}, "body": {"intent": {}}});
        assert!(read(ok).is_ok());
    }
}
