//! The requester's side: drives a [`RequesterSession`] against a provider over a
//! [`MetaChannel`] (NLIP's, over HTTP or a WebSocket, is [`NlipLink`]), keeps the outcome in the
//! local store, and calls agreed protocols — 0-RTT when the provider already knows the hash,
//! renegotiating on its own when it does not. The negotiation itself runs over any
//! [`MetaChannel`]; [`Requester::call`] and [`ask_in_natural_language`] speak NLIP.
//!
//! [`Requester::request`] (module `request`) is the whole decision a requester takes for one
//! request: the agreed protocol when there is one, a negotiation first when there is not, and
//! natural language when no protocol can be agreed. The CLI's `call` makes it for a person; the
//! server makes it for a capability bound to another agent ([`BindingRequester`]).
//!
//! A provider's `fixErrorNegotiation` (its answers are right, our test expectation wrong) is
//! accepted only within the guard rails of [`parley_anp::fix`]: data values the requester could
//! not know may be corrected, statuses, structure and its own values may not. A configured
//! [`Requester::reviewer`] (a protocol reasoner, e.g. over a model) may then still decline.
//!
//! Test cases a provider proposes (`testCasesNegotiation`, for a protocol without any of its
//! own) are agreed only when every request and expected response follows the protocol's schemas
//! (`cases`); [`Negotiated::test_cases`] returns the cases agreed either way round.

mod anp;
mod anp12;
mod binding;
mod cases;
mod channel;
mod counter;
mod fix;
mod question;
mod request;

pub use binding::BindingRequester;
pub use channel::MetaChannel;
use channel::Recorded;
pub use counter::judge_counter;
pub use fix::Fixed;
pub use request::{FallbackReason, ProtocolRef, Requested, ask_in_natural_language};

use std::collections::VecDeque;
use std::sync::Arc;

use parley_anp::{
    FixReview, FixVerdict, MetaMessage, MetaProtocolInfo, ProtocolDoc, ProtocolHash,
    RequesterSession, SessionConfig, Step,
};
use parley_nlip::{ErrorInfo, Message};
use parley_reasoner::ProtocolReasoner;
use parley_store::{
    Direction, NegotiationOutcome, NegotiationStatus, NewAgreement, NewConversation,
    NewNegotiation, Role, Store,
};
use serde_json::{Value, json};

use super::anp::{AnpLink, AnpOptions};
use super::nlip::{NlipLink, application_message};
use crate::client::{ClientError, NlipClient};

/// Why the requester could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RequesterError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Store(#[from] parley_store::StoreError),
    #[error("the protocol text is not a usable protocol document: {0}")]
    Protocol(#[from] parley_anp::ProtocolError),
    #[error(
        "the peer does not speak the meta-protocol (it answered without meta-protocol messages); talk to it in natural language instead"
    )]
    NotSupported,
    #[error("the peer answered with error {code}: {message}")]
    Peer { code: String, message: String },
    #[error("the peer stopped answering the negotiation")]
    Stalled,
    /// The peer did not answer the hello: on a framing where the hello is optional (seed 002's)
    /// the negotiation goes on without 0-RTT.
    #[error("the peer did not answer the hello")]
    NoHello,
    #[error(
        "the peer speaks meta-protocol version {version:?}; this side speaks {ours}",
        ours = parley_anp::messages::META_PROTOCOL_VERSION
    )]
    UnsupportedVersion { version: String },
    #[error("protocol {0} is not in the local store; negotiate it first")]
    UnknownLocally(String),
    #[error("{prefix} names more than one protocol in the local store: {}", .candidates.join(", "))]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    #[error("the provider rejected protocol {hash} ({code}): {reason}")]
    Rejected {
        hash: String,
        code: String,
        reason: String,
    },
    #[error("no protocol could be agreed with the peer ({0}), and natural language is not allowed")]
    NoAgreement(FallbackReason),
    #[error("{0:?} is not a protocol hash or the start of one (hex digits)")]
    NotAHash(String),
    #[error("the provider no longer knew the protocol, and negotiating it again failed")]
    Renegotiation(#[source] Box<RequesterError>),
    #[error("the requester's reasoner failed")]
    Reasoner(#[source] parley_reasoner::ProtocolReasonerError),
    /// ANP 1.2's end-point could not be found or answered with something else than JSON-RPC.
    #[error(transparent)]
    Rpc(#[from] crate::negotiation::jsonrpc::client::RpcLinkError),
    #[error("the peer's answer does not follow the protocol: {0}")]
    InvalidAnswer(String),
    #[error("the request does not follow the protocol, so it was not sent: {0}")]
    InvalidRequest(String),
    /// The answer broke the protocol, the provider was told, and it kept its handler.
    #[error(
        "the peer's answer does not follow protocol {hash} ({violation}); the provider refused to fix its handler: {reason}"
    )]
    FixRefused {
        hash: String,
        violation: String,
        reason: String,
    },
}

