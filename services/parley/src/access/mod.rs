//! Who a request comes from and what it may do.
//!
//! [`Access`] is built at start from `[access]` (the anonymous grants, the peers file) and the
//! store. Every transport hands it what the request presents ([`Access::resolve`]): an
//! `Authorization: Bearer parley_…` API key (the peers file's entry with that key id, else the
//! store's peer), or the verified client certificate the listener put in the request's
//! extensions (the peers file's entry for it), or nothing (anonymous). With `[access.did_wba]`
//! on, an ANP peer's DID-WBA credential (an HTTP Message Signature, or `Authorization: DIDWba …`)
//! is checked instead ([`Access::did_wba_request`], see [`did_wba`]). The answer is a
//! [`Principal`]; with the peer's address it is the [`Caller`] that `Agent::handle` and every
//! other path checks its [`Action`]s against.
//!
//! # Decisions
//! - **A wrong credential is refused, never downgraded.** A presented credential that does not
//!   resolve (malformed, unknown, revoked, another scheme's token) is `unauthenticated` (HTTP 401
//!   with `WWW-Authenticate: Bearer`), so a client with a stale key learns it at once.
//! - **Anonymous costs nothing.** A request without credentials gets the one shared anonymous
//!   principal: no lookup, no allocation.
//! - **Keys from the store are cached for [`KEY_TTL`]**, the found and the unknown alike: a key
//!   made by `parley peers add` works within that time on a running server, and a revoked one
//!   stops within it, while a busy peer costs one lookup a second, not one per request.
//! - **A certificate without an entry** in the peers file is a named peer (conversations and
//!   agreements are its own) with the anonymous grants: the operator's CA vouched for the name,
//!   and nobody granted it more. So is a verified DID without an entry naming it.
//! - **Indirect calls are checked where every call passes**: [`scoped`] puts the caller in a
//!   task-local for the request's work, and the [`CallerGuard`] installed in
//!   `Capabilities::invoke` refuses a capability the caller may not use, whoever proposed the
//!   call (a tool call, a handler's `host.call`, the reasoner or its model). Work outside a
//!   request (start-up, the server's own requester) has no caller and is not checked.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderValue;
pub use parley_auth::{Action, Grants, Scope};
use parley_auth::{ApiKey, StoredKey};
use parley_capabilities::CapabilityError;
use parley_store::{Role, Store};

use crate::error::ApiError;
use crate::peer::{Caller, PeerIdentity};

pub mod did_wba;
pub mod peers_file;
pub mod sessions;

use crate::issuers::Issuers;
use peers_file::PeersFile;
use sessions::Sessions;

/// How long a key looked up in the store is trusted before it is looked up again.
pub const KEY_TTL: Duration = Duration::from_secs(1);

/// Most keys (and unknown key ids) remembered at once; the memory is emptied when full.
const MAX_CACHED_KEYS: usize = 10_000;

/// Most (peer, protocol) agreements remembered as the peer's own.
const MAX_CACHED_AGREEMENTS: usize = 10_000;

/// How long an in-message session lasts by default (`[access.sessions] ttl_s`).
pub const DEFAULT_SESSION_TTL_S: u64 = 900;

/// Most in-message sessions open at once by default (`[access.sessions] max`).
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// Who a request comes from, as far as its credentials tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The peer's id (a peers-file entry, a store peer, a certificate's name); `None`: anonymous.
    pub id: Option<String>,
    pub scheme: Scheme,
    pub grants: Grants,
}

/// The credential a principal was resolved from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Anonymous,
    ApiKey,
    ClientCertificate,
    /// An OAuth 2.0 access token (a JWT) from a trusted issuer.
    Jwt,
    /// An ANP DID-WBA signature by a key of the peer's `did:wba` DID document.
    DidWba,
}

/// What an NLIP message's authentication tokens say about its sender (ECMA-430 §6.2.2), for a
/// request whose transport presented no credential.
#[derive(Debug)]
pub enum InBand {
    /// No token this agent reads as a credential: the sender stays anonymous.
    None,
    /// A session token this agent handed out earlier.
    Session(Arc<Principal>),
    /// A credential, verified: the principal, and the session token to hand the peer.
    Credential {
        principal: Arc<Principal>,
        session: parley_auth::SessionToken,
    },
}

impl Principal {
    /// How agreements, usage and conversations record this principal: `peer:<id>`, or `None`
    /// for an anonymous one (recorded by its address).
    pub fn party(&self) -> Option<String> {
        self.id.as_ref().map(|id| format!("peer:{id}"))
    }

