//! The provider's side: answers meta-protocol messages with the [`ProviderSession`] state
//! machine, evaluates proposals with the protocol reasoner, generates and verifies handlers
//! in the sandbox, and serves application messages through active handlers.

use std::collections::HashSet;
use std::sync::Arc;

use parley_anp::{
    FixVerdict, MetaMessage, NegotiationError, ProtocolDoc, ProtocolHash, ProviderSession,
    SessionConfig, Step, Verdict, VerificationReport, messages::NlMessageType,
    verify::compiled_differs,
};
use parley_capabilities::Capabilities;
use parley_nlip::Message;
use parley_reasoner::{DeclaredCapability, GeneratedHandler, ProtocolReasoner, Reasoner};
use parley_sandbox::{Dialect, Sandbox};
use parley_store::{
    Direction, NegotiationOutcome, NegotiationStatus, NewAgreement, NewHandler, NewNegotiation,
    Role, Store, StoreError,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::runner::{ActiveProtocol, LoadError, ProtocolCache, SandboxRunner, publish_serving};
use crate::error::ApiError;
use crate::host::CapabilityBridge;
use crate::metrics;

/// Which protocol reasoner evaluates proposals and writes handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolBackend {
    /// `builtin` with the built-in reasoner; `hybrid` when a model is configured.
    #[default]
    Auto,
    /// Deterministic field mapping only; never calls a model.
    Builtin,
    /// Built-in first, the model only when the built-in backend cannot decide.
    Hybrid,
    /// The model for every decision (needs the openai reasoner settings).
    Openai,
}

/// Settings of the provider's negotiation.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NegotiationLimits {
    /// Which protocol reasoner to use.
    pub backend: ProtocolBackend,
    /// Proposals per negotiation (both sides counted) before it ends as rejected.
    pub max_rounds: u32,
    /// How often a handler that fails verification is regenerated before giving up.
    pub fix_attempts: u32,
    /// Serve a handler's compiled form (the built-in reasoner's mapping, run without a
    /// JavaScript engine) once it answered every test case as the JavaScript did. Off: the
    /// JavaScript always serves.
    pub compiled_handlers: bool,
}

impl Default for NegotiationLimits {
    fn default() -> Self {
        NegotiationLimits {
            backend: ProtocolBackend::Auto,
            max_rounds: 10,
            fix_attempts: 2,
            compiled_handlers: true,
        }
    }
}

/// The result of building a handler for an agreed protocol.
#[derive(Debug)]
enum Built {
    /// Generated and verified.
    Verified,
    /// Generation or verification failed on our side.
    Failed(String),
    /// The handler's answers follow the protocol's schema but differ from the peer's test
    /// expectations even after fixing: the expectation itself may be wrong, so the peer is
    /// asked through `fixErrorNegotiation`.
    PeerExpectation(String),
}

impl Built {
    fn into_result(self) -> Result<(), String> {
        match self {
            Built::Verified => Ok(()),
            Built::Failed(why) | Built::PeerExpectation(why) => Err(why),
        }
    }
}

/// What the provider keeps in the conversation's state between messages.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    negotiation_id: Uuid,
    session: ProviderSession,
    /// The candidate handler built for the agreed protocol, once there is one.
    handler_id: Option<Uuid>,
    handler: Option<GeneratedHandler>,
}

/// The provider role.
#[derive(Debug)]
pub struct Provider {
    pub store: Arc<dyn Store>,
    pub capabilities: Arc<Capabilities>,
    pub specs: Vec<DeclaredCapability>,
    pub reasoner: Arc<dyn ProtocolReasoner>,
    pub nl: Arc<dyn Reasoner>,
    pub sandbox: Arc<Sandbox>,
    pub runner: SandboxRunner,
    pub cache: ProtocolCache,
    pub limits: NegotiationLimits,
    /// Per-peer call counts, written to the store in batches (see [`UsageCounts`]).
    pub usage: Arc<UsageCounts>,
}

