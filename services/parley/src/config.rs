//! Server configuration: defaults, then an optional TOML file, then `PARLEY_*` environment
//! variables and flags (clap merges those two, flags winning). Everything is validated
//! before any socket opens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

pub mod access;
mod audit;
pub mod did_wba;
pub mod issuers;
mod limits;
mod listen;
mod mcp;
mod negotiation;
mod throttle;
pub mod tls;

pub use access::{AccessSettings, AnonymousAccess};
pub use audit::AuditSettings;
pub use limits::Limits;
pub use listen::{BadListenAddr, ListenAddr};
pub use mcp::McpSettings;
pub use negotiation::NegotiationLimits;
pub use throttle::{KindRates, MessageRates, Rate, Throttle, ThrottleArgs};
pub use tls::{ClientAuth, ClientTlsSettings, TlsSettings, TlsVersion};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting {setting}: {message}")]
    Invalid {
        setting: &'static str,
        message: String,
    },
}

fn invalid(setting: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting,
        message: message.into(),
    }
}

/// Which reasoner answers natural language; the protocol reasoner uses its model too (see
/// [`ProtocolBackend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReasonerKind {
    /// Deterministic, no network.
    #[default]
    Builtin,
    /// Any OpenAI-compatible chat-completions endpoint.
    Openai,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Settings for the OpenAI-compatible backend.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    pub base_url: String,
    pub model: String,
    /// Secret: never printed (see the Debug impl).
    pub api_key: Option<String>,
    pub timeout_secs: u64,
    pub max_tool_rounds: u32,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        OpenAiSettings {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key: None,
            timeout_secs: 60,
            max_tool_rounds: 4,
        }
    }
}

impl std::fmt::Debug for OpenAiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout_secs", &self.timeout_secs)
            .field("max_tool_rounds", &self.max_tool_rounds)
            .finish()
    }
}

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

/// The complete, validated configuration of `parley serve`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address of the NLIP end-point (HTTP and WebSocket); a host name is resolved at start.
    pub listen: ListenAddr,
    /// Address of the out-of-band upload end-point (ECMA-431: a different port).
    pub upload_listen: ListenAddr,
    /// Base URL announced for uploads, when clients reach the upload port under another name.
    pub upload_public_url: Option<String>,
    /// Where the embedded database and other files live.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; defaults to a SQLite file in `data_dir`.
    pub database_url: Option<String>,
    /// How long connecting to PostgreSQL at start may take before it fails.
    pub database_connect_timeout_ms: u64,
    /// The capabilities file (TOML or JSON). Without one the agent can only talk.
    pub capabilities: Option<PathBuf>,
    /// This agent's identity, appended to the tokens it creates (`conversation_<id>`).
    pub agent_id: String,
    pub reasoner: ReasonerKind,
    pub openai: OpenAiSettings,
    pub limits: Limits,
    pub log_format: LogFormat,
    pub sandbox: parley_sandbox::SandboxConfig,
    pub negotiation: NegotiationLimits,
    /// The ethics statement published at `GET /ethics` (ECMA-434 §7.1.3), a UTF-8 text file
    /// (Markdown reads well); Parley's own `ETHICS.md` when unset.
    pub ethics_statement: Option<PathBuf>,
    /// Parley as an MCP server (`/mcp`), off by default.
    pub mcp: McpSettings,
    /// TLS on the listeners, and what the server's own outgoing calls trust.
    pub tls: TlsSettings,
    /// How often one address, and one authenticated peer, may cause each kind of work.
    pub throttle: Throttle,
    /// Who may do what: anonymous peers, the peers file.
    pub access: AccessSettings,
    /// How the audit log's capability calls are buffered.
    pub audit: AuditSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)).into(),
            upload_listen: SocketAddr::from(([127, 0, 0, 1], 8081)).into(),
            upload_public_url: None,
            data_dir: PathBuf::from("data"),
            database_url: None,
            database_connect_timeout_ms: DEFAULT_DATABASE_CONNECT_TIMEOUT_MS,
            capabilities: None,
            agent_id: "parley".into(),
            reasoner: ReasonerKind::Builtin,
            openai: OpenAiSettings::default(),
            limits: Limits::default(),
            log_format: LogFormat::Text,
            sandbox: parley_sandbox::SandboxConfig::default(),
            negotiation: Default::default(),
            ethics_statement: None,
            mcp: McpSettings::default(),
            tls: TlsSettings::default(),
            throttle: Throttle::default(),
            access: AccessSettings::default(),
            audit: AuditSettings::default(),
        }
    }
}