    /// Whether `action` is allowed, and if not the `forbidden` error saying what the peer may do
    /// instead.
    pub fn check(&self, action: Action<'_>) -> Result<(), ApiError> {
        if self.grants.allows(action) {
            return Ok(());
        }
        Err(ApiError::Forbidden(self.refusal(action)))
    }

    /// Why `action` is refused, and what the peer may do instead, from the peer's side.
    pub fn refusal(&self, action: Action<'_>) -> String {
        let refused = match action {
            Action::Negotiate => "you may not negotiate protocols with this agent".to_owned(),
            Action::Talk => "you may not talk to this agent's reasoner".to_owned(),
            Action::Capability(name) => format!("you may not use the capability `{name}`"),
            Action::Protocol { hash, .. } => format!(
                "you may not call protocol {hash}: it was not agreed by you and is not granted to you"
            ),
        };
        let mut text = format!("{refused}; {}", describe(&self.grants));
        if self.id.is_none() {
            text.push_str(
                " Present a credential for more: an API key or access token (Authorization: \
                 Bearer, or as the content of an `authentication` token submessage), or a client \
                 certificate.",
            );
        }
        text
    }
}

/// What `grants` allow, as a sentence addressed to the peer.
pub fn describe(grants: &Grants) -> String {
    let mut may = Vec::new();
    if grants.talk {
        may.push("talk in natural language (a text message)".to_owned());
    }
    if grants.negotiate {
        may.push("negotiate protocols (a control message of the meta-protocol)".to_owned());
    }
    match &grants.capabilities {
        Scope::Nothing => {}
        Scope::All => may.push("use every capability".to_owned()),
        Scope::Only(names) => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            may.push(format!("use the capabilities {}", names.join(", ")));
        }
    }
    match &grants.protocols {
        Scope::All => may.push("call every active protocol".to_owned()),
        _ if grants.negotiate => may.push("call the protocols you agreed".to_owned()),
        Scope::Only(_) => may.push("call the protocols granted to you".to_owned()),
        Scope::Nothing => {}
    }
    if may.is_empty() {
        "you may do nothing here.".to_owned()
    } else {
        format!("you may {}.", may.join("; "))
    }
}

/// A key as the store or the peers file knows it.
#[derive(Debug, Clone)]
pub struct KeyPeer {
    pub id: String,
    pub key: StoredKey,
    pub grants: Grants,
    pub revoked: bool,
}

/// Resolves credentials to principals; see the module docs.
pub struct Access {
    anonymous: Arc<Principal>,
    store: Arc<dyn Store>,
    /// The peers file's peers (empty without one).
    file: PeersFile,
    /// Trusted JWT issuers, when any are configured.
    issuers: Option<Issuers>,
    /// DID-WBA's verifier and DID documents, when `[access.did_wba]` is on.
    did_wba: Option<did_wba::DidWbaAccess>,
    /// Store keys by key id, and when they were looked up (`None`: no such key).
    keys: Mutex<HashMap<String, (Instant, Option<KeyPeer>)>>,
    /// (party, protocol hash) pairs known to be the party's own agreement.
    agreed: Mutex<std::collections::HashSet<(String, String)>>,
    ttl: Duration,
    /// Sessions of peers that authenticated inside a message.
    sessions: Sessions,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("anonymous", &self.anonymous.grants)
            .finish_non_exhaustive()
    }
}

impl Access {
    pub fn new(anonymous: Grants, store: Arc<dyn Store>) -> Access {
        Access {
            anonymous: Arc::new(Principal {
                id: None,
                scheme: Scheme::Anonymous,
                grants: anonymous,
            }),
            store,
            file: PeersFile::default(),
            issuers: None,
            did_wba: None,
            keys: Mutex::default(),
            agreed: Mutex::default(),
            ttl: KEY_TTL,
            sessions: Sessions::new(
                Duration::from_secs(DEFAULT_SESSION_TTL_S),
                DEFAULT_MAX_SESSIONS,
            ),
        }
    }

    /// Keeps in-message sessions for `ttl`, at most `max` at once.
    pub fn with_sessions(mut self, ttl: Duration, max: usize) -> Access {
        self.sessions = Sessions::new(ttl, max);
        self
    }

