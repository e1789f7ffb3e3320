//! Turning validated [`Settings`] into a running server: the one place that picks concrete
//! backends (store, reasoner, capabilities, sandbox).

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use std::path::PathBuf;

use parley_capabilities::Capabilities;
use parley_reasoner::{
    ApiKey, BuiltinProtocolReasoner, HybridProtocolReasoner, OpenAiConfig, OpenAiProtocolReasoner,
    ProtocolReasoner, Reasoner, ReasonerConfig, ReasonerError,
};
use parley_sandbox::SandboxError;
use parley_store::{Store, StoreError, StoreOptions};
use tokio::net::TcpListener;

use crate::agent::{Agent, AgentSettings};
use crate::audit::Audit;
use crate::config::{ConfigError, ProtocolBackend, ReasonerKind, Settings};
use crate::model_endpoint;
use crate::negotiation::provider::{Oversight, Provider};
use crate::negotiation::requester::{BindingRequester, Requester};
use crate::server::{self, AppState, ModelEndpoint, Readiness, Sandbox};

mod database;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("capabilities file {} refused", path.display())]
    Capabilities {
        path: PathBuf,
        #[source]
        source: parley_capabilities::LoadError,
    },
    #[error("capability `{capability}`: its protocol {path} is not a usable protocol document")]
    AgentProtocol {
        capability: String,
        path: String,
        #[source]
        source: parley_anp::ProtocolError,
    },
    #[error("the MCP servers of {} did not all start", path.display())]
    McpServers {
        path: PathBuf,
        #[source]
        source: parley_capabilities::StartError,
    },
    #[error("the peers file was refused")]
    PeersFile(#[from] crate::access::peers_file::PeersFileError),
    #[error("the trusted token issuers could not be set up")]
    Issuers(#[from] crate::issuers::IssuersError),
    #[error("reasoner could not be set up")]
    Reasoner(#[source] ReasonerError),
    #[error("protocol reasoner could not be set up")]
    ProtocolReasoner(#[source] ReasonerError),
    #[error("negotiation.backend needs a model: set reasoner = \"openai\" and its settings")]
    BackendNeedsModel,
    #[error("cannot create data directory {}", path.display())]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the database at {target}")]
    Store {
        /// The database URL without its password.
        target: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Postgres(#[from] database::PostgresError),
    #[error("the sandbox could not be set up")]
    Sandbox(#[source] SandboxError),
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the server failed")]
    Serve(#[source] std::io::Error),
}

/// Loads the capabilities file (an empty set when none is configured) and starts the MCP
/// servers it declares: a required server that does not start is an error naming it, with
/// what it wrote to stderr.
pub async fn load_capabilities(path: Option<&Path>) -> Result<Arc<Capabilities>, StartupError> {
    let caps = match path {
        Some(path) => Capabilities::load(path, |k| std::env::var(k).ok()).map_err(|source| {
            StartupError::Capabilities {
                path: path.to_owned(),
                source,
            }
        })?,
        None => Capabilities::parse(
            "[agent]\nname = \"Parley agent\"\ndescription = \"An NLIP agent with no declared capabilities.\"\n",
            parley_capabilities::FileFormat::Toml,
            Path::new("."),
            "built-in empty capabilities",
            |_| None,
        )
        .expect("the built-in empty capability set is valid"),
    };
    if let Some(path) = path {
        caps.start()
            .await
            .map_err(|source| StartupError::McpServers {
                path: path.to_owned(),
                source,
            })?;
    }
    Ok(Arc::new(caps))
}

/// The model settings as the negotiator takes them.
fn reasoner_config(settings: &Settings) -> ReasonerConfig {
    match settings.reasoner {
        ReasonerKind::Builtin => ReasonerConfig::Builtin,
        ReasonerKind::Openai => {
            let o = &settings.openai;
            let mut config = OpenAiConfig::new(o.base_url.clone(), o.model.clone());
            config.api_key = o.api_key.clone().map(ApiKey::new);
            config.timeout_ms = o.timeout_secs.saturating_mul(1000);
            config.max_tool_rounds = o.max_tool_rounds;
            ReasonerConfig::OpenAi(config)
        }
    }
}

/// The natural-language reasoner the settings ask for.
pub fn build_reasoner(
    settings: &Settings,
    capabilities: Arc<Capabilities>,
) -> Result<Arc<dyn Reasoner>, StartupError> {
    parley_reasoner::build(reasoner_config(settings), capabilities).map_err(StartupError::Reasoner)
}

/// The protocol reasoner: built-in, hybrid (built-in first, then the model) or the model.
pub fn build_protocol_reasoner(
    settings: &Settings,
) -> Result<Arc<dyn ProtocolReasoner>, StartupError> {
    let config = reasoner_config(settings);
    let model = || model_protocol_reasoner(&config)?.ok_or(StartupError::BackendNeedsModel);
    Ok(match settings.negotiation.backend {
        ProtocolBackend::Builtin => Arc::new(BuiltinProtocolReasoner),
        ProtocolBackend::Openai => model()?,
        ProtocolBackend::Hybrid => Arc::new(HybridProtocolReasoner::new(model()?)),
        ProtocolBackend::Auto => parley_reasoner::build_protocol_reasoner(&config)
            .map_err(StartupError::ProtocolReasoner)?,
    })
}

/// The protocol reasoner over the configured model; `None` without one.
fn model_protocol_reasoner(
    config: &ReasonerConfig,
) -> Result<Option<Arc<dyn ProtocolReasoner>>, StartupError> {
    Ok(match config {
        ReasonerConfig::OpenAi(openai) => Some(Arc::new(
            OpenAiProtocolReasoner::new(openai.clone()).map_err(StartupError::ProtocolReasoner)?,
        )),
        ReasonerConfig::Builtin => None,
    })
}

/// Opens the database (creating the SQLite file and its directory on first start) and
/// applies migrations; the database is logged first, without its password. PostgreSQL must
/// answer within [`Settings::database_connect_timeout`]. Conversation logs keep their newest
/// `limits.max_conversation_messages`.
pub async fn open_store(settings: &Settings) -> Result<Arc<dyn Store>, StartupError> {
    let url = settings.database_url();
    if settings.database_url.is_none() {
        std::fs::create_dir_all(&settings.data_dir).map_err(|source| StartupError::DataDir {
            path: settings.data_dir.clone(),
            source,
        })?;
    }
    let target = redacted(&url);
    tracing::info!(database = %target, "opening the database");
    let options = StoreOptions {
        max_log_messages: Some(settings.limits.max_conversation_messages),
        ..StoreOptions::default()
    };
    if let Some(server) = database::PostgresServer::of(&url) {
        return Ok(server
            .connect(&url, settings.database_connect_timeout(), options)
            .await?);
    }
    parley_store::connect(&url, options)
        .await
        .map_err(|source| StartupError::Store { target, source })
}

/// `url` without its password (and the query of a PostgreSQL URL, which may carry one).
pub(crate) fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.has_host() => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.set_query(None);
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// The server's TLS configuration when `[tls]` names a certificate, loaded and checked now.
fn load_server_tls(
    settings: &Settings,
) -> Result<Option<Arc<crate::tls::ServerTls>>, StartupError> {
    if !settings.tls.enabled() {
        return Ok(None);
    }
    let tls = crate::tls::ServerTls::load(&settings.tls).map_err(|e| ConfigError::Invalid {
        setting: e.setting(),
        message: e.to_string(),
    })?;
    Ok(Some(Arc::new(tls)))
}

/// The sandbox, its compiled handlers cached next to the data (so a restart reloads them in
/// milliseconds) unless `[sandbox] cache_dir` says otherwise.
fn build_sandbox(settings: &Settings) -> Result<Arc<parley_sandbox::Sandbox>, StartupError> {
    let mut config = settings.sandbox.clone();
    config
        .cache_dir
        .get_or_insert_with(|| settings.data_dir.join("sandbox-cache"));
    Ok(Arc::new(
        parley_sandbox::Sandbox::new(config).map_err(StartupError::Sandbox)?,
    ))
}

/// What readiness waits for beyond the database, with the background work that reports it:
/// the sandbox's warm-up and the model end-point's probe.
fn start_readiness_checks(
    settings: &Settings,
    sandbox: Arc<parley_sandbox::Sandbox>,
) -> Arc<Readiness> {
    let readiness = Arc::new(Readiness::new(
        if settings.sandbox.warm_up {
            Sandbox::Warming
        } else {
            Sandbox::Off
        },
        match settings.reasoner {
            ReasonerKind::Builtin => ModelEndpoint::None,
            ReasonerKind::Openai => ModelEndpoint::Probing,
        },
    ));
    if settings.sandbox.warm_up {
        spawn_warm_up(sandbox, readiness.clone());
    }
    if settings.reasoner == ReasonerKind::Openai {
        let (openai, readiness) = (settings.openai.clone(), readiness.clone());
        tokio::spawn(async move {
            readiness.set_model(model_endpoint::probe(&openai).await);
        });
    }
    readiness
}

/// A server whose listeners are bound and whose state is built, ready to run.
#[derive(Debug)]
pub struct Bound {
    pub state: AppState,
    pub listener: TcpListener,
    pub upload_listener: TcpListener,
    pub addr: SocketAddr,
    pub upload_addr: SocketAddr,
    /// The upload end-point's URL as peers are given it.
    pub upload_url: String,
    /// Reloads the listeners' TLS files on SIGHUP or when they change, while the server runs.
    tls_watch: Option<tokio_util::task::AbortOnDropHandle<()>>,
}

impl Bound {
    /// Builds everything from validated settings: the capabilities file and the listen
    /// addresses first (a name that does not resolve is a configuration error before anything
    /// starts), backends next, sockets next, so that a bad capabilities file or database fails
    /// before anything listens, and the slow background work (the sandbox's warm-up, the model
    /// end-point's probe) last, so that a port already in use fails before any of it starts.
    pub async fn new(settings: &Settings) -> Result<Bound, StartupError> {
        settings.validate()?;
        let capabilities = load_capabilities(settings.capabilities.as_deref()).await?;
        Bound::build(settings, capabilities).await
    }

    /// [`Bound::new`] with capabilities the caller loaded (a test resolves a file's `${VAR}`
    /// references from its own values rather than from the process's environment).
    pub async fn with_capabilities(
        settings: &Settings,
        capabilities: Arc<Capabilities>,
    ) -> Result<Bound, StartupError> {
        settings.validate()?;
        Bound::build(settings, capabilities).await
    }

    /// [`Bound::new`]'s work once the settings are validated and the capabilities loaded.
    async fn build(
        settings: &Settings,
        capabilities: Arc<Capabilities>,
    ) -> Result<Bound, StartupError> {
        let ethics = settings.ethics()?;
        check_agent_protocols(&capabilities)?;
        let server_tls = load_server_tls(settings)?;
        let listen_on = settings.listen.resolve("listen").await?;
        let upload_on = settings.upload_listen.resolve("upload_listen").await?;
        let reasoner = build_reasoner(settings, capabilities.clone())?;
        let store = open_store(settings).await?;
        connect_agents(settings, &capabilities, &store)?;
        crate::metrics::install();
        let sandbox = build_sandbox(settings)?;
        let protocol_reasoner = build_protocol_reasoner(settings)?;
        let access = build_access(settings, &capabilities, &store).await?;
        let audit = Audit::new(store.clone(), &settings.audit);
        audit.observe(&capabilities);
        let provider = Arc::new(Provider::new(
            store.clone(),
            capabilities.clone(),
            protocol_reasoner,
            reasoner.clone(),
            sandbox.clone(),
            settings.negotiation,
            Oversight { access, audit },
        ));
        let (listener, addr) = listen(&listen_on).await?;
        let (upload_listener, upload_addr) = listen(&upload_on).await?;
        let readiness = start_readiness_checks(settings, sandbox);
        let upload_base = settings.upload_base_url(upload_addr);
        if settings.upload_public_url.is_none() && upload_addr.ip().is_unspecified() {
            tracing::warn!(
                uploads = %format!("{upload_base}/upload"),
                "peers are given an upload URL on an unspecified address they cannot reach; \
                 set PARLEY_UPLOAD_PUBLIC_URL (upload_public_url) to one they can"
            );
        }
        let agent = Agent::new(
            store,
            reasoner,
            capabilities,
            provider,
            AgentSettings {
                agent_id: settings.agent_id.clone(),
                upload_base: upload_base.clone(),
                history_messages: settings.limits.history_messages,
                upload_quota: settings.limits.max_upload_storage_bytes,
                throttles: Arc::new(crate::throttle::Throttles::new(
                    &settings.limits,
                    &settings.throttle,
                )),
            },
        );
        let mut state = AppState::new(Arc::new(agent), settings.limits.clone(), readiness)
            .with_ethics(&ethics)
            .with_mcp(&settings.mcp);
        let tls_watch = server_tls.as_ref().map(crate::tls::ServerTls::watch);
        state.tls = server_tls;
        Ok(Bound {
            state,
            listener,
            upload_listener,
            addr,
            upload_addr,
            upload_url: format!("{upload_base}/upload"),
            tls_watch,
        })
    }

    /// Serves until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartupError> {
        let backends = self.state.agent.backends();
        let scheme = if self.state.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let mcp = match self.state.serves_mcp() {
            true => format!("{scheme}://{}/mcp", self.addr),
            false => "off".to_owned(),
        };
        tracing::info!(
            nlip = %format!("{scheme}://{}/nlip", self.addr),
            uploads = %self.upload_url,
            mcp = %mcp,
            store = backends.store,
            reasoner = backends.reasoner,
            capabilities = backends.capabilities,
            "parley is listening"
        );
        let provider = self.state.agent.provider().clone();
        let capabilities = self.state.agent.capabilities().clone();
        let audit = self.state.agent.audit().clone();
        let flusher = provider.spawn_usage_flusher(Duration::from_secs(1));
        let audit_flusher = audit.spawn_flusher();
        let audit_retention = audit.spawn_retention(Duration::from_secs(3_600));
        let turn_limit = Duration::from_millis(self.state.limits.request_timeout_ms);
        let sweeper = provider.spawn_interrupted_sweep(turn_limit, Duration::from_secs(60));
        let limits = &self.state.limits;
        let expiry = self.state.agent.spawn_conversation_expiry(
            Duration::from_millis(limits.conversation_idle_timeout_ms),
            Duration::from_millis(limits.conversation_sweep_interval_ms),
        );
        let last_flush = Duration::from_millis(self.state.limits.shutdown_flush_ms);
        let _tls_watch = self.tls_watch;
        let served = server::serve(self.state, self.listener, self.upload_listener, shutdown).await;
        flusher.abort();
        audit_flusher.abort();
        if let Some(retention) = audit_retention {
            retention.abort();
        }
        sweeper.abort();
        if let Some(expiry) = expiry {
            expiry.abort();
        }
        provider.flush_usage_within(last_flush).await;
        audit.flush_within(last_flush).await;
        capabilities.shutdown().await;
        served.map_err(StartupError::Serve)
    }
}

/// Every protocol an `agent` binding names must be a protocol document this agent can propose.
fn check_agent_protocols(capabilities: &Capabilities) -> Result<(), StartupError> {
    for capability in capabilities.iter() {
        if let Some(peer) = capability.peer_agent() {
            parley_anp::ProtocolDoc::parse(peer.protocol).map_err(|source| {
                StartupError::AgentProtocol {
                    capability: capability.name().to_owned(),
                    path: peer.protocol_path.to_owned(),
                    source,
                }
            })?;
        }
    }
    Ok(())
}

/// Who may do what (`[access]`), and the check every capability call passes, installed in the
/// capabilities as the agent bindings' requester is (the guard is the same for every server:
/// it reads the caller of the request being handled, see `crate::access`).
async fn build_access(
    settings: &Settings,
    capabilities: &Capabilities,
    store: &Arc<dyn Store>,
) -> Result<Arc<crate::access::Access>, StartupError> {
    let sessions = &settings.access.sessions;
    let mut access = crate::access::Access::new(settings.access.anonymous.clone(), store.clone())
        .with_sessions(Duration::from_secs(sessions.ttl_s), sessions.max);
    if let Some(path) = &settings.access.peers_file {
        access = access.with_peers_file(crate::access::peers_file::load(path)?);
    }
    let client_tls = || {
        crate::tls::ClientTls::new(&settings.tls.client).map_err(|e| ConfigError::Invalid {
            setting: "tls.client",
            message: e.to_string(),
        })
    };
    if !settings.access.issuers.is_empty() {
        let tls = client_tls()?;
        let issuers = crate::issuers::Issuers::load(&settings.access.issuers, &tls).await?;
        access = access.with_issuers(issuers);
    }
    let did_wba = &settings.access.did_wba;
    if did_wba.enabled {
        let tls = client_tls()?;
        let invalid = |e: &dyn std::fmt::Display| ConfigError::Invalid {
            setting: "access.did_wba",
            message: e.to_string(),
        };
        let verifier =
            parley_auth::did_wba::DidWba::new(&did_wba.verifier()).map_err(|e| invalid(&e))?;
        let documents =
            crate::did_documents::DidDocuments::new(did_wba, &tls).map_err(|e| invalid(&e))?;
        access = access.with_did_wba(crate::access::did_wba::DidWbaAccess::new(
            verifier, documents,
        ));
    }
    capabilities.guard_calls(Arc::new(crate::access::CallerGuard));
    Ok(Arc::new(access))
}

/// Lets the capabilities bound to other agents reach them: this agent, as a requester on its
/// own store ([`BindingRequester`]).
fn connect_agents(
    settings: &Settings,
    capabilities: &Capabilities,
    store: &Arc<dyn Store>,
) -> Result<(), StartupError> {
    let bound: Vec<_> = capabilities
        .iter()
        .filter(|c| c.peer_agent().is_some())
        .collect();
    if bound.is_empty() {
        return Ok(());
    }
    let tls =
        crate::tls::ClientTls::new(&settings.tls.client).map_err(|e| ConfigError::Invalid {
            setting: e.setting(),
            message: e.to_string(),
        })?;
    // A provider's questions are answered by the configured model, if any.
    let answerer = model_protocol_reasoner(&reasoner_config(settings))?;
    let requester = Requester {
        max_rounds: settings.negotiation.max_rounds,
        tls,
        answerer,
        ..Requester::new(store.clone())
    };
    if !capabilities.connect_agents(Arc::new(BindingRequester::new(requester))) {
        // One set of capabilities given to two servers: the first one's requester serves both.
        tracing::warn!("the agent bindings already have a requester; this server's is not used");
    }
    for capability in &bound {
        let Some(peer) = capability.peer_agent() else {
            continue;
        };
        tracing::info!(
            capability = capability.name(),
            peer = peer.url,
            protocol = peer.protocol_path,
            "the capability is another agent's, asked through a protocol"
        );
    }
    Ok(())
}

/// Compiles the guest runtimes off the async workers, and reports to `readiness` when done.
fn spawn_warm_up(sandbox: Arc<parley_sandbox::Sandbox>, readiness: Arc<Readiness>) {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        match sandbox.warm_up() {
            Ok(()) => {
                tracing::info!(elapsed = ?started.elapsed(), "sandbox warmed up");
                readiness.set_sandbox(Sandbox::Warm);
            }
            Err(e) => {
                tracing::error!(error = %crate::error::chain(&e), "sandbox warm-up failed: protocol handlers cannot run");
                readiness.set_sandbox(Sandbox::Failed);
            }
        }
    });
}

/// A listener bound to the first of `addrs` (what a [`crate::config::ListenAddr`] resolved to) that can be
/// bound, and the address it got (the port the OS chose for port 0).
async fn listen(addrs: &[SocketAddr]) -> Result<(TcpListener, SocketAddr), StartupError> {
    let mut failure = None;
    for &candidate in addrs {
        let failed = |source| StartupError::Listen {
            addr: candidate,
            source,
        };
        match TcpListener::bind(candidate).await {
            Ok(listener) => {
                let bound = listener.local_addr().map_err(failed)?;
                return Ok((listener, bound));
            }
            Err(e) => failure = Some(failed(e)),
        }
    }
    Err(failure.expect("ListenAddr::resolve returns at least one address"))
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_targets_are_logged_without_their_secrets() {
        assert_eq!(
            redacted("postgres://parley:s3cret@db.internal:5432/parley?password=x"),
            "postgres://parley:***@db.internal:5432/parley"
        );
        assert_eq!(
            redacted("postgres://parley@127.0.0.1/parley"),
            "postgres://parley@127.0.0.1/parley"
        );
        assert_eq!(
            redacted("sqlite:///var/lib/parley/parley.db"),
            "sqlite:///var/lib/parley/parley.db"
        );
    }
}
