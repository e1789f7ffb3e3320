//! The two error types of this crate: one for loading a capabilities file, one for invoking a
//! capability.

use std::time::Duration;

/// A capabilities file that cannot be used. The message always says where the problem is (the
/// file, the capability, the field) and what is wrong, because the operator reads it at start-up
/// and must be able to fix the file from the message alone.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file (or a dataset file it references) could not be read.
    #[error("{source_name}: cannot read {path}: {source}")]
    Read {
        source_name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file name does not end in `.toml` or `.json`.
    #[error("{path}: unsupported capabilities file extension (expected .toml or .json)")]
    UnsupportedFormat { path: String },
    /// The file is not valid TOML/JSON, or does not have the expected shape (unknown or missing
    /// keys, wrong value types). The message is the parser's, which names the line or key.
    #[error("{source_name}: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    /// The file parsed but a value is not acceptable.
    #[error("{source_name}: {context}: {message}")]
    Invalid {
        source_name: String,
        /// `capability `name`, field `binding.url`` or `field `agent.name``.
        context: String,
        message: String,
    },
    /// The HTTP client used by `http` bindings could not be built (TLS set-up failure).
    #[error("cannot build the HTTP client for http bindings: {0}")]
    HttpClient(#[source] reqwest::Error),
}

/// Why a capability invocation failed. Each variant has a stable [`code`](Self::code) that
/// callers put into protocol responses and logs; the `Display` text is for humans.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// No capability with that name is declared.
    #[error("unknown capability `{name}`")]
    UnknownCapability { name: String },
    /// The arguments do not match the capability's input schema.
    #[error("invalid arguments for `{capability}`: {message}")]
    InvalidArguments { capability: String, message: String },
    /// The binding could not perform the call (connection refused, unexpected HTTP status,
    /// non-JSON body, missing JSON pointer target, ...).
    #[error("capability `{capability}` failed: {message}")]
    BindingFailed { capability: String, message: String },
    /// The binding produced a value that does not match the output schema.
    #[error("capability `{capability}` returned an invalid result: {message}")]
    InvalidResult { capability: String, message: String },
    /// The looked-up entity does not exist and the capability is configured to report that as an
    /// error (`not_found = "error"`).
    #[error("capability `{capability}`: not found: {message}")]
    NotFound { capability: String, message: String },
    /// The binding did not complete within its timeout.
    #[error("capability `{capability}` timed out after {} ms", after.as_millis())]
    Timeout { capability: String, after: Duration },
    /// What performs the capability is not running now (an MCP server being restarted, or no
    /// longer listing the tool); the same call may succeed later.
    #[error("capability `{capability}` is unavailable: {message}")]
    Unavailable { capability: String, message: String },
    /// The tool ran and reported an error (an MCP result with `isError: true`); the message is
    /// the tool's.
    #[error("capability `{capability}` reported an error: {message}")]
    ToolError { capability: String, message: String },
    /// The caller may not use this capability (the [`CallGuard`](crate::CallGuard) refused it);
    /// nothing was called. The message says what the caller may do instead.
    #[error("capability `{capability}` is not allowed: {message}")]
    Forbidden { capability: String, message: String },
}

impl CapabilityError {
    /// Stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownCapability { .. } => "unknown_capability",
            Self::InvalidArguments { .. } => "invalid_arguments",
            Self::BindingFailed { .. } => "binding_failed",
            Self::InvalidResult { .. } => "invalid_result",
            Self::NotFound { .. } => "not_found",
            Self::Timeout { .. } => "timeout",
            Self::Unavailable { .. } => "capability_unavailable",
            Self::ToolError { .. } => "tool_error",
            Self::Forbidden { .. } => "forbidden",
        }
    }
}

/// An error with its causes, `outer: cause: root cause`, skipping a cause whose text its parent
/// already shows (many errors repeat their source's message). Clients such as reqwest put the
/// useful part ("connection refused") only in a cause.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut parent = text.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !parent.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        parent = cause_text;
        source = cause.source();
    }
    text
}

/// Required MCP servers that did not start: Parley does not serve without them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(failures))]
pub struct StartError {
    pub failures: Vec<ServerFailure>,
}

/// One server that did not start: why, and the last lines it wrote to standard error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFailure {
    pub server: String,
    pub message: String,
    pub stderr: String,
}

fn describe(failures: &[ServerFailure]) -> String {
    let mut text = String::new();
    for (i, f) in failures.iter().enumerate() {
        if i > 0 {
            text.push_str("; ");
        }
        text.push_str(&format!(
            "MCP server `{}` did not start: {}",
            f.server, f.message
        ));
        if f.stderr.trim().is_empty() {
            text.push_str(" (it wrote nothing to stderr)");
        } else {
            text.push_str(&format!("; its stderr ends:\n{}", f.stderr.trim_end()));
        }
    }
    text
}
