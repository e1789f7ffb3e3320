//! The command line's arguments, as clap reads them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{DEFAULT_DATABASE_CONNECT_TIMEOUT_MS, ServeArgs, Settings};

use super::CliError;

/// Parley: an NLIP agent that negotiates protocols with other agents and serves them fast.
#[derive(Debug, Parser)]
#[command(name = "parley", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: NLIP over HTTP (POST /nlip) and WebSocket (/nlip/ws, /nlip/ws/text),
    /// plus the upload end-point on its own port.
    Serve(Box<ServeArgs>),
    /// Send one NLIP text message and print the reply.
    Send(SendArgs),
    /// Operator tools for protocol handlers.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Negotiate a protocol with a provider as requester, and store the outcome locally.
    Negotiate(NegotiateArgs),
    /// Send one request through a protocol and print the answer: the protocol agreed with the
    /// peer (0-RTT), negotiated first when there is none, or natural language when none can be.
    Call(CallArgs),
    /// What this agent has agreed, with whom, how it was verified, and what agreeing cost.
    #[command(subcommand)]
    Protocols(ProtocolsCommand),
    /// Conversations this agent keeps: their logs and what their answers cost.
    #[command(subcommand)]
    Conversations(ConversationsCommand),
    /// Who did what, when, and how it went: negotiations, handler activations, capability
    /// calls, failed authentications and refusals, newest first.
    Audit(AuditArgs),
    /// The peers this agent knows by their API keys, and what each may do.
    #[command(subcommand)]
    Peers(PeersCommand),
}

/// Where the local store of a requester lives (the same settings as `serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct LocalStore {
    /// Directory of the embedded database [default: ./data]
    #[arg(long, env = "PARLEY_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// sqlite://PATH or postgres://… [default: sqlite in the data directory]
    #[arg(long, env = "PARLEY_DATABASE_URL")]
    pub database_url: Option<String>,
    /// How long connecting to PostgreSQL may take, in milliseconds
    #[arg(long, env = "PARLEY_DATABASE_CONNECT_TIMEOUT_MS", default_value_t = DEFAULT_DATABASE_CONNECT_TIMEOUT_MS)]
    pub database_connect_timeout_ms: u64,
}

impl LocalStore {
    pub(super) fn settings(&self) -> Result<Settings, CliError> {
        let settings = Settings {
            data_dir: self.data_dir.clone(),
            database_url: self.database_url.clone(),
            database_connect_timeout_ms: self.database_connect_timeout_ms,
            ..Settings::default()
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Opens the store, creating the embedded database on first use (commands that record).
    pub(super) async fn open(&self) -> Result<std::sync::Arc<dyn parley_store::Store>, CliError> {
        Ok(crate::startup::open_store(&self.settings()?).await?)
    }

    /// Opens a store that must exist already (commands that only read): without a database
    /// URL and without the embedded database file, says where it looked instead of creating
    /// an empty one.
    pub(super) async fn open_existing(
        &self,
    ) -> Result<std::sync::Arc<dyn parley_store::Store>, CliError> {
        let settings = self.settings()?;
        if settings.database_url.is_none() {
            let file = settings.database_file();
            if !file.is_file() {
                return Err(CliError::NoData(std::path::absolute(&file).unwrap_or(file)));
            }
        }
        Ok(crate::startup::open_store(&settings).await?)
    }
}

/// What a command that connects trusts and presents over `https://` and `wss://`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientTlsArgs {
    /// CA certificates (PEM) trusted besides the platform's roots: a private deployment's CA.
    #[arg(long, env = "PARLEY_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// A client certificate chain (PEM), for peers that require mutual TLS.
    #[arg(
        long,
        env = "PARLEY_CLIENT_CERT",
        value_name = "FILE",
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM).
    #[arg(
        long,
        env = "PARLEY_CLIENT_KEY",
        value_name = "FILE",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
}

