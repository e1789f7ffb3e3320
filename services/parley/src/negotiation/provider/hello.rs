//! The hello exchange (`sourceHello` → `destinationHello`): what the peer supports, and which
//! protocol it offers that this side already serves (0-RTT). A hello comes before any
//! negotiation exists, so its messages wait in the conversation's state until a negotiation's
//! transcript can take them.

use std::collections::HashSet;

use parley_anp::messages::Hello;
use parley_anp::{MetaMessage, MetaProtocolInfo, NegotiationError, ProtocolHash};
use parley_store::Direction;
use serde_json::Value;

use super::Provider;
use super::driver::Turn;
use super::state::NegotiationState;
use crate::error::ApiError;

impl Provider {
    /// The first of `offered` with an active handler here (0-RTT), looking at no more than the
    /// first `negotiation.max_hello_hashes`, one query each: what a hello selects, for framings
    /// that offer hashes without one (ANP 1.2's structured selection).
    pub async fn select_served(
        &self,
        offered: &[ProtocolHash],
    ) -> Result<Option<ProtocolHash>, ApiError> {
        for hash in offered.iter().take(self.limits.max_hello_hashes) {
            if self
                .store
                .active_handler(&hash.to_string())
                .await?
                .is_some()
                && self.may_select(&hash.to_string()).await?
            {
                return Ok(Some(*hash));
            }
        }
        Ok(None)
    }

    /// How many offered hashes are looked up (`negotiation.max_hello_hashes`).
    pub fn max_offered(&self) -> usize {
        self.limits.max_hello_hashes
    }

    /// Whether the caller of the request being handled may call protocol `hash` (a hello
    /// selects only such a protocol: 0-RTT is no way around an agreement).
    async fn may_select(&self, hash: &str) -> Result<bool, ApiError> {
        let Some(caller) = crate::access::current() else {
            return Ok(true);
        };
        match self.access.may_call_protocol(&caller, hash).await {
            Ok(()) => Ok(true),
            Err(ApiError::Forbidden(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Answers the peer's `sourceHello` (`value` as received): remembers what it supports,
    /// selects the first offered protocol with an active handler here that the caller may call
    /// (among the first
    /// `negotiation.max_hello_hashes` offered), and opens the
    /// transcript of the next negotiation with the exchange.
    pub(super) async fn answer_hello(
        &self,
        hello: Hello,
        value: Value,
        state: &mut NegotiationState,
        turn: &mut Turn,
    ) -> Result<(), ApiError> {
        if let Some(version) = hello.meta_protocol.unsupported_version(&hello.version) {
            // Refused: the answer says which version this side speaks, and selects nothing.
            let refusal = NegotiationError::UnsupportedVersion {
                version: version.to_owned(),
            };
            turn.summary.push(refusal.to_string());
            turn.violation = Some(refusal);
            turn.hello_replies
                .push(MetaMessage::destination_hello(MetaProtocolInfo::parley([])));
            return Ok(());
        }
        // Only what both sides support is used: remember what the peer announced.
        state.peer_capabilities = Some(hello.meta_protocol.supported_capabilities.clone());
        // A hello may offer any number of hashes; only the first `max_hello_hashes` are
        // looked up, one query each.
        let mut known = HashSet::new();
        let offered = hello.meta_protocol.offered_hashes();
        for h in offered.into_iter().take(self.limits.max_hello_hashes) {
            let hash = h.to_string();
            if self.store.active_handler(&hash).await?.is_some() && self.may_select(&hash).await? {
                known.insert(h);
            }
        }
        let answer = hello.meta_protocol.answer(|h| known.contains(h));
        turn.agreed = hello.meta_protocol.select(|h| known.contains(h));
        turn.summary.push(match &known.iter().next() {
            Some(h) => format!("Protocol {h} is known here: send application messages directly."),
            None => "Hello. No offered protocol is known here; propose one.".to_owned(),
        });
        // The transcript opens with the last hello before the negotiation.
        state.hello_transcript.clear();
        state.hello_transcript.push((Direction::Inbound, value));
        state
            .hello_transcript
            .push((Direction::Outbound, answer.to_value()));
        turn.hello_replies.push(answer);
        Ok(())
    }
}
