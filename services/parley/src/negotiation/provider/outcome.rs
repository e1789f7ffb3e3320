//! How a negotiation's record ends: the transcript it keeps, activation of the verified
//! handler once both sides generated code, and the outcome stored when it closes.

use std::sync::Arc;

use parley_anp::{NegotiationError, ProtocolDoc, ProtocolHash};
use parley_store::{
    Direction, ModelUsageOwner, NegotiationOutcome, NegotiationStatus, NewAgreement, Role,
    StoreError,
};
use serde_json::Value;
use uuid::Uuid;

use super::Provider;
use super::state::{self, Negotiation};
use crate::audit::Actor;
use crate::error::ApiError;
use crate::metrics;
use crate::negotiation::runner::{ActiveProtocol, publish_serving};

impl Provider {
    /// Appends `entries` to negotiation `id`'s transcript, in order.
    pub(super) async fn transcribe(
        &self,
        id: Uuid,
        entries: impl IntoIterator<Item = (Direction, Value)>,
    ) -> Result<(), ApiError> {
        for (direction, message) in entries {
            self.store
                .append_transcript(id, direction, &message)
                .await?;
        }
        Ok(())
    }

    /// Both sides generated code: activate the handler, record the agreement, serve it.
    pub(super) async fn activate(
        &self,
        negotiation: &Negotiation,
        hash: &ProtocolHash,
        peer: &str,
    ) -> Result<(), ApiError> {
        let (Some(id), Some(generated)) = (negotiation.handler_id, negotiation.handler.as_ref())
        else {
            return Err(ApiError::internal("ready without a verified handler"));
        };
        self.store.activate_handler(id).await?;
        let actor = Actor::current_or(peer);
        let hash_text = hash.to_string();
        self.audit
            .handler_activated(&actor, &hash_text, id, negotiation.negotiation_id)
            .await;
        self.store
            .record_agreement(NewAgreement {
                peer: peer.to_owned(),
                peer_url: None,
                protocol_hash: hash_text,
                role: Role::Provider,
            })
            .await?;
        self.finish(
            negotiation,
            NegotiationStatus::Accepted,
            Some(hash.to_string()),
            None,
        )
        .await?;
        let text = negotiation
            .session
            .agreed()
            .map(|(_, t)| t.to_owned())
            .unwrap_or_default();
        let doc = ProtocolDoc::parse(text).map_err(ApiError::internal)?;
        let handler = publish_serving(
            &self.sandbox,
            &generated.source,
            generated.compiled.as_ref(),
        )
        .await
        .map_err(ApiError::internal)?;
        self.cache.insert(
            *hash,
            id,
            ActiveProtocol {
                doc: Arc::new(doc),
                handler,
                grants: generated.grants.iter().cloned().collect(),
            },
        );
        metrics::negotiation_outcome("accepted");
        Ok(())
    }

    /// The framing lost the peer of conversation `cid` (its connection closed): a negotiation
    /// still open there (not ended, not yet ready) can never go on, so it ends, recorded as timed
    /// out. Nothing is sent.
    pub async fn abandon(&self, cid: &str) -> Result<(), ApiError> {
        let state::Loaded { mut state, version } = state::load(&self.store, cid).await?;
        let open = |n: &&mut Negotiation| !n.session.is_closed() && !n.session.is_ready();
        let Some(negotiation) = state.negotiation.as_mut().filter(open) else {
            return Ok(());
        };
        let reason = match negotiation.session.timeout() {
            parley_anp::Step::Rejected { reason, .. } => reason,
            other => {
                return Err(ApiError::internal(format!(
                    "a session's timeout ended in {other:?}"
                )));
            }
        };
        tracing::info!(conversation = cid, "the peer left an open negotiation");
        self.close(negotiation, &reason).await?;
        state::save(&self.store, cid, version, &state).await
    }

    /// What the negotiation's reasoning cost in the turn just handled: into the metrics and the
    /// negotiation's record.
    pub(super) async fn settle_usage(&self, negotiation: &Negotiation) {
        let owner = ModelUsageOwner::Negotiation(negotiation.negotiation_id);
        crate::model_usage::settle(self.store.as_ref(), Some(owner), &negotiation.meter).await;
    }

    /// The negotiation ended without agreement (or broke after it): record why.
    pub(super) async fn close(
        &self,
        negotiation: &Negotiation,
        reason: &NegotiationError,
    ) -> Result<(), ApiError> {
        let status = match reason {
            NegotiationError::Timeout { .. } => NegotiationStatus::Timeout,
            NegotiationError::CodeGeneration { .. } => NegotiationStatus::Failed,
            _ => NegotiationStatus::Rejected,
        };
        metrics::negotiation_outcome(status.as_str());
        self.finish(negotiation, status, None, Some(reason.code().to_owned()))
            .await
    }

    async fn finish(
        &self,
        negotiation: &Negotiation,
        status: NegotiationStatus,
        protocol_hash: Option<String>,
        reason: Option<String>,
    ) -> Result<(), ApiError> {
        let outcome = NegotiationOutcome {
            status,
            protocol_hash,
            rounds: i64::from(negotiation.session.rounds()),
            reason,
        };
        match self
            .store
            .finish_negotiation(negotiation.negotiation_id, outcome)
            .await
        {
            Ok(record) => {
                log_end(&record, negotiation);
                let actor = Actor::current_or(&record.peer);
                self.audit.negotiation_ended(&actor, &record).await;
                Ok(())
            }
            // A negotiation already finished (a rule break after agreement) stays as recorded.
            Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The operator's line for a negotiation that ended: peer, the protocol's hash prefix (the
/// agreed one, or the last one proposed), outcome, rounds, and the time since it started.
fn log_end(record: &parley_store::Negotiation, negotiation: &Negotiation) {
    let hash = record
        .protocol_hash
        .clone()
        .or_else(|| negotiation.proposed.map(|h| h.to_string()))
        .unwrap_or_default();
    let elapsed_ms = record
        .ended_at
        .map_or(0, |end| (end - record.started_at).num_milliseconds().max(0));
    tracing::info!(
        negotiation = %record.id,
        peer = %record.peer,
        hash = hash.get(..12).unwrap_or(&hash),
        outcome = record.status.as_str(),
        reason = record.reason.as_deref().unwrap_or_default(),
        rounds = record.rounds,
        elapsed_ms,
        "negotiation ended"
    );
}