impl ClientTlsArgs {
    pub fn settings(&self) -> crate::config::tls::ClientTlsSettings {
        crate::config::tls::ClientTlsSettings {
            ca_cert: self.ca_cert.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        }
    }

    /// The client's TLS configuration; files that do not load are a usage error.
    pub(super) fn client_tls(&self) -> Result<crate::tls::ClientTls, CliError> {
        crate::tls::ClientTls::new(&self.settings()).map_err(|e| CliError::Usage(format!("{e}")))
    }
}

/// Who a command that connects says it is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TokenArgs {
    /// A credential for the peer, sent as `Authorization: Bearer`: the API key its operator
    /// made for this agent (`parley peers add`), or an OAuth access token.
    #[arg(
        long,
        env = "PARLEY_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        conflicts_with = "did_document"
    )]
    pub token: Option<String>,
    /// Where the token goes over NLIP: `header` (Authorization: Bearer, on every request), or
    /// `message` (the NLIP authentication exchange: an `authentication` token submessage when
    /// the peer asks, then the session token it hands back)
    #[arg(
        long,
        env = "PARLEY_TOKEN_IN",
        value_name = "WHERE",
        default_value = "header"
    )]
    pub token_in: crate::client::Placement,
    /// A DID-WBA identity instead of a token (ANP-02): this `did:wba` DID document (JSON), whose
    /// key `--did-key` holds, signs every request (an HTTP Message Signature)
    #[arg(
        long,
        env = "PARLEY_DID_DOCUMENT",
        value_name = "FILE",
        requires = "did_key"
    )]
    pub did_document: Option<PathBuf>,
    /// The PEM private key of one of the `--did-document`'s verification methods
    #[arg(
        long,
        env = "PARLEY_DID_KEY",
        value_name = "FILE",
        requires = "did_document"
    )]
    pub did_key: Option<PathBuf>,
}

impl TokenArgs {
    /// The credential to present: the token (checked to be one a header can carry, presented
    /// where `--token-in` says), or the DID-WBA identity, whose files must load and agree.
    pub(super) fn credential(&self) -> Result<Option<crate::client::Credential>, CliError> {
        if let (Some(document), Some(key)) = (&self.did_document, &self.did_key) {
            let signer = crate::client::DidSigner::new(&super::read(document)?, &super::read(key)?)
                .map_err(|e| {
                    CliError::Usage(format!(
                        "--did-document {} with --did-key {}: {e}",
                        document.display(),
                        key.display()
                    ))
                })?;
            return Ok(Some(crate::client::Credential::DidWba(
                std::sync::Arc::new(signer),
            )));
        }
        self.token
            .as_deref()
            .map(crate::client::BearerToken::new)
            .transpose()
            .map(|token| token.map(|t| t.presented(self.token_in).into()))
            .map_err(|e| CliError::Usage(format!("--token: {e}")))
    }
}

/// Which framing of the meta-protocol to speak to the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WireKind {
    /// NLIP messages: POST /nlip, or the WebSocket /nlip/ws for ws(s):// URLs.
    Nlip,
    /// Seed 002's frames on the WebSocket /anp (AgentConnect's framing); http(s):// URLs are
    /// reached over ws(s)://.
    Anp,
    /// ANP 1.2's JSON-RPC `anp.negotiate`, its end-point found through the agent description
    /// (/.well-known/agent-descriptions) of a URL without a path; calls then go over NLIP.
    Anp12,
}

/// The framing, and its time limits.
#[derive(Debug, Clone, clap::Args)]
pub struct WireArgs {
    /// The framing of the meta-protocol: nlip, anp (seed 002's, on /anp), or anp12 (ANP 1.2's
    /// JSON-RPC, found through discovery).
    #[arg(long, value_enum, default_value = "nlip")]
    pub wire: WireKind,
    /// With --wire anp: how long the provider may take to answer the hello before the
    /// negotiation goes on without it (seed-002 peers need not answer one).
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub hello_timeout_ms: u64,
    /// With --wire anp: how long the provider may take for any other answer.
    #[arg(long, default_value_t = 120_000, value_name = "MS")]
    pub reply_timeout_ms: u64,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["protocol", "requirement"])))]