/// How a negotiation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Negotiated now; the provider generated and verified a handler.
    Agreed,
    /// The provider already knew the protocol: no negotiation happened.
    ZeroRtt,
    /// No agreement; `code` is the negotiator's stable code.
    Rejected { code: String, reason: String },
}

/// The result of [`Requester::negotiate`].
#[derive(Debug, Clone)]
pub struct Negotiated {
    pub hash: ProtocolHash,
    pub outcome: Outcome,
    pub rounds: u32,
    /// Every meta-protocol message, in order, with its direction.
    pub transcript: Vec<(Direction, Value)>,
    /// NLIP messages exchanged.
    pub messages: u32,
    /// The test cases agreed through `testCasesNegotiation` (ours the provider's handler passes,
    /// or the provider's, for a protocol without test cases of its own, that follow the
    /// protocol), if any; the transcript kept in the local store holds them too.
    pub test_cases: Option<String>,
}

/// Progress reports while a negotiation runs (stage, round).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub stage: &'static str,
    pub round: u32,
}

/// The requester role over one local store.
#[derive(Debug, Clone)]
pub struct Requester {
    pub store: Arc<dyn Store>,
    pub max_rounds: u32,
    /// Reviews a provider's error report once the guard rails allowed it (and may only decline
    /// it); without one, what the guard rails allow is accepted.
    pub reviewer: Option<Arc<dyn ProtocolReasoner>>,
    /// Answers a provider's questions about the proposal (`naturalLanguageNegotiation`) from
    /// the protocol document, with a model; without one, the document's requirement is the
    /// answer, saying the requester knows nothing else.
    pub answerer: Option<Arc<dyn ProtocolReasoner>>,
    /// The framing this requester speaks to providers.
    pub wire: Wire,
    /// What it trusts and presents over `https://` and `wss://`.
    pub tls: crate::tls::ClientTls,
    /// The credential it presents to providers (a bearer token or a DID-WBA identity), if any.
    pub token: Option<crate::client::Credential>,
    /// Test cases of its own (the protocol document's `Test Cases` form), proposed with
    /// `testCasesNegotiation` once a protocol is agreed and both sides generated their code: the
    /// provider runs them against its handler, and an agreement whose handler fails them is
    /// not kept (`Outcome::Rejected`, `test_cases_failed`). Not sent at 0-RTT.
    pub test_cases: Option<String>,
}

/// Which framing of the meta-protocol a requester speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// NLIP messages (`/nlip`, `/nlip/ws`): [`NlipLink`].
    #[default]
    Nlip,
    /// Seed 002's frames on a WebSocket (`/anp`): [`AnpLink`].
    Anp(AnpOptions),
    /// ANP 1.2's JSON-RPC binding (`anp.negotiate`, found through the agent description);
    /// agreed protocols are then called over NLIP.
    Anp12,
}

/// What the requester's loop does after one step of its session.
enum Next {
    /// Act on this step at once.
    Step(Box<Step>),
    /// Wait for the peer's next message.
    Peer,
    /// The negotiation is over.
    Done(ProtocolHash, Outcome),
}

/// One negotiation run by the requester, from its first proposal until it is agreed or over.
struct Run<'a, C, P> {
    requester: &'a Requester,
    session: RequesterSession,
    channel: Recorded<'a, C>,
    /// Messages for the peer, sent when the session waits for its answer.
    outbox: Vec<MetaMessage>,
    /// The protocol proposed.
    doc: &'a ProtocolDoc,
    peer: &'a str,
    progress: P,
    /// Our test cases, until proposed.
    cases: Option<String>,
    /// The agreed protocol, while our test cases are with the provider.
    testing: Option<ProtocolHash>,
}

impl Next {
    fn step(step: Step) -> Next {
        Next::Step(Box::new(step))
    }
}

