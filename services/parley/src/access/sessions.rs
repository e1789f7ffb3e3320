//! The sessions this agent opened for peers that authenticated inside an NLIP message
//! (ECMA-430 §6.2.2): a peer presents its credential in an `authentication` token submessage,
//! the reply carries a session token of this agent's own (`authentication_<agent id>`), and the
//! peer's later messages carry that token back instead of the credential.
//!
//! # Decisions
//! - **In memory, keyed by the token's digest.** A session is cheap to open again (the peer
//!   still holds its credential and is asked for it), so a restart that forgets every session
//!   costs one exchange per peer, and nothing that could authenticate is written anywhere.
//! - **Bounded twice**: at most `max` sessions in all, and at most [`PER_PEER`] per peer (a
//!   peer that authenticates again and again replaces its own oldest sessions, never another
//!   peer's). When the table is full, expired sessions go first, then the one closest to its
//!   end.
//! - **A session never outlives its credential**: one opened with an access token ends when the
//!   token expires; one opened with a store key is checked against the key on every use, so
//!   revoking the key ends it (see `Access::in_band`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parley_auth::{SessionDigest, SessionToken};

use super::Principal;
use crate::error::ApiError;

/// Most sessions one peer holds at once.
pub const PER_PEER: usize = 8;

/// One open session.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Arc<Principal>,
    /// The store key it was opened with, checked again on every use.
    pub key_id: Option<String>,
    until: Instant,
}

#[derive(Debug, Default)]
struct Table {
    sessions: HashMap<SessionDigest, Session>,
    /// Each peer's sessions, oldest first.
    by_peer: HashMap<String, VecDeque<SessionDigest>>,
}

impl Table {
    fn remove(&mut self, digest: &SessionDigest) -> Option<Session> {
        let session = self.sessions.remove(digest)?;
        if let Some(id) = &session.principal.id
            && let Some(list) = self.by_peer.get_mut(id)
        {
            list.retain(|d| d != digest);
            if list.is_empty() {
                self.by_peer.remove(id);
            }
        }
        Some(session)
    }

    /// Makes room for one more session in a table of at most `max`.
    fn make_room(&mut self, max: usize, now: Instant) {
        if self.sessions.len() < max {
            return;
        }
        let expired: Vec<SessionDigest> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.until <= now)
            .map(|(d, _)| *d)
            .collect();
        for digest in &expired {
            self.remove(digest);
        }
        while self.sessions.len() >= max {
            let Some(closest) = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.until)
                .map(|(d, _)| *d)
            else {
                return;
            };
            self.remove(&closest);
        }
    }
}

/// The open sessions; see the module docs.
#[derive(Debug)]
pub struct Sessions {
    table: Mutex<Table>,
    ttl: Duration,
    max: usize,
}

impl Sessions {
    pub fn new(ttl: Duration, max: usize) -> Sessions {
        Sessions {
            table: Mutex::default(),
            ttl,
            max: max.max(1),
        }
    }

    /// Opens a session for a named `principal`, ending no later than `until` when given (the
    /// credential's own expiry), and returns the token the peer receives.
    pub fn open(
        &self,
        principal: Arc<Principal>,
        key_id: Option<String>,
        until: Option<Instant>,
    ) -> Result<SessionToken, ApiError> {
        let Some(id) = principal.id.clone() else {
            return Err(ApiError::internal(
                "a session is only opened for a named peer",
            ));
        };
        let token = SessionToken::generate().map_err(ApiError::internal)?;
        let now = Instant::now();
        let end = now + self.ttl;
        let until = until.map_or(end, |u| u.min(end));
        let digest = token.digest();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let oldest_of_peer = table
            .by_peer
            .get(&id)
            .filter(|list| list.len() >= PER_PEER)
            .and_then(|list| list.front().copied());
        if let Some(oldest) = oldest_of_peer {
            table.remove(&oldest);
        }
        table.make_room(self.max, now);
        table.sessions.insert(
            digest,
            Session {
                principal,
                key_id,
                until,
            },
        );
        table.by_peer.entry(id).or_default().push_back(digest);
        Ok(token)
    }

    /// The live session a presented token names; an expired one is removed and found as none.
    pub fn find(&self, presented: &str) -> Option<Session> {
        let digest = SessionDigest::of(presented);
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let session = table.sessions.get(&digest)?;
        if session.until > Instant::now() {
            return Some(session.clone());
        }
        table.remove(&digest);
        None
    }

    /// Ends the session a presented token names, if there is one.
    pub fn end(&self, presented: &str) {
        let digest = SessionDigest::of(presented);
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest);
    }

    /// How many sessions are open (expired ones not yet removed included).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sessions
            .len()
    }

    /// Whether no session is open.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Grants, Scheme};

    fn peer(id: &str) -> Arc<Principal> {
        Arc::new(Principal {
            id: Some(id.to_owned()),
            scheme: Scheme::ApiKey,
            grants: Grants::talk_only(),
        })
    }

    #[test]
    fn a_session_is_found_by_its_token_until_it_ends() {
        let sessions = Sessions::new(Duration::from_secs(60), 100);
        let token = sessions.open(peer("shop"), None, None).expect("opened");
        let found = sessions.find(token.reveal()).expect("found");
        assert_eq!(found.principal.id.as_deref(), Some("shop"));
        assert!(sessions.find("pls_unknown").is_none());
        sessions.end(token.reveal());
        assert!(sessions.find(token.reveal()).is_none());

        let expired = sessions
            .open(peer("shop"), None, Some(Instant::now()))
            .expect("opened");
        assert!(sessions.find(expired.reveal()).is_none(), "ended at once");
        assert!(sessions.is_empty(), "and removed when found expired");

        let anonymous = Arc::new(Principal {
            id: None,
            scheme: Scheme::Anonymous,
            grants: Grants::talk_only(),
        });
        assert!(sessions.open(anonymous, None, None).is_err());
    }

    #[test]
    fn one_peer_cannot_push_out_the_sessions_of_others() {
        let sessions = Sessions::new(Duration::from_secs(60), PER_PEER + 1);
        let other = sessions.open(peer("other"), None, None).expect("opened");
        let first = sessions.open(peer("noisy"), None, None).expect("opened");
        for _ in 0..50 {
            sessions.open(peer("noisy"), None, None).expect("opened");
        }
        assert_eq!(sessions.len(), PER_PEER + 1);
        assert!(
            sessions.find(other.reveal()).is_some(),
            "the other peer's session stays"
        );
        assert!(
            sessions.find(first.reveal()).is_none(),
            "the noisy peer's oldest went"
        );

        let full = Sessions::new(Duration::from_secs(60), 2);
        let a = full.open(peer("a"), None, None).expect("opened");
        full.open(peer("b"), None, None).expect("opened");
        full.open(peer("c"), None, None).expect("opened");
        assert_eq!(full.len(), 2);
        assert!(
            full.find(a.reveal()).is_none(),
            "the one closest to its end went"
        );
    }
}