pub struct NegotiateArgs {
    /// The provider's end-point: with --wire nlip, http(s)://…/nlip or ws(s)://…/nlip/ws
    /// (without a path, the peer's /nlip or /nlip/ws); with --wire anp, ws(s)://…/anp
    /// (without a path, the peer's /anp); with --wire anp12, the agent's base URL (discovery) or
    /// its JSON-RPC end-point. Without a scheme, http://.
    pub url: String,
    /// A protocol document (markdown with request/response JSON Schemas and test cases).
    #[arg(long)]
    pub protocol: Option<PathBuf>,
    /// Instead of --protocol: a requirement in prose, drafted into a protocol with the two schemas.
    #[arg(long, requires_all = ["input_schema", "output_schema"])]
    pub requirement: Option<PathBuf>,
    /// JSON Schema of what this agent will send (with --requirement).
    #[arg(long)]
    pub input_schema: Option<PathBuf>,
    /// JSON Schema of what this agent wants back (with --requirement).
    #[arg(long)]
    pub output_schema: Option<PathBuf>,
    /// Proposals before giving up.
    #[arg(long, default_value_t = 10)]
    pub max_rounds: u32,
    /// Test cases of this agent's own (a protocol document's `# Test Cases` section, or the
    /// section alone), proposed once the protocol is agreed (testCasesNegotiation): the
    /// provider's handler must pass them, or the agreement is not kept.
    #[arg(long, value_name = "FILE")]
    pub test_cases: Option<PathBuf>,
    #[command(flatten)]
    pub wire: WireArgs,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub store: LocalStore,
}

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The provider's end-point (without a path: its /nlip, /nlip/ws over ws(s)://, or /anp
    /// with --wire anp; without a scheme, http://).
    pub url: String,
    /// A protocol document, negotiated first unless this requester agreed it with the peer
    /// already; or the hash of a protocol in the local store (hex or sha256:hex; a unique
    /// prefix will do).
    #[arg(long, value_name = "FILE|HASH")]
    pub protocol: String,
    /// The request, as JSON.
    #[arg(long)]
    pub json: String,
    /// When no protocol can be agreed, fail instead of asking in natural language.
    #[arg(long)]
    pub no_fallback: bool,
    /// Proposals before giving up, when the call negotiates.
    #[arg(long, default_value_t = 10)]
    pub max_rounds: u32,
    #[command(flatten)]
    pub wire: WireArgs,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub store: LocalStore,
}

