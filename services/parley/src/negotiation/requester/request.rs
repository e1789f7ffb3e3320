//! One request, decided: through the protocol agreed with the peer when there is one (0-RTT),
//! after negotiating it when there is not, and in natural language when no protocol can be
//! agreed. The CLI's `call` and a server acting as a requester both go through
//! [`Requester::request`].
//!
//! # Falling back
//! A request falls back to natural language when the provider rejects the protocol, when the
//! negotiation fails (the peer answers with an error or stops answering), or when the peer
//! does not speak the meta-protocol at all. The fallback is one plain NLIP text message built
//! from the protocol's requirement and the request ([`natural_language_request`]); the peer's
//! reasoner answers it. Failures that a natural-language message would meet just the same (the
//! peer cannot be reached) or that are the caller's (a request the protocol does not admit, an
//! unusable protocol document) are errors, never a fallback; so are failures of the agreed
//! protocol's own call (the provider's handler answered with an error).

use std::fmt;

use parley_anp::{ProtocolDoc, ProtocolHash};
use parley_nlip::{ErrorInfo, Message};
use parley_store::Role;
use serde_json::Value;

use super::{Called, Negotiated, Outcome, Progress, Requester, RequesterError, Wire};
use crate::client::{ClientError, Credential, NlipClient, endpoint};
use crate::negotiation::jsonrpc::client::RpcLinkError;
use crate::tls::ClientTls;

/// What a request names its protocol by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolRef {
    /// The protocol document itself: negotiated first unless agreed with the peer already.
    Text(String),
    /// A protocol in the local store (see [`Requester::resolve_hash`] for short hashes).
    Hash(ProtocolHash),
}

/// Why a request was answered in natural language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackReason {
    /// The negotiation ended without agreement (the provider rejected the protocol, or this
    /// requester its counter-proposal); `code` is the negotiator's stable code.
    Rejected { code: String, reason: String },
    /// The peer does not speak the meta-protocol.
    NotSupported,
    /// The negotiation failed: why.
    Failed(String),
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackReason::Rejected { code, reason } => {
                write!(
                    f,
                    "the negotiation ended without agreement ({code}): {reason}"
                )
            }
            FallbackReason::NotSupported => {
                f.write_str("the peer does not speak the meta-protocol")
            }
            FallbackReason::Failed(why) => write!(f, "the negotiation failed: {why}"),
        }
    }
}

/// How [`Requester::request`] was answered.
#[derive(Debug, Clone)]
pub enum Requested {
    /// Through the agreed protocol `hash`; `negotiated` is set when this request negotiated it
    /// (before the call, or again because the provider had forgotten it).
    Protocol {
        hash: ProtocolHash,
        negotiated: Option<Box<Negotiated>>,
        called: Box<Called>,
    },
    /// In natural language, for `reason`; `reply` is the peer's answer.
    Fallback {
        reason: FallbackReason,
        reply: Message,
    },
}

impl Requested {
    /// The answer's text: the protocol's JSON answer, or the peer's natural-language text.
    pub fn text(&self) -> String {
        match self {
            Requested::Protocol { called, .. } => called.answer.to_string(),
            Requested::Fallback { reply, .. } => reply_text(reply),
        }
    }
}

impl Requester {
    /// Sends `request` to the peer at `url` under `protocol`. A protocol named by its hash was
    /// agreed before (with this peer, or with another instance on the provider's database), so
    /// it is called at once; the provider that does not know it is answered with a negotiation
    /// and the call is retried ([`Requester::call`]). A protocol given as text is called at
    /// once when this requester agreed it with that peer, else negotiated first. When no
    /// protocol can be agreed, the request goes in natural language, or — with
    /// `allow_fallback` false — is [`RequesterError::NoAgreement`]. `progress` hears the
    /// negotiation's stages.
    pub async fn request(
        &self,
        url: &str,
        protocol: ProtocolRef,
        request: Value,
        allow_fallback: bool,
        progress: impl FnMut(Progress),
    ) -> Result<Requested, RequesterError> {
        if self.wire == Wire::Anp12 {
            return Box::pin(self.request_anp12(url, protocol, request, allow_fallback, progress))
                .await;
        }
        if let Wire::Anp(options) = self.wire {
            return Box::pin(self.request_anp(
                url,
                protocol,
                request,
                allow_fallback,
                progress,
                options,
            ))
            .await;
        }
        let peer = self.peer_key(url)?;
        let by_hash = matches!(protocol, ProtocolRef::Hash(_));
        let (text, hash, doc) = self.protocol_for(protocol, &request).await?;
        let fall_back = |reason| self.fall_back(&peer, &doc, &request, reason, allow_fallback);
        let mut negotiated = None;
        if !by_hash && !self.agreed_with(&peer, &hash).await? {
            match self.negotiate(&peer, &text, progress).await {
                Ok(n) => match &n.outcome {
                    Outcome::Rejected { code, reason } => {
                        let reason = FallbackReason::Rejected {
                            code: code.clone(),
                            reason: reason.clone(),
                        };
                        return fall_back(reason).await;
                    }
                    Outcome::Agreed | Outcome::ZeroRtt => negotiated = Some(n),
                },
                Err(e) => return fall_back(fallback_reason(e)?).await,
            }
        }
        match self.call(&peer, &hash, request.clone()).await {
            Ok(called) => Ok(Requested::Protocol {
                hash,
                negotiated: negotiated
                    .or_else(|| called.renegotiated.clone())
                    .map(Box::new),
                called: Box::new(called),
            }),
            Err(e @ (RequesterError::Renegotiation(_) | RequesterError::Rejected { .. })) => {
                fall_back(fallback_reason(e)?).await
            }
            Err(e) => Err(e),
        }
    }

