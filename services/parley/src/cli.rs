//! The `parley` command line.

#[macro_use]
mod output;
mod args;
mod audit;
mod inspect;
mod peers;
mod requester;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use parley_nlip::{ErrorInfo, Format, Message, Submessage};

pub use args::*;

use crate::client::{ClientError, NlipClient};
use crate::config::{ConfigError, Settings};
use crate::negotiation::requester::RequesterError;
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
        Command::Negotiate(args) => requester::negotiate(args).await,
        Command::Call(args) => requester::call(args).await,
        Command::Protocols(ProtocolsCommand::List { store }) => {
            inspect::protocols_list(store).await
        }
        Command::Protocols(ProtocolsCommand::Show { hash, store }) => {
            inspect::protocols_show(&hash, store).await
        }
        Command::Conversations(ConversationsCommand::Show { id, store }) => {
            inspect::conversations_show(&id, store).await
        }
        Command::Audit(args) => audit::audit(args).await,
        Command::Peers(command) => peers::run(command).await,
    }
}

async fn send(args: SendArgs) -> Result<ExitCode, CliError> {
    let mut message = Message::text(args.language, args.text);
    if args.control {
        message = message.into_control();
    }
    for token in &args.tokens {
        let (sub, content) = token.split_once('=').ok_or_else(|| {
            CliError::Usage(format!("--nlip-token {token:?} is not SUBFORMAT=CONTENT"))
        })?;
        message = message.with_submessage(Submessage::new(Format::Token, sub, content));
    }
    let token = args.token.credential()?;
    let tls = args.tls.client_tls()?;
    let mut client = NlipClient::connect_as(&args.url, args.cbor, &tls, token.as_ref()).await?;
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
    let capabilities = crate::startup::load_capabilities(args.capabilities.as_deref()).await?;
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
