//! Row structs shared by both backends, and the column encodings that make sharing possible.
//!
//! Every row struct derives `FromRow` generically, so the SQLite and PostgreSQL queries decode into
//! the same types as long as each backend selects the same column names. Rows convert into the public
//! model types with `From`; nothing outside this crate sees a row.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::types::Json;
use sqlx::{Database, Decode, Encode, FromRow, Postgres, Sqlite, Type};
use uuid::Uuid;
use uuid::fmt::Hyphenated;

use crate::StoreError;

use crate::model::{
    Agreement, AuditEvent, Conversation, Direction, HandlerRecord, HandlerState, LoggedMessage,
    ModelUsage, Negotiation, NegotiationStatus, PeerRecord, Protocol, ProtocolUsage, Role, Upload,
    UploadMeta,
};

/// A closed set stored as a TEXT column on both backends (the model's enumerations).
pub(crate) trait TextEnum: Copy + std::str::FromStr<Err = String> {
    fn as_text(self) -> &'static str;
}

macro_rules! text_enum {
    ($($ty:ty),+) => {$(
        impl TextEnum for $ty {
            fn as_text(self) -> &'static str {
                self.as_str()
            }
        }
    )+};
}

text_enum!(Direction, Role, NegotiationStatus, HandlerState);

/// A closed set as a column: encoded and decoded through `&str`, so a value outside the set fails
/// loudly at decode time (the CHECK constraints make that a corruption). A wrapper rather than
/// sqlx impls on the model types keeps sqlx out of the public API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Text<T>(pub T);

impl<DB: Database, T> Type<DB> for Text<T>
where
    str: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <str as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <str as Type<DB>>::compatible(ty)
    }
}

impl<'q, DB: Database, T: TextEnum> Encode<'q, DB> for Text<T>
where
    &'q str: Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <&'q str as Encode<'q, DB>>::encode(self.0.as_text(), buf)
    }
}

impl<'r, DB: Database, T: TextEnum> Decode<'r, DB> for Text<T>
where
    &'r str: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&'r str as Decode<'r, DB>>::decode(value)?;
        Ok(Self(text.parse::<T>()?))
    }
}

/// A UUID column: native `UUID` on PostgreSQL, hyphenated TEXT on SQLite (sqlx's SQLite default is
/// a 16-byte BLOB, unreadable for an operator poking at the file with `sqlite3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DbUuid(pub Uuid);

impl Type<Sqlite> for DbUuid {
    fn type_info() -> <Sqlite as Database>::TypeInfo {
        <Hyphenated as Type<Sqlite>>::type_info()
    }
}

impl<'q> Encode<'q, Sqlite> for DbUuid {
    fn encode_by_ref(
        &self,
        buf: &mut <Sqlite as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <Hyphenated as Encode<'q, Sqlite>>::encode(self.0.hyphenated(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for DbUuid {
    fn decode(value: <Sqlite as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(
            <Hyphenated as Decode<'r, Sqlite>>::decode(value)?.into_uuid(),
        ))
    }
}

impl Type<Postgres> for DbUuid {
    fn type_info() -> <Postgres as Database>::TypeInfo {
        <Uuid as Type<Postgres>>::type_info()
    }
}