/// How often the last flush at shutdown is retried while the database cannot take it.
const FLUSH_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Protocol usage counted in memory and flushed to the store once a second (and at
/// shutdown): the 0-RTT path must not pay a database write per message.
#[derive(Debug, Default)]
pub struct UsageCounts {
    pending: std::sync::Mutex<std::collections::HashMap<(String, ProtocolHash), (u64, u64)>>,
}

impl UsageCounts {
    fn count(&self, peer: &str, hash: &ProtocolHash, ok: bool) {
        let mut pending = self.pending.lock().expect("usage lock is never poisoned");
        let entry = pending.entry((peer.to_owned(), *hash)).or_default();
        if ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// Writes what has been counted since the last flush. When the database fails in a way that
    /// may pass (unreachable, busy, locked), what is not written yet is kept for the next flush;
    /// counts the database refuses are dropped with a warning. Returns how many (peer, protocol)
    /// counts are kept.
    pub async fn flush(&self, store: &Arc<dyn Store>) -> usize {
        let batch =
            std::mem::take(&mut *self.pending.lock().expect("usage lock is never poisoned"));
        let mut batch = batch.into_iter();
        while let Some(((peer, hash), (ok, errors))) = batch.next() {
            match store
                .record_usage(&peer, &hash.to_string(), ok, errors)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "could not record protocol usage; kept for the next flush");
                    let unwritten = std::iter::once(((peer, hash), (ok, errors))).chain(batch);
                    let mut pending = self.pending.lock().expect("usage lock is never poisoned");
                    for (key, (ok, errors)) in unwritten {
                        let entry = pending.entry(key).or_default();
                        entry.0 = entry.0.saturating_add(ok);
                        entry.1 = entry.1.saturating_add(errors);
                    }
                    return pending.len();
                }
                Err(e) => {
                    tracing::warn!(error = %e, %peer, protocol = %hash, "protocol usage refused by the store; dropped");
                }
            }
        }
        0
    }

    /// The last flush, at shutdown: retried every [`FLUSH_RETRY`] while the database fails in
    /// a way that may pass, for at most `within`. Counts still unwritten then are lost, with a
    /// warning.
    pub async fn flush_within(&self, store: &Arc<dyn Store>, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let unwritten = self.flush(store).await;
            let now = tokio::time::Instant::now();
            if unwritten == 0 {
                return;
            }
            if now >= deadline {
                tracing::warn!(
                    unwritten,
                    "protocol usage counts could not be written before shutdown; lost"
                );
                return;
            }
            tokio::time::sleep(FLUSH_RETRY.min(deadline - now)).await;
        }
    }

    /// Flushes every `period` until the returned task is aborted.
    pub fn spawn_flusher(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        period: std::time::Duration,
    ) -> tokio::task::JoinHandle<()> {
        let counts = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                counts.flush(&store).await;
            }
        })
    }
}

/// The conversation state's key for hello messages not in a transcript yet (see
/// `Turn::untranscribed`).
const HELLO_TRANSCRIPT: &str = "hello_transcript";

/// Per-message working state of [`Provider::handle_meta`].
struct Turn {
    outbox: Vec<MetaMessage>,
    summary: Vec<String>,
    mapping: Option<parley_reasoner::Mapping>,
    /// A rule break by the peer: answered as an NLIP error.
    violation: Option<NegotiationError>,
    /// What the peer's hello announced; `None` when it sent none (then the seed's full set
    /// is assumed).
    peer_capabilities: Option<Vec<String>>,
    /// Answers to hellos, sent ahead of the rest of the outbox.
    hello_replies: Vec<MetaMessage>,
    /// Hello messages both ways that no negotiation's transcript holds yet: a hello comes before
    /// any negotiation exists, so its exchange waits in the conversation's state
    /// (`hello_transcript`) and opens the transcript of the next negotiation started there.
    untranscribed: Vec<(Direction, Value)>,
}

impl Turn {
    fn peer_supports(&self, capability: &str) -> bool {
        self.peer_capabilities
            .as_ref()
            .is_none_or(|caps| caps.iter().any(|c| c == capability))
    }
}

impl Provider {
    pub fn new(
        store: Arc<dyn Store>,
        capabilities: Arc<Capabilities>,
        reasoner: Arc<dyn ProtocolReasoner>,
        nl: Arc<dyn Reasoner>,
        sandbox: Arc<Sandbox>,
        limits: NegotiationLimits,
    ) -> Self {
        Provider {
            specs: DeclaredCapability::all(&capabilities),
            runner: SandboxRunner::new(sandbox.clone(), capabilities.clone()),
            store,
            capabilities,
            reasoner,
            nl,
            sandbox,
            cache: ProtocolCache::default(),
            limits,
            usage: Arc::default(),
        }
    }