/// Flags of `parley serve`; each also reads a `PARLEY_*` environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML config file; flags and environment override it.
    #[arg(long, env = "PARLEY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the NLIP end-point, HOST:PORT (a name such as localhost is resolved)
    /// [default: 127.0.0.1:8080]
    #[arg(long, env = "PARLEY_LISTEN")]
    pub listen: Option<ListenAddr>,
    /// Address of the upload end-point, HOST:PORT [default: 127.0.0.1:8081]
    #[arg(long, env = "PARLEY_UPLOAD_LISTEN")]
    pub upload_listen: Option<ListenAddr>,
    /// Base URL announced for uploads [default: http://<upload-listen>]
    #[arg(long, env = "PARLEY_UPLOAD_PUBLIC_URL")]
    pub upload_public_url: Option<String>,
    /// Directory for the embedded database [default: ./data]
    #[arg(long, env = "PARLEY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// sqlite://PATH or postgres://… [default: sqlite in the data directory]
    #[arg(long, env = "PARLEY_DATABASE_URL")]
    pub database_url: Option<String>,
    /// How long connecting to PostgreSQL may take at start, in milliseconds [default: 5000]
    #[arg(long, env = "PARLEY_DATABASE_CONNECT_TIMEOUT_MS")]
    pub database_connect_timeout_ms: Option<u64>,
    /// Capabilities file (TOML or JSON)
    #[arg(long, env = "PARLEY_CAPABILITIES")]
    pub capabilities: Option<PathBuf>,
    /// Identity appended to tokens this agent creates [default: parley]
    #[arg(long, env = "PARLEY_AGENT_ID")]
    pub agent_id: Option<String>,
    /// Reasoner backend [default: builtin]
    #[arg(long, env = "PARLEY_REASONER")]
    pub reasoner: Option<ReasonerKind>,
    /// Base URL of the OpenAI-compatible API
    #[arg(long, env = "PARLEY_OPENAI_BASE_URL")]
    pub openai_base_url: Option<String>,
    /// Model name for the OpenAI-compatible API
    #[arg(long, env = "PARLEY_OPENAI_MODEL")]
    pub openai_model: Option<String>,
    /// API key for the OpenAI-compatible API
    #[arg(long, env = "PARLEY_OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<String>,
    /// File holding the API key (a Docker secret, say); trailing whitespace is dropped.
    /// Instead of --openai-api-key.
    #[arg(long, env = "PARLEY_OPENAI_API_KEY_FILE", value_name = "FILE")]
    pub openai_api_key_file: Option<PathBuf>,
    /// Largest NLIP message in bytes [default: 1048576]
    #[arg(long, env = "PARLEY_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Largest upload in bytes [default: 67108864]
    #[arg(long, env = "PARLEY_MAX_UPLOAD_BYTES")]
    pub max_upload_bytes: Option<usize>,
    /// Request timeout in milliseconds [default: 30000]
    #[arg(long, env = "PARLEY_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    /// Requests per second per client address, 0 = unlimited [default: 100]
    #[arg(long, env = "PARLEY_RATE_LIMIT")]
    pub rate_limit: Option<u32>,
    /// Idle time after which a conversation and its state are deleted, in milliseconds;
    /// 0 = never [default: 86400000, a day]
    #[arg(long, env = "PARLEY_CONVERSATION_IDLE_TIMEOUT_MS")]
    pub conversation_idle_timeout_ms: Option<u64>,
    /// Proposals per negotiation before it ends as rejected [default: 10]
    #[arg(long, env = "PARLEY_MAX_ROUNDS")]
    pub max_rounds: Option<u32>,
    /// Log format [default: text]
    #[arg(long, env = "PARLEY_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// The ethics statement served at GET /ethics, a UTF-8 text file [default: Parley's ETHICS.md]
    #[arg(long, env = "PARLEY_ETHICS_STATEMENT", value_name = "FILE")]
    pub ethics_statement: Option<PathBuf>,
    /// Serve Parley's capabilities and negotiated protocols as MCP tools on /mcp
    /// (`--serve-mcp` alone means true) [default: false]
    #[arg(
        long,
        env = "PARLEY_SERVE_MCP",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub serve_mcp: Option<bool>,
    #[command(flatten)]
    pub tls: tls::TlsArgs,
    #[command(flatten)]
    pub throttle: ThrottleArgs,
    #[command(flatten)]
    pub access: access::AccessArgs,
}

