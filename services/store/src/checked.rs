//! The input rules both backends share, enforced once in front of either.
//!
//! `connect` always returns a backend wrapped in [`Checked`], so the SQL files can assume well-formed
//! input and the two backends cannot drift apart in what they accept. The rules:
//! * hashes and upload ids are 64 lower-case hex digits, or the call is `Invalid`;
//! * names that identify something (conversation id, peer, content type, backend, capability) are
//!   not empty;
//! * nothing stored contains U+0000: PostgreSQL's TEXT and JSONB cannot hold it while SQLite can,
//!   and a store whose answer depends on the backend is a bug waiting for a deployment. Peers choose
//!   message contents and conversation tokens, so this must be a clean `Invalid`, not a database
//!   error;
//! * a key that no row can have (empty, or containing U+0000) is simply absent: lookups answer
//!   `None`, operations `NotFound`, without a round trip.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::model::{
    Agreement, Conversation, Direction, HandlerRecord, LoggedMessage, ModelUsage, ModelUsageOwner,
    Negotiation, NegotiationOutcome, NegotiationRecord, NegotiationStatus, NewAgreement,
    NewConversation, NewHandler, NewNegotiation, Protocol, ProtocolUsage, Role, Upload, UploadMeta,
};
use crate::{Store, StoreError};

/// A backend behind the shared input rules. Method order follows the trait.
#[derive(Debug)]
pub(crate) struct Checked<S>(pub(crate) S);

