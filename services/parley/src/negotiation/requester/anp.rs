//! The requester over seed 002's framing ([`Wire::Anp`](super::Wire::Anp)).
//!
//! Application frames name no protocol: the one agreed on the connection applies. So every call
//! opens a connection with a hello offering the protocol's hash: a provider that serves it
//! selects it (0-RTT: no negotiation, one round trip for the hello), one that does not gets it
//! negotiated on the same connection, from the text in the local store. The request follows on
//! that connection; a natural-language fallback goes there too, in a natural-language frame.

use parley_anp::{ProtocolDoc, ProtocolHash};
use parley_nlip::Message;
use serde_json::Value;

use super::fix::answer_over_anp;
use super::request::{fallback_reason, natural_language_request};
use super::{
    Called, FallbackReason, Negotiated, Outcome, Progress, ProtocolRef, Requested, Requester,
    RequesterError,
};
use crate::negotiation::anp::{AnpLink, AnpOptions};

impl Requester {
    /// [`Requester::call`] over seed 002's framing.
    pub(super) async fn call_anp(
        &self,
        url: &str,
        hash: &ProtocolHash,
        request: Value,
        options: AnpOptions,
    ) -> Result<Called, RequesterError> {
        let (text, hash, doc) = self
            .protocol_for(ProtocolRef::Hash(*hash), &request)
            .await?;
        let peer = self.peer_key(url)?;
        let mut link = AnpLink::connect_as(&peer, options, &self.tls, self.token.as_ref()).await?;
        let n = self
            .agree_on(&mut link, &peer, &text, |_| {})
            .await
            .map_err(|e| RequesterError::Renegotiation(Box::new(e)))?;
        let renegotiated = match &n.outcome {
            Outcome::ZeroRtt => None,
            Outcome::Agreed => Some(n),
            Outcome::Rejected { code, reason } => {
                return Err(RequesterError::Rejected {
                    hash: hash.to_string(),
                    code: code.clone(),
                    reason: reason.clone(),
                });
            }
        };
        let (answer, fixed) = answer_over_anp(&mut link, &doc, &request).await?;
        Ok(Called {
            answer,
            renegotiated,
            reply: None,
            fixed,
        })
    }

    /// [`Requester::request`] over seed 002's framing: one connection for the hello, the
    /// negotiation when the provider does not serve the protocol yet, and the request (or its
    /// natural-language form when no protocol can be agreed).
    pub(super) async fn request_anp(
        &self,
        url: &str,
        protocol: ProtocolRef,
        request: Value,
        allow_fallback: bool,
        progress: impl FnMut(Progress),
        options: AnpOptions,
    ) -> Result<Requested, RequesterError> {
        let peer = self.peer_key(url)?;
        let by_hash = matches!(protocol, ProtocolRef::Hash(_));
        let (text, hash, doc) = self.protocol_for(protocol, &request).await?;
        let agreed_before = by_hash || self.agreed_with(&peer, &hash).await?;
        let mut link = AnpLink::connect_as(&peer, options, &self.tls, self.token.as_ref()).await?;
        let reason = match self.agree_on(&mut link, &peer, &text, progress).await {
            Ok(n) => match &n.outcome {
                Outcome::Rejected { code, reason } => FallbackReason::Rejected {
                    code: code.clone(),
                    reason: reason.clone(),
                },
                Outcome::Agreed | Outcome::ZeroRtt => {
                    // The provider may have agreed a counter-proposal: its answers follow that.
                    let (hash, doc) = self.agreed_doc(n.hash, hash, doc).await?;
                    let (answer, fixed) = answer_over_anp(&mut link, &doc, &request).await?;
                    let fresh = n.outcome == Outcome::Agreed;
                    // Negotiating what this requester had agreed with the peer already is a
                    // renegotiation; a hello that finds it known is no news then.
                    let (negotiated, renegotiated) = match (fresh, agreed_before) {
                        (true, true) => (None, Some(n)),
                        (false, true) => (None, None),
                        (_, false) => (Some(Box::new(n)), None),
                    };
                    let called = Called {
                        answer,
                        renegotiated,
                        reply: None,
                        fixed,
                    };
                    return Ok(Requested::Protocol {
                        hash,
                        negotiated,
                        called: Box::new(called),
                    });
                }
            },
            Err(e) => fallback_reason(e)?,
        };
        if !allow_fallback {
            return Err(RequesterError::NoAgreement(reason));
        }
        let answer = link
            .natural_language(&natural_language_request(&doc, &request))
            .await?;
        Ok(Requested::Fallback {
            reason,
            reply: Message::text(parley_nlip::DEFAULT_LANGUAGE, answer),
        })
    }

    /// The document of protocol `agreed`: `proposed`'s when it is that one, else the stored
    /// text of the counter-proposal that was agreed instead.
    async fn agreed_doc(
        &self,
        agreed: ProtocolHash,
        proposed: ProtocolHash,
        doc: ProtocolDoc,
    ) -> Result<(ProtocolHash, ProtocolDoc), RequesterError> {
        if agreed == proposed {
            return Ok((agreed, doc));
        }
        let stored = self.store.get_protocol(&agreed.to_string()).await?;
        let stored = stored.ok_or_else(|| RequesterError::UnknownLocally(agreed.to_string()))?;
        Ok((agreed, ProtocolDoc::parse(stored.text)?))
    }

    /// The hello and, unless the provider serves `text` already, its negotiation, on `link`.
    async fn agree_on(
        &self,
        link: &mut AnpLink,
        peer: &str,
        text: &str,
        progress: impl FnMut(Progress),
    ) -> Result<Negotiated, RequesterError> {
        let all = parley_anp::messages::capability::ALL.map(str::to_owned);
        self.negotiate_over(link, peer, text, &all, progress).await
    }
}