    /// The credentials a peer may present inside a message (the `authenticate` part of a
    /// request for authentication lists them).
    pub fn in_band_schemes(&self) -> Vec<&'static str> {
        let mut schemes = vec!["api-key"];
        if self.issuers.is_some() {
            schemes.push("oauth-access-token");
        }
        if self.takes_did_wba() {
            schemes.push("did-wba");
        }
        schemes
    }

    /// Knows the peers of a peers file too (looked up before the store).
    pub fn with_peers_file(mut self, file: PeersFile) -> Access {
        self.file = file;
        self
    }

    /// Takes bearer JWTs from these issuers too.
    pub fn with_issuers(mut self, issuers: Issuers) -> Access {
        self.issuers = (!issuers.is_empty()).then_some(issuers);
        self
    }

    /// Takes DID-WBA credentials too.
    pub fn with_did_wba(mut self, did_wba: did_wba::DidWbaAccess) -> Access {
        self.did_wba = Some(did_wba);
        self
    }

    /// The principal of a peer that presents no credential.
    pub fn anonymous(&self) -> Arc<Principal> {
        Arc::clone(&self.anonymous)
    }

    /// The principal a request's credentials name: its `Authorization` header's API key, else
    /// its verified client certificate, else anonymous. A credential that is presented and
    /// wrong is `unauthenticated`.
    pub async fn resolve(
        &self,
        authorization: Option<&HeaderValue>,
        identity: Option<&PeerIdentity>,
    ) -> Result<Arc<Principal>, ApiError> {
        if let Some(header) = authorization {
            return self.bearer(header).await.map(Arc::new);
        }
        if let Some(identity) = identity {
            return Ok(Arc::new(self.certificate(identity)));
        }
        Ok(self.anonymous())
    }

    async fn bearer(&self, header: &HeaderValue) -> Result<Principal, ApiError> {
        let unauthenticated = |why: &str| ApiError::Unauthenticated(why.to_owned());
        let text = header
            .to_str()
            .map_err(|_| unauthenticated("the Authorization header is not text"))?;
        match text.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                self.token(token).await
            }
            _ => Err(unauthenticated(
                "send an API key as Authorization: Bearer parley_…",
            )),
        }
    }

    /// A bearer token: an access token (JWT) when issuers are configured and it has a JWT's
    /// three parts, else an API key.
    async fn token(&self, token: &str) -> Result<Principal, ApiError> {
        let unauthenticated = |why: &str| ApiError::Unauthenticated(why.to_owned());
        if is_jwt(token)
            && let Some(issuers) = &self.issuers
        {
            return self
                .jwt(issuers, token)
                .await
                .map(|(principal, _)| principal);
        }
        let key = ApiKey::parse(token)
            .map_err(|_| unauthenticated("the bearer token is not an API key of this agent"))?;
        if let Some(peer) = self.file.by_key_id(key.key_id())
            && let Some(stored) = &peer.key
        {
            if !stored.matches(&key) {
                return Err(unauthenticated("unknown API key"));
            }
            return Ok(Principal {
                id: Some(peer.id.clone()),
                scheme: Scheme::ApiKey,
                grants: peer.grants.clone(),
            });
        }
        let Some(peer) = self.key_peer(key.key_id()).await? else {
            return Err(unauthenticated("unknown API key"));
        };
        if !peer.key.matches(&key) {
            return Err(unauthenticated("unknown API key"));
        }
        if peer.revoked {
            return Err(unauthenticated("this API key was revoked"));
        }
        Ok(Principal {
            id: Some(peer.id),
            scheme: Scheme::ApiKey,
            grants: peer.grants,
        })
    }

    /// What `message`'s `authentication` tokens say about its sender (ECMA-430 §6.2.2), for a
    /// request whose transport presented no credential. `own` is the subformat of this agent's
    /// own authentication tokens (`authentication_<agent id>`): such a token is a session this
    /// agent opened. Any other authentication token whose content reads as a credential of this
    /// agent (an API key, an access token when issuers are configured, a legacy DID-WBA
    /// credential when DID-WBA is on; `Bearer ` before a key or token is allowed) is verified, and a session is opened for it. A credential wins over a
    /// session token in the same message: it is how a peer answers a request for
    /// authentication. Tokens that read as neither are opaque to this agent (ECMA-430 lets
    /// clients carry their own) and leave the sender anonymous; a credential that reads as one
    /// and is wrong is `unauthenticated`, and an ended session is `authentication_required`.
    pub async fn in_band(
        &self,
        message: &parley_nlip::Message,
        own: &str,
    ) -> Result<InBand, ApiError> {
        let mut session = None;
        let mut credential = None;
        for token in message.tokens() {
            if token.token_kind() != Some(parley_nlip::TokenKind::Authentication) {
                continue;
            }
            let Some(text) = token.content.as_str() else {
                continue;
            };
            if token.subformat.eq_ignore_ascii_case(own) {
                session.get_or_insert(text);
            } else if credential.is_none() {
                credential = self.reads_as_credential(text);
            }
        }
        if let Some(text) = credential {
            return self.open_session(text).await;
        }
        let Some(text) = session else {
            return Ok(InBand::None);
        };
        let ended = || {
            ApiError::AuthenticationRequired(
                "your session with this agent has ended (it expired, or the agent restarted); \
                 present your credential again"
                    .to_owned(),
            )
        };
        let Some(found) = self.sessions.find(text) else {
            return Err(ended());
        };
        if let Some(key_id) = &found.key_id {
            let live = self.key_peer(key_id).await?;
            if live.is_none_or(|peer| peer.revoked) {
                self.sessions.end(text);
                return Err(ApiError::Unauthenticated(
                    "the API key this session was opened with was revoked".to_owned(),
                ));
            }
        }
        Ok(InBand::Session(found.principal))
    }

    /// The credential in an authentication token's `text`, when it reads as one of this
    /// agent's schemes.
    fn reads_as_credential<'a>(&self, text: &'a str) -> Option<&'a str> {
        let text = text.trim();
        if self.takes_did_wba() && did_wba::is_legacy(text) {
            return Some(text);
        }
        let token = match text.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => text,
        };
        let is_key = ApiKey::parse(token).is_ok();
        (is_key || (self.issuers.is_some() && is_jwt(token))).then_some(token)
    }

    /// Verifies an in-message credential and opens a session for the peer it names.
    async fn open_session(&self, token: &str) -> Result<InBand, ApiError> {
        let (principal, key_id, until) = if did_wba::is_legacy(token) {
            (self.did_wba_in_message(token).await?, None, None)
        } else if is_jwt(token)
            && let Some(issuers) = &self.issuers
        {
            let (principal, expires_at) = self.jwt(issuers, token).await?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let left = expires_at.saturating_sub(now);
            let until = Instant::now() + Duration::from_secs(left);
            (principal, None, Some(until))
        } else {
            let principal = self.token(token).await?;
            let from_store = ApiKey::parse(token)
                .ok()
                .filter(|key| self.file.by_key_id(key.key_id()).is_none())
                .map(|key| key.key_id().to_owned());
            (principal, from_store, None)
        };
        let principal = Arc::new(principal);
        let session = self.sessions.open(Arc::clone(&principal), key_id, until)?;
        Ok(InBand::Credential { principal, session })
    }

    /// A bearer JWT: verified against its issuer's keys; the peers-file entry naming its
    /// `"<issuer> <subject>"` decides its grants, else its scopes do (`parley:negotiate`, …).
    /// Also returns when the token expires (seconds since the Unix epoch).
    async fn jwt(&self, issuers: &Issuers, token: &str) -> Result<(Principal, u64), ApiError> {
        let verified = issuers
            .verify(token)
            .await
            .map_err(|e| ApiError::Unauthenticated(format!("the access token is refused: {e}")))?;
        let subject = format!("{} {}", verified.issuer, verified.subject);
        let principal = match self.file.by_subject(&subject) {
            Some(peer) => Principal {
                id: Some(peer.id.clone()),
                scheme: Scheme::Jwt,
                grants: peer.grants.clone(),
            },
            None => Principal {
                id: Some(verified.peer_id()),
                scheme: Scheme::Jwt,
                grants: verified.grants(),
            },
        };
        Ok((principal, verified.expires_at))
    }

    /// The peer of `key_id`, from memory when looked up less than the TTL ago.
    async fn key_peer(&self, key_id: &str) -> Result<Option<KeyPeer>, ApiError> {
        {
            let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, peer)) = keys.get(key_id)
                && at.elapsed() < self.ttl
            {
                return Ok(peer.clone());
            }
        }
        let found = self.store_key(key_id).await?;
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() >= MAX_CACHED_KEYS {
            keys.clear();
        }
        keys.insert(key_id.to_owned(), (Instant::now(), found.clone()));
        Ok(found)
    }

    /// The store's peer of `key_id`. A row whose digest or grants do not read (written by
    /// something other than `parley peers`) names no usable peer: logged, and refused.
    async fn store_key(&self, key_id: &str) -> Result<Option<KeyPeer>, ApiError> {
        let Some(record) = self.store.peer_by_key_id(key_id).await? else {
            return Ok(None);
        };
        let grants = match serde_json::from_value::<Grants>(record.grants) {
            Ok(grants) => grants,
            Err(e) => {
                tracing::warn!(peer = %record.id, error = %e, "a stored peer's grants do not read; its key is refused");
                return Ok(None);
            }
        };
        let Some(digest) = record.key_digest else {
            return Ok(None);
        };
        Ok(Some(KeyPeer {
            id: record.id,
            key: StoredKey {
                key_id: key_id.to_owned(),
                digest,
            },
            grants,
            revoked: record.revoked_at.is_some(),
        }))
    }

    fn certificate(&self, identity: &PeerIdentity) -> Principal {
        let entry = self.file.by_certificate(identity.name());
        self.declared_or_named(entry, identity.name(), Scheme::ClientCertificate)
    }

    /// The principal of a verified `name` (a certificate's, a DID): its peers-file `entry`'s
    /// id and grants, else a peer of that name with the anonymous grants.
    fn declared_or_named(
        &self,
        entry: Option<&peers_file::FilePeer>,
        name: &str,
        scheme: Scheme,
    ) -> Principal {
        match entry {
            Some(peer) => Principal {
                id: Some(peer.id.clone()),
                scheme,
                grants: peer.grants.clone(),
            },
            None => Principal {
                id: Some(name.to_owned()),
                scheme,
                grants: self.anonymous.grants.clone(),
            },
        }
    }

    /// Whether `caller` may call protocol `hash`: granted, or its own agreement (one it
    /// negotiated as the same principal, or anonymously from the same address). The store is
    /// asked only when the grants do not decide, and an agreement found is remembered.
    pub async fn may_call_protocol(&self, caller: &Caller, hash: &str) -> Result<(), ApiError> {
        let grants = &caller.principal.grants;
        if grants.allows(Action::Protocol { hash, own: false }) {
            return Ok(());
        }
        let refused = || {
            Err(ApiError::Forbidden(
                caller
                    .principal
                    .refusal(Action::Protocol { hash, own: false }),
            ))
        };
        // An anonymous peer that may not negotiate owns nothing: refused without a lookup.
        if caller.principal.id.is_none() && !grants.negotiate {
            return refused();
        }
        let party = caller.party();
        let key = (party, hash.to_owned());
        if self
            .agreed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
        {
            return Ok(());
        }
        let agreements = self.store.agreements_for_protocol(hash).await?;
        let own = agreements
            .iter()
            .filter(|a| a.role == Role::Provider)
            .any(|a| caller.is(&a.peer));
        if !own {
            return refused();
        }
        let mut agreed = self.agreed.lock().unwrap_or_else(|e| e.into_inner());
        if agreed.len() >= MAX_CACHED_AGREEMENTS {
            agreed.clear();
        }
        agreed.insert(key);
        Ok(())
    }
}

