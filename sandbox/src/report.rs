//! What a call produced: its output or error, and the handler's captured logs.

use std::time::Duration;

use crate::error::SandboxError;

/// Severity of a captured log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// `console.log`, `console.info`, `console.debug`, stdout.
    Info,
    /// `console.warn`.
    Warn,
    /// `console.error`, stderr.
    Error,
}

/// One captured log line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    /// Severity.
    pub level: LogLevel,
    /// The text (lossy UTF-8, possibly cut at the log cap).
    pub text: String,
}

/// What a successful call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput {
    /// The handler's response.
    pub output: serde_json::Value,
    /// Captured `console.*` / stdout / stderr lines, up to `SandboxConfig::log_bytes`.
    pub logs: Vec<LogLine>,
    /// Whether some log output was dropped at the cap.
    pub logs_truncated: bool,
    /// Time from instantiation to outcome.
    pub elapsed: Duration,
}

/// Everything about one call, whether it succeeded or not: what `parley sandbox run` prints and what a
/// handler-fixing loop feeds back to the reasoner.
#[derive(Debug)]
pub struct CallReport {
    /// The handler's response, or why there is none.
    pub result: Result<serde_json::Value, SandboxError>,
    /// Captured log lines, kept even when the call failed.
    pub logs: Vec<LogLine>,
    /// Whether some log output was dropped at the cap.
    pub logs_truncated: bool,
    /// Time from the start of the call to its outcome.
    pub elapsed: Duration,
}

impl CallReport {
    /// A call that failed before the guest ran, `started` when the call began.
    pub(crate) fn failed(error: SandboxError, started: std::time::Instant) -> Self {
        CallReport {
            result: Err(error),
            logs: Vec::new(),
            logs_truncated: false,
            elapsed: started.elapsed(),
        }
    }

    /// The output of a successful call; the logs of a failed one are dropped.
    pub(crate) fn into_output(self) -> Result<CallOutput, SandboxError> {
        self.result.map(|output| CallOutput {
            output,
            logs: self.logs,
            logs_truncated: self.logs_truncated,
            elapsed: self.elapsed,
        })
    }
}
