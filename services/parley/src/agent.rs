//! The agent: what Parley does with one decoded NLIP message, whatever transport brought
//! it. Transports decode, call [`Agent::handle`], and encode; nothing here knows HTTP.
//!
//! Conversations: a message that carries Parley's own conversation token
//! (`conversation_<agent id>`) continues that conversation; one that carries only the
//! peer's conversation token is mapped to a conversation derived from that token and the
//! peer (its principal, or its address), so clients that keep their own conversation ids get persistence too; a
//! message with no conversation token is a stateless exchange and touches no database — which
//! keeps one-shot traffic as fast as the transport allows.
//!
//! A conversation belongs to the peer that created it: an authenticated principal (`peer:<id>`,
//! wherever it connects from), or for an anonymous peer its address
//! ([`PeerAddress`](crate::peer::PeerAddress)). Another peer presenting its token gets
//! `unknown_conversation`, and the same peer token from another peer names another
//! conversation.
//!
//! Access: every message is checked for what its route does (see `crate::access`), before its
//! conversation is looked up: a meta-protocol message needs `negotiate`, an application message
//! a protocol the caller agreed or was granted, a tool call its capability, natural language
//! `talk`. A refusal is `forbidden` (403); to an anonymous peer it is a control message asking
//! for authentication (`authentication_required`, 401), which the peer answers by sending the
//! message again with its credential in an `authentication` token submessage (ECMA-430 §6.2.2,
//! see [`Access::in_band`]). The reply to a message that authenticated so carries a session
//! token of this agent's own (`authentication_<agent id>`) for the peer's later messages. The
//! whole answer runs as the caller's ([`access::scoped`]), so the capability calls it causes are
//! checked too.
//!
//! Authentication tokens are credentials: the conversation log keeps them as `<redacted>`.

use std::sync::Arc;

use axum::http::StatusCode;
use parley_anp::ProtocolHash;
use parley_capabilities::Capabilities;
use parley_nlip::{Format, Message, Submessage, TokenKind, finish_reply};
use parley_reasoner::{DialogueTurn, NlRequest, Reasoner};
use parley_store::{Direction, ModelUsageOwner, NewConversation, Store, StoreError, Upload};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::access::{self, Access, Action};
use crate::error::ApiError;
use crate::negotiation::fix_report::FixReport;
use crate::negotiation::nlip;
use crate::negotiation::provider::Provider;
use crate::peer::{Caller, PeerAddress};
use crate::router::{self, Route, ToolCall};
use crate::throttle::{Kind, Throttles};

mod replies;

use replies::{answer_reply, tool_reply};
pub use replies::{bare_error, upload_reply};

/// Everything the agent needs, shared by all transports.
#[derive(Debug)]
pub struct Agent {
    store: Arc<dyn Store>,
    reasoner: Arc<dyn Reasoner>,
    capabilities: Arc<Capabilities>,
    /// The meta-protocol provider and the handlers it serves.
    provider: Arc<Provider>,
    /// Identity appended to tokens this agent creates.
    agent_id: String,
    /// Base URL of the upload listener, as announced to peers (§6.4).
    upload_base: String,
    /// How many earlier messages of a conversation the reasoner sees.
    history_messages: u32,
    /// Most bytes the stored uploads may take together.
    upload_quota: u64,
    /// The throttles, shared with the transports.
    throttles: Arc<Throttles>,
}

/// Who the agent is to its peers, and how much of a conversation its reasoner sees.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Identity appended to tokens this agent creates (`conversation_<agent id>`).
    pub agent_id: String,
    /// Base URL of the upload listener, as announced to peers (§6.4).
    pub upload_base: String,
    /// How many earlier messages of a conversation the reasoner sees.
    pub history_messages: u32,
    /// Most bytes the stored uploads may take together (`limits.max_upload_storage_bytes`).
    pub upload_quota: u64,
    /// How often one address or peer may negotiate and have the reasoner answer (and, at the
    /// transports, send messages and upload).
    pub throttles: Arc<Throttles>,
}