impl<'q> Encode<'q, Postgres> for DbUuid {
    fn encode_by_ref(
        &self,
        buf: &mut <Postgres as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <Uuid as Encode<'q, Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl<'r> Decode<'r, Postgres> for DbUuid {
    fn decode(value: <Postgres as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(<Uuid as Decode<'r, Postgres>>::decode(value)?))
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct ConversationRow {
    id: String,
    peer: Option<String>,
    state: Value,
    version: i64,
    last_seq: i64,
    turns: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ConversationRow> for Conversation {
    fn from(row: ConversationRow) -> Self {
        Self {
            id: row.id,
            peer: row.peer,
            state: row.state,
            version: row.version,
            message_count: row.last_seq,
            turns: row.turns,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A row of `conversation_messages` or `negotiation_messages` (the owner column is not selected).
#[derive(Debug, FromRow)]
pub(crate) struct MessageRow {
    seq: i64,
    direction: Text<Direction>,
    message: Value,
    created_at: DateTime<Utc>,
}

impl From<MessageRow> for LoggedMessage {
    fn from(row: MessageRow) -> Self {
        Self {
            seq: row.seq,
            direction: row.direction.0,
            message: row.message,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct UploadMetaRow {
    id: String,
    size: i64,
    content_type: String,
    filename: Option<String>,
    created_at: DateTime<Utc>,
}

impl From<UploadMetaRow> for UploadMeta {
    fn from(row: UploadMetaRow) -> Self {
        Self {
            id: row.id,
            size: row.size,
            content_type: row.content_type,
            filename: row.filename,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct UploadRow {
    #[sqlx(flatten)]
    meta: UploadMetaRow,
    bytes: Vec<u8>,
}

impl From<UploadRow> for Upload {
    fn from(row: UploadRow) -> Self {
        Self {
            meta: row.meta.into(),
            bytes: row.bytes,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct ProtocolRow {
    hash: String,
    text: String,
    created_at: DateTime<Utc>,
}

impl From<ProtocolRow> for Protocol {
    fn from(row: ProtocolRow) -> Self {
        Self {
            hash: row.hash,
            text: row.text,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct AgreementRow {
    peer: String,
    peer_url: Option<String>,
    protocol_hash: String,
    role: Text<Role>,
    agreed_at: DateTime<Utc>,
    last_agreed_at: DateTime<Utc>,
}

impl From<AgreementRow> for Agreement {
    fn from(row: AgreementRow) -> Self {
        Self {
            peer: row.peer,
            peer_url: row.peer_url,
            protocol_hash: row.protocol_hash,
            role: row.role.0,
            agreed_at: row.agreed_at,
            last_agreed_at: row.last_agreed_at,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct NegotiationRow {
    id: DbUuid,
    conversation_id: String,
    role: Text<Role>,
    peer: String,
    status: Text<NegotiationStatus>,
    protocol_hash: Option<String>,
    rounds: i64,
    last_seq: i64,
    started_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
    reason: Option<String>,
}

impl From<NegotiationRow> for Negotiation {
    fn from(row: NegotiationRow) -> Self {
        Self {
            id: row.id.0,
            conversation_id: row.conversation_id,
            role: row.role.0,
            peer: row.peer,
            status: row.status.0,
            protocol_hash: row.protocol_hash,
            rounds: row.rounds,
            message_count: row.last_seq,
            started_at: row.started_at,
            ended_at: row.ended_at,
            reason: row.reason,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct HandlerRow {
    id: DbUuid,
    protocol_hash: String,
    source: String,
    source_sha256: String,
    backend: String,
    capabilities: Json<Vec<String>>,
    verification: Option<Value>,
    verification_passed: Option<bool>,
    verified_at: Option<DateTime<Utc>>,
    state: Text<HandlerState>,
    /// The exact JSON text (see `Store::attach_compiled`).
    compiled: Option<String>,
    created_at: DateTime<Utc>,
    activated_at: Option<DateTime<Utc>>,
    retired_at: Option<DateTime<Utc>>,
}

impl HandlerRow {
    pub(crate) fn state(&self) -> HandlerState {
        self.state.0
    }

    /// Which handlers may become active: verified candidates, retired handlers (a rollback), and
    /// the active one itself (a no-op).
    pub(crate) fn check_activatable(&self) -> Result<(), StoreError> {
        let id = self.id.0;
        match self.state.0 {
            HandlerState::Active => Ok(()),
            HandlerState::Failed => Err(StoreError::conflict(format!(
                "handler {id} failed verification and cannot be activated"
            ))),
            HandlerState::Candidate | HandlerState::Retired => {
                if self.verification_passed == Some(true) {
                    Ok(())
                } else {
                    Err(StoreError::conflict(format!(
                        "handler {id} has not passed verification"
                    )))
                }
            }
        }
    }

    pub(crate) fn protocol_hash(&self) -> &str {
        &self.protocol_hash
    }
}

impl From<HandlerRow> for HandlerRecord {
    fn from(row: HandlerRow) -> Self {
        Self {
            id: row.id.0,
            protocol_hash: row.protocol_hash,
            source: row.source,
            source_sha256: row.source_sha256,
            backend: row.backend,
            capabilities: row.capabilities.0,
            verification: row.verification,
            verification_passed: row.verification_passed,
            verified_at: row.verified_at,
            state: row.state.0,
            // Written by `attach_compiled` from a `Value`, and checked as a JSON object by the
            // schema, so it parses.
            compiled: row
                .compiled
                .and_then(|text| serde_json::from_str(&text).ok()),
            created_at: row.created_at,
            activated_at: row.activated_at,
            retired_at: row.retired_at,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct UsageRow {
    peer: String,
    protocol_hash: String,
    ok_count: i64,
    error_count: i64,
    first_used_at: DateTime<Utc>,
    last_used_at: DateTime<Utc>,
}

impl From<UsageRow> for ProtocolUsage {
    fn from(row: UsageRow) -> Self {
        Self {
            peer: row.peer,
            protocol_hash: row.protocol_hash,
            ok_count: row.ok_count,
            error_count: row.error_count,
            first_used_at: row.first_used_at,
            last_used_at: row.last_used_at,
        }
    }
}

/// A row of `conversation_model_usage` or `negotiation_model_usage` (the owner column is not
/// selected).
#[derive(Debug, FromRow)]
pub(crate) struct ModelUsageRow {
    purpose: String,
    calls: i64,
    unmetered_calls: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
}

impl From<ModelUsageRow> for ModelUsage {
    fn from(row: ModelUsageRow) -> Self {
        Self {
            purpose: row.purpose,
            calls: row.calls,
            unmetered_calls: row.unmetered_calls,
            prompt_tokens: row.prompt_tokens,
            completion_tokens: row.completion_tokens,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct PeerRow {
    id: String,
    key_id: Option<String>,
    key_digest: Option<String>,
    grants: Value,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<PeerRow> for PeerRecord {
    fn from(row: PeerRow) -> Self {
        Self {
            id: row.id,
            key_id: row.key_id,
            key_digest: row.key_digest,
            grants: row.grants,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
        }
    }
}

#[derive(Debug, FromRow)]
pub(crate) struct AuditRow {
    id: i64,
    at: DateTime<Utc>,
    peer: Option<String>,
    address: Option<String>,
    action: String,
    subject: String,
    outcome: String,
    detail: Option<Value>,
}

impl From<AuditRow> for AuditEvent {
    fn from(row: AuditRow) -> Self {
        Self {
            id: row.id,
            at: row.at,
            peer: row.peer,
            address: row.address,
            action: row.action,
            subject: row.subject,
            outcome: row.outcome,
            detail: row.detail,
        }
    }
}

// Column lists, one per row struct, shared by every SELECT and RETURNING on both backends so a
// column added to a row struct is added everywhere at once. Macros rather than consts so queries can
// be assembled with `concat!` into `&'static str` at compile time.

macro_rules! conversation_columns {
    () => {
        "id, peer, state, version, last_seq, turns, created_at, updated_at"
    };
}

macro_rules! message_columns {
    () => {
        "seq, direction, message, created_at"
    };
}

macro_rules! upload_meta_columns {
    () => {
        "id, size, content_type, filename, created_at"
    };
}

macro_rules! protocol_columns {
    () => {
        "hash, text, created_at"
    };
}

macro_rules! agreement_columns {
    () => {
        "peer, peer_url, protocol_hash, role, agreed_at, last_agreed_at"
    };
}

macro_rules! negotiation_columns {
    () => {
        "id, conversation_id, role, peer, status, protocol_hash, rounds, last_seq, started_at, \
         ended_at, reason"
    };
}

macro_rules! handler_columns {
    () => {
        "id, protocol_hash, source, source_sha256, backend, capabilities, verification, \
         verification_passed, verified_at, state, compiled, created_at, activated_at, retired_at"
    };
}

macro_rules! usage_columns {
    () => {
        "peer, protocol_hash, ok_count, error_count, first_used_at, last_used_at"
    };
}

macro_rules! model_usage_columns {
    () => {
        "purpose, calls, unmetered_calls, prompt_tokens, completion_tokens"
    };
}

macro_rules! peer_columns {
    () => {
        "id, key_id, key_digest, grants, created_at, revoked_at"
    };
}

macro_rules! audit_columns {
    () => {
        "id, at, peer, address, action, subject, outcome, detail"
    };
}

pub(crate) use {
    agreement_columns, audit_columns, conversation_columns, handler_columns, message_columns,
    model_usage_columns, negotiation_columns, peer_columns, protocol_columns, upload_meta_columns,
    usage_columns,
};