impl<C: MetaChannel, P: FnMut(Progress)> Run<'_, C, P> {
    /// Runs the session from the proposal of `text` until it is agreed or over.
    async fn run(&mut self, text: &str) -> Result<(ProtocolHash, Outcome), RequesterError> {
        let mut step = self.session.start(text);
        let mut inbox: VecDeque<Value> = VecDeque::new();
        loop {
            match self.act(step).await? {
                Next::Step(next) => {
                    step = *next;
                    continue;
                }
                Next::Done(hash, outcome) => return Ok((hash, outcome)),
                Next::Peer => {}
            }
            if let Some(v) = inbox.pop_front() {
                step = self.session.receive_value(v);
                continue;
            }
            let replies = if self.outbox.is_empty() {
                // Nothing to send, but the peer still owes a message: a framing where the peer
                // speaks unprompted may have it on the way.
                self.channel.receive().await?
            } else {
                self.report("negotiating");
                self.send("Protocol negotiation.").await?
            };
            inbox.extend(replies);
            let Some(first) = inbox.pop_front() else {
                return Err(RequesterError::Stalled);
            };
            step = self.session.receive_value(first);
        }
    }

    /// The provider says its answers are right and our test expectations wrong: accepted only
    /// within the guard rails, and then only when the reviewer (if any) agrees.
    async fn review_fix(&self, description: &str) -> Result<FixVerdict, RequesterError> {
        let agreed = self.session.agreed().map(|(_, text)| text.to_owned());
        let Some(doc) = agreed.and_then(|text| ProtocolDoc::parse(text).ok()) else {
            return Ok(FixVerdict::Decline {
                reason: "no protocol is agreed".into(),
            });
        };
        let review = parley_anp::review_fix(&doc, description);
        let FixReview::Acceptable { corrections } = &review else {
            return Ok(review.verdict());
        };
        let Some(reviewer) = &self.requester.reviewer else {
            return Ok(FixVerdict::Fix);
        };
        reviewer
            .review_fix(&doc, description, corrections)
            .await
            .map_err(RequesterError::Reasoner)
    }

    fn report(&mut self, stage: &'static str) {
        let round = self.session.rounds();
        (self.progress)(Progress { stage, round });
    }

    /// Sends the outbox and returns the peer's answer.
    async fn send(&mut self, summary: &str) -> Result<Vec<Value>, RequesterError> {
        let out = std::mem::take(&mut self.outbox);
        self.channel.exchange(summary, &out).await
    }

    /// Acts on one step: the requester's own decisions are taken at once, messages for the
    /// peer collect in the outbox, and the end of the negotiation is told to the peer.
    async fn act(&mut self, step: Step) -> Result<Next, RequesterError> {
        Ok(match step {
            Step::Send(m) => {
                self.outbox.push(m);
                Next::Peer
            }
            Step::TestCasesAgreed { send: None, .. } if self.testing.is_some() => {
                let hash = self.testing.take().unwrap_or_else(|| self.doc.hash());
                self.requester.agree(self.peer, &hash).await?;
                Next::Done(hash, Outcome::Agreed)
            }
            Step::TestCasesRejected { reason } if self.testing.is_some() => {
                let hash = self.testing.take().unwrap_or_else(|| self.doc.hash());
                let reason = reason.unwrap_or_else(|| {
                    "the provider's handler does not pass our test cases".to_owned()
                });
                let outcome = Outcome::Rejected {
                    code: "test_cases_failed".to_owned(),
                    reason,
                };
                Next::Done(hash, outcome)
            }
            Step::Wait
            | Step::TestCasesRejected { .. }
            | Step::FixDeclined { .. }
            | Step::FixAccepted { .. } => Next::Peer,
            Step::Converse(nl) => self.answer_question(nl).await?,
            Step::Evaluate { text, hash } => {
                self.report("evaluating counter-proposal");
                let verdict = judge_counter(self.doc, &text);
                Next::step(self.session.evaluated(&hash, verdict))
            }
            Step::Accepted { text, send, .. } => {
                self.outbox.extend(send);
                self.report("agreed; code generation");
                // The requester's "code" is the protocol's own schemas, checked on every
                // answer; storing the agreed text is all it needs.
                self.requester.store.put_protocol(&text).await?;
                Next::step(self.session.code_generated(Ok(())))
            }
            Step::Ready { hash, send } => {
                self.outbox.extend(send);
                if let Some(cases) = self.cases.take() {
                    self.report("agreed; proposing our test cases");
                    self.testing = Some(hash);
                    return Ok(Next::step(self.session.propose_test_cases(cases)));
                }
                if !self.outbox.is_empty() {
                    let out = std::mem::take(&mut self.outbox);
                    self.channel.notify("Code generated.", &out).await?;
                }
                self.requester.agree(self.peer, &hash).await?;
                Next::Done(hash, Outcome::Agreed)
            }
            Step::Rejected { reason, send } => {
                self.outbox.extend(send);
                if !self.outbox.is_empty() {
                    // Tell the peer; its answer does not matter any more.
                    let out = std::mem::take(&mut self.outbox);
                    let _ = self.channel.notify("Negotiation ended.", &out).await;
                }
                let outcome = Outcome::Rejected {
                    code: reason.code().to_owned(),
                    reason: reason.to_string(),
                };
                Next::Done(self.doc.hash(), outcome)
            }
            Step::EvaluateTestCases { test_cases } => {
                self.report("reviewing the provider's test cases");
                let agreed = self.session.agreed().map(|(_, text)| text);
                let verdict = cases::judge_cases(agreed, &test_cases);
                Next::step(self.session.test_cases_evaluated(verdict))
            }
            Step::TestCasesAgreed { send, .. } => {
                self.outbox.extend(send);
                Next::Peer
            }
            Step::FixError { description } => {
                self.report("reviewing the provider's error report");
                let verdict = self.review_fix(&description).await?;
                Next::step(self.session.fix_evaluated(verdict))
            }
            Step::Regenerate { send, .. } => {
                self.outbox.extend(send);
                Next::step(self.session.code_generated(Ok(())))
            }
        })
    }
}