#[async_trait]
impl<S: Store> Store for Checked<S> {
    fn backend_name(&self) -> &'static str {
        self.0.backend_name()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }

    // --- conversations -------------------------------------------------------------------------

    async fn create_conversation(&self, new: NewConversation) -> Result<Conversation, StoreError> {
        name("conversation id", &new.id)?;
        if let Some(peer) = &new.peer {
            text("peer", peer)?;
        }
        json("conversation state", &new.state)?;
        self.0.create_conversation(new).await
    }

    async fn get_conversation(&self, id: &str) -> Result<Option<Conversation>, StoreError> {
        if !could_exist(id) {
            return Ok(None);
        }
        self.0.get_conversation(id).await
    }

    async fn touch_conversation(&self, id: &str) -> Result<DateTime<Utc>, StoreError> {
        existing("conversation", id)?;
        self.0.touch_conversation(id).await
    }

    async fn update_conversation_state(
        &self,
        id: &str,
        expected_version: i64,
        state: &Value,
    ) -> Result<i64, StoreError> {
        existing("conversation", id)?;
        json("conversation state", state)?;
        self.0
            .update_conversation_state(id, expected_version, state)
            .await
    }

    async fn append_message(
        &self,
        conversation_id: &str,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError> {
        existing("conversation", conversation_id)?;
        json("message", message)?;
        self.0
            .append_message(conversation_id, direction, message)
            .await
    }

    async fn list_messages(
        &self,
        conversation_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<LoggedMessage>, StoreError> {
        existing("conversation", conversation_id)?;
        self.0
            .list_messages(conversation_id, after_seq, limit)
            .await
    }

    // --- uploads -------------------------------------------------------------------------------

    async fn put_upload(
        &self,
        bytes: &[u8],
        content_type: &str,
        filename: Option<&str>,
    ) -> Result<UploadMeta, StoreError> {
        name("content type", content_type)?;
        if let Some(filename) = filename {
            text("filename", filename)?;
        }
        self.0.put_upload(bytes, content_type, filename).await
    }

    async fn get_upload(&self, id: &str) -> Result<Option<Upload>, StoreError> {
        hash("upload id", id)?;
        self.0.get_upload(id).await
    }

    async fn upload_meta(&self, id: &str) -> Result<Option<UploadMeta>, StoreError> {
        hash("upload id", id)?;
        self.0.upload_meta(id).await
    }

    // --- protocols and agreements --------------------------------------------------------------

    async fn put_protocol(&self, protocol_text: &str) -> Result<Protocol, StoreError> {
        name("protocol text", protocol_text)?;
        self.0.put_protocol(protocol_text).await
    }

    async fn get_protocol(&self, protocol_hash: &str) -> Result<Option<Protocol>, StoreError> {
        hash("protocol hash", protocol_hash)?;
        self.0.get_protocol(protocol_hash).await
    }

    async fn protocols_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        hash_prefix("protocol hash prefix", prefix)?;
        self.0.protocols_with_prefix(prefix, limit).await
    }

    async fn record_agreement(&self, new: NewAgreement) -> Result<Agreement, StoreError> {
        name("peer", &new.peer)?;
        if let Some(url) = &new.peer_url {
            text("peer URL", url)?;
        }
        hash("protocol hash", &new.protocol_hash)?;
        self.0.record_agreement(new).await
    }

    async fn agreements_with_peer(
        &self,
        peer: &str,
        role: Role,
    ) -> Result<Vec<Agreement>, StoreError> {
        if !could_exist(peer) {
            return Ok(Vec::new());
        }
        self.0.agreements_with_peer(peer, role).await
    }

    async fn agreements_for_protocol(
        &self,
        protocol_hash: &str,
    ) -> Result<Vec<Agreement>, StoreError> {
        hash("protocol hash", protocol_hash)?;
        self.0.agreements_for_protocol(protocol_hash).await
    }

    async fn list_agreements(&self, limit: u32) -> Result<Vec<Agreement>, StoreError> {
        self.0.list_agreements(limit).await
    }

    // --- negotiations --------------------------------------------------------------------------

    async fn start_negotiation(&self, new: NewNegotiation) -> Result<Negotiation, StoreError> {
        existing("conversation", &new.conversation_id)?;
        name("peer", &new.peer)?;
        self.0.start_negotiation(new).await
    }

    async fn append_transcript(
        &self,
        negotiation_id: Uuid,
        direction: Direction,
        message: &Value,
    ) -> Result<LoggedMessage, StoreError> {
        json("message", message)?;
        self.0
            .append_transcript(negotiation_id, direction, message)
            .await
    }

    async fn finish_negotiation(
        &self,
        id: Uuid,
        outcome: NegotiationOutcome,
    ) -> Result<Negotiation, StoreError> {
        check_outcome(&outcome)?;
        self.0.finish_negotiation(id, outcome).await
    }

    async fn get_negotiation(&self, id: Uuid) -> Result<Option<NegotiationRecord>, StoreError> {
        self.0.get_negotiation(id).await
    }

    async fn negotiations_for_protocol(
        &self,
        protocol_hash: &str,
    ) -> Result<Vec<Negotiation>, StoreError> {
        hash("protocol hash", protocol_hash)?;
        self.0.negotiations_for_protocol(protocol_hash).await
    }

    // --- handlers ------------------------------------------------------------------------------

    async fn insert_handler_candidate(&self, new: NewHandler) -> Result<HandlerRecord, StoreError> {
        hash("protocol hash", &new.protocol_hash)?;
        text("handler source", &new.source)?;
        name("handler backend", &new.backend)?;
        for capability in &new.capabilities {
            name("capability name", capability)?;
        }
        self.0.insert_handler_candidate(new).await
    }

    async fn record_handler_verification(
        &self,
        id: Uuid,
        passed: bool,
        report: &Value,
    ) -> Result<HandlerRecord, StoreError> {
        json("verification report", report)?;
        self.0.record_handler_verification(id, passed, report).await
    }

    async fn activate_handler(&self, id: Uuid) -> Result<HandlerRecord, StoreError> {
        self.0.activate_handler(id).await
    }

    async fn attach_compiled(
        &self,
        id: Uuid,
        compiled: &Value,
    ) -> Result<HandlerRecord, StoreError> {
        if !compiled.is_object() {
            return Err(StoreError::Invalid(
                "a compiled form must be a JSON object".into(),
            ));
        }
        json("compiled form", compiled)?;
        self.0.attach_compiled(id, compiled).await
    }

    async fn get_handler(&self, id: Uuid) -> Result<Option<HandlerRecord>, StoreError> {
        self.0.get_handler(id).await
    }

    async fn active_handler(
        &self,
        protocol_hash: &str,
    ) -> Result<Option<HandlerRecord>, StoreError> {
        hash("protocol hash", protocol_hash)?;
        self.0.active_handler(protocol_hash).await
    }

    // --- usage ---------------------------------------------------------------------------------

    async fn record_usage(
        &self,
        peer: &str,
        protocol_hash: &str,
        ok: u64,
        errors: u64,
    ) -> Result<ProtocolUsage, StoreError> {
        name("peer", peer)?;
        hash("protocol hash", protocol_hash)?;
        self.0.record_usage(peer, protocol_hash, ok, errors).await
    }

    async fn usage(
        &self,
        peer: &str,
        protocol_hash: &str,
    ) -> Result<Option<ProtocolUsage>, StoreError> {
        hash("protocol hash", protocol_hash)?;
        if !could_exist(peer) {
            return Ok(None);
        }
        self.0.usage(peer, protocol_hash).await
    }

    // --- model usage ---------------------------------------------------------------------------

    async fn record_model_usage(
        &self,
        owner: &ModelUsageOwner,
        usage: &[ModelUsage],
    ) -> Result<Vec<ModelUsage>, StoreError> {
        if let ModelUsageOwner::Conversation(id) = owner {
            existing("conversation", id)?;
        }
        for entry in usage {
            check_model_usage(entry)?;
        }
        if usage.is_empty() {
            return Ok(Vec::new());
        }
        self.0.record_model_usage(owner, usage).await
    }

    async fn model_usage(&self, owner: &ModelUsageOwner) -> Result<Vec<ModelUsage>, StoreError> {
        if let ModelUsageOwner::Conversation(id) = owner
            && !could_exist(id)
        {
            return Ok(Vec::new());
        }
        self.0.model_usage(owner).await
    }
}

// --- the rules ---------------------------------------------------------------------------------

