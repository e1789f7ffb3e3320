//! The input rules both backends share. Every operation of the one `Store` implementation
//! (`sql/`) checks its input with these before any query, so the queries can assume well-formed
//! input and the two backends cannot drift apart in what they accept. The rules:
//! * hashes and upload ids are 64 lower-case hex digits, or the call is `Invalid`;
//! * names that identify something (conversation id, peer, content type, backend, capability) are
//!   not empty;
//! * nothing stored contains U+0000: PostgreSQL's TEXT and JSONB cannot hold it while SQLite can,
//!   and a store whose answer depends on the backend is a bug waiting for a deployment. Peers choose
//!   message contents and conversation tokens, so this must be a clean `Invalid`, not a database
//!   error;
//! * a key that no row can have (empty, or containing U+0000) is simply absent: lookups answer
//!   `None`, operations `NotFound`, without a round trip;
//! * a cut-off that selects rows to delete by age is not in the future;
//! * a peer's key is its id and its digest (a SHA-256) together, or neither, and its grants are
//!   a JSON object.
//! * an audit event's words are short (`MAX_AUDIT_TEXT`).

use serde_json::Value;

use crate::StoreError;
use crate::model::{ModelUsage, NegotiationOutcome, NegotiationStatus, NewAuditEvent, NewPeer};
use crate::store::MAX_AUDIT_TEXT;

/// 64 lower-case hex digits: checked before SQL so a malformed hash is reported as what it is,
/// not as "not found" or a constraint violation.
pub(crate) fn hash(what: &str, value: &str) -> Result<(), StoreError> {
    if value.len() == 64 && lower_hex(value) {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{what} must be 64 lower-case hex digits (a SHA-256)"
        )))
    }
}

/// The start of a hash: 1 to 64 lower-case hex digits (so it holds no `LIKE` wildcard).
pub(crate) fn hash_prefix(what: &str, value: &str) -> Result<(), StoreError> {
    if (1..=64).contains(&value.len()) && lower_hex(value) {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{what} must be 1 to 64 lower-case hex digits"
        )))
    }
}

fn lower_hex(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A cut-off for deleting rows by age: not later than now, so no row written now can be older.
pub(crate) fn past(what: &str, cut_off: chrono::DateTime<chrono::Utc>) -> Result<(), StoreError> {
    if cut_off > chrono::Utc::now() {
        return Err(StoreError::Invalid(format!(
            "{what} {cut_off} is in the future"
        )));
    }
    Ok(())
}

/// Storable text: no U+0000.
pub(crate) fn text(what: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        Err(StoreError::Invalid(format!(
            "{what} contains U+0000, which the store does not accept"
        )))
    } else {
        Ok(())
    }
}

/// Storable, non-empty text.
pub(crate) fn name(what: &str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() {
        return Err(StoreError::Invalid(format!("{what} must not be empty")));
    }
    text(what, value)
}

/// A JSON document with no U+0000 in any string or key. Walks with an explicit stack, so a deeply
/// nested value built in code cannot overflow the call stack.
pub(crate) fn json(what: &str, value: &Value) -> Result<(), StoreError> {
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
pub(crate) fn could_exist(key: &str) -> bool {
    !key.is_empty() && !key.contains('\0')
}

/// An operation on a row named by a key that no row can have is `NotFound`.
pub(crate) fn existing(what: &str, key: &str) -> Result<(), StoreError> {
    if could_exist(key) {
        Ok(())
    } else {
        Err(StoreError::not_found(format!("{what} {key:?}")))
    }
}

pub(crate) fn check_outcome(outcome: &NegotiationOutcome) -> Result<(), StoreError> {
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

pub(crate) fn check_model_usage(usage: &ModelUsage) -> Result<(), StoreError> {
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

pub(crate) fn check_new_peer(peer: &NewPeer) -> Result<(), StoreError> {
    name("peer id", &peer.id)?;
    match (&peer.key_id, &peer.key_digest) {
        (Some(key_id), Some(digest)) => {
            name("key id", key_id)?;
            hash("key digest", digest)?;
        }
        (None, None) => {}
        _ => {
            return Err(StoreError::Invalid(format!(
                "peer {:?}: a key needs both its id and its digest",
                peer.id
            )));
        }
    }
    if !peer.grants.is_object() {
        return Err(StoreError::Invalid(format!(
            "peer {:?}: grants must be a JSON object",
            peer.id
        )));
    }
    json("grants", &peer.grants)
}

/// An audit event: its words named, storable and short, its detail storable JSON.
pub(crate) fn check_audit_event(event: &NewAuditEvent) -> Result<(), StoreError> {
    let optional = [
        ("audit peer", &event.peer),
        ("audit address", &event.address),
    ];
    let given = optional
        .into_iter()
        .filter_map(|(what, value)| value.as_deref().map(|v| (what, v)));
    let words = [
        ("audit action", event.action.as_str()),
        ("audit subject", event.subject.as_str()),
        ("audit outcome", event.outcome.as_str()),
    ];
    for (what, value) in words.into_iter().chain(given) {
        name(what, value)?;
        if value.len() > MAX_AUDIT_TEXT {
            return Err(StoreError::Invalid(format!(
                "{what} must be at most {MAX_AUDIT_TEXT} bytes"
            )));
        }
    }
    if let Some(detail) = &event.detail {
        json("audit detail", detail)?;
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
    fn audit_events_need_short_storable_words() {
        let event = NewAuditEvent {
            at: chrono::Utc::now(),
            peer: None,
            address: Some("127.0.0.1".into()),
            action: "capability.call".into(),
            subject: "getProductInfo".into(),
            outcome: "ok".into(),
            detail: Some(json!({"duration_us": 31})),
        };
        assert!(check_audit_event(&event).is_ok());
        let bad = [
            NewAuditEvent {
                action: String::new(),
                ..event.clone()
            },
            NewAuditEvent {
                peer: Some(String::new()),
                ..event.clone()
            },
            NewAuditEvent {
                subject: "x".repeat(MAX_AUDIT_TEXT + 1),
                ..event.clone()
            },
            NewAuditEvent {
                outcome: "o\u{0}k".into(),
                ..event.clone()
            },
            NewAuditEvent {
                detail: Some(json!({"reason": "\u{0}"})),
                ..event.clone()
            },
        ];
        for bad in bad {
            assert!(
                matches!(check_audit_event(&bad), Err(StoreError::Invalid(_))),
                "{bad:?}"
            );
        }
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