impl Requester {
    /// A requester over `store`: at most 10 proposals per negotiation, no reviewer.
    pub fn new(store: Arc<dyn Store>) -> Requester {
        Requester {
            store,
            max_rounds: 10,
            reviewer: None,
            answerer: None,
            wire: Wire::Nlip,
            tls: crate::tls::ClientTls::default(),
            token: None,
            test_cases: None,
        }
    }

    /// Negotiates `text` with the provider at `url` (0-RTT when it already knows the hash)
    /// and records the outcome locally.
    pub async fn negotiate(
        &self,
        url: &str,
        text: &str,
        progress: impl FnMut(Progress),
    ) -> Result<Negotiated, RequesterError> {
        let all = parley_anp::messages::capability::ALL.map(str::to_owned);
        self.negotiate_with(url, text, &all, progress).await
    }

    /// [`Requester::negotiate`], announcing only `capabilities` of the meta-protocol in the
    /// hello (the provider then uses no exchange the requester did not announce).
    pub async fn negotiate_with(
        &self,
        url: &str,
        text: &str,
        capabilities: &[String],
        progress: impl FnMut(Progress),
    ) -> Result<Negotiated, RequesterError> {
        match self.wire {
            Wire::Nlip => {
                let peer = self.peer_key(url)?;
                let mut link = NlipLink::connect(&peer, &self.tls, self.token.as_ref()).await?;
                self.negotiate_over(&mut link, &peer, text, capabilities, progress)
                    .await
            }
            Wire::Anp(options) => {
                let peer = self.peer_key(url)?;
                let mut link =
                    AnpLink::connect_as(&peer, options, &self.tls, self.token.as_ref()).await?;
                let negotiated = self
                    .negotiate_over(&mut link, &peer, text, capabilities, progress)
                    .await?;
                link.close().await?;
                Ok(negotiated)
            }
            // The binding has no hello: the meta-protocol's optional exchanges do not apply.
            Wire::Anp12 => self.negotiate_anp12(url, text, progress).await,
        }
    }