impl Settings {
    /// Builds the settings from defaults, the config file and the flags, then validates.
    pub fn load(args: &ServeArgs) -> Result<Settings, ConfigError> {
        let mut s = match &args.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        macro_rules! set {
            ($($arg:ident => $($field:ident).+),* $(,)?) => {
                $(if let Some(v) = &args.$arg { s.$($field).+ = v.clone().into(); })*
            };
        }
        set!(
            listen => listen,
            upload_listen => upload_listen,
            upload_public_url => upload_public_url,
            data_dir => data_dir,
            database_url => database_url,
            database_connect_timeout_ms => database_connect_timeout_ms,
            capabilities => capabilities,
            agent_id => agent_id,
            reasoner => reasoner,
            openai_base_url => openai.base_url,
            openai_model => openai.model,
            openai_api_key => openai.api_key,
            max_message_bytes => limits.max_message_bytes,
            max_upload_bytes => limits.max_upload_bytes,
            request_timeout_ms => limits.request_timeout_ms,
            rate_limit => limits.rate_limit_per_second,
            conversation_idle_timeout_ms => limits.conversation_idle_timeout_ms,
            log_format => log_format,
            max_rounds => negotiation.max_rounds,
            ethics_statement => ethics_statement,
            serve_mcp => mcp.serve,
        );
        args.tls.apply(&mut s.tls);
        args.throttle.apply(&mut s.throttle);
        args.access.apply(&mut s.access);
        if let Some(path) = &args.openai_api_key_file {
            if args.openai_api_key.is_some() {
                return Err(invalid(
                    "openai_api_key_file",
                    "give the key (--openai-api-key, PARLEY_OPENAI_API_KEY) or the file that \
                     holds it (--openai-api-key-file, PARLEY_OPENAI_API_KEY_FILE), not both",
                ));
            }
            s.openai.api_key = Some(read_secret("openai_api_key_file", path)?);
        }
        s.validate()?;
        Ok(s)
    }

    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Checks every setting that could otherwise fail late or behave absurdly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_identity()?;
        self.limits.validate()?;
        if self.reasoner == ReasonerKind::Openai {
            let url = url::Url::parse(&self.openai.base_url)
                .map_err(|e| invalid("openai.base_url", format!("not a URL: {e}")))?;
            if self.openai.model.trim().is_empty() {
                return Err(invalid("openai.model", "must not be empty"));
            }
            let keyless = self
                .openai
                .api_key
                .as_deref()
                .is_none_or(|k| k.trim().is_empty());
            if keyless && !crate::model_endpoint::is_local(&url) {
                return Err(invalid(
                    "openai.api_key",
                    format!(
                        "{url} is a hosted end-point and needs an API key (--openai-api-key, PARLEY_OPENAI_API_KEY, --openai-api-key-file, PARLEY_OPENAI_API_KEY_FILE or [openai] api_key); only local end-points are called without one"
                    ),
                ));
            }
        }
        if let Some(path) = &self.capabilities
            && !path.is_file()
        {
            return Err(invalid(
                "capabilities",
                format!("{} is not a readable file", path.display()),
            ));
        }
        if self.database_connect_timeout_ms == 0 {
            return Err(invalid("database_connect_timeout_ms", "must be positive"));
        }
        self.ethics()?;
        self.negotiation.validate()?;
        self.mcp.validate()?;
        self.tls.validate()?;
        self.throttle.validate()?;
        self.access.validate()?;
        self.audit.validate()?;
        self.sandbox
            .validate()
            .map_err(|e| invalid("sandbox", e.to_string()))?;
        Ok(())
    }

    /// The addresses, the agent's identity and the database URL.
    fn validate_identity(&self) -> Result<(), ConfigError> {
        if self.listen == self.upload_listen && self.listen.port() != 0 {
            return Err(invalid(
                "upload_listen",
                "must differ from listen (ECMA-431 puts uploads on another port)",
            ));
        }
        if self.agent_id.is_empty()
            || !self
                .agent_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        {
            return Err(invalid(
                "agent_id",
                "must be non-empty and use only letters, digits, '.' and '-'",
            ));
        }
        if let Some(url) = &self.database_url {
            let ok = ["sqlite:", "postgres://", "postgresql://"]
                .iter()
                .any(|p| url.starts_with(p));
            if !ok {
                return Err(invalid(
                    "database_url",
                    "must start with sqlite:, postgres:// or postgresql://",
                ));
            }
        }
        if let Some(url) = &self.upload_public_url {
            url::Url::parse(url)
                .map_err(|e| invalid("upload_public_url", format!("not a URL: {e}")))?;
        }
        Ok(())
    }

    /// The database URL in force: the configured one, or a SQLite file in the data dir.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", self.database_file().display()))
    }

    /// The embedded database's file, used when no database URL is configured.
    pub fn database_file(&self) -> PathBuf {
        self.data_dir.join("parley.db")
    }

    /// The URL announced for uploads (§6.4).
    pub fn upload_base_url(&self, bound: SocketAddr) -> String {
        self.upload_public_url
            .clone()
            .unwrap_or_else(|| format!("{}://{bound}", self.http_scheme()))
            .trim_end_matches('/')
            .to_owned()
    }

    /// `https` when the listeners speak TLS, else `http`.
    pub fn http_scheme(&self) -> &'static str {
        if self.tls.enabled() { "https" } else { "http" }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.limits.request_timeout_ms)
    }

    pub fn database_connect_timeout(&self) -> Duration {
        Duration::from_millis(self.database_connect_timeout_ms)
    }
}