#[derive(Debug, Subcommand)]
pub enum ProtocolsCommand {
    /// Every agreement, newest first.
    List {
        #[command(flatten)]
        store: LocalStore,
    },
    /// One protocol: its text, who agreed it, its negotiations and its handler.
    Show {
        /// The protocol's hash (hex or sha256:hex; a unique prefix will do).
        hash: String,
        #[command(flatten)]
        store: LocalStore,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// One conversation: its peer, the model calls and tokens its answers cost, and its log.
    Show {
        /// The conversation's id (the content of its conversation token).
        id: String,
        #[command(flatten)]
        store: LocalStore,
    },
}

#[derive(Debug, Subcommand)]
pub enum PeersCommand {
    /// Declare a peer in the store and print its API key, once: the key alone on stdout, what
    /// it may do on stderr. Running servers on the same database honour it at once.
    Add {
        /// The peer's id (letters, digits, `.`, `_`, `-`, `@`, `:`).
        id: String,
        #[command(flatten)]
        grants: GrantArgs,
        #[command(flatten)]
        store: LocalStore,
    },
    /// Every declared peer: id, key id, grants, when created and revoked (never a digest).
    List {
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: LocalStore,
    },
    /// Stop honouring a peer's key, on running servers too; the id is not given out again.
    Revoke {
        id: String,
        #[command(flatten)]
        store: LocalStore,
    },
    /// Make a key for a peer declared in a peers file: the key on stdout, the `[[peers]]` entry
    /// to paste on stderr (with the key's digest, never the key).
    Keygen {
        id: String,
        #[command(flatten)]
        grants: GrantArgs,
    },
}

/// What a peer may do, as `peers add` and `peers keygen` take it.
#[derive(Debug, Clone, clap::Args)]
pub struct GrantArgs {
    /// It may negotiate protocols with this agent.
    #[arg(long)]
    pub negotiate: bool,
    /// It may talk to the natural-language reasoner (which may cost model tokens).
    #[arg(long)]
    pub talk: bool,
    /// A capability it may have called on its behalf (repeatable; `*`: every one).
    #[arg(long = "capability", value_name = "NAME")]
    pub capabilities: Vec<String>,
    /// An active protocol it may call besides those it agreed itself (repeatable; hex or
    /// sha256:hex; `*`: every one).
    #[arg(long = "protocol", value_name = "HASH|*")]
    pub protocols: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Only events of this authenticated peer.
    #[arg(long, value_name = "ID")]
    pub peer: Option<String>,
    /// Only events from this IP address.
    #[arg(long, value_name = "IP")]
    pub address: Option<String>,
    /// Only this action: negotiation.start, negotiation.end, handler.activate,
    /// capability.call, authenticate, or a refused action.
    #[arg(long)]
    pub action: Option<String>,
    /// Only this outcome: ok, refused, failed, accepted, rejected, timeout, an error code.
    #[arg(long)]
    pub outcome: Option<String>,
    /// Only events at or after TIME: RFC 3339, or a time ago (30s, 10m, 2h, 1d, 1w).
    #[arg(long, value_name = "TIME", value_parser = super::audit::parse_time)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only events before TIME (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = super::audit::parse_time)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many events, the newest.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(parley_store::MAX_PAGE)))]
    pub limit: u32,
    /// Print the events as a JSON array.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: LocalStore,
}

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// End-point: http(s)://host:port/nlip, ws(s)://host:port/nlip/ws (CBOR) or …/nlip/ws/text
    /// (JSON); without a path, the peer's /nlip or /nlip/ws; without a scheme, http://
    pub url: String,
    /// The text to send.
    pub text: String,
    /// Print the raw NLIP reply as JSON instead of its text.
    #[arg(long)]
    pub json: bool,
    /// Language subformat of the text.
    #[arg(long, default_value = parley_nlip::DEFAULT_LANGUAGE)]
    pub language: String,
    /// Send as a control message.
    #[arg(long)]
    pub control: bool,
    /// Use CBOR bodies over HTTP.
    #[arg(long)]
    pub cbor: bool,
    /// Add a token submessage, SUBFORMAT=CONTENT (e.g. conversation=abc, authentication=key).
    #[arg(long = "nlip-token", value_name = "SUBFORMAT=CONTENT")]
    pub tokens: Vec<String>,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub token: TokenArgs,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run a handler once in the sandbox with the configured limits and print its output
    /// or the typed error.
    Run(SandboxRunArgs),
}

#[derive(Debug, clap::Args)]
pub struct SandboxRunArgs {
    /// The handler's JavaScript source (defines `handle(request)`).
    #[arg(long)]
    pub handler: PathBuf,
    /// The request, as JSON.
    #[arg(long)]
    pub input: String,
    /// Capabilities the handler may call through `host.call` (repeatable).
    #[arg(long = "grant", value_name = "CAPABILITY")]
    pub grants: Vec<String>,
    /// Capabilities file that performs granted calls.
    #[arg(long, env = "PARLEY_CAPABILITIES")]
    pub capabilities: Option<PathBuf>,
    /// Config file whose [sandbox] limits apply.
    #[arg(long, env = "PARLEY_CONFIG")]
    pub config: Option<PathBuf>,
}