    /// Negotiates `text` with the provider `peer` over `channel`: hello first (0-RTT when the
    /// provider selects the protocol's hash), then the [`RequesterSession`]; the outcome and its
    /// transcript are recorded locally.
    pub async fn negotiate_over<C: MetaChannel>(
        &self,
        channel: &mut C,
        peer: &str,
        text: &str,
        capabilities: &[String],
        mut progress: impl FnMut(Progress),
    ) -> Result<Negotiated, RequesterError> {
        let doc = ProtocolDoc::parse(text)?;
        let hash = doc.hash();
        let mut channel = Recorded {
            channel,
            transcript: Vec::new(),
            messages: 0,
        };
        progress(Progress {
            stage: "hello",
            round: 0,
        });
        // With test cases of its own to run, the requester offers no hash for 0-RTT: the
        // protocol is negotiated, so that the provider's handler meets them.
        let offered = self.test_cases.is_none().then_some(hash);
        let selected = hello(&mut channel, offered, capabilities).await?;
        self.store.put_protocol(text).await?;
        if selected == Some(hash) {
            self.agree(peer, &hash).await?;
            return Ok(Negotiated {
                hash,
                outcome: Outcome::ZeroRtt,
                rounds: 0,
                transcript: channel.transcript,
                messages: channel.messages,
                test_cases: None,
            });
        }
        let mut run = Run {
            requester: self,
            session: RequesterSession::new(SessionConfig {
                max_rounds: self.max_rounds,
            }),
            channel,
            outbox: Vec::new(),
            doc: &doc,
            peer,
            progress,
            cases: self.test_cases.clone(),
            testing: None,
        };
        let outcome = run.run(text).await?;
        let (session, channel) = (run.session, run.channel);
        self.record(peer, &channel.transcript, session.rounds(), &outcome)
            .await?;
        Ok(Negotiated {
            hash: outcome.0,
            outcome: outcome.1,
            rounds: session.rounds(),
            transcript: channel.transcript,
            messages: channel.messages,
            test_cases: session.agreed_test_cases().map(str::to_owned),
        })
    }

    async fn agree(&self, url: &str, hash: &ProtocolHash) -> Result<(), RequesterError> {
        self.store
            .record_agreement(NewAgreement {
                peer: url.to_owned(),
                peer_url: Some(url.to_owned()),
                protocol_hash: hash.to_string(),
                role: Role::Requester,
            })
            .await?;
        Ok(())
    }

    /// Keeps the negotiation and its transcript in the local store.
    async fn record(
        &self,
        url: &str,
        transcript: &[(Direction, Value)],
        rounds: u32,
        (hash, outcome): &(ProtocolHash, Outcome),
    ) -> Result<(), RequesterError> {
        let cid = uuid::Uuid::new_v4().to_string();
        self.store
            .create_conversation(NewConversation {
                id: cid.clone(),
                peer: Some(url.to_owned()),
                state: json!({}),
            })
            .await?;
        let negotiation = self
            .store
            .start_negotiation(NewNegotiation {
                conversation_id: cid,
                role: Role::Requester,
                peer: url.to_owned(),
            })
            .await?;
        for (direction, message) in transcript {
            self.store
                .append_transcript(negotiation.id, *direction, message)
                .await?;
        }
        let (status, protocol_hash, reason) = match outcome {
            Outcome::Agreed | Outcome::ZeroRtt => {
                (NegotiationStatus::Accepted, Some(hash.to_string()), None)
            }
            Outcome::Rejected { code, .. } => (
                if code == "timeout" {
                    NegotiationStatus::Timeout
                } else {
                    NegotiationStatus::Rejected
                },
                None,
                Some(code.clone()),
            ),
        };
        self.store
            .finish_negotiation(
                negotiation.id,
                NegotiationOutcome {
                    status,
                    protocol_hash,
                    rounds: i64::from(rounds),
                    reason,
                },
            )
            .await?;
        Ok(())
    }