    /// The text, hash and document of `protocol` (a hash names a locally stored one), once
    /// `request` is checked against its request schema.
    pub(super) async fn protocol_for(
        &self,
        protocol: ProtocolRef,
        request: &Value,
    ) -> Result<(String, ProtocolHash, ProtocolDoc), RequesterError> {
        let (text, hash) = match protocol {
            ProtocolRef::Text(text) => {
                let hash = ProtocolHash::of(&text);
                (text, hash)
            }
            ProtocolRef::Hash(hash) => {
                let stored = self.store.get_protocol(&hash.to_string()).await?;
                let stored =
                    stored.ok_or_else(|| RequesterError::UnknownLocally(hash.to_string()))?;
                (stored.text, hash)
            }
        };
        let doc = ProtocolDoc::parse(text.as_str())?;
        doc.validate_request(request)
            .map_err(|v| RequesterError::InvalidRequest(v.to_string()))?;
        Ok((text, hash, doc))
    }

    /// The stored protocol whose hash `prefix` abbreviates (hex digits, `sha256:` allowed, any
    /// case), as git resolves an abbreviated object name: one match is it, none is
    /// [`RequesterError::UnknownLocally`], several [`RequesterError::Ambiguous`].
    pub async fn resolve_hash(&self, prefix: &str) -> Result<ProtocolHash, RequesterError> {
        let trimmed = prefix.trim();
        let hex = ProtocolHash::hex_digits(trimmed).to_ascii_lowercase();
        if hex.is_empty() || hex.len() > 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RequesterError::NotAHash(prefix.to_owned()));
        }
        let mut matches = self.store.protocols_with_prefix(&hex, 10).await?;
        match matches.len() {
            0 => Err(RequesterError::UnknownLocally(hex)),
            1 => {
                let hash = matches.remove(0);
                hash.parse()
                    .map_err(|_| RequesterError::UnknownLocally(hash.clone()))
            }
            _ => Err(RequesterError::Ambiguous {
                prefix: hex,
                candidates: matches,
            }),
        }
    }

    /// Whether this requester agreed protocol `hash` with the peer at end-point `peer` (the
    /// same host and port, whichever transport the agreement was reached over).
    pub async fn agreed_with(
        &self,
        peer: &str,
        hash: &ProtocolHash,
    ) -> Result<bool, RequesterError> {
        let agreements = self
            .store
            .agreements_for_protocol(&hash.to_string())
            .await?;
        Ok(agreements.iter().any(|a| {
            a.role == Role::Requester && same_peer(a.peer_url.as_deref().unwrap_or(&a.peer), peer)
        }))
    }

    /// Asks the peer in natural language, or refuses to when `allowed` is false.
    pub(super) async fn fall_back(
        &self,
        peer: &str,
        doc: &ProtocolDoc,
        request: &Value,
        reason: FallbackReason,
        allowed: bool,
    ) -> Result<Requested, RequesterError> {
        if !allowed {
            return Err(RequesterError::NoAgreement(reason));
        }
        let reply = ask(
            peer,
            natural_language_request(doc, request),
            &self.tls,
            self.token.as_ref(),
        )
        .await?;
        Ok(Requested::Fallback { reason, reply })
    }
}

/// Whether two URLs name the same agent: the same host and port.
fn same_peer(a: &str, b: &str) -> bool {
    match (endpoint(a), endpoint(b)) {
        (Ok(a), Ok(b)) => {
            a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
        }
        _ => a == b,
    }
}