    /// Answers the meta-protocol messages of one control message in conversation `cid`.
    pub async fn handle_meta(
        &self,
        cid: &str,
        peer: &str,
        values: Vec<Value>,
    ) -> Result<(Message, Option<ApiError>), ApiError> {
        let conversation = self
            .store
            .get_conversation(cid)
            .await?
            .ok_or_else(|| ApiError::UnknownConversation(cid.to_owned()))?;
        let mut state = conversation.state.clone();
        let mut stored: Option<Stored> = state
            .get("negotiation")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let mut hello_seen = false;
        let mut turn = Turn {
            peer_capabilities: state
                .get("peer_capabilities")
                .and_then(|v| serde_json::from_value(v.clone()).ok()),
            outbox: Vec::new(),
            summary: Vec::new(),
            mapping: None,
            violation: None,
            hello_replies: Vec::new(),
            untranscribed: state
                .get(HELLO_TRANSCRIPT)
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
        };
        for value in values {
            metrics::negotiation_messages("inbound", 1);
            let parsed = MetaMessage::from_value(value.clone());
            match parsed {
                Ok(MetaMessage::SourceHello(hello)) => {
                    // Only what both sides support is used: remember what the peer announced.
                    state["peer_capabilities"] =
                        json!(hello.meta_protocol.supported_capabilities.clone());
                    hello_seen = true;
                    let offered = hello.meta_protocol.offered_hashes();
                    let mut known = HashSet::new();
                    for h in offered {
                        if self.store.active_handler(&h.to_string()).await?.is_some() {
                            known.insert(h);
                        }
                    }
                    let answer = hello.meta_protocol.answer(|h| known.contains(h));
                    turn.summary.push(match &known.iter().next() {
                        Some(h) => format!(
                            "Protocol {h} is known here: send application messages directly."
                        ),
                        None => "Hello. No offered protocol is known here; propose one.".to_owned(),
                    });
                    // The transcript opens with the last hello before the negotiation.
                    turn.untranscribed.clear();
                    turn.untranscribed.push((Direction::Inbound, value));
                    turn.untranscribed
                        .push((Direction::Outbound, answer.to_value()));
                    turn.hello_replies.push(answer);
                    continue;
                }
                Ok(MetaMessage::DestinationHello(_)) => {
                    turn.untranscribed.push((Direction::Inbound, value));
                    continue;
                }
                _ => {}
            }
            let fresh = match &stored {
                Some(st) => st.session.is_closed() && parsed.is_ok(),
                None => true,
            };
            if fresh {
                let negotiation = self
                    .store
                    .start_negotiation(NewNegotiation {
                        conversation_id: cid.to_owned(),
                        role: Role::Provider,
                        peer: peer.to_owned(),
                    })
                    .await?;
                stored = Some(Stored {
                    negotiation_id: negotiation.id,
                    session: ProviderSession::new(SessionConfig {
                        max_rounds: self.limits.max_rounds,
                    }),
                    handler_id: None,
                    handler: None,
                });
            }
            let st = stored.as_mut().expect("a session exists from here on");
            self.transcribe(st.negotiation_id, turn.untranscribed.drain(..))
                .await?;
            self.store
                .append_transcript(st.negotiation_id, Direction::Inbound, &value)
                .await?;
            let step = st.session.receive_value(value);
            self.drive(st, step, &mut turn, peer).await?;
        }
        // A hello after this turn's first negotiation message belongs to that negotiation; one
        // after a negotiation ended waits for the next.
        if let Some(st) = stored.as_ref().filter(|st| !st.session.is_closed()) {
            self.transcribe(st.negotiation_id, turn.untranscribed.drain(..))
                .await?;
        }
        if turn.untranscribed.is_empty() {
            if let Some(state) = state.as_object_mut() {
                state.remove(HELLO_TRANSCRIPT);
            }
        } else {
            state[HELLO_TRANSCRIPT] = json!(turn.untranscribed);
        }
        if stored.is_none() && hello_seen {
            self.store
                .update_conversation_state(cid, conversation.version, &state)
                .await?;
        }
        metrics::negotiation_messages("outbound", turn.hello_replies.len() + turn.outbox.len());
        if let Some(st) = &stored {
            // Collected first: a borrowing iterator held across the awaits would make the
            // future `!Send`.
            let sent: Vec<_> = turn
                .outbox
                .iter()
                .map(|m| (Direction::Outbound, m.to_value()))
                .collect();
            self.transcribe(st.negotiation_id, sent).await?;
            state["negotiation"] = serde_json::to_value(st).expect("session state serializes");
            match self
                .store
                .update_conversation_state(cid, conversation.version, &state)
                .await
            {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => {
                    return Err(ApiError::Conflict(format!(
                        "another message of conversation {cid} moved its negotiation on first"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let summary = if turn.summary.is_empty() {
            "Meta-protocol message processed.".to_owned()
        } else {
            turn.summary.join(" ")
        };
        turn.hello_replies.append(&mut turn.outbox);
        let reply = super::wrap(summary, &turn.hello_replies);
        let violation = turn.violation.map(|e| ApiError::Negotiation {
            code: e.code().to_owned(),
            message: e.to_string(),
        });
        Ok((reply, violation))
    }

    /// Appends `entries` to negotiation `id`'s transcript, in order.
    async fn transcribe(
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

    /// Runs session steps until the session waits for the peer or ends.
    async fn drive(
        &self,
        st: &mut Stored,
        mut step: Step,
        turn: &mut Turn,
        peer: &str,
    ) -> Result<(), ApiError> {
        loop {
            step = match step {
                Step::Send(m) => {
                    turn.outbox.push(m);
                    return Ok(());
                }
                Step::Wait | Step::TestCasesRejected { .. } => {
                    return Ok(());
                }
                Step::FixDeclined { reason } => {
                    if st.handler_id.is_some() {
                        return Ok(());
                    }
                    // The peer keeps expectations our verified answers do not meet: no
                    // handler can be activated for this protocol.
                    turn.summary
                        .push(format!("The peer keeps its test expectations: {reason}"));
                    st.session
                        .code_generated(Err(format!("test expectations not met: {reason}")))
                }
                Step::Evaluate { text, hash } => {
                    let verdict = self.evaluate(&text, turn).await?;
                    turn.summary.push(match &verdict {
                        Verdict::Accept => format!("Protocol {hash} accepted."),
                        Verdict::Counter { .. } => format!("Protocol {hash} cannot be served as written; counter-proposal attached."),
                        Verdict::Reject { reason } => format!("Protocol {hash} rejected: {reason}"),
                    });
                    st.session.evaluated(&hash, verdict)
                }
                Step::Accepted { text, send, .. } => {
                    turn.outbox.extend(send);
                    self.store.put_protocol(&text).await?;
                    let built = self
                        .build_handler(&text, turn.mapping.take(), None, st)
                        .await?;
                    match built {
                        Built::Verified => {
                            turn.summary.push(
                                "Handler generated and verified against the test cases.".to_owned(),
                            );
                            st.session.code_generated(Ok(()))
                        }
                        Built::Failed(why) => {
                            turn.summary
                                .push(format!("Handler generation failed: {why}"));
                            st.session.code_generated(Err(why))
                        }
                        Built::PeerExpectation(why)
                            if !turn.peer_supports(
                                parley_anp::messages::capability::FIX_ERROR_NEGOTIATION,
                            ) =>
                        {
                            turn.summary
                                .push(format!("Handler verification failed: {why}"));
                            st.session.code_generated(Err(why))
                        }
                        Built::PeerExpectation(why) => {
                            turn.summary.push("The handler's answers follow the protocol but not the test expectations; please check them.".to_owned());
                            st.session.report_error(why)
                        }
                    }
                }
                Step::Ready { hash, send } => {
                    turn.outbox.extend(send);
                    self.activate(st, &hash, peer).await?;
                    turn.summary.push(format!(
                        "Protocol {hash} is active: send application messages with a `protocol` token."
                    ));
                    return Ok(());
                }
                Step::Rejected { reason, send } => {
                    turn.outbox.extend(send);
                    self.close(st, &reason).await?;
                    turn.summary.push(format!("Negotiation ended: {reason}"));
                    if is_violation(&reason) {
                        turn.violation = Some(reason);
                    }
                    return Ok(());
                }
                Step::EvaluateTestCases { test_cases } => {
                    let verdict = self.evaluate_test_cases(st, &test_cases).await?;
                    st.session.test_cases_evaluated(verdict)
                }
                Step::TestCasesAgreed { send, .. } => {
                    turn.outbox.extend(send);
                    turn.summary
                        .push("Test cases agreed; the handler passes them.".to_owned());
                    return Ok(());
                }
                Step::FixError { description } => {
                    let verdict = match self.rebuild(st, &description).await? {
                        Built::Verified => FixVerdict::Fix,
                        Built::Failed(why) | Built::PeerExpectation(why) => {
                            FixVerdict::Decline { reason: why }
                        }
                    };
                    st.session.fix_evaluated(verdict)
                }
                Step::Regenerate { description, send } => {
                    turn.outbox.extend(send);
                    // The fix was already built and verified when the report was evaluated.
                    let result = if st.handler_id.is_some() {
                        Ok(())
                    } else {
                        self.rebuild(st, &description).await?.into_result()
                    };
                    turn.summary
                        .push("Handler regenerated from the error report.".to_owned());
                    st.session.code_generated(result)
                }
                Step::Converse(nl) => {
                    if nl.message_type == NlMessageType::Request {
                        let answer = self
                            .nl
                            .answer(parley_reasoner::NlRequest {
                                text: nl.message.clone(),
                                language: parley_nlip::DEFAULT_LANGUAGE.into(),
                                history: Vec::new(),
                            })
                            .await
                            .map_err(|e| ApiError::Reasoner {
                                code: e.code().to_owned(),
                                message: e.to_string(),
                            })?;
                        metrics::reasoner_call(self.nl.backend(), "answer");
                        turn.outbox.push(MetaMessage::natural_language(
                            NlMessageType::Response,
                            nl.message_id.clone(),
                            answer.text,
                        ));
                    }
                    return Ok(());
                }
            };
        }
    }

    /// The reasoner's verdict on a proposal; a backend failure is an error for the caller,
    /// never an empty or default verdict.
    async fn evaluate(&self, text: &str, turn: &mut Turn) -> Result<Verdict, ApiError> {
        let doc = match ProtocolDoc::parse(text) {
            Ok(doc) => doc,
            Err(e) => {
                return Ok(Verdict::Reject {
                    reason: format!("the protocol document is not usable: {e}"),
                });
            }
        };
        metrics::reasoner_call(self.reasoner.backend(), "evaluate");
        let evaluation = self
            .reasoner
            .evaluate(&doc, &self.specs)
            .await
            .map_err(reasoner_error)?;
        let verdict = evaluation.verdict();
        if let parley_reasoner::Evaluation::Accept { mapping } = evaluation {
            turn.mapping = Some(mapping);
        }
        Ok(verdict)
    }

    /// Generates a handler for `text`, verifies it in the sandbox against the protocol's
    /// test cases (plus `extra` agreed ones), and regenerates it from the failure a bounded
    /// number of times. `Ok(Err(why))` is a verification or generation failure to report
    /// to the peer; `Err` is a failure of our own infrastructure.
    async fn build_handler(
        &self,
        text: &str,
        mapping: Option<parley_reasoner::Mapping>,
        previous: Option<(GeneratedHandler, String)>,
        st: &mut Stored,
    ) -> Result<Built, ApiError> {
        let doc = match ProtocolDoc::parse(text) {
            Ok(doc) => doc,
            Err(e) => {
                return Ok(Built::Failed(format!(
                    "the agreed text is not a protocol document: {e}"
                )));
            }
        };
        if doc.test_cases().is_empty() {
            return Ok(Built::Failed(
                "the protocol has no test cases; Parley only activates verified handlers".into(),
            ));
        }
        let mut generated = match previous {
            None => {
                metrics::reasoner_call(self.reasoner.backend(), "generate");
                match self
                    .reasoner
                    .generate_handler(&doc, &self.specs, mapping.as_ref())
                    .await
                {
                    Ok(g) => g,
                    Err(e) if e.is_backend_failure() => return Err(reasoner_error(e)),
                    Err(e) => return Ok(Built::Failed(e.to_string())),
                }
            }
            Some((previous, failure)) => {
                metrics::reasoner_call(self.reasoner.backend(), "fix");
                match self
                    .reasoner
                    .fix_handler(&doc, &self.specs, &previous, &failure)
                    .await
                {
                    Ok(g) => g,
                    Err(e) if e.is_backend_failure() => return Err(reasoner_error(e)),
                    Err(e) => return Ok(Built::Failed(e.to_string())),
                }
            }
        };
        let hash = doc.hash().to_string();
        let mut attempt = 0;
        loop {
            let candidate = self
                .store
                .insert_handler_candidate(NewHandler {
                    protocol_hash: hash.clone(),
                    source: generated.source.clone(),
                    backend: self.reasoner.backend().to_owned(),
                    capabilities: generated.grants.clone(),
                })
                .await?;
            let report = match self
                .runner
                .verify(
                    &doc,
                    doc.test_cases(),
                    Dialect::JavaScript,
                    &generated.source,
                    &generated.grants,
                )
                .await
            {
                Ok(report) => report,
                Err(e) => {
                    let failure = format!("the handler does not load: {}: {e}", e.code());
                    self.store
                        .record_handler_verification(
                            candidate.id,
                            false,
                            &json!({"error": failure}),
                        )
                        .await?;
                    return Ok(Built::Failed(failure));
                }
            };
            let report_json = serde_json::to_value(&report).unwrap_or(Value::Null);
            self.store
                .record_handler_verification(candidate.id, report.passed(), &report_json)
                .await?;
            if report.passed() {
                generated.compiled = self
                    .check_compiled(&doc, &generated, &report, candidate.id)
                    .await?;
                st.handler_id = Some(candidate.id);
                st.handler = Some(generated);
                return Ok(Built::Verified);
            }
            let failure = report.failure_description();
            // Schema-valid answers that differ only from the expectations point at the
            // expectations, once our own fixes are exhausted.
            let expectation_only = report.failed().all(|c| {
                c.response.is_some()
                    && !c
                        .failures
                        .iter()
                        .any(|f| f.starts_with("response schema violation"))
            });
            let give_up = |failure: String| {
                if expectation_only {
                    Built::PeerExpectation(failure)
                } else {
                    Built::Failed(failure)
                }
            };
            attempt += 1;
            if attempt > self.limits.fix_attempts {
                return Ok(give_up(failure));
            }
            metrics::reasoner_call(self.reasoner.backend(), "fix");
            generated = match self
                .reasoner
                .fix_handler(&doc, &self.specs, &generated, &failure)
                .await
            {
                Ok(g) => g,
                Err(e) if e.is_backend_failure() => return Err(reasoner_error(e)),
                // The backend has nothing better: the failure stands.
                Err(_) => return Ok(give_up(failure)),
            };
        }
    }

    /// Checks a verified handler's compiled form, when it has one: the same test cases run
    /// through it in the sandbox's mapping runtime, and it must answer every one exactly as the
    /// JavaScript did (`reference`). Then it is attached to the candidate and returned, to serve
    /// in place of the JavaScript; otherwise the JavaScript serves alone, and a warning says why.
    async fn check_compiled(
        &self,
        doc: &ProtocolDoc,
        generated: &GeneratedHandler,
        reference: &VerificationReport,
        candidate: Uuid,
    ) -> Result<Option<Value>, ApiError> {
        let Some(compiled) = generated
            .compiled
            .as_ref()
            .filter(|_| self.limits.compiled_handlers)
        else {
            return Ok(None);
        };
        let difference = match self
            .runner
            .verify(
                doc,
                doc.test_cases(),
                Dialect::Mapping,
                &compiled.to_string(),
                &generated.grants,
            )
            .await
        {
            Ok(report) => compiled_differs(reference, &report),
            Err(e) => Some(format!("it does not load: {}: {e}", e.code())),
        };
        if let Some(difference) = difference {
            tracing::warn!(
                %difference,
                "provider: the handler's compiled form does not answer as its JavaScript does; \
                 the JavaScript serves"
            );
            return Ok(None);
        }
        self.store.attach_compiled(candidate, compiled).await?;
        Ok(Some(compiled.clone()))
    }

    /// Regenerates the handler of the agreed protocol from a failure description.
    async fn rebuild(&self, st: &mut Stored, failure: &str) -> Result<Built, ApiError> {
        let Some((_, text)) = st.session.agreed().map(|(h, t)| (h, t.to_owned())) else {
            return Ok(Built::Failed("no protocol is agreed".into()));
        };
        let previous = st.handler.clone().map(|h| (h, failure.to_owned()));
        self.build_handler(&text, None, previous, st).await
    }

    /// Runs proposed test cases against the current handler.
    async fn evaluate_test_cases(&self, st: &mut Stored, text: &str) -> Result<Verdict, ApiError> {
        let cases = match parley_anp::parse_test_cases(text) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => {
                return Ok(Verdict::Reject {
                    reason: "no test cases".into(),
                });
            }
            Err(e) => {
                return Ok(Verdict::Reject {
                    reason: e.to_string(),
                });
            }
        };
        let (Some((_, agreed)), Some(handler)) = (st.session.agreed(), st.handler.clone()) else {
            return Ok(Verdict::Reject {
                reason: "no handler to test yet".into(),
            });
        };
        let doc = match ProtocolDoc::parse(agreed) {
            Ok(d) => d,
            Err(e) => {
                return Ok(Verdict::Reject {
                    reason: e.to_string(),
                });
            }
        };
        let report = match self
            .runner
            .verify(
                &doc,
                &cases,
                Dialect::JavaScript,
                &handler.source,
                &handler.grants,
            )
            .await
        {
            Ok(report) => report,
            Err(e) => {
                return Ok(Verdict::Reject {
                    reason: e.to_string(),
                });
            }
        };
        if report.passed() {
            Ok(Verdict::Accept)
        } else {
            Ok(Verdict::Reject {
                reason: report.failure_description(),
            })
        }
    }

    /// Both sides generated code: activate the handler, record the agreement, serve it.
    async fn activate(
        &self,
        st: &mut Stored,
        hash: &ProtocolHash,
        peer: &str,
    ) -> Result<(), ApiError> {
        let (Some(id), Some(generated)) = (st.handler_id, st.handler.clone()) else {
            return Err(ApiError::internal(anyhow::anyhow!(
                "ready without a verified handler"
            )));
        };
        self.store.activate_handler(id).await?;
        self.store
            .record_agreement(NewAgreement {
                peer: peer.to_owned(),
                peer_url: None,
                protocol_hash: hash.to_string(),
                role: Role::Provider,
            })
            .await?;
        self.finish(
            st,
            NegotiationStatus::Accepted,
            Some(hash.to_string()),
            None,
        )
        .await?;
        let text = st
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
            ActiveProtocol {
                doc: Arc::new(doc),
                handler,
                grants: generated.grants.iter().cloned().collect(),
            },
        );
        metrics::negotiation_outcome("accepted");
        Ok(())
    }

    async fn close(&self, st: &mut Stored, reason: &NegotiationError) -> Result<(), ApiError> {
        let status = match reason {
            NegotiationError::Timeout { .. } => NegotiationStatus::Timeout,
            NegotiationError::CodeGeneration { .. } => NegotiationStatus::Failed,
            _ => NegotiationStatus::Rejected,
        };
        metrics::negotiation_outcome(status.as_str());
        self.finish(st, status, None, Some(reason.code().to_owned()))
            .await
    }

    async fn finish(
        &self,
        st: &Stored,
        status: NegotiationStatus,
        protocol_hash: Option<String>,
        reason: Option<String>,
    ) -> Result<(), ApiError> {
        let outcome = NegotiationOutcome {
            status,
            protocol_hash,
            rounds: i64::from(st.session.rounds()),
            reason,
        };
        match self
            .store
            .finish_negotiation(st.negotiation_id, outcome)
            .await
        {
            // A negotiation already finished (a rule break after agreement) stays as recorded.
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Serves one application message through the active handler of `hash`: no reasoner,
    /// no negotiation, just schema checks and the sandboxed handler.
    pub async fn application(
        &self,
        hash: &ProtocolHash,
        request: &Value,
        peer: &str,
        runtime: tokio::runtime::Handle,
    ) -> Result<Value, ApiError> {
        let (active, hit) = match self
            .cache
            .get(
                hash,
                &self.store,
                &self.sandbox,
                self.limits.compiled_handlers,
            )
            .await
        {
            Ok(found) => found,
            Err(LoadError::Unknown) => {
                metrics::protocol_cache("miss");
                return Err(ApiError::UnknownProtocol(hash.to_string()));
            }
            Err(e) => return Err(ApiError::internal(e)),
        };
        metrics::protocol_cache(if hit { "hit" } else { "miss" });
        if let Err(v) = active.doc.validate_request(request) {
            metrics::handler_call("invalid_request");
            return Err(ApiError::InvalidProtocolMessage(v.to_string()));
        }
        let host = CapabilityBridge::new(self.capabilities.clone(), runtime);
        let result = self
            .sandbox
            .call(&active.handler, request, &active.grants, host)
            .await;
        self.usage.count(peer, hash, result.is_ok());
        let output = match result {
            Ok(out) => out.output,
            Err(e) => {
                metrics::handler_call(e.code());
                return Err(ApiError::Handler {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                });
            }
        };
        if let Err(v) = active.doc.validate_response(&output) {
            metrics::handler_call("invalid_response");
            return Err(ApiError::Handler {
                code: "invalid_response".into(),
                message: v.to_string(),
            });
        }
        metrics::handler_call("ok");
        Ok(output)
    }
}

/// Rule breaks by the peer are answered as NLIP errors; other endings are normal replies.
fn is_violation(e: &NegotiationError) -> bool {
    matches!(
        e,
        NegotiationError::Sequence { .. }
            | NegotiationError::RoundLimit { .. }
            | NegotiationError::UnevaluatedAcceptance { .. }
            | NegotiationError::InvalidMessage { .. }
            | NegotiationError::OutOfTurn { .. }
            | NegotiationError::SessionClosed
    )
}

/// Failures of the model itself (unreachable, or an unusable answer) go to the caller as
/// errors; they are never turned into a proposal or a failed code generation for the peer.
fn reasoner_error(e: parley_reasoner::ProtocolReasonerError) -> ApiError {
    ApiError::Reasoner {
        code: e.code().to_owned(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::Connection as _;

    use super::*;

    /// A verified candidate of `generated` for protocol `hash`.
    async fn verified_candidate(
        store: &Arc<dyn Store>,
        hash: &ProtocolHash,
        generated: &GeneratedHandler,
    ) -> Uuid {
        let candidate = store
            .insert_handler_candidate(NewHandler {
                protocol_hash: hash.to_string(),
                source: generated.source.clone(),
                backend: "builtin".into(),
                capabilities: generated.grants.clone(),
            })
            .await
            .expect("candidate");
        store
            .record_handler_verification(candidate.id, true, &json!({"passed": true}))
            .await
            .expect("verified");
        candidate.id
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compiled_form_is_attached_only_when_it_answers_as_the_javascript() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let text = std::fs::read_to_string(root.join("examples/protocols/product-info.md"))
            .expect("the example protocol");
        let doc = ProtocolDoc::parse(text.clone()).expect("a protocol document");
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("p.db").display());
        let store = parley_store::connect(&url, Default::default())
            .await
            .expect("store");
        store.put_protocol(&text).await.expect("protocol");
        let capabilities =
            crate::startup::load_capabilities(Some(&root.join("examples/capabilities.toml")))
                .expect("capabilities");
        let sandbox =
            Arc::new(Sandbox::new(parley_sandbox::SandboxConfig::default()).expect("a sandbox"));
        let provider = |compiled_handlers| {
            Provider::new(
                store.clone(),
                capabilities.clone(),
                Arc::new(parley_reasoner::BuiltinProtocolReasoner),
                Arc::new(parley_reasoner::BuiltinReasoner::new(capabilities.clone())),
                sandbox.clone(),
                NegotiationLimits {
                    compiled_handlers,
                    ..NegotiationLimits::default()
                },
            )
        };
        let generated = parley_reasoner::BuiltinProtocolReasoner
            .generate_sync(&doc, &DeclaredCapability::all(&capabilities), None)
            .expect("the built-in handler");
        let mapping = generated.compiled.clone().expect("a compiled form");
        let on = provider(true);
        let reference = on
            .runner
            .verify(
                &doc,
                doc.test_cases(),
                Dialect::JavaScript,
                &generated.source,
                &generated.grants,
            )
            .await
            .expect("the JavaScript publishes");
        // Verification leaves nothing published behind.
        assert_eq!(on.runner.verifying(), 0);
        assert!(
            reference.passed() && reference.cases.len() >= 2,
            "{reference:?}"
        );
        let compiled_of = |id| {
            let store = store.clone();
            async move {
                store
                    .get_handler(id)
                    .await
                    .expect("get")
                    .expect("stored")
                    .compiled
            }
        };

        // The mapping the JavaScript was generated from answers as it does: attached.
        let id = verified_candidate(&store, &doc.hash(), &generated).await;
        let attached = on
            .check_compiled(&doc, &generated, &reference, id)
            .await
            .expect("checked");
        assert_eq!(attached.as_ref(), Some(&mapping));
        assert_eq!(compiled_of(id).await.as_ref(), Some(&mapping));

        // A mapping that answers differently (another success code), or is no mapping at all,
        // is not: the JavaScript serves.
        let mut other_code = mapping.clone();
        other_code["codes"]["ok"] = json!(201);
        let mut not_a_mapping = mapping.clone();
        not_a_mapping["capability"] = json!(5);
        for compiled in [other_code, not_a_mapping] {
            let tampered = GeneratedHandler {
                compiled: Some(compiled),
                ..generated.clone()
            };
            let id = verified_candidate(&store, &doc.hash(), &tampered).await;
            let attached = on
                .check_compiled(&doc, &tampered, &reference, id)
                .await
                .expect("checked");
            assert_eq!(attached, None);
            assert_eq!(compiled_of(id).await, None);
        }

        // An operator who turned compiled forms off gets the JavaScript, whatever the mapping.
        let off = provider(false);
        let id = verified_candidate(&store, &doc.hash(), &generated).await;
        assert_eq!(
            off.check_compiled(&doc, &generated, &reference, id)
                .await
                .expect("checked"),
            None
        );
        assert_eq!(compiled_of(id).await, None);

        // Serving from the store: the compiled form when the active handler has one (unless
        // turned off); a stored form that does not publish falls back to the JavaScript.
        let request = json!({
            "messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"
        });
        let hash = doc.hash();
        let serve = |compiled_handlers| {
            let provider = provider(compiled_handlers);
            let request = request.clone();
            async move {
                let (active, _) = provider
                    .cache
                    .get(&hash, &provider.store, &provider.sandbox, compiled_handlers)
                    .await
                    .expect("the active protocol loads");
                let answer = provider
                    .application(&hash, &request, "peer", tokio::runtime::Handle::current())
                    .await
                    .expect("an answer");
                (active.handler.dialect(), answer)
            }
        };
        let attached = verified_candidate(&store, &hash, &generated).await;
        store
            .attach_compiled(attached, &mapping)
            .await
            .expect("attach");
        store.activate_handler(attached).await.expect("activate");
        let (dialect, compiled_answer) = serve(true).await;
        assert_eq!(dialect, Dialect::Mapping);
        assert_eq!(compiled_answer["status"]["code"], 200, "{compiled_answer}");
        let (dialect, javascript_answer) = serve(false).await;
        assert_eq!(dialect, Dialect::JavaScript);
        assert_eq!(javascript_answer, compiled_answer);

        let broken = verified_candidate(&store, &hash, &generated).await;
        store
            .attach_compiled(broken, &json!({ "capability": 5 }))
            .await
            .expect("the store takes any object");
        store.activate_handler(broken).await.expect("activate");
        let (dialect, fallback_answer) = serve(true).await;
        assert_eq!(dialect, Dialect::JavaScript);
        assert_eq!(fallback_answer, compiled_answer);
    }

    fn pending(usage: &UsageCounts, peer: &str, hash: &ProtocolHash) -> Option<(u64, u64)> {
        let pending = usage.pending.lock().expect("usage lock");
        pending.get(&(peer.to_owned(), *hash)).copied()
    }

    /// Peer `peer-a`'s counts of `hash` in the store, once nothing of them is pending.
    async fn written(
        store: &Arc<dyn Store>,
        usage: &UsageCounts,
        hash: &ProtocolHash,
    ) -> (i64, i64) {
        assert_eq!(pending(usage, "peer-a", hash), None);
        let row = store
            .usage("peer-a", &hash.to_string())
            .await
            .expect("usage")
            .expect("a usage row");
        (row.ok_count, row.error_count)
    }

    /// A SQLite store in `dir` that waits 100 ms for a lock, the hash of a protocol stored in
    /// it, and a second connection holding its write lock (see [`unlock`]).
    async fn locked_usage_store(
        dir: &tempfile::TempDir,
    ) -> (Arc<dyn Store>, ProtocolHash, sqlx::SqliteConnection) {
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("usage.db").display()
        );
        let options = parley_store::StoreOptions {
            busy_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        let store = parley_store::connect(&url, options).await.expect("store");
        let text = "# A protocol\n";
        store.put_protocol(text).await.expect("protocol");
        let mut holder = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("second connection");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .expect("lock");
        (store, ProtocolHash::of(text), holder)
    }

    /// Releases the write lock [`locked_usage_store`]'s connection holds.
    async fn unlock(holder: &mut sqlx::SqliteConnection) {
        sqlx::query("COMMIT").execute(holder).await.expect("unlock");
    }

    #[tokio::test]
    async fn usage_counts_outlast_a_locked_database_and_counts_it_refuses_are_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, hash, mut holder) = locked_usage_store(&dir).await;
        let usage = UsageCounts::default();
        usage.count("peer-a", &hash, true);
        usage.count("peer-a", &hash, true);
        usage.count("peer-a", &hash, false);

        // Another connection holds the write lock: the flush cannot write and keeps the counts.
        usage.flush(&store).await;
        assert_eq!(pending(&usage, "peer-a", &hash), Some((2, 1)));
        unlock(&mut holder).await;

        // Counted meanwhile, then written together.
        usage.count("peer-a", &hash, true);
        usage.flush(&store).await;
        assert_eq!(written(&store, &usage, &hash).await, (3, 1));

        // A protocol the store does not know: refused (foreign key), not retried for ever.
        let unknown = ProtocolHash::of("# Never stored\n");
        usage.count("peer-a", &unknown, true);
        usage.flush(&store).await;
        assert_eq!(pending(&usage, "peer-a", &unknown), None);
        assert!(
            store
                .usage("peer-a", &unknown.to_string())
                .await
                .expect("usage")
                .is_none()
        );
    }

    #[tokio::test]
    async fn the_last_flush_waits_for_a_locked_database_within_its_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, hash, mut holder) = locked_usage_store(&dir).await;
        let usage = UsageCounts::default();
        usage.count("peer-a", &hash, true);

        // With no time to wait, one try: the count is not written.
        usage.flush_within(&store, Duration::ZERO).await;
        assert_eq!(pending(&usage, "peer-a", &hash), Some((1, 0)));
        // With time, the flush outlasts the lock, released part-way through.
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            unlock(&mut holder).await;
        });
        usage.flush_within(&store, Duration::from_secs(10)).await;
        release.await.expect("released");
        assert_eq!(written(&store, &usage, &hash).await, (1, 0));
    }
}
