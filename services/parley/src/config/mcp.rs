//! The `[mcp]` table: Parley as an MCP server on `/mcp` (see `crate::mcp_server`).

use serde::Deserialize;

use super::{ConfigError, invalid};

/// Settings of the `/mcp` end-point (the `[mcp]` table).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// Serve `/mcp`; off, it is 404 like any unknown path (`--serve-mcp`, `PARLEY_SERVE_MCP`).
    pub serve: bool,
    /// The `Host` header values `/mcp` answers (a name, or `name:port`), which keeps a web page
    /// from reaching a local Parley through DNS rebinding; others get 403. An empty list
    /// accepts any host. A Parley reached under another name adds that name here.
    pub allowed_hosts: Vec<String>,
    /// Most negotiated protocols listed as tools (the earliest activated first); each costs
    /// its schemas in every `tools/list` answer.
    pub max_protocol_tools: u32,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            serve: false,
            allowed_hosts: ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec(),
            max_protocol_tools: 100,
        }
    }
}

impl McpSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(bad) = self
            .allowed_hosts
            .iter()
            .find(|h| h.is_empty() || h.contains(|c: char| c.is_whitespace() || c == '/'))
        {
            return Err(invalid(
                "mcp.allowed_hosts",
                format!("{bad:?} is not a host name or host:port"),
            ));
        }
        if self.max_protocol_tools > parley_store::MAX_PAGE {
            return Err(invalid(
                "mcp.max_protocol_tools",
                format!("must be at most {}", parley_store::MAX_PAGE),
            ));
        }
        Ok(())
    }
}
