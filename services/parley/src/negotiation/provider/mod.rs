//! The provider's side of negotiation: answers meta-protocol messages with the
//! [`ProviderSession`](parley_anp::ProviderSession) state machine, evaluates proposals
//! with the protocol reasoner, generates and verifies handlers in the sandbox, and serves
//! application messages through the active ones.
//!
//! # Layout
//! - `driver`: one turn — the inbound meta-protocol messages of one message, answered.
//! - `state`: what a conversation keeps between turns (`NegotiationState`), read
//!   once and written once per turn.
//! - `hello`: the hello exchange and the 0-RTT selection.
//! - `build`: handler generation, verification, regeneration, a disputed handler the peer accepts.
//! - `cases`: the test cases a handler is verified against (the document's, agreed ones, or
//!   cases generated from the capabilities for a document without any), and the generated
//!   cases proposed to the peer with `testCasesNegotiation`.
//! - `compiled`: the handler's compiled form (its mapping, served without a JavaScript engine):
//!   its check, what it buys, how to switch it off.
//! - `outcome`: transcripts, activation of the verified handler, the recorded outcome, and what
//!   the negotiation's reasoning cost (model calls and tokens, settled after every message).
//!   A negotiation's start (in `driver`), its end and a handler's activation are written to the
//!   audit log before the turn is answered.
//! - `fix`: a requester's run-time `fixErrorNegotiation` about an active protocol: the
//!   reported request and the test cases run again, the handler rebuilt from the report and
//!   activated as a new version of the same protocol, or the report refused with reasons.
//! - `serve`: application messages, hash → handler → answer.
//! - `usage`: per-peer usage counts and their flusher.

mod build;
mod cases;
mod compiled;
mod driver;
mod fix;
mod hello;
mod inquiry;
mod outcome;
mod serve;
mod state;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use parley_capabilities::Capabilities;
use parley_reasoner::{DeclaredCapability, ProtocolReasoner, Reasoner, UsageMeter};
use parley_sandbox::Sandbox;
use parley_store::Store;

pub use self::driver::MetaTurn;
use self::usage::UsageCounts;
use super::runner::{ProtocolCache, SandboxRunner};
use crate::access::Access;
use crate::audit::Audit;
use crate::config::NegotiationLimits;
use crate::error::ApiError;

/// The provider role: what negotiating and serving protocols needs.
#[derive(Debug)]
pub struct Provider {
    store: Arc<dyn Store>,
    capabilities: Arc<Capabilities>,
    /// The capabilities as the protocol reasoner sees them.
    specs: Vec<DeclaredCapability>,
    reasoner: Arc<dyn ProtocolReasoner>,
    /// Answers `naturalLanguageNegotiation` requests.
    nl: Arc<dyn Reasoner>,
    sandbox: Arc<Sandbox>,
    /// Runs handlers under verification.
    runner: SandboxRunner,
    /// The active handlers, by protocol hash.
    cache: ProtocolCache,
    limits: NegotiationLimits,
    /// Per-peer call counts, written to the store in batches.
    usage: Arc<UsageCounts>,
    /// Who may call which protocol (a hello selects only those).
    access: Arc<Access>,
    /// Where negotiations and activations are recorded.
    audit: Audit,
}

/// Who may do what, and the record of what was done: the peer-facing rules a provider keeps.
#[derive(Debug, Clone)]
pub struct Oversight {
    pub access: Arc<Access>,
    pub audit: Audit,
}

impl Provider {
    pub fn new(
        store: Arc<dyn Store>,
        capabilities: Arc<Capabilities>,
        reasoner: Arc<dyn ProtocolReasoner>,
        nl: Arc<dyn Reasoner>,
        sandbox: Arc<Sandbox>,
        limits: NegotiationLimits,
        oversight: Oversight,
    ) -> Self {
        let Oversight { access, audit } = oversight;
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
            access,
            audit,
        }
    }

    /// Who the server's peers are and what they may do.
    /// The `[negotiation]` settings it negotiates by.
    pub fn limits(&self) -> &NegotiationLimits {
        &self.limits
    }

    pub fn access(&self) -> &Arc<Access> {
        &self.access
    }

    /// The audit log this provider records in.
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// The protocol reasoner, counting the model calls it makes in `meter`.
    fn protocol_reasoner(&self, meter: &UsageMeter) -> Arc<dyn ProtocolReasoner> {
        parley_reasoner::metered_protocol(&self.reasoner, meter)
    }

    /// Writes the usage counts to the store every `period` until the task is aborted.
    pub fn spawn_usage_flusher(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        self.usage.spawn_flusher(self.store.clone(), period)
    }

    /// Ends as failed (reason `interrupted`) every negotiation whose last turn never finished
    /// and is older than `turn_limit` (the request timeout: no turn runs longer, the request's
    /// deadline ends it), so a negotiation a stopped process left in the middle of a turn does
    /// not stay `negotiating`; at once, then every `period` until the task is aborted. A turn
    /// another instance on the same database is running is younger than `turn_limit`.
    pub fn spawn_interrupted_sweep(
        &self,
        turn_limit: Duration,
        period: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.store.clone();
        // A limit too long for a timestamp: no turn is that old, and the sweep finds nothing.
        let limit = chrono::Duration::from_std(turn_limit).unwrap_or(chrono::TimeDelta::MAX);
        crate::periodic::spawn_every(period, move || {
            let store = store.clone();
            async move {
                let Some(before) = chrono::Utc::now().checked_sub_signed(limit) else {
                    return;
                };
                match store.fail_interrupted_negotiations(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(
                        negotiations = n,
                        "negotiations interrupted in the middle of a turn ended as failed"
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, "the sweep for interrupted negotiations failed; trying again later")
                    }
                }
            }
        })
    }

    /// The last usage flush, at shutdown: retried for at most `within` while the database
    /// cannot take it.
    pub async fn flush_usage_within(&self, within: Duration) {
        self.usage.flush_within(&self.store, within).await;
    }
}

/// Failures of the model itself (unreachable, or an unusable answer) go to the caller as
/// errors; they are never turned into a proposal or a failed code generation for the peer.
fn reasoner_error(e: parley_reasoner::ProtocolReasonerError) -> ApiError {
    tracing::warn!(
        code = e.code(),
        error = %crate::error::chain(&e),
        "the protocol reasoner failed"
    );
    ApiError::Reasoner {
        code: e.code().to_owned(),
        message: e.to_string(),
    }
}