/// The backends an agent runs on, by name: for logs and `GET /health`.
#[derive(Debug, Clone, Copy)]
pub struct Backends {
    pub store: &'static str,
    pub reasoner: &'static str,
    /// How many capabilities the operator declared.
    pub capabilities: usize,
}

/// A reply and the HTTP status that goes with it (transports without status ignore it), and
/// for a refusal that says "not now", when to retry (HTTP's `Retry-After`; the message's error
/// JSON carries it as `retry_after_ms` for every transport).
#[derive(Debug)]
pub struct Reply {
    pub message: Message,
    pub status: StatusCode,
    pub retry_after: Option<std::time::Duration>,
}

impl Agent {
    pub fn new(
        store: Arc<dyn Store>,
        reasoner: Arc<dyn Reasoner>,
        capabilities: Arc<Capabilities>,
        provider: Arc<Provider>,
        settings: AgentSettings,
    ) -> Agent {
        Agent {
            store,
            reasoner,
            capabilities,
            provider,
            agent_id: settings.agent_id,
            upload_base: settings.upload_base,
            history_messages: settings.history_messages,
            upload_quota: settings.upload_quota,
            throttles: settings.throttles,
        }
    }

    /// The throttles this agent checks, which the transports share.
    pub fn throttles(&self) -> &Arc<Throttles> {
        &self.throttles
    }

    /// The meta-protocol provider: negotiation, and application messages served without NLIP.
    pub fn provider(&self) -> &Arc<Provider> {
        &self.provider
    }

    /// Who the agent's peers are and what they may do.
    pub fn access(&self) -> &Arc<Access> {
        self.provider.access()
    }

    /// The audit log: what the agent decides on a peer's behalf is recorded there.
    pub fn audit(&self) -> &crate::audit::Audit {
        self.provider.audit()
    }

