//! Turning validated [`Settings`] into a running server: the one place that picks concrete
//! backends (store, reasoner, capabilities, sandbox).

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use parley_capabilities::Capabilities;
use parley_reasoner::{
    ApiKey, BuiltinProtocolReasoner, HybridProtocolReasoner, OpenAiConfig, OpenAiProtocolReasoner,
    ProtocolReasoner, Reasoner, ReasonerConfig,
};
use parley_store::{Store, StoreOptions};
use tokio::net::TcpListener;

use crate::agent::Agent;
use crate::config::{ReasonerKind, Settings};
use crate::negotiation::provider::{ProtocolBackend, Provider};
use crate::server::{self, AppState};

/// Loads the capabilities file, or an empty set when none is configured.
pub fn load_capabilities(path: Option<&Path>) -> anyhow::Result<Arc<Capabilities>> {
    let caps = match path {
        Some(path) => Capabilities::load(path, |k| std::env::var(k).ok())
            .with_context(|| format!("capabilities file {} refused", path.display()))?,
        None => Capabilities::parse(
            "[agent]\nname = \"Parley agent\"\ndescription = \"An NLIP agent with no declared capabilities.\"\n",
            parley_capabilities::Format::Toml,
            Path::new("."),
            "built-in empty capabilities",
            |_| None,
        )
        .context("the built-in empty capability set is valid")?,
    };
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
) -> anyhow::Result<Arc<dyn Reasoner>> {
    parley_reasoner::build(reasoner_config(settings), capabilities)
        .context("reasoner could not be set up")
}

/// The protocol reasoner: built-in, hybrid (built-in first, then the model) or the model.
pub fn build_protocol_reasoner(settings: &Settings) -> anyhow::Result<Arc<dyn ProtocolReasoner>> {
    let config = reasoner_config(settings);
    let model = || -> anyhow::Result<Arc<dyn ProtocolReasoner>> {
        match &config {
            ReasonerConfig::OpenAi(openai) => Ok(Arc::new(
                OpenAiProtocolReasoner::new(openai.clone())
                    .context("protocol reasoner could not be set up")?,
            )),
            ReasonerConfig::Builtin => anyhow::bail!(
                "negotiation.backend needs a model: set reasoner = \"openai\" and its settings"
            ),
        }
    };
    Ok(match settings.negotiation.backend {
        ProtocolBackend::Builtin => Arc::new(BuiltinProtocolReasoner),
        ProtocolBackend::Openai => model()?,
        ProtocolBackend::Hybrid => Arc::new(HybridProtocolReasoner::new(model()?)),
        ProtocolBackend::Auto => match &config {
            ReasonerConfig::Builtin => Arc::new(BuiltinProtocolReasoner),
            ReasonerConfig::OpenAi(_) => Arc::new(HybridProtocolReasoner::new(model()?)),
        },
    })
}

/// Opens the database (creating the SQLite file and its directory on first start) and
/// applies migrations.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    let url = settings.database_url();
    if settings.database_url.is_none() {
        std::fs::create_dir_all(&settings.data_dir).with_context(|| {
            format!(
                "cannot create data directory {}",
                settings.data_dir.display()
            )
        })?;
    }
    parley_store::connect(&url, StoreOptions::default())
        .await
        .context("cannot open the database")
}

/// A server whose listeners are bound and whose state is built, ready to run.
#[derive(Debug)]
pub struct Bound {
    pub state: AppState,
    pub listener: TcpListener,
    pub upload_listener: TcpListener,
    pub addr: SocketAddr,
    pub upload_addr: SocketAddr,
}

impl Bound {
    /// Builds everything from validated settings: backends first, sockets last, so that a
    /// bad capabilities file or database fails before anything listens.
    pub async fn new(settings: &Settings) -> anyhow::Result<Bound> {
        settings.validate()?;
        let capabilities = load_capabilities(settings.capabilities.as_deref())?;
        let reasoner = build_reasoner(settings, capabilities.clone())?;
        let store = open_store(settings).await?;
        crate::metrics::install();
        let mut sandbox_config = settings.sandbox.clone();
        // Compiled handlers are cached next to the data, so a restart reloads in milliseconds.
        sandbox_config
            .cache_dir
            .get_or_insert_with(|| settings.data_dir.join("sandbox-cache"));
        let sandbox = Arc::new(
            parley_sandbox::Sandbox::new(sandbox_config)
                .context("the sandbox could not be set up")?,
        );
        if settings.sandbox.warm_up {
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                match sandbox.warm_up() {
                    Ok(()) => tracing::info!(elapsed = ?started.elapsed(), "sandbox warmed up"),
                    Err(e) => tracing::warn!(error = %e, "sandbox warm-up failed"),
                }
            });
        }
        let protocol_reasoner = build_protocol_reasoner(settings)?;
        let provider = Arc::new(Provider::new(
            store.clone(),
            capabilities.clone(),
            protocol_reasoner,
            reasoner.clone(),
            sandbox,
            settings.negotiation,
        ));
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let upload_listener = TcpListener::bind(settings.upload_listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.upload_listen))?;
        let addr = listener.local_addr()?;
        let upload_addr = upload_listener.local_addr()?;
        let agent = Agent {
            store,
            reasoner,
            capabilities,
            agent_id: settings.agent_id.clone(),
            upload_base: settings.upload_base_url(upload_addr),
            history_messages: settings.limits.history_messages,
            provider,
        };
        Ok(Bound {
            state: AppState::new(Arc::new(agent), settings.limits.clone()),
            listener,
            upload_listener,
            addr,
            upload_addr,
        })
    }

    /// Serves until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(
            nlip = %format!("http://{}/nlip", self.addr),
            uploads = %format!("http://{}/upload", self.upload_addr),
            store = self.state.agent.store.backend_name(),
            reasoner = self.state.agent.reasoner.backend(),
            capabilities = self.state.agent.capabilities.len(),
            "parley is listening"
        );
        let provider = self.state.agent.provider.clone();
        let store = self.state.agent.store.clone();
        let flusher = provider
            .usage
            .spawn_flusher(store.clone(), Duration::from_secs(1));
        let last_flush = Duration::from_millis(self.state.limits.shutdown_flush_ms);
        let served = server::serve(self.state, self.listener, self.upload_listener, shutdown).await;
        flusher.abort();
        provider.usage.flush_within(&store, last_flush).await;
        served?;
        Ok(())
    }
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