/// Default of [`Settings::database_connect_timeout_ms`].
pub const DEFAULT_DATABASE_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// A secret kept in a file, as container secrets are: the whole file, without the trailing
/// newline (and any other trailing whitespace) editors and `echo` add.
/// Parley's own ethics statement, published when the operator gives none.
const ETHICS: &str = include_str!("../../../ETHICS.md");

/// The largest ethics statement an operator may publish.
const MAX_ETHICS_BYTES: u64 = 64 * 1024;

impl Settings {
    /// The ethics statement to publish: the operator's file (read now, so that a missing,
    /// empty, oversized or non-UTF-8 one stops the start) or Parley's own.
    pub fn ethics(&self) -> Result<std::borrow::Cow<'static, str>, ConfigError> {
        const SETTING: &str = "ethics_statement";
        let Some(path) = &self.ethics_statement else {
            return Ok(ETHICS.into());
        };
        let cannot =
            |e: std::io::Error| invalid(SETTING, format!("cannot read {}: {e}", path.display()));
        let size = std::fs::metadata(path).map_err(cannot)?.len();
        if size > MAX_ETHICS_BYTES {
            return Err(invalid(
                SETTING,
                format!(
                    "{} is {size} bytes; at most {MAX_ETHICS_BYTES} are published",
                    path.display()
                ),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(cannot)?;
        if text.trim().is_empty() {
            return Err(invalid(SETTING, format!("{} is empty", path.display())));
        }
        Ok(text.into())
    }
}

fn read_secret(setting: &'static str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(setting, format!("cannot read {}: {e}", path.display())))?;
    let secret = text.trim_end();
    if secret.is_empty() {
        return Err(invalid(setting, format!("{} is empty", path.display())));
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ethics_statement_must_be_a_readable_nonempty_text_of_bounded_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Settings::default();
        assert!(s.ethics().expect("own statement").contains("ECMA-434"));
        let refused = |s: &Settings, needle: &str| {
            let e = s.validate().expect_err("refused").to_string();
            assert!(e.contains("ethics_statement") && e.contains(needle), "{e}");
        };
        s.ethics_statement = Some(dir.path().join("missing.md"));
        refused(&s, "cannot read");
        let empty = dir.path().join("empty.md");
        std::fs::write(&empty, "  \n").expect("write");
        s.ethics_statement = Some(empty);
        refused(&s, "is empty");
        let large = dir.path().join("large.md");
        std::fs::write(&large, "x".repeat(64 * 1024 + 1)).expect("write");
        s.ethics_statement = Some(large);
        refused(&s, "at most 65536");
        let binary = dir.path().join("binary.md");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("write");
        s.ethics_statement = Some(binary);
        refused(&s, "cannot read");
        let good = dir.path().join("good.md");
        std::fs::write(&good, "We answer weather questions.").expect("write");
        s.ethics_statement = Some(good);
        s.validate().expect("a readable statement");
        assert_eq!(s.ethics().expect("read"), "We answer weather questions.");
    }

    #[test]
    fn defaults_validate() {
        Settings::default().validate().expect("defaults are valid");
        assert!(
            Settings::default()
                .database_url()
                .starts_with("sqlite://data/")
        );
    }

    #[test]
    fn file_then_flags_override() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("parley.toml");
        std::fs::write(
            &file,
            "agent_id = \"from-file\"\n[limits]\nmax_message_bytes = 4096\n",
        )
        .expect("write");
        let args = ServeArgs {
            config: Some(file),
            agent_id: Some("from-flag".into()),
            ..ServeArgs::default()
        };
        let s = Settings::load(&args).expect("valid");
        assert_eq!(s.agent_id, "from-flag");
        assert_eq!(s.limits.max_message_bytes, 4096);
    }

    #[test]
    fn mcp_is_served_when_the_file_or_the_flag_says_so_and_the_flag_wins() {
        assert!(
            !Settings::load(&ServeArgs::default())
                .expect("valid")
                .mcp
                .serve
        );
        let on = ServeArgs {
            serve_mcp: Some(true),
            ..ServeArgs::default()
        };
        assert!(Settings::load(&on).expect("valid").mcp.serve);

        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("parley.toml");
        std::fs::write(
            &file,
            "[mcp]\nserve = true\nallowed_hosts = [\"parley.example:8080\"]\n",
        )
        .expect("write");
        let from_file = ServeArgs {
            config: Some(file.clone()),
            ..ServeArgs::default()
        };
        let s = Settings::load(&from_file).expect("valid");
        assert!(s.mcp.serve);
        assert_eq!(s.mcp.allowed_hosts, ["parley.example:8080"]);
        let off = ServeArgs {
            serve_mcp: Some(false),
            ..from_file
        };
        assert!(!Settings::load(&off).expect("valid").mcp.serve);

        for (line, setting) in [
            ("allowed_hosts = [\"a b\"]", "mcp.allowed_hosts"),
            ("max_protocol_tools = 5000", "mcp.max_protocol_tools"),
        ] {
            std::fs::write(&file, format!("[mcp]\n{line}\n")).expect("write");
            let err = Settings::load(&ServeArgs {
                config: Some(file.clone()),
                ..Default::default()
            })
            .expect_err(setting);
            assert!(err.to_string().contains(setting), "{setting}: {err}");
        }
    }

    #[test]
    fn the_serve_mcp_flag_is_a_bare_flag_or_a_boolean() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(["parley", "serve"].iter().chain(args))
                .expect("parses");
            match cli.command {
                crate::cli::Command::Serve(args) => args.serve_mcp,
                other => panic!("serve, not {other:?}"),
            }
        };
        assert_eq!(parse(&["--serve-mcp"]), Some(true));
        assert_eq!(parse(&["--serve-mcp=true"]), Some(true));
        assert_eq!(parse(&["--serve-mcp=false"]), Some(false));
        assert!(crate::cli::Cli::try_parse_from(["parley", "serve", "--serve-mcp=maybe"]).is_err());
    }

    #[test]
    fn bad_settings_name_the_setting() {
        let cases: Vec<(ServeArgs, &str)> = vec![
            (
                ServeArgs {
                    database_url: Some("mysql://x".into()),
                    ..Default::default()
                },
                "database_url",
            ),
            (
                ServeArgs {
                    agent_id: Some("has space".into()),
                    ..Default::default()
                },
                "agent_id",
            ),
            (
                ServeArgs {
                    max_message_bytes: Some(1),
                    ..Default::default()
                },
                "limits.max_message_bytes",
            ),
            (
                ServeArgs {
                    conversation_idle_timeout_ms: Some(5),
                    ..Default::default()
                },
                "limits.conversation_idle_timeout_ms",
            ),
            (
                ServeArgs {
                    capabilities: Some("/nonexistent/caps.toml".into()),
                    ..Default::default()
                },
                "capabilities",
            ),
            (
                ServeArgs {
                    listen: Some("127.0.0.1:9000".parse().expect("addr")),
                    upload_listen: Some("127.0.0.1:9000".parse().expect("addr")),
                    ..Default::default()
                },
                "upload_listen",
            ),
        ];
        for (args, setting) in cases {
            let err = Settings::load(&args).expect_err(setting);
            assert!(err.to_string().contains(setting), "{setting}: {err}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "no_such_setting = 1\n").expect("write");
        let err = Settings::load(&ServeArgs {
            config: Some(file.clone()),
            ..Default::default()
        })
        .expect_err("unknown key");
        assert!(err.to_string().contains("no_such_setting"), "{err}");
        for (line, setting) in [
            ("max_connections = 0", "limits.max_connections"),
            (
                "header_read_timeout_ms = 0",
                "limits.header_read_timeout_ms",
            ),
            (
                "conversation_sweep_interval_ms = 0",
                "limits.conversation_sweep_interval_ms",
            ),
        ] {
            std::fs::write(&file, format!("[limits]\n{line}\n")).expect("write");
            let err = Settings::load(&ServeArgs {
                config: Some(file.clone()),
                ..Default::default()
            })
            .expect_err(setting);
            assert!(err.to_string().contains(setting), "{setting}: {err}");
        }
    }
}
