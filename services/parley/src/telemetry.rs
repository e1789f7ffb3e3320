//! Logging setup: the one place that installs a tracing subscriber. Libraries only emit.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber: `RUST_LOG` filters (default `info`, the MCP SDK's own lines
/// from `warn`: Parley logs each MCP server's start, tools and failures itself, and the SDK's
/// info lines repeat a server's whole self-description), text or JSON lines on stderr. Message
/// bodies and secrets are never logged at info or above.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for people: pipes and log collectors get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // A second init (tests, embedding) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
