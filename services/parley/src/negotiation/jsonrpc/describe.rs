//! What this agent says about itself to ANP peers: `anp.get_capabilities`, the agent
//! description (ANP-07, JSON-LD) with its `MetaProtocolInterface`, and the discovery page
//! (ANP-08's `CollectionPage` at `/.well-known/agent-descriptions`) that points at it.
//!
//! Every URL in them is absolute, built from the `Host` the peer used and the listener's
//! scheme, so a peer finds the end-points by the name it reached the agent by; a request
//! without a usable `Host` gets paths relative to the agent's root.

use parley_anp::rpc::{CONTENT_TYPE, Mode, PROFILE, RpcError, SECURITY_PROFILE, digest_of_text};
use serde_json::{Value, json};

use super::{Endpoint, server_error};
use crate::agent::Agent;

/// The JSON-RPC end-point's path.
pub const RPC_PATH: &str = "/anp/rpc";
/// The agent description's path.
pub const DESCRIPTION_PATH: &str = "/agents/parley/ad.json";
/// ANP-08's discovery path.
pub const DISCOVERY_PATH: &str = "/.well-known/agent-descriptions";
/// The id of the interface agreed protocols are called at (`selected.interface`).
pub const NLIP_INTERFACE: &str = "interface.nlip.http";
/// `selected.profile`: NLIP application messages over HTTP (ECMA-430 over ECMA-431).
pub const NLIP_PROFILE: &str = "nlip.ecma-431";
/// How many served protocols `anp.get_capabilities` lists.
const LISTED: u32 = 100;

/// Where this agent's end-points are, as one peer reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urls {
    /// The JSON-RPC end-point.
    pub rpc: String,
    /// `POST /nlip`: application messages of agreed protocols, natural language.
    pub nlip: String,
    /// `/nlip/ws`.
    pub nlip_ws: String,
    /// `/anp`: seed 002's framing.
    pub anp: String,
    pub description: String,
    pub discovery: String,
}

impl Urls {
    /// The URLs under `authority` (`host:port`, as the peer's `Host` header gave it; `None`:
    /// relative paths), over TLS when `secure`.
    pub fn at(authority: Option<&str>, secure: bool) -> Urls {
        let (http, ws) = match authority {
            Some(a) if secure => (format!("https://{a}"), format!("wss://{a}")),
            Some(a) => (format!("http://{a}"), format!("ws://{a}")),
            None => (String::new(), String::new()),
        };
        Urls {
            rpc: format!("{http}{RPC_PATH}"),
            nlip: format!("{http}/nlip"),
            nlip_ws: format!("{ws}/nlip/ws"),
            anp: format!("{ws}/anp"),
            description: format!("{http}{DESCRIPTION_PATH}"),
            discovery: format!("{http}{DISCOVERY_PATH}"),
        }
    }
}

/// `anp.get_capabilities`: the profiles, security profiles and content types offered, the
/// negotiation modes, the protocols served (by hash), the capabilities, and the limits.
pub(super) async fn capabilities(endpoint: &Endpoint) -> Result<Value, RpcError> {
    let provider = endpoint.agent.provider();
    let served = provider
        .served_protocols(LISTED)
        .await
        .map_err(|e| server_error(&e))?;
    let protocols: Vec<Value> = served
        .iter()
        .map(|p| {
            json!({
                "protocolArtifact": format!("sha256:{}", p.hash),
                "digest": digest_of_text(&p.text),
            })
        })
        .collect();
    Ok(json!({
        "supported_profiles": [PROFILE],
        "supported_security_profiles": [SECURITY_PROFILE],
        "supported_content_types": [CONTENT_TYPE],
        "limits": {
            "max_request_bytes": endpoint.max_request_bytes,
            "max_candidate_protocols": provider.max_offered(),
        },
        "negotiation": {
            "modes": [Mode::STRUCTURED_SELECTION, Mode::DRAFTING],
            "metaProtocols": meta_protocols(&endpoint.urls),
            "validForSeconds": endpoint.valid_for.as_secs(),
        },
        "protocols": protocols,
        "capabilities": capability_list(&endpoint.agent),
    }))
}

/// The meta-protocol framings served, by version.
fn meta_protocols(urls: &Urls) -> Value {
    json!([
        {"profile": PROFILE, "binding": "jsonrpc-2.0", "url": urls.rpc},
        {
            "profile": "anp.meta.seed-002",
            "version": parley_anp::messages::META_PROTOCOL_VERSION,
            "binding": "websocket",
            "url": urls.anp
        },
        {
            "profile": "anp.meta.nlip-control",
            "version": parley_anp::messages::META_PROTOCOL_VERSION,
            "binding": "nlip",
            "url": urls.nlip
        }
    ])
}

