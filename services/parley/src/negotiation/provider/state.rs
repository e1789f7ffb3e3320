//! What the provider keeps in a conversation between two of its messages, as one type: read
//! once when a turn begins and written once when it ends.
//!
//! It is stored as the conversation's state object, one key per field (`negotiation`,
//! `peer_capabilities`, `hello_transcript`); an absent key is the field's default, and an empty
//! field is left out.

use std::sync::Arc;

use parley_anp::{ProtocolHash, ProviderSession, SessionConfig, TestCase, VerificationReport};
use parley_reasoner::{GeneratedHandler, UsageMeter};
use parley_store::{Direction, Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::inquiry::Questions;
use crate::error::ApiError;

/// The provider's state of one conversation.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct NegotiationState {
    /// The conversation's current negotiation, or its last one once closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negotiation: Option<Negotiation>,
    /// What the peer's last hello announced; `None` when it sent none (then the seed's full set
    /// is assumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_capabilities: Option<Vec<String>>,
    /// Hello messages, both ways, that no negotiation's transcript holds yet: a hello comes
    /// before any negotiation exists, so its exchange waits here and opens the transcript of the
    /// next negotiation started in this conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hello_transcript: Vec<(Direction, Value)>,
}

/// One negotiation: its record in the store, its session state machine, and the handler built
/// for the agreed protocol once there is one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Negotiation {
    pub negotiation_id: Uuid,
    pub session: ProviderSession,
    /// The verified candidate built for the agreed protocol.
    pub handler_id: Option<Uuid>,
    pub handler: Option<GeneratedHandler>,
    /// The model calls of the turn in progress; settled into the store (for this negotiation)
    /// and the metrics when the turn's message has been handled, so it never outlives a turn.
    #[serde(skip)]
    pub meter: UsageMeter,
    /// The hash of the last protocol the peer proposed, for the log line that ends a
    /// negotiation without agreement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed: Option<ProtocolHash>,
    /// A handler whose answers follow the protocol but not the peer's test expectations, kept
    /// while the peer is asked about them through `fixErrorNegotiation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disputed: Option<Disputed>,
    /// The test cases written here that the verified handler passes, for a protocol without
    /// test cases of its own: what is proposed to the peer (see `cases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_cases: Option<Vec<TestCase>>,
    /// The questions asked of the peer through `naturalLanguageNegotiation` (see `inquiry`).
    #[serde(default, skip_serializing_if = "Questions::is_empty")]
    pub questions: Questions,
}

impl Negotiation {
    /// A negotiation that has just begun: a session of at most `max_rounds` rounds, nothing
    /// built, asked or disputed yet.
    pub fn begun(negotiation_id: Uuid, max_rounds: u32) -> Negotiation {
        Negotiation {
            negotiation_id,
            session: ProviderSession::new(SessionConfig { max_rounds }),
            handler_id: None,
            handler: None,
            meter: UsageMeter::new(),
            proposed: None,
            disputed: None,
            generated_cases: None,
            questions: Questions::default(),
        }
    }
}

/// A handler the peer's expectations dispute, with the verification that showed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Disputed {
    pub handler: GeneratedHandler,
    pub report: VerificationReport,
}

impl NegotiationState {
    /// Whether the peer's hello announced `capability` (or there was no hello).
    pub fn peer_supports(&self, capability: &str) -> bool {
        self.peer_capabilities
            .as_ref()
            .is_none_or(|caps| caps.iter().any(|c| c == capability))
    }

    /// The negotiation that is still open, if any.
    pub fn open(&self) -> Option<&Negotiation> {
        self.negotiation.as_ref().filter(|n| !n.session.is_closed())
    }
}

/// A conversation's state as read at the start of a turn, with the version a write must match.
pub(super) struct Loaded {
    pub state: NegotiationState,
    pub version: i64,
}

/// Reads conversation `cid`'s state. A state that does not read as [`NegotiationState`] is
/// dropped with a warning: the conversation starts afresh rather than failing every message.
pub(super) async fn load(store: &Arc<dyn Store>, cid: &str) -> Result<Loaded, ApiError> {
    let conversation = store
        .get_conversation(cid)
        .await?
        .ok_or_else(|| ApiError::UnknownConversation(cid.to_owned()))?;
    let state = serde_json::from_value(conversation.state).unwrap_or_else(|error| {
        tracing::warn!(%error, conversation = cid, "unreadable negotiation state; starting afresh");
        NegotiationState::default()
    });
    Ok(Loaded {
        state,
        version: conversation.version,
    })
}

/// Writes conversation `cid`'s state, if no other message changed it since it was read.
pub(super) async fn save(
    store: &Arc<dyn Store>,
    cid: &str,
    version: i64,
    state: &NegotiationState,
) -> Result<(), ApiError> {
    let value = serde_json::to_value(state).expect("negotiation state serializes");
    match store.update_conversation_state(cid, version, &value).await {
        Ok(_) => Ok(()),
        Err(StoreError::Conflict { .. }) => Err(ApiError::Conflict(format!(
            "another message of conversation {cid} moved its negotiation on first"
        ))),
        Err(e) => Err(e.into()),
    }
}