    /// The capabilities this agent offers (their MCP servers are stopped at shutdown).
    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.capabilities
    }

    pub fn backends(&self) -> Backends {
        Backends {
            store: self.store.backend_name(),
            reasoner: self.reasoner.backend(),
            capabilities: self.capabilities.len(),
        }
    }

    /// Starts the sweep that deletes conversations idle for longer than `idle` (none when it is
    /// zero), every `period`; see [`crate::expiry`].
    pub fn spawn_conversation_expiry(
        &self,
        idle: std::time::Duration,
        period: std::time::Duration,
    ) -> Option<tokio::task::JoinHandle<()>> {
        crate::expiry::spawn_sweep(self.store.clone(), idle, period)
    }

    /// Whether the database takes writes now (see `Store::check_writable`).
    pub async fn store_writable(&self) -> Result<(), StoreError> {
        self.store.check_writable().await
    }

    /// Stores an out-of-band upload (§6.4) if it fits in the upload quota; the answer names it
    /// by its URI.
    pub async fn put_upload(
        &self,
        bytes: &[u8],
        content_type: &str,
        filename: Option<&str>,
    ) -> Result<Message, ApiError> {
        let stored = self.store.uploads_size().await?;
        if stored.saturating_add(bytes.len() as u64) > self.upload_quota {
            return Err(ApiError::UploadQuota {
                limit: self.upload_quota,
            });
        }
        let meta = self.store.put_upload(bytes, content_type, filename).await?;
        let uri = format!("{}/uploads/{}", self.upload_base, meta.id);
        Ok(upload_reply(&uri, &meta))
    }

    /// An upload by its id.
    pub async fn upload(&self, id: &str) -> Result<Option<Upload>, ApiError> {
        match self.store.get_upload(id).await {
            Ok(upload) => Ok(upload),
            // An id that is not a SHA-256 names no upload either.
            Err(StoreError::Invalid(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The subformat of the conversation tokens this agent mints.
    pub fn conversation_subformat(&self) -> String {
        format!("conversation_{}", self.agent_id)
    }

    /// The subformat of the session tokens this agent hands peers that authenticated inside a
    /// message.
    pub fn authentication_subformat(&self) -> String {
        format!("authentication_{}", self.agent_id)
    }

    /// Whether `token` is a token this agent minted (`conversation_<agent id>` or
    /// `authentication_<agent id>`, any case); compared in place, as it runs for every token of
    /// every message.
    fn is_own_token(&self, token: &Submessage) -> bool {
        let s = token.subformat.as_bytes();
        [b"conversation_".as_slice(), b"authentication_".as_slice()]
            .iter()
            .any(|prefix| {
                s.len() == prefix.len() + self.agent_id.len()
                    && s[..prefix.len()].eq_ignore_ascii_case(prefix)
                    && s[prefix.len()..].eq_ignore_ascii_case(self.agent_id.as_bytes())
            })
    }

    /// Answers one message from `caller`: §6.1 (always a reply), §6.2 (tokens echoed), §6.3
    /// (control in, control out). Errors become NLIP error messages with their status. A
    /// meta-protocol or natural-language message over its throttle (`throttle::Kind::of_route`)
    /// is refused first, before any database or model is touched; then the caller's grants
    /// decide.
    pub async fn handle(&self, request: &Message, caller: &Caller) -> Reply {
        let in_band = if caller.principal.id.is_none() {
            self.access()
                .in_band(request, &self.authentication_subformat())
                .await
        } else {
            Ok(access::InBand::None)
        };
        let (caller, session) = match in_band {
            Ok(access::InBand::None) => (caller.clone(), None),
            Ok(access::InBand::Session(principal)) => (Caller::new(caller.addr, principal), None),
            Ok(access::InBand::Credential { principal, session }) => {
                (Caller::new(caller.addr, principal), Some(session))
            }
            Err(e) => {
                if let ApiError::Unauthenticated(reason) = &e {
                    let actor = crate::audit::Actor::at(caller.addr);
                    let audit = self.audit();
                    audit
                        .authentication_failed(&actor, "nlip-token", reason)
                        .await;
                }
                return self.error_reply(request, None, e);
            }
        };
        let mut reply = access::scoped(caller.clone(), self.handle_as(request, &caller)).await;
        if let Some(session) = session {
            reply.message.submessages.push(Submessage::new(
                Format::Token,
                self.authentication_subformat(),
                session.reveal(),
            ));
        }
        reply
    }

    async fn handle_as(&self, request: &Message, caller: &Caller) -> Reply {
        let route = router::route(request);
        if let Some(kind) = Kind::of_route(&route)
            && let Err(refused) = self.throttles.check(
                kind,
                PeerAddress::of(caller.addr),
                caller.principal.id.as_deref(),
            )
        {
            return self.error_reply(request, None, refused.into());
        }
        // The transport counted the message against its address; its peer is known only now.
        if let Some(id) = caller.principal.id.as_deref()
            && let Err(refused) = self.throttles.check_peer(Kind::Messages, id)
        {
            return self.error_reply(request, None, refused.into());
        }
        if let Err(e) = self.permit(&route, caller).await {
            let e = match e {
                ApiError::Forbidden(reason) => {
                    let (action, subject) = audited(&route);
                    let actor = crate::audit::Actor::of(caller);
                    self.audit()
                        .refused(&actor, action, &subject, &reason)
                        .await;
                    asked_of(caller, ApiError::Forbidden(reason))
                }
                e => e,
            };
            return self.error_reply(request, None, e);
        }
        let is_meta = matches!(route, Route::Meta(_));
        let conversation = match self.conversation_for(request, caller, is_meta).await {
            Ok(c) => c,
            Err(e) => return self.error_reply(request, None, e),
        };
        if let Some(id) = &conversation {
            tracing::Span::current().record("conversation", id.as_str());
            if let Err(e) = self.log(id, Direction::Inbound, request).await {
                return self.error_reply(request, None, e);
            }
        }
        let ok = |message| (message, StatusCode::OK);
        let result = match (route, &conversation) {
            (Route::Meta(values), Some(cid)) => {
                Box::pin(self.meta(request, cid, &caller.party(), values)).await
            }
            // A meta-protocol message always has a conversation (one is minted for it).
            (Route::Meta(_) | Route::Control, _) => self.control(request, caller).await.map(ok),
            (Route::Application(application), _) => {
                self.application(application, caller).await.map(ok)
            }
            (Route::Fix(report), _) => Box::pin(self.fix(report, caller)).await.map(ok),
            (Route::ToolCall(call), _) => self.tool_call(request, call).await.map(ok),
            (Route::NaturalLanguage, _) => self
                .natural_language(request, conversation.as_deref())
                .await
                .map(ok),
        };
        let reply = match result {
            Ok((message, status)) => {
                let message = self.finish(request, conversation.as_deref(), message);
                Reply {
                    message,
                    status,
                    retry_after: None,
                }
            }
            Err(e) => self.error_reply(request, conversation.as_deref(), asked_of(caller, e)),
        };
        if let Some(id) = &conversation
            && let Err(e) = self.log(id, Direction::Outbound, &reply.message).await
        {
            return self.error_reply(request, None, e);
        }
        reply
    }

    /// Whether `caller` may take `route`: negotiate for the meta-protocol, the protocol for an
    /// application message, the capability for a tool call, talk for natural language. NLIP's
    /// own control exchange and malformed messages (answered with their own error) pass.
    async fn permit(&self, route: &Route<'_>, caller: &Caller) -> Result<(), ApiError> {
        match route {
            Route::Meta(_) => caller.check(Action::Negotiate),
            Route::Control => Ok(()),
            Route::Application(Ok((hash, _))) => {
                self.access()
                    .may_call_protocol(caller, &hash.to_string())
                    .await
            }
            // A fix report may rebuild the handler: the caller negotiates, and only about a
            // protocol it may call.
            Route::Fix(Ok(report)) => {
                caller.check(Action::Negotiate)?;
                self.access()
                    .may_call_protocol(caller, &report.hash.to_string())
                    .await
            }
            Route::ToolCall(Ok(call)) => caller.check(Action::Capability(call.name)),
            Route::NaturalLanguage => caller.check(Action::Talk),
            Route::Application(Err(_)) | Route::ToolCall(Err(_)) | Route::Fix(Err(_)) => Ok(()),
        }
    }

    /// Renders an error as the reply to `request` (tokens echoed, control preserved).
    pub fn error_reply(
        &self,
        request: &Message,
        conversation: Option<&str>,
        error: ApiError,
    ) -> Reply {
        let mut message = error.to_info().to_message(request.reply_language());
        if let ApiError::AuthenticationRequired(_) = &error {
            message = self.authentication_request(message);
        }
        Reply {
            message: self.finish(request, conversation, message),
            status: error.status(),
            retry_after: error.retry_after(),
        }
    }

    /// `error` as a request for authentication: a control message whose `authenticate` part
    /// says how to answer (the token subformat to carry the credential in, the schemes read).
    fn authentication_request(&self, error: Message) -> Message {
        let how = json!({
            "token_subformat": "authentication",
            "schemes": self.access().in_band_schemes(),
            "http_header": "Authorization: Bearer",
        });
        let mut message = error.into_control();
        message.submessages.push(
            Submessage::new(Format::Structured, "json", parley_nlip::Content::Json(how))
                .with_label("authenticate"),
        );
        message
    }

    fn finish(&self, request: &Message, conversation: Option<&str>, reply: Message) -> Message {
        let mut reply = finish_reply(request, reply, |t| self.is_own_token(t));
        if let Some(id) = conversation {
            reply.submessages.push(Submessage::new(
                Format::Token,
                self.conversation_subformat(),
                id,
            ));
        }
        reply
    }

    async fn log(&self, id: &str, direction: Direction, m: &Message) -> Result<(), ApiError> {
        self.store
            .append_message(id, direction, &parley_nlip::to_json_value(&m.redacted()))
            .await?;
        Ok(())
    }

    /// Starts a conversation of this agent's own with `caller`: the state of a negotiation whose
    /// framing has no conversations of its own (one per seed-002 connection) lives there.
    pub async fn open_conversation(&self, caller: &Caller) -> Result<String, ApiError> {
        let id = uuid::Uuid::new_v4().to_string();
        self.store
            .create_conversation(NewConversation {
                id: id.clone(),
                peer: Some(caller.party()),
                state: json!({}),
            })
            .await?;
        Ok(id)
    }

    /// Finds or creates the conversation the request belongs to (see the module docs).
    async fn conversation_for(
        &self,
        request: &Message,
        caller: &Caller,
        mint: bool,
    ) -> Result<Option<String>, ApiError> {
        let mut foreign = None;
        for token in request.tokens() {
            if token.token_kind() != Some(TokenKind::Conversation) {
                continue;
            }
            if self.is_own_token(token) {
                let id = token.content.as_str().unwrap_or_default().to_owned();
                return match self.store.get_conversation(&id).await? {
                    Some(c) if belongs_to(&c, caller) => Ok(Some(id)),
                    Some(_) => {
                        let peer = caller.party();
                        tracing::debug!(%peer, conversation = id, "a conversation token presented by another peer");
                        Err(ApiError::UnknownConversation(id))
                    }
                    None => Err(ApiError::UnknownConversation(id)),
                };
            }
            foreign.get_or_insert(token);
        }
        let Some(token) = foreign else {
            if !mint {
                return Ok(None);
            }
            // Negotiation needs state: start a conversation of our own.
            return self.open_conversation(caller).await.map(Some);
        };
        // The peer's token is opaque; hash it (with its subformat and the caller's identity, see
        // `Caller::party`) into a stable id: the same token from another peer is another
        // conversation.
        let address = caller.party();
        let mut h = Sha256::new();
        h.update(token.subformat.to_ascii_lowercase().as_bytes());
        h.update([0]);
        h.update(token.content.to_json().to_string().as_bytes());
        h.update([0]);
        h.update(address.as_bytes());
        let id = format!("peer-{}", &hex::encode(h.finalize())[..32]);
        if self.store.get_conversation(&id).await?.is_some() {
            return Ok(Some(id));
        }
        let new = NewConversation {
            id: id.clone(),
            peer: Some(address),
            state: json!({}),
        };
        match self.store.create_conversation(new).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(Some(id)),
            Err(e) => Err(e.into()),
        }
    }

    /// Meta-protocol traffic: handled by the provider; a peer's rule break is answered as an
    /// NLIP error that still carries the meta-protocol answer (`rejected`).
    async fn meta(
        &self,
        request: &Message,
        cid: &str,
        peer: &str,
        values: Vec<serde_json::Value>,
    ) -> Result<(Message, StatusCode), ApiError> {
        let turn = self.provider.handle_meta(cid, peer, values).await?;
        Ok(nlip::meta_reply(turn, request))
    }

    /// Control messages (§6.3): the out-of-band upload request (§6.4), or a description of
    /// this end-point and its parameters.
    async fn control(&self, request: &Message, caller: &Caller) -> Result<Message, ApiError> {
        let language = request.reply_language().to_owned();
        let asks_upload = all_text(request).any(|t| t.to_ascii_lowercase().contains("upload"));
        if asks_upload {
            let uri = format!("{}/upload", self.upload_base);
            return Ok(Message::text(
                language,
                format!("POST large content to {uri}; the reply names the stored upload, which later messages may refer to by its URI."),
            )
            .with_submessage(Submessage::new(Format::Structured, "uri", uri).with_label("upload")));
        }
        let info = json!({
            "agent": self.agent_id,
            "name": self.capabilities.agent().name,
            "capabilities": self.capabilities.names().into_iter()
                .filter(|name| caller.principal.grants.allows(Action::Capability(name)))
                .collect::<Vec<_>>(),
            "access": access::describe(&caller.principal.grants),
            "reasoner": self.reasoner.backend(),
            "upload": format!("{}/upload", self.upload_base),
        });
        Ok(Message::text(language, self.capabilities.summary())
            .with_submessage(Submessage::new(Format::Structured, "json", info).with_label("agent")))
    }

    /// An application message: its payload answered by the active handler of its protocol.
    async fn application(
        &self,
        application: Result<(ProtocolHash, &serde_json::Value), ApiError>,
        caller: &Caller,
    ) -> Result<Message, ApiError> {
        let (hash, payload) = application?;
        let output = Box::pin(self.provider.application(
            &hash,
            payload,
            &caller.party(),
            tokio::runtime::Handle::current(),
        ))
        .await?;
        Ok(Message::json(output))
    }

    /// A run-time `fixErrorNegotiation`: the provider checks the reported answer again and fixes
    /// its handler or says why not, in a control message.
    async fn fix(
        &self,
        report: Result<FixReport, ApiError>,
        caller: &Caller,
    ) -> Result<Message, ApiError> {
        let report = report?;
        let answer = self.provider.fix_reported(&report, &caller.party()).await?;
        Ok(answer.to_message(&report.hash))
    }

    /// A tool call: capability `call.name` invoked with its arguments, as a handler's
    /// `host.call` and the reasoners invoke it. The reply is a short text naming the capability,
    /// then its result as a `structured`/`json` submessage labelled with the capability's name
    /// (the shape of a natural-language answer's results); a failure is an NLIP error with the
    /// capability's code (`unknown_capability`, `invalid_arguments`, `not_found`, `timeout`,
    /// `capability_unavailable`, `tool_error`, ...).
    async fn tool_call(
        &self,
        request: &Message,
        call: Result<ToolCall<'_>, ApiError>,
    ) -> Result<Message, ApiError> {
        let call = call?;
        let result = self.capabilities.invoke(call.name, call.arguments).await;
        tool_reply(request.reply_language(), call.name, result)
    }

    /// Natural language: answered by the reasoner, with the conversation's earlier turns.
    async fn natural_language(
        &self,
        request: &Message,
        conversation: Option<&str>,
    ) -> Result<Message, ApiError> {
        let language = request.reply_language().to_owned();
        let attachments = self.resolve_uploads(request).await?;
        let Some(text) = all_text(request).next().map(str::to_owned) else {
            return Ok(Message::text(
                language,
                "This agent answers natural-language text messages. Send a text part (format text) describing what you need.",
            ));
        };
        let mut text = text;
        for a in &attachments {
            text.push_str(&format!("\n[attached upload {a}]"));
        }
        let history = match conversation {
            Some(id) => self.history(id).await?,
            None => Vec::new(),
        };
        let backend = self.reasoner.backend();
        let meter = parley_reasoner::UsageMeter::new();
        let answer = parley_reasoner::metered(&self.reasoner, &meter)
            .answer(NlRequest {
                text,
                language: language.clone(),
                history,
            })
            .await;
        let owner = conversation.map(|id| ModelUsageOwner::Conversation(id.to_owned()));
        crate::model_usage::settle(self.store.as_ref(), owner, &meter).await;
        let answer = answer.map_err(|e| {
            tracing::warn!(
                backend,
                code = e.code(),
                error = %crate::error::chain(&e),
                "the reasoner could not answer"
            );
            ApiError::Reasoner {
                code: e.code().to_owned(),
                message: e.to_string(),
            }
        })?;
        crate::metrics::reasoner_call(backend, "answer");
        answer_reply(language, answer)
    }

    /// Earlier text turns of the conversation, oldest first.
    async fn history(&self, id: &str) -> Result<Vec<DialogueTurn>, ApiError> {
        let Some(conv) = self.store.get_conversation(id).await? else {
            return Ok(Vec::new());
        };
        let n = i64::from(self.history_messages);
        // The inbound message being answered is already logged; leave it out.
        let upto = conv.message_count - 1;
        let after = (upto - n).max(0);
        let logged = self
            .store
            .list_messages(id, after, u32::try_from(upto - after).unwrap_or(0))
            .await?;
        Ok(logged
            .iter()
            .filter_map(|m| {
                let msg = parley_nlip::from_json_value(&m.message).ok()?;
                let text = msg.text_content()?.to_owned();
                Some(match m.direction {
                    Direction::Inbound => DialogueTurn::peer(text),
                    Direction::Outbound => DialogueTurn::agent(text),
                })
            })
            .collect())
    }

    /// Checks every reference to one of our uploads; returns descriptions of those found.
    async fn resolve_uploads(&self, request: &Message) -> Result<Vec<String>, ApiError> {
        let mut found = Vec::new();
        for sub in request.payload_submessages() {
            if sub.format != Format::Structured || !sub.subformat.eq_ignore_ascii_case("uri") {
                continue;
            }
            let Some(id) = sub
                .content
                .as_str()
                .and_then(|u| u.strip_prefix(self.upload_base.as_str()))
                .and_then(|u| u.strip_prefix("/uploads/"))
            else {
                continue;
            };
            match self.store.upload_meta(id).await {
                Ok(Some(meta)) => found.push(format!(
                    "{} ({} bytes, {}{})",
                    meta.id,
                    meta.size,
                    meta.content_type,
                    meta.filename.map(|f| format!(", {f}")).unwrap_or_default()
                )),
                // An id that is not a SHA-256 names no upload either.
                Ok(None) | Err(StoreError::Invalid(_)) => {
                    return Err(ApiError::UnknownUpload(id.to_owned()));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(found)
    }
}

/// Whether `conversation` belongs to `caller`: it was created by the same principal (or, for
/// an anonymous caller, from the same address). A conversation recorded without a peer is
/// bound to no one.
fn belongs_to(conversation: &parley_store::Conversation, caller: &Caller) -> bool {
    conversation
        .peer
        .as_deref()
        .is_none_or(|owner| caller.is(owner))
}

/// How the audit log names what a refused message asked for: its action and subject.
/// `error` as `caller` is told it: a refusal by the grants (of the route, or of a capability
/// called on the way, by a tool call or the reasoner) asks an anonymous peer to authenticate,
/// since credentials could change the answer; anything else, and any refusal of a named peer,
/// stays as it is.
fn asked_of(caller: &Caller, error: ApiError) -> ApiError {
    if caller.principal.id.is_some() {
        return error;
    }
    match error {
        ApiError::Forbidden(reason) => ApiError::AuthenticationRequired(reason),
        ApiError::Capability { code, message } if code == "forbidden" => {
            ApiError::AuthenticationRequired(message)
        }
        e => e,
    }
}

fn audited(route: &Route<'_>) -> (&'static str, String) {
    match route {
        Route::Meta(_) => ("negotiate", "meta-protocol".to_owned()),
        Route::Application(Ok((hash, _))) => ("protocol.call", hash.to_string()),
        Route::Fix(Ok(report)) => ("handler.fix", report.hash.to_string()),
        Route::ToolCall(Ok(call)) => ("capability.call", call.name.to_owned()),
        Route::NaturalLanguage => ("talk", "reasoner".to_owned()),
        Route::Control
        | Route::Application(Err(_))
        | Route::ToolCall(Err(_))
        | Route::Fix(Err(_)) => ("message", "-".to_owned()),
    }
}

/// Text of the first submessage and of every text submessage, in order.
fn all_text(m: &Message) -> impl Iterator<Item = &str> {
    let first = (m.format == Format::Text)
        .then(|| m.content.as_str())
        .flatten();
    first.into_iter().chain(
        m.payload_submessages()
            .filter(|s| s.format == Format::Text)
            .filter_map(|s| s.content.as_str()),
    )
}