fn capability_list(agent: &Agent) -> Vec<Value> {
    agent
        .capabilities()
        .iter()
        .map(|c| {
            json!({
                "id": format!("cap.{}", c.name()),
                "name": c.name(),
                "description": c.description(),
            })
        })
        .collect()
}

/// The agent description (ANP-07): who this agent is, its capabilities, and its interfaces —
/// the `MetaProtocolInterface` of the JSON-RPC end-point first, then NLIP's and seed 002's.
pub fn agent_description(agent: &Agent, urls: &Urls) -> Value {
    json!({
        "@context": {
            "@vocab": "https://schema.org/",
            "did": "https://w3id.org/did#",
            "ad": "https://agent-network-protocol.com/ad#"
        },
        "@type": "ad:AgentDescription",
        "@id": urls.description,
        "protocolType": "ANP",
        "protocolVersion": "1.2",
        "type": "AgentDescription",
        "url": urls.description,
        "name": "Parley",
        "description": "An NLIP agent that negotiates structured protocols (the ANP meta-protocol) \
                        and serves them through sandboxed, verified handlers.",
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": capability_list(agent),
        "interfaces": [
            {
                "id": "interface.negotiation.default",
                "type": "MetaProtocolInterface",
                "protocol": "ANP",
                "version": "1.0",
                "profile": PROFILE,
                "binding": "jsonrpc-2.0",
                "url": urls.rpc,
                "methods": [parley_anp::rpc::method::GET_CAPABILITIES, parley_anp::rpc::method::NEGOTIATE],
                "securityProfiles": [SECURITY_PROFILE],
                "negotiates": ["protocol_artifacts", "schemas", "execution_modes"],
                "description": "Meta-protocol negotiation: select a protocol served here by its \
                                hash, or draft one; agreed protocols are called at interface.nlip.http."
            },
            {
                "id": NLIP_INTERFACE,
                "type": "StructuredInterface",
                "protocol": "NLIP",
                "profile": NLIP_PROFILE,
                "url": urls.nlip,
                "description": "NLIP messages over HTTP POST: an agreed protocol's requests as \
                                structured/json with a `protocol` token naming its hash; meta-protocol \
                                messages as control messages; natural language."
            },
            {
                "id": "interface.nlip.websocket",
                "type": "StructuredInterface",
                "protocol": "NLIP",
                "profile": "nlip.ecma-432",
                "url": urls.nlip_ws,
                "description": "The same NLIP messages over a WebSocket (CBOR; /nlip/ws/text for JSON)."
            },
            {
                "id": "interface.negotiation.seed-002",
                "type": "StructuredInterface",
                "protocol": "ANP",
                "profile": "anp.meta.seed-002",
                "url": urls.anp,
                "description": "The meta-protocol's earlier framing (a header byte per WebSocket \
                                frame), as AgentConnect speaks it."
            },
            {
                "id": "interface.conversation.nl",
                "type": "NaturalLanguageInterface",
                "protocol": "NLIP",
                "url": urls.nlip,
                "description": "Natural language: a plain NLIP text message."
            }
        ]
    })
}

/// The discovery page (ANP-08): one `CollectionPage` listing this agent's description.
pub fn discovery_page(urls: &Urls) -> Value {
    json!({
        "@context": {
            "@vocab": "https://schema.org/",
            "did": "https://w3id.org/did#",
            "ad": "https://agent-network-protocol.com/ad#"
        },
        "@type": "CollectionPage",
        "url": urls.discovery,
        "items": [
            {"@type": "ad:AgentDescription", "name": "Parley", "@id": urls.description}
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_host_and_the_scheme() {
        let plain = Urls::at(Some("agent.example:8080"), false);
        assert_eq!(plain.rpc, "http://agent.example:8080/anp/rpc");
        assert_eq!(plain.anp, "ws://agent.example:8080/anp");
        let secure = Urls::at(Some("agent.example"), true);
        assert_eq!(secure.nlip, "https://agent.example/nlip");
        assert_eq!(secure.nlip_ws, "wss://agent.example/nlip/ws");
        let relative = Urls::at(None, true);
        assert_eq!(relative.description, DESCRIPTION_PATH);
    }

    #[test]
    fn the_discovery_page_points_at_the_description() {
        let urls = Urls::at(Some("a:1"), false);
        let page = discovery_page(&urls);
        assert_eq!(page["@type"], "CollectionPage");
        assert_eq!(page["items"][0]["@id"], urls.description);
    }
}