/// Whether `token` has a JWT's form: three dot-separated parts, and not an API key.
fn is_jwt(token: &str) -> bool {
    !token.starts_with("parley_") && token.matches('.').count() == 2
}

tokio::task_local! {
    /// The caller whose request is being handled (see [`scoped`]).
    static CALLER: Caller;
}

/// Runs `work` as `caller`'s: capability calls made inside it, however indirectly, are
/// checked against its grants.
pub async fn scoped<F: Future>(caller: Caller, work: F) -> F::Output {
    CALLER.scope(caller, work).await
}

/// The scheme a presented `Authorization` header names, as the audit log records a failed
/// one: `bearer`, `did-wba` (a `DIDWba` header), `other` for any other scheme, `certificate` when there is no header (a
/// client certificate was what failed).
pub fn scheme_of(authorization: Option<&HeaderValue>) -> &'static str {
    match authorization.and_then(|h| h.to_str().ok()) {
        Some(h) if h.len() >= 7 && h[..7].eq_ignore_ascii_case("bearer ") => "bearer",
        Some(h) if did_wba::is_legacy(h) => did_wba::SCHEME,
        Some(_) => "other",
        None => "certificate",
    }
}

/// The caller of the request being handled, when there is one.
pub fn current() -> Option<Caller> {
    CALLER.try_with(Clone::clone).ok()
}