/// The reason to fall back for a failed negotiation, or the error itself when natural language
/// would not do better.
pub(super) fn fallback_reason(error: RequesterError) -> Result<FallbackReason, RequesterError> {
    match error {
        RequesterError::Renegotiation(inner) => fallback_reason(*inner),
        RequesterError::NotSupported => Ok(FallbackReason::NotSupported),
        RequesterError::Rejected { code, reason, .. } => {
            Ok(FallbackReason::Rejected { code, reason })
        }
        RequesterError::Peer { .. }
        | RequesterError::Stalled
        | RequesterError::NoHello
        | RequesterError::UnsupportedVersion { .. } => {
            Ok(FallbackReason::Failed(error.to_string()))
        }
        // A peer without ANP 1.2's end-point.
        RequesterError::Rpc(RpcLinkError::Discovery { .. } | RpcLinkError::NotJsonRpc { .. }) => {
            Ok(FallbackReason::NotSupported)
        }
        // A peer whose NLIP end-point answers a control message with something other than NLIP.
        RequesterError::Client(ClientError::NotNlip { .. } | ClientError::Decode(_)) => {
            Ok(FallbackReason::Failed(crate::error::chain(&error)))
        }
        other => Err(other),
    }
}

/// The natural-language form of `request`: the protocol's requirement, then the request as
/// JSON, so a reasoner (or a person) reading it knows both what is wanted and with what.
pub fn natural_language_request(doc: &ProtocolDoc, request: &Value) -> String {
    let requirement = doc
        .sections()
        .requirements
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .unwrap_or("Please answer this request.");
    format!("{requirement}\n\nThe request, as JSON: {request}")
}

/// Sends `text` to the peer at `url` as a plain NLIP text message and returns its reply; an
/// NLIP error reply is [`RequesterError::Peer`].
async fn ask(
    url: &str,
    text: String,
    tls: &ClientTls,
    token: Option<&Credential>,
) -> Result<Message, RequesterError> {
    let mut client = NlipClient::connect_as(url, false, tls, token).await?;
    let reply = client
        .send(&Message::text(parley_nlip::DEFAULT_LANGUAGE, text))
        .await?
        .message;
    match ErrorInfo::from_message(&reply) {
        Some(err) => Err(RequesterError::Peer {
            code: err.code,
            message: err.message,
        }),
        None => Ok(reply),
    }
}

/// A reply's text, or its JSON when it has none.
pub(super) fn reply_text(reply: &Message) -> String {
    reply
        .text_content()
        .map(str::to_owned)
        .unwrap_or_else(|| parley_nlip::to_json_value(reply).to_string())
}

/// The natural-language fallback for peers without the meta-protocol: the protocol's
/// requirements (or the whole text) as a plain NLIP text message; returns the peer's text.
/// `https://` and `wss://` trust and present what `tls` says; `token`, when there is one, is
/// presented too.
pub async fn ask_in_natural_language(
    url: &str,
    protocol: &str,
    tls: &ClientTls,
    token: Option<&Credential>,
) -> Result<String, RequesterError> {
    let text = ProtocolDoc::parse(protocol)
        .ok()
        .and_then(|d| d.sections().requirements.clone())
        .unwrap_or_else(|| protocol.to_owned());
    Ok(reply_text(&ask(url, text, tls, token).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_over_any_transport_and_path() {
        assert!(same_peer(
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/nlip"
        ));
        assert!(same_peer(
            "ws://127.0.0.1:8080/nlip/ws",
            "http://127.0.0.1:8080/nlip"
        ));
        assert!(same_peer(
            "http://agent.example",
            "ws://agent.example:80/nlip/ws"
        ));
        assert!(!same_peer("http://127.0.0.1:8080", "http://127.0.0.1:8081"));
        assert!(!same_peer("http://a.example", "http://b.example"));
    }

    #[test]
    fn the_natural_language_request_carries_requirement_and_request() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples/protocols/product-info.md"),
        )
        .expect("example protocol");
        let doc = ProtocolDoc::parse(text).expect("protocol");
        let message = natural_language_request(
            &doc,
            &serde_json::json!({"action": "getProductInfo", "productId": "P12345"}),
        );
        assert!(message.starts_with("Look up one product"), "{message}");
        assert!(
            message.ends_with(r#"{"action":"getProductInfo","productId":"P12345"}"#),
            "{message}"
        );
    }

    #[test]
    fn reasons_read_as_sentences() {
        let rejected = FallbackReason::Rejected {
            code: "declined".into(),
            reason: "no capability serves it".into(),
        };
        assert_eq!(
            rejected.to_string(),
            "the negotiation ended without agreement (declined): no capability serves it"
        );
        assert_eq!(
            FallbackReason::NotSupported.to_string(),
            "the peer does not speak the meta-protocol"
        );
    }
}
