//! The records the store keeps, as plain Rust values.
//!
//! Nothing here knows NLIP or ANP: messages and states are `serde_json::Value`, protocol texts are
//! strings, roles and statuses are the small closed sets the tables' CHECK constraints allow.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// Declares a closed set stored as TEXT: the Rust names, the SQL spellings (which must match the
/// CHECK constraints in the migrations), `as_str`, `FromStr` and `Display`.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling stored in the database (and used in serde).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!("unknown {} {other:?}", stringify!($name))),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum! {
    /// Which way a logged message travelled.
    Direction {
        /// Received from the peer.
        Inbound => "inbound",
        /// Sent by us.
        Outbound => "outbound",
    }
}

text_enum! {
    /// Our role in a negotiation or agreement.
    Role {
        /// We proposed the protocol and call it.
        Requester => "requester",
        /// We evaluated the protocol and serve it.
        Provider => "provider",
    }
}

text_enum! {
    /// Where a negotiation stands. Every outcome the meta-protocol defines has a value, so no
    /// spec-legal status can fail to be recorded.
    NegotiationStatus {
        /// Still exchanging proposals.
        Negotiating => "negotiating",
        /// Both sides agreed on a protocol (its hash is recorded).
        Accepted => "accepted",
        /// One side rejected, or the round limit ran out.
        Rejected => "rejected",
        /// Broke down: a backend error, a protocol violation, handler generation failed.
        Failed => "failed",
        /// The peer went quiet.
        Timeout => "timeout",
    }
}

text_enum! {
    /// Life cycle of a generated handler.
    HandlerState {
        /// Generated; verification not run or passed but not yet activated.
        Candidate => "candidate",
        /// The one handler serving its protocol.
        Active => "active",
        /// Verification failed; never runs.
        Failed => "failed",
        /// Was active, replaced by a newer one; may be re-activated to roll back.
        Retired => "retired",
    }
}

/// A conversation to create. The id is the conversation token the server minted.
#[derive(Debug, Clone, PartialEq)]
pub struct NewConversation {
    pub id: String,
    pub peer: Option<String>,
    /// Initial state; `Value::Object` empty if the caller has none yet.
    pub state: Value,
}

/// A stored conversation (without its log).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    pub id: String,
    pub peer: Option<String>,
    pub state: Value,
    /// Optimistic-concurrency version of `state`; pass it back to `update_conversation_state`.
    pub version: i64,
    /// How many messages were ever appended to the log: the sequence number of the newest one.
    /// The log itself may hold fewer, when its oldest were trimmed.
    pub message_count: i64,
    /// How many messages the peer sent: one turn per inbound message appended to the log
    /// (still counted after the log's oldest messages were trimmed).
    pub turns: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One entry of a conversation log or a negotiation transcript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoggedMessage {
    /// 1-based position, consecutive within its log.
    pub seq: i64,
    pub direction: Direction,
    pub message: Value,
    pub created_at: DateTime<Utc>,
}

/// An upload's metadata (everything but the bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UploadMeta {
    /// Lower-case hex SHA-256 of the bytes.
    pub id: String,
    pub size: i64,
    pub content_type: String,
    pub filename: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// An upload with its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub meta: UploadMeta,
    pub bytes: Vec<u8>,
}

/// An agreed protocol text and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protocol {
    /// Lower-case hex SHA-256 of the exact UTF-8 bytes of `text`.
    pub hash: String,
    pub text: String,
    pub created_at: DateTime<Utc>,
}

/// An agreement to record: `peer` agreed `protocol_hash` with us, we in `role`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAgreement {
    pub peer: String,
    /// The peer's base URL when known; a later agreement without one keeps the known URL.
    pub peer_url: Option<String>,
    pub protocol_hash: String,
    pub role: Role,
}

/// A recorded agreement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Agreement {
    pub peer: String,
    pub peer_url: Option<String>,
    pub protocol_hash: String,
    pub role: Role,
    pub agreed_at: DateTime<Utc>,
    pub last_agreed_at: DateTime<Utc>,
}

/// A negotiation to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNegotiation {
    /// The conversation carrying it; must exist.
    pub conversation_id: String,
    pub role: Role,
    pub peer: String,
}

/// How a negotiation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiationOutcome {
    /// Anything but `Negotiating`.
    pub status: NegotiationStatus,
    /// Required for `Accepted`; the protocol must be stored first (`put_protocol`).
    pub protocol_hash: Option<String>,
    /// Rounds used, as counted by the negotiator.
    pub rounds: i64,
    /// Stable error code or short explanation for anything but acceptance.
    pub reason: Option<String>,
}

/// A negotiation (without its transcript).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Negotiation {
    pub id: Uuid,
    pub conversation_id: String,
    pub role: Role,
    pub peer: String,
    pub status: NegotiationStatus,
    pub protocol_hash: Option<String>,
    pub rounds: i64,
    /// Number of transcript messages.
    pub message_count: i64,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub reason: Option<String>,
}

/// A negotiation with its transcript in order, read in one consistent snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NegotiationRecord {
    pub negotiation: Negotiation,
    pub transcript: Vec<LoggedMessage>,
}

/// A generated handler to store as a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHandler {
    pub protocol_hash: String,
    pub source: String,
    /// The reasoner backend that generated it.
    pub backend: String,
    /// Capability names the handler may call.
    pub capabilities: Vec<String>,
}