    /// Sends one application message; when the provider does not know the protocol, or
    /// refuses it as not this requester's (`forbidden`: agreed under another identity, such as
    /// another key on the same local store), and its text is stored locally, negotiates again
    /// and retries once. A provider that refuses the negotiation too leaves its first refusal as
    /// the answer. The answer is checked against the protocol's response schema; one that
    /// breaks it is reported to the provider with a `fixErrorNegotiation` (module `fix`), and
    /// when the provider fixed its handler the request goes once more
    /// ([`Called::fixed`]); when it refuses, the call is [`RequesterError::FixRefused`].
    pub async fn call(
        &self,
        url: &str,
        hash: &ProtocolHash,
        request: Value,
    ) -> Result<Called, RequesterError> {
        match self.wire {
            Wire::Anp(options) => return self.call_anp(url, hash, request, options).await,
            Wire::Anp12 => return Box::pin(self.call_anp12(url, hash, request)).await,
            Wire::Nlip => {}
        }
        let protocol = self
            .store
            .get_protocol(&hash.to_string())
            .await?
            .ok_or_else(|| RequesterError::UnknownLocally(hash.to_string()))?;
        let doc = ProtocolDoc::parse(protocol.text.clone())?;
        doc.validate_request(&request)
            .map_err(|v| RequesterError::InvalidRequest(v.to_string()))?;
        let mut client = NlipClient::connect_as(url, false, &self.tls, self.token.as_ref()).await?;
        let message = application_message(hash, request.clone());
        let mut renegotiated = None;
        let mut reply = client.send(&message).await?.message;
        if let Some(refused) = ErrorInfo::from_message(&reply)
            .filter(|e| matches!(e.code.as_str(), "unknown_protocol" | "forbidden"))
        {
            let n = match self.negotiate(url, &protocol.text, |_| {}).await {
                Ok(n) => n,
                Err(_) if refused.code == "forbidden" => {
                    return Err(RequesterError::Peer {
                        code: refused.code,
                        message: refused.message,
                    });
                }
                Err(e) => return Err(RequesterError::Renegotiation(Box::new(e))),
            };
            if let Outcome::Rejected { code, reason } = &n.outcome {
                return Err(RequesterError::Rejected {
                    hash: hash.to_string(),
                    code: code.clone(),
                    reason: reason.clone(),
                });
            }
            renegotiated = Some(n);
            reply = client.send(&message).await?.message;
        }
        let (answer, reply, fixed) = match fix::check(&doc, &reply) {
            fix::Checked::Answer(answer) => (answer, reply, None),
            fix::Checked::Failed(e) => return Err(e),
            fix::Checked::Wrong(wrong) => {
                let context = (&message, &request);
                let (answer, reply, fixed) = self
                    .after_wrong_answer(&mut client, &doc, context, wrong)
                    .await?;
                (answer, reply, Some(fixed))
            }
        };
        Ok(Called {
            answer,
            renegotiated,
            reply: Some(reply),
            fixed,
        })
    }
}

impl Requester {
    /// How the local store names the peer at `url`: its end-point for this requester's framing,
    /// so `http://host:8080` and `http://host:8080/nlip` are one peer.
    fn peer_key(&self, url: &str) -> Result<String, RequesterError> {
        Ok(match self.wire {
            Wire::Nlip | Wire::Anp12 => crate::client::endpoint(url)?.to_string(),
            Wire::Anp(_) => crate::negotiation::anp::endpoint(url)?.to_string(),
        })
    }
}

/// The hello exchange: announces `capabilities` and offers `hash` for reuse; returns the
/// protocol the provider selected, if any. A peer that does not answer the hello does not speak
/// the meta-protocol.
async fn hello<C: MetaChannel>(
    channel: &mut Recorded<'_, C>,
    hash: Option<ProtocolHash>,
    capabilities: &[String],
) -> Result<Option<ProtocolHash>, RequesterError> {
    let mut info = MetaProtocolInfo::parley(hash);
    info.supported_capabilities = capabilities.to_vec();
    let hello = MetaMessage::source_hello(info);
    let answer = match channel
        .exchange("Hello from a Parley requester.", &[hello])
        .await
    {
        Ok(answer) => answer,
        Err(RequesterError::NoHello) => return Ok(None),
        Err(e) => return Err(e),
    };
    let hello = answer
        .into_iter()
        .find_map(|v| match MetaMessage::from_value(v) {
            Ok(MetaMessage::DestinationHello(h)) => Some(h),
            _ => None,
        })
        .ok_or(RequesterError::NotSupported)?;
    if let Some(version) = hello.meta_protocol.unsupported_version(&hello.version) {
        return Err(RequesterError::UnsupportedVersion {
            version: version.to_owned(),
        });
    }
    Ok(hello.meta_protocol.selected_hash())
}

/// The answer of [`Requester::call`].
#[derive(Debug, Clone)]
pub struct Called {
    pub answer: Value,
    /// Set when the provider had forgotten the protocol and it was negotiated again.
    pub renegotiated: Option<Negotiated>,
    /// The NLIP reply that carried the answer (none over seed 002's framing, which has no
    /// envelope).
    pub reply: Option<Message>,
    /// Set when the first answer broke the protocol and the provider fixed its handler: the
    /// answer is the fixed handler's.
    pub fixed: Option<Fixed>,
}