/// 64 lower-case hex digits: checked before SQL so a malformed hash is reported as what it is,
/// not as "not found" or a constraint violation.
fn hash(what: &str, value: &str) -> Result<(), StoreError> {
    let well_formed = value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if well_formed {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{what} must be 64 lower-case hex digits (a SHA-256)"
        )))
    }
}

/// The start of a hash: 1 to 64 lower-case hex digits (so it holds no `LIKE` wildcard).
fn hash_prefix(what: &str, value: &str) -> Result<(), StoreError> {
    let well_formed = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if well_formed {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{what} must be 1 to 64 lower-case hex digits"
        )))
    }
}

/// Storable text: no U+0000.
fn text(what: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        Err(StoreError::Invalid(format!(
            "{what} contains U+0000, which the store does not accept"
        )))
    } else {
        Ok(())
    }
}

/// Storable, non-empty text.
fn name(what: &str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() {
        return Err(StoreError::Invalid(format!("{what} must not be empty")));
    }
    text(what, value)
}

/// A JSON document with no U+0000 in any string or key. Walks with an explicit stack, so a deeply
/// nested value built in code cannot overflow the call stack.
fn json(what: &str, value: &Value) -> Result<(), StoreError> {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(s) => text(what, s)?,
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    text(what, key)?;
                    pending.push(item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    Ok(())
}

/// Whether any row could have this key (keys are non-empty and storable).
fn could_exist(key: &str) -> bool {
    !key.is_empty() && !key.contains('\0')
}

/// An operation on a row named by a key that no row can have is `NotFound`.
fn existing(what: &str, key: &str) -> Result<(), StoreError> {
    if could_exist(key) {
        Ok(())
    } else {
        Err(StoreError::not_found(format!("{what} {key:?}")))
    }
}

fn check_outcome(outcome: &NegotiationOutcome) -> Result<(), StoreError> {
    if outcome.status == NegotiationStatus::Negotiating {
        return Err(StoreError::Invalid(
            "a negotiation cannot finish as 'negotiating'".into(),
        ));
    }
    if outcome.status == NegotiationStatus::Accepted && outcome.protocol_hash.is_none() {
        return Err(StoreError::Invalid(
            "an accepted negotiation needs the agreed protocol hash".into(),
        ));
    }
    if let Some(protocol_hash) = &outcome.protocol_hash {
        hash("protocol hash", protocol_hash)?;
    }
    if let Some(reason) = &outcome.reason {
        text("reason", reason)?;
    }
    if outcome.rounds < 0 {
        return Err(StoreError::Invalid("rounds must not be negative".into()));
    }
    Ok(())
}

fn check_model_usage(usage: &ModelUsage) -> Result<(), StoreError> {
    name("model usage purpose", &usage.purpose)?;
    let counts = [
        usage.calls,
        usage.unmetered_calls,
        usage.prompt_tokens,
        usage.completion_tokens,
    ];
    if counts.iter().any(|&n| n < 0) {
        return Err(StoreError::Invalid(format!(
            "model usage of {:?}: counts must not be negative",
            usage.purpose
        )));
    }
    if usage.unmetered_calls > usage.calls {
        return Err(StoreError::Invalid(format!(
            "model usage of {:?}: more unmetered calls than calls",
            usage.purpose
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sha256_hex;

    #[test]
    fn hashes_must_be_lower_case_sha256_hex() {
        assert!(hash("h", &sha256_hex(b"")).is_ok());
        for bad in ["", "abc", &"A".repeat(64), &"g".repeat(64), &"a".repeat(65)] {
            assert!(
                matches!(hash("h", bad), Err(StoreError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn nul_is_refused_anywhere_in_json() {
        assert!(json("m", &json!({ "a": [1, "ok", { "b": null }] })).is_ok());
        for bad in [
            json!("a\u{0}b"),
            json!({ "k\u{0}": 1 }),
            json!([[[{ "deep": ["\u{0}"] }]]]),
        ] {
            assert!(
                matches!(json("m", &bad), Err(StoreError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn keys_no_row_can_have_are_absent() {
        assert!(could_exist("conv-1"));
        assert!(!could_exist(""));
        assert!(!could_exist("a\u{0}b"));
        assert!(matches!(
            existing("conversation", ""),
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(name("peer", ""), Err(StoreError::Invalid(_))));
    }

    #[test]
    fn outcomes_are_checked() {
        let outcome = |status, hash: Option<&str>| NegotiationOutcome {
            status,
            protocol_hash: hash.map(str::to_owned),
            rounds: 1,
            reason: None,
        };
        let good = sha256_hex(b"p");
        assert!(check_outcome(&outcome(NegotiationStatus::Negotiating, None)).is_err());
        assert!(check_outcome(&outcome(NegotiationStatus::Accepted, None)).is_err());
        assert!(check_outcome(&outcome(NegotiationStatus::Accepted, Some(&good))).is_ok());
        assert!(check_outcome(&outcome(NegotiationStatus::Timeout, None)).is_ok());
        assert!(check_outcome(&outcome(NegotiationStatus::Rejected, Some("x"))).is_err());
    }
}