/// A stored handler.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandlerRecord {
    pub id: Uuid,
    pub protocol_hash: String,
    pub source: String,
    /// Lower-case hex SHA-256 of `source`, computed by the store.
    pub source_sha256: String,
    pub backend: String,
    pub capabilities: Vec<String>,
    /// The verifier's report; `None` until verification ran.
    pub verification: Option<Value>,
    /// `None` until verification ran.
    pub verification_passed: Option<bool>,
    pub verified_at: Option<DateTime<Utc>>,
    pub state: HandlerState,
    /// The handler's compiled form (the built-in reasoner's mapping, a JSON object), attached by
    /// [`crate::Store::attach_compiled`] once it answered every test case as `source` did; it then
    /// serves in place of `source`. `None`: `source` serves.
    pub compiled: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub activated_at: Option<DateTime<Utc>>,
    pub retired_at: Option<DateTime<Utc>>,
}

/// Call counters for one (peer, protocol).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtocolUsage {
    pub peer: String,
    pub protocol_hash: String,
    pub ok_count: i64,
    pub error_count: i64,
    pub first_used_at: DateTime<Utc>,
    pub last_used_at: DateTime<Utc>,
}

impl ProtocolUsage {
    /// All calls recorded, whatever their outcome.
    pub fn calls(&self) -> i64 {
        self.ok_count + self.error_count
    }
}

/// Whose language-model use a [`ModelUsage`] counts: a conversation (its natural-language
/// answers) or a negotiation (its reasoning). Each is counted on its own: a negotiation's calls are
/// not added to the conversation that carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelUsageOwner {
    Conversation(String),
    Negotiation(Uuid),
}

impl std::fmt::Display for ModelUsageOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelUsageOwner::Conversation(id) => write!(f, "conversation {id}"),
            ModelUsageOwner::Negotiation(id) => write!(f, "negotiation {id}"),
        }
    }
}

/// Language-model calls and tokens spent for one purpose: what to add with
/// [`crate::Store::record_model_usage`], and the totals it and [`crate::Store::model_usage`] return.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ModelUsage {
    /// Why the model was called (the reasoner's name: `answer`, `evaluate`, `generate_handler`,
    /// `fix_handler`, ...). Opaque to the store; not empty.
    pub purpose: String,
    /// Requests sent.
    pub calls: i64,
    /// Of `calls`, those whose tokens are unknown: the response reported no usage, or no response
    /// came. The token counts leave them out, so they are a lower bound while this is above 0.
    pub unmetered_calls: i64,
    /// Tokens of the prompts, as the model's responses reported them.
    pub prompt_tokens: i64,
    /// Tokens of the completions, as the model's responses reported them.
    pub completion_tokens: i64,
}

impl ModelUsage {
    /// Prompt and completion tokens together.
    pub fn tokens(&self) -> i64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// A peer to declare: its id, its API key's public id and secret digest (both or neither), and
/// what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPeer {
    /// The operator's name for the peer; not empty.
    pub id: String,
    /// The API key's public id; `None` for a peer named by another credential.
    pub key_id: Option<String>,
    /// Lower-case hex SHA-256 of the key's secret (64 digits); present exactly when `key_id` is.
    pub key_digest: Option<String>,
    /// What the peer may do, a JSON object the store keeps without interpreting it.
    pub grants: Value,
}

/// A declared peer, revoked or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRecord {
    pub id: String,
    pub key_id: Option<String>,
    pub key_digest: Option<String>,
    pub grants: Value,
    pub created_at: DateTime<Utc>,
    /// When its key stopped being honoured; `None` while it is.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Something that happened on a peer's behalf, to record with [`crate::Store::append_audit`]:
/// who (`peer`, `address`), what (`action` on `subject`), when (`at`) and how it went
/// (`outcome`). The store keeps the words as given; what they may be is the caller's vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewAuditEvent {
    /// When it happened. Taken from the caller, unlike every other timestamp in the store: events
    /// written in batches happened before the batch is written. Kept at microsecond precision.
    pub at: DateTime<Utc>,
    /// The authenticated peer's id, when a credential named one; not empty.
    pub peer: Option<String>,
    /// The peer's network address; not empty.
    pub address: Option<String>,
    /// What was done or attempted (`negotiation.start`, `capability.call`, ...); not empty.
    pub action: String,
    /// What it was done to (a negotiation id, a protocol hash, a capability name); not empty.
    pub subject: String,
    /// How it went (`ok`, `refused`, `failed`, an error code); not empty.
    pub outcome: String,
    /// Whatever else explains it, as JSON.
    pub detail: Option<Value>,
}

/// A recorded [`NewAuditEvent`] with the id the store gave it (ids grow in insertion order).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEvent {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub peer: Option<String>,
    pub address: Option<String>,
    pub action: String,
    pub subject: String,
    pub outcome: String,
    pub detail: Option<Value>,
}

/// Which audit events [`crate::Store::list_audit`] returns: those matching every field that is
/// set, newest first, at most `limit` (capped at [`crate::MAX_PAGE`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub peer: Option<String>,
    pub address: Option<String>,
    pub action: Option<String>,
    pub outcome: Option<String>,
    /// Events at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Events before this instant.
    pub until: Option<DateTime<Utc>>,
    pub limit: u32,
}
