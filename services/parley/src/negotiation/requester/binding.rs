//! The server as a requester: the [`AgentCaller`] behind the capabilities' `agent` bindings. A
//! capability bound to another agent (called by this agent's reasoner, or by a handler through
//! `host.call`) is one [`Requester::request`] on the server's own store: through the protocol
//! agreed with that peer (0-RTT), after negotiating it when there is none, and in natural
//! language when none can be agreed. Its agreements and negotiations are kept beside the ones
//! this agent made as a provider (role `requester`), so they outlive a restart.
//!
//! A binding with a token presents it to its peer (`Authorization: Bearer`) on every connection
//! of its calls.
//!
//! Two calls that find no agreement take turns: the first negotiates, the second then finds the
//! agreement and calls at once, rather than both negotiating the same protocol with one peer. A
//! pair (peer, protocol) known to be agreed is called by its hash, without a look-up first.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use parley_anp::ProtocolHash;
use parley_capabilities::{AgentAnswer, AgentCallError, AgentCaller, AgentFuture, AgentRequest};
use parley_nlip::{Content, Format, Message};

use super::request::reply_text;
use super::{Outcome, ProtocolRef, Requested, Requester, RequesterError};
use crate::client::BearerToken;

/// A peer's NLIP end-point and a protocol.
type Pair = (String, ProtocolHash);

/// Performs `agent` bindings' calls with a [`Requester`] (see the module docs).
#[derive(Debug)]
pub struct BindingRequester {
    requester: Requester,
    /// Pairs agreed, as far as this process knows.
    agreed: Mutex<HashSet<Pair>>,
    /// One turn per pair for calls that may negotiate. Grows with the pairs the capabilities
    /// file names, no further.
    turns: Mutex<HashMap<Pair, Arc<tokio::sync::Mutex<()>>>>,
}

impl BindingRequester {
    pub fn new(requester: Requester) -> Self {
        BindingRequester {
            requester,
            agreed: Mutex::new(HashSet::new()),
            turns: Mutex::new(HashMap::new()),
        }
    }

    async fn ask(&self, asked: AgentRequest) -> Result<AgentAnswer, RequesterError> {
        let with_token;
        let requester = match &asked.token {
            None => &self.requester,
            Some(token) => {
                with_token = Requester {
                    token: Some(BearerToken::new(token.expose())?.into()),
                    ..self.requester.clone()
                };
                &with_token
            }
        };
        let peer = requester.peer_key(&asked.url)?;
        let pair = (peer.clone(), ProtocolHash::of(&asked.protocol));
        let known = self.agreed.lock().expect("never poisoned").contains(&pair);
        let requested = if known {
            let protocol = ProtocolRef::Hash(pair.1);
            requester
                .request(&peer, protocol, asked.request, asked.fallback, |_| {})
                .await?
        } else {
            let turn = self.turn(&pair);
            let _turn = turn.lock().await;
            let protocol = ProtocolRef::Text(asked.protocol.to_string());
            requester
                .request(&peer, protocol, asked.request, asked.fallback, |_| {})
                .await?
        };
        let mut agreed = self.agreed.lock().expect("never poisoned");
        Ok(match requested {
            Requested::Protocol {
                negotiated, called, ..
            } => {
                if let Some(n) = negotiated.filter(|n| n.outcome == Outcome::Agreed) {
                    tracing::info!(
                        capability = %asked.capability,
                        peer = %peer,
                        hash = %pair.1,
                        rounds = n.rounds,
                        "agreed a protocol with a peer, as a requester"
                    );
                }
                agreed.insert(pair);
                AgentAnswer::Protocol(called.answer)
            }
            Requested::Fallback { reason, reply } => {
                tracing::info!(
                    capability = %asked.capability,
                    peer = %peer,
                    reason = %reason,
                    "no protocol could be agreed with the peer: asked in natural language"
                );
                agreed.remove(&pair);
                AgentAnswer::NaturalLanguage {
                    reason: reason.to_string(),
                    text: reply_text(&reply),
                    data: structured_data(&reply),
                }
            }
        })
    }

    fn turn(&self, pair: &Pair) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock().expect("never poisoned");
        turns.entry(pair.clone()).or_default().clone()
    }
}

impl AgentCaller for BindingRequester {
    fn request(&self, request: AgentRequest) -> AgentFuture<'_> {
        Box::pin(async move {
            let (capability, url) = (request.capability.clone(), request.url.clone());
            self.ask(request).await.map_err(|error| {
                let message = crate::error::chain(&error);
                tracing::warn!(%capability, peer = %url, error = %message, "asking a peer agent failed");
                AgentCallError { message }
            })
        })
    }
}

/// The first structured JSON part of a natural-language reply, when it has one (a Parley peer
/// sends each capability result it answered from as one).
fn structured_data(reply: &Message) -> Option<serde_json::Value> {
    let json = |format: Format, content: &Content| match (format, content) {
        (Format::Structured, Content::Json(value)) => Some(value.clone()),
        _ => None,
    };
    json(reply.format, &reply.content).or_else(|| {
        reply
            .payload_submessages()
            .find_map(|s| json(s.format, &s.content))
    })
}