/// Checks every capability call against the current caller's grants (installed in
/// `Capabilities` at start).
#[derive(Debug, Default)]
pub struct CallerGuard;

impl parley_capabilities::CallGuard for CallerGuard {
    fn check(&self, capability: &str) -> Result<(), CapabilityError> {
        let refusal = CALLER
            .try_with(|caller| {
                let action = Action::Capability(capability);
                (!caller.principal.grants.allows(action)).then(|| caller.principal.refusal(action))
            })
            .ok()
            .flatten();
        match refusal {
            None => Ok(()),
            Some(message) => Err(CapabilityError::Forbidden {
                capability: capability.to_owned(),
                message,
            }),
        }
    }
}

/// Whether the current caller (if any) may have `capabilities` called on its behalf; the first
/// one it may not use, and the refusal, otherwise.
pub fn current_may_use<'a>(
    capabilities: impl IntoIterator<Item = &'a String>,
) -> Result<(), String> {
    let Some(caller) = current() else {
        return Ok(());
    };
    for name in capabilities {
        let action = Action::Capability(name);
        if !caller.principal.grants.allows(action) {
            return Err(caller.principal.refusal(action));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn access(dir: &std::path::Path) -> Access {
        let url = format!("sqlite://{}?mode=rwc", dir.join("a.db").display());
        let store = parley_store::connect(&url, Default::default())
            .await
            .expect("store");
        Access::new(Grants::talk_only(), store)
    }

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).expect("a header value")
    }

    #[tokio::test]
    async fn credentials_resolve_to_their_peer_and_wrong_ones_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let access = access(dir.path()).await;
        let anonymous = access.resolve(None, None).await.expect("anonymous");
        assert!(
            Arc::ptr_eq(&anonymous, &access.anonymous()),
            "shared, no allocation"
        );

        let key = ApiKey::generate().expect("a key");
        let stored = key.stored();
        access
            .store
            .add_peer(parley_store::NewPeer {
                id: "shop".into(),
                key_id: Some(stored.key_id.clone()),
                key_digest: Some(stored.digest.clone()),
                grants: serde_json::json!({"negotiate": true}),
            })
            .await
            .expect("a peer");
        let bearer = header(&format!("Bearer {}", key.reveal()));
        let shop = access.resolve(Some(&bearer), None).await.expect("the key");
        assert_eq!(shop.id.as_deref(), Some("shop"));
        assert_eq!(shop.scheme, Scheme::ApiKey);
        assert!(shop.grants.negotiate && !shop.grants.talk);

        let other = ApiKey::generate().expect("a key");
        let forged = format!("Bearer parley_{}_{}", stored.key_id, {
            let text = other.reveal();
            text.rsplit('_').next().expect("a secret").to_owned()
        });
        for wrong in ["Basic eDp5", "Bearer nope", forged.as_str()] {
            let refused = access.resolve(Some(&header(wrong)), None).await;
            assert!(
                matches!(refused, Err(ApiError::Unauthenticated(_))),
                "{wrong}: {refused:?}"
            );
        }

        access.store.revoke_peer("shop").await.expect("revoked");
        tokio::time::sleep(KEY_TTL).await;
        let revoked = access.resolve(Some(&bearer), None).await;
        assert!(matches!(revoked, Err(ApiError::Unauthenticated(m)) if m.contains("revoked")));

        let named = PeerIdentity::client_certificate("agent-b".into());
        let b = access.resolve(None, Some(&named)).await.expect("a name");
        assert_eq!(
            (b.id.as_deref(), b.scheme, &b.grants),
            (
                Some("agent-b"),
                Scheme::ClientCertificate,
                &Grants::talk_only()
            )
        );
    }

    #[test]
    fn a_refusal_says_what_the_peer_may_do_instead() {
        let anonymous = Principal {
            id: None,
            scheme: Scheme::Anonymous,
            grants: Grants::talk_only(),
        };
        let text = anonymous.refusal(Action::Negotiate);
        assert!(text.starts_with("you may not negotiate"), "{text}");
        assert!(text.contains("you may talk in natural language"), "{text}");
        assert!(text.contains("API key"), "{text}");
        let peer = Principal {
            id: Some("shop".into()),
            scheme: Scheme::ApiKey,
            grants: Grants {
                negotiate: true,
                capabilities: Scope::of(["a", "b"]),
                ..Grants::default()
            },
        };
        let text = peer.refusal(Action::Capability("c"));
        assert!(text.contains("use the capabilities a, b"), "{text}");
        assert!(text.contains("call the protocols you agreed"), "{text}");
        assert!(!text.contains("API key"), "{text}");
        assert_eq!(
            describe(&Grants::default()),
            "you may do nothing here.".to_owned()
        );
    }
}
