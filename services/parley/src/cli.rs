//! The `parley` command line.

#[macro_use]
mod output;
mod inspect;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use parley_nlip::{ErrorInfo, Format, Message, Submessage};

use crate::client::{ClientError, NlipClient};
use crate::config::{ConfigError, DEFAULT_DATABASE_CONNECT_TIMEOUT_MS, ServeArgs, Settings};
use crate::negotiation::requester::{
    Outcome, ProtocolRef, Requested, Requester, RequesterError, ask_in_natural_language,
};
use crate::startup::{Bound, StartupError, shutdown_signal};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error(transparent)]
    Requester(#[from] RequesterError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Store(#[from] parley_store::StoreError),
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An argument or file that is not the JSON it must be; `what` says which.
    #[error("{what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot draft a protocol from the requirement")]
    Draft(#[source] parley_reasoner::ProtocolReasonerError),
    #[error("{0}")]
    Usage(String),
    #[error("the sandbox task panicked")]
    SandboxTask(#[source] tokio::task::JoinError),
    #[error("no Parley data at {} (set --data-dir or PARLEY_DATABASE_URL)", .0.display())]
    NoData(PathBuf),
    #[error("cannot write the output")]
    Output(#[source] std::io::Error),
}

fn read(path: &PathBuf) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.clone(),
        source,
    })
}

fn json(text: &str, what: impl FnOnce() -> String) -> Result<serde_json::Value, CliError> {
    serde_json::from_str(text).map_err(|source| CliError::Json {
        what: what(),
        source,
    })
}

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
    fn settings(&self) -> Result<Settings, CliError> {
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
    async fn open(&self) -> Result<std::sync::Arc<dyn parley_store::Store>, CliError> {
        Ok(crate::startup::open_store(&self.settings()?).await?)
    }

    /// Opens a store that must exist already (commands that only read): without a database
    /// URL and without the embedded database file, says where it looked instead of creating
    /// an empty one.
    async fn open_existing(&self) -> Result<std::sync::Arc<dyn parley_store::Store>, CliError> {
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

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["protocol", "requirement"])))]
pub struct NegotiateArgs {
    /// The provider's NLIP end-point (http(s)://…/nlip or ws(s)://…/nlip/ws; without a path,
    /// the peer's /nlip or /nlip/ws).
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
    #[command(flatten)]
    pub store: LocalStore,
}

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The provider's NLIP end-point (without a path: its /nlip, or /nlip/ws over ws(s)://).
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

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// End-point: http(s)://host:port/nlip, ws(s)://host:port/nlip/ws (CBOR) or …/nlip/ws/text
    /// (JSON); without a path, the peer's /nlip or /nlip/ws
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
    #[arg(long = "token", value_name = "SUBFORMAT=CONTENT")]
    pub tokens: Vec<String>,
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

