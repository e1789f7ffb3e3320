//! `mcp` binding: the tools of Model Context Protocol servers as capabilities, through the
//! official Rust SDK (`rmcp`).
//!
//! - `config`: the `[[mcp_servers]]` entries and explicit bindings, checked at load.
//! - `tools`: what a listed tool becomes, and what a tool's answer becomes (the rule is in its
//!   docs).
//! - `server`: one server's connection, calls over it, its standard error.
//! - `supervisor`: start, tool-list refresh, restart with backoff.
//!
//! Loading a capabilities file starts nothing; [`Mcp::start`] (through
//! [`crate::Capabilities::start`]) starts every server and waits until each has listed its tools
//! or failed. Dropping the capabilities stops the servers (a stdio server's process is killed);
//! [`crate::Capabilities::shutdown`] stops them gracefully and waits.

mod config;
mod server;
mod supervisor;
mod tools;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub(crate) use config::{load_binding, load_servers};
pub(crate) use server::Server;

use crate::CapabilityError;
use crate::catalogue::Catalogue;
use crate::error::{ServerFailure, StartError};

/// A capability performed by one tool of one server.
#[derive(Debug)]
pub(crate) struct McpBinding {
    pub(crate) server: Arc<Server>,
    pub(crate) tool: String,
    pub(crate) timeout: Duration,
}

impl McpBinding {
    pub(crate) async fn call(
        &self,
        capability: &str,
        args: &Value,
    ) -> Result<Value, CapabilityError> {
        self.server
            .call(capability, &self.tool, args, self.timeout)
            .await
    }
}

/// The declared servers and their supervisors.
#[derive(Debug)]
pub(crate) struct Mcp {
    servers: Vec<Arc<Server>>,
    cancel: CancellationToken,
    supervisors: Mutex<Option<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Mcp {
    pub(crate) fn new(servers: Vec<Arc<Server>>) -> Self {
        Mcp {
            servers,
            cancel: CancellationToken::new(),
            supervisors: Mutex::new(None),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts every server (once; later calls do nothing) and waits until each has listed its
    /// tools or failed. A required server that failed makes this an error; an optional one is
    /// logged and retried in the background.
    pub(crate) async fn start(&self, catalogue: &Arc<Catalogue>) -> Result<(), StartError> {
        let mut firsts = Vec::with_capacity(self.servers.len());
        {
            let mut supervisors = self.supervisors.lock().unwrap_or_else(|e| e.into_inner());
            if supervisors.is_some() {
                return Ok(());
            }
            let mut tasks = Vec::with_capacity(self.servers.len());
            for server in &self.servers {
                let (tell, told) = oneshot::channel();
                let supervisor = supervisor::Supervisor {
                    server: Arc::clone(server),
                    catalogue: Arc::clone(catalogue),
                    cancel: self.cancel.child_token(),
                };
                tasks.push(tokio::spawn(supervisor.run(tell)));
                firsts.push((server, told));
            }
            *supervisors = Some(tasks);
        }
        let mut failures = Vec::new();
        for (server, told) in firsts {
            let failure = match told.await {
                Ok(Ok(())) => continue,
                Ok(Err(failure)) => failure,
                Err(_) => server::Failure {
                    message: "its supervisor ended before it started".to_owned(),
                    stderr: String::new(),
                },
            };
            let config = &server.config;
            if config.optional {
                tracing::warn!(
                    server = %config.name,
                    stderr = %failure.stderr,
                    "optional MCP server did not start (retrying in the background): {}",
                    failure.message
                );
                continue;
            }
            failures.push(ServerFailure {
                server: config.name.clone(),
                message: failure.message,
                stderr: failure.stderr,
            });
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(StartError { failures })
        }
    }

    /// Stops every server and waits until each has been stopped.
    pub(crate) async fn shutdown(&self) {
        self.cancel.cancel();
        let tasks = self
            .supervisors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(std::mem::take);
        for task in tasks.into_iter().flatten() {
            let _ = task.await;
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