/// Parses the command line and runs it; errors are printed with their causes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            note!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) if output::reader_gone(&e) => ExitCode::SUCCESS,
        Err(e) => {
            note!("error: {}", crate::error::chain(&e));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Serve(args) => {
            let settings = Settings::load(&args)?;
            crate::telemetry::init(settings.log_format);
            Bound::new(&settings).await?.run(shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Send(args) => send(args).await,
        Command::Sandbox(SandboxCommand::Run(args)) => sandbox_run(args).await,
        Command::Negotiate(args) => negotiate(args).await,
        Command::Call(args) => call(args).await,
        Command::Protocols(ProtocolsCommand::List { store }) => protocols_list(store).await,
        Command::Protocols(ProtocolsCommand::Show { hash, store }) => {
            protocols_show(&hash, store).await
        }
        Command::Conversations(ConversationsCommand::Show { id, store }) => {
            inspect::conversations_show(&id, store).await
        }
    }
}

/// The protocol text `negotiate` proposes: the file given, or one drafted from a requirement.
async fn protocol_text(args: &NegotiateArgs) -> Result<String, CliError> {
    let requirement = match (&args.protocol, &args.requirement) {
        (Some(path), _) => return read(path),
        (None, Some(requirement)) => requirement,
        (None, None) => return Err(CliError::Usage("give --protocol or --requirement".into())),
    };
    let schema = |p: &Option<PathBuf>| -> Result<serde_json::Value, CliError> {
        let p = p.as_ref().ok_or_else(|| {
            CliError::Usage("--input-schema and --output-schema are required".into())
        })?;
        json(&read(p)?, || format!("{} is not JSON", p.display()))
    };
    use parley_reasoner::ProtocolReasoner as _;
    parley_reasoner::BuiltinProtocolReasoner
        .draft(
            &read(requirement)?,
            &schema(&args.input_schema)?,
            &schema(&args.output_schema)?,
        )
        .await
        .map_err(CliError::Draft)
}

async fn negotiate(args: NegotiateArgs) -> Result<ExitCode, CliError> {
    let text = protocol_text(&args).await?;
    let requester = Requester {
        max_rounds: args.max_rounds,
        ..Requester::new(args.store.open().await?)
    };
    let result = match requester.negotiate(&args.url, &text, progress).await {
        Ok(r) => r,
        Err(RequesterError::NotSupported) => {
            note!("the peer does not speak the meta-protocol: asking in natural language instead");
            let answer = ask_in_natural_language(&args.url, &text).await?;
            out!("status   natural-language fallback");
            out!("{answer}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.into()),
    };
    out!("hash     {}", result.hash);
    let (status, ok) = match &result.outcome {
        Outcome::Agreed => ("agreed".to_owned(), true),
        Outcome::ZeroRtt => (
            "known to the provider (0-RTT, no negotiation)".to_owned(),
            true,
        ),
        Outcome::Rejected { code, reason } => (format!("rejected ({code}): {reason}"), false),
    };
    out!("status   {status}");
    out!("rounds   {}", result.rounds);
    out!("messages {} NLIP exchanges", result.messages);
    out!("transcript:");
    for (direction, message) in &result.transcript {
        let arrow = match direction {
            parley_store::Direction::Outbound => "→",
            parley_store::Direction::Inbound => "←",
        };
        let kind = message
            .get("action")
            .or_else(|| message.get("type"))
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        let status = message.get("status").and_then(|v| v.as_str()).unwrap_or("");
        out!("  {arrow} {kind} {status}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Progress of a negotiation, on stderr.
fn progress(p: crate::negotiation::requester::Progress) {
    note!("… {} (round {})", p.stage, p.round);
}

async fn call(args: CallArgs) -> Result<ExitCode, CliError> {
    let request = json(&args.json, || "--json is not valid JSON".into())?;
    let requester = Requester {
        max_rounds: args.max_rounds,
        ..Requester::new(args.store.open().await?)
    };
    let path = PathBuf::from(&args.protocol);
    let protocol = if path.is_file() {
        ProtocolRef::Text(read(&path)?)
    } else {
        match requester.resolve_hash(&args.protocol).await {
            Ok(hash) => ProtocolRef::Hash(hash),
            Err(RequesterError::NotAHash(given)) => {
                return Err(CliError::Usage(format!(
                    "--protocol {given:?} is neither a file nor a protocol hash"
                )));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let requested = requester
        .request(&args.url, protocol, request, !args.no_fallback, progress)
        .await?;
    match &requested {
        Requested::Protocol {
            hash,
            negotiated,
            called,
        } => {
            if called.renegotiated.is_some() {
                note!("the provider no longer knew the protocol: negotiated it again");
            } else if let Some(n) = negotiated {
                let how = match n.outcome {
                    Outcome::ZeroRtt => "known to the provider (0-RTT, no negotiation)".to_owned(),
                    _ if n.rounds == 1 => "agreed in 1 round".to_owned(),
                    _ => format!("agreed in {} rounds", n.rounds),
                };
                note!("protocol {hash}: {how}");
            }
            out!(
                "{}",
                serde_json::to_string_pretty(&called.answer)
                    .expect("a JSON value always serializes")
            );
        }
        Requested::Fallback { reason, .. } => {
            note!("fell back to natural language: {reason}");
            out!("{}", requested.text());
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn protocols_list(store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    let agreements = store.list_agreements(parley_store::MAX_PAGE).await?;
    if agreements.is_empty() {
        out!("no protocols agreed yet");
    }
    for a in agreements {
        let verified = match a.role {
            parley_store::Role::Provider => match store.active_handler(&a.protocol_hash).await? {
                Some(h) => format!("handler {} verified", &h.source_sha256[..12]),
                None => "no active handler".to_owned(),
            },
            parley_store::Role::Requester => "checked by the provider".to_owned(),
        };
        out!(
            "{}  {:9}  {}  {}  {verified}",
            a.protocol_hash,
            a.role,
            a.last_agreed_at.format("%Y-%m-%d %H:%M"),
            a.peer
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn protocols_show(hash: &str, store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    let hex = Requester::new(store.clone())
        .resolve_hash(hash)
        .await?
        .to_string();
    let Some(protocol) = store.get_protocol(&hex).await? else {
        note!("protocol {hex} is not in the local store");
        return Ok(ExitCode::FAILURE);
    };
    out!("protocol {hex}");
    for a in store.agreements_for_protocol(&hex).await? {
        out!(
            "agreed   with {} as {} at {}",
            a.peer,
            a.role,
            a.last_agreed_at
        );
    }
    let mut negotiations = Vec::new();
    for n in store.negotiations_for_protocol(&hex).await? {
        let owner = parley_store::ModelUsageOwner::Negotiation(n.id);
        let usage = store.model_usage(&owner).await?;
        negotiations.push((n, usage));
    }
    let accepted: Vec<_> = negotiations
        .iter()
        .filter(|(n, _)| n.status == parley_store::NegotiationStatus::Accepted)
        .map(|(_, usage)| usage.clone())
        .collect();
    if !accepted.is_empty() {
        out!("{}", inspect::agreement_cost(&accepted));
    }
    for (n, usage) in &negotiations {
        out!(
            "negotiation {} {} {} rounds, {} messages",
            n.id,
            n.status,
            n.rounds,
            n.message_count
        );
        out!("{}", inspect::negotiation_cost(usage));
    }
    if let Some(h) = store.active_handler(&hex).await? {
        out!(
            "handler  {} by {} ({}), verification {}",
            h.source_sha256,
            h.backend,
            h.capabilities.join(", "),
            match h.verification_passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "not run",
            }
        );
        out!(
            "serves   {}",
            if h.compiled.is_some() {
                "its compiled form (the built-in mapping, same answers on every test case)"
            } else {
                "its JavaScript"
            }
        );
    }
    out!("\n{}", protocol.text);
    Ok(ExitCode::SUCCESS)
}

async fn send(args: SendArgs) -> Result<ExitCode, CliError> {
    let mut message = Message::text(args.language, args.text);
    if args.control {
        message = message.into_control();
    }
    for token in &args.tokens {
        let (sub, content) = token.split_once('=').ok_or_else(|| {
            CliError::Usage(format!("--token {token:?} is not SUBFORMAT=CONTENT"))
        })?;
        message = message.with_submessage(Submessage::new(Format::Token, sub, content));
    }
    let mut client = NlipClient::connect(&args.url, args.cbor).await?;
    let reply = client.send(&message).await?;
    if args.json {
        let pretty = serde_json::to_string_pretty(&parley_nlip::to_json_value(&reply.message))
            .expect("a JSON value always serializes");
        out!("{pretty}");
    } else {
        let text = reply
            .message
            .text_content()
            .map(str::to_owned)
            .unwrap_or_else(|| parley_nlip::to_json_value(&reply.message).to_string());
        out!("{text}");
    }
    if let Some(err) = ErrorInfo::from_message(&reply.message) {
        note!("error {}: {}", err.code, err.message);
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

async fn sandbox_run(args: SandboxRunArgs) -> Result<ExitCode, CliError> {
    let config = match &args.config {
        Some(path) => Settings::from_file(path)?.sandbox,
        None => parley_sandbox::SandboxConfig::default(),
    };
    let source = read(&args.handler)?;
    let input = json(&args.input, || "--input is not valid JSON".into())?;
    let capabilities = crate::startup::load_capabilities(args.capabilities.as_deref())?;
    let host = crate::host::CapabilityBridge::new(capabilities, tokio::runtime::Handle::current());
    let grants: parley_sandbox::Grants = args.grants.iter().cloned().collect();
    // Compiling and running a handler is blocking work: keep it off the async workers.
    let outcome = tokio::task::spawn_blocking(move || {
        parley_sandbox::run_once(config, &source, &input, &grants, host)
    })
    .await
    .map_err(CliError::SandboxTask)?;
    match outcome {
        Ok(output) => {
            let pretty = serde_json::to_string_pretty(&output.output)
                .expect("a JSON value always serializes");
            out!("{pretty}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            note!("error {}: {e}", e.code());
            Ok(ExitCode::FAILURE)
        }
    }
}
