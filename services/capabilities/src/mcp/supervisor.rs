//! Keeps one MCP server connected: starts it, lists its tools into the catalogue, lists them
//! again on `notifications/tools/list_changed`, and restarts it with backoff when it exits or its
//! connection breaks. Its capabilities stay in the catalogue meanwhile and answer
//! `capability_unavailable`.
//!
//! Backoff: the first restart waits `restart_backoff_ms`, each further one twice as long as the
//! one before, up to `restart_backoff_max_ms`; a server that ran for longer than
//! `restart_backoff_max_ms` before it exited starts again from `restart_backoff_ms`.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::service::{Peer, RoleClient};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::server::{Failure, Handler, Live, Server, connect};
use super::tools::{self, ListedTool};
use crate::catalogue::Catalogue;

pub(crate) struct Supervisor {
    pub(crate) server: Arc<Server>,
    pub(crate) catalogue: Arc<Catalogue>,
    pub(crate) cancel: CancellationToken,
}

/// How a connection ended.
enum Ended {
    Cancelled,
    Failed(Failure),
    Exited(Failure),
}

/// When listing the tools finds something missing, at start (a failure) or later (a warning).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listing {
    First,
    Refresh,
}

impl Supervisor {
    /// Runs until cancelled. The outcome of the first start goes to `first`; a required server
    /// whose first start fails is not retried (Parley does not start without it).
    pub(crate) async fn run(self, first: oneshot::Sender<Result<(), Failure>>) {
        let config = &self.server.config;
        let mut first = Some(first);
        let mut delay = config.restart_backoff;
        loop {
            let began = Instant::now();
            let failure = match self.session(&mut first).await {
                Ended::Cancelled => return,
                Ended::Failed(failure) => {
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(failure.clone()));
                        if !config.optional {
                            self.server.set_down(failure.message);
                            return;
                        }
                    }
                    failure
                }
                Ended::Exited(failure) => failure,
            };
            if began.elapsed() > config.restart_backoff_max {
                delay = config.restart_backoff;
            }
            tracing::warn!(
                server = %config.name,
                restart_in_ms = delay.as_millis() as u64,
                stderr = %failure.stderr,
                "MCP server unavailable: {}",
                failure.message
            );
            self.server.set_down(failure.message);
            tokio::select! {
                () = self.cancel.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(config.restart_backoff_max);
        }
    }

    /// One connection, from start to its end.
    async fn session(&self, first: &mut Option<oneshot::Sender<Result<(), Failure>>>) -> Ended {
        let tools_changed = Arc::new(Notify::new());
        let handler = Handler {
            tools_changed: Arc::clone(&tools_changed),
        };
        let connected = tokio::select! {
            () = self.cancel.cancelled() => return Ended::Cancelled,
            connected = connect(&self.server.config, handler) => connected,
        };
        let (running, stderr) = match connected {
            Ok(connected) => connected,
            Err(failure) => return Ended::Failed(failure),
        };
        let broken = Arc::new(Notify::new());
        let peer = running.peer().clone();
        let listed = tokio::select! {
            () = self.cancel.cancelled() => return Ended::Cancelled,
            listed = self.list(&peer, &broken, Listing::First) => listed,
        };
        if let Err(message) = listed {
            drop(running);
            return Ended::Failed(Failure {
                message,
                stderr: stderr.finish().await,
            });
        }
        if let Some(first) = first.take() {
            let _ = first.send(Ok(()));
        }
        let stop = running.cancellation_token();
        let closed = running.waiting();
        tokio::pin!(closed);
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => {
                    stop.cancel();
                    let _ = closed.await;
                    return Ended::Cancelled;
                }
                () = tools_changed.notified() => {
                    if let Err(message) = self.list(&peer, &broken, Listing::Refresh).await {
                        tracing::warn!(server = %self.server.config.name, "the changed tool list cannot be read: {message}");
                    }
                }
                () = broken.notified() => {
                    stop.cancel();
                    let _ = closed.await;
                    return Ended::Exited(Failure {
                        message: "a call found its connection broken".to_owned(),
                        stderr: stderr.finish().await,
                    });
                }
                quit = &mut closed => {
                    let how = match quit {
                        Ok(reason) => format!("{reason:?}"),
                        Err(e) => e.to_string(),
                    };
                    return Ended::Exited(Failure {
                        message: format!("the connection ended ({how})"),
                        stderr: stderr.finish().await,
                    });
                }
            }
        }
    }

    /// Lists the server's tools, publishes the capabilities they become and the connection.
    async fn list(
        &self,
        peer: &Peer<RoleClient>,
        broken: &Arc<Notify>,
        listing: Listing,
    ) -> Result<(), String> {
        let config = &self.server.config;
        let tools = tokio::time::timeout(config.start_timeout, peer.list_all_tools())
            .await
            .map_err(|_| {
                format!(
                    "tools/list did not answer within {} ms",
                    config.start_timeout.as_millis()
                )
            })?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let listed: Vec<ListedTool> = tools
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .filter_map(|t| ListedTool::from_wire(&config.name, &t))
            .collect();
        let (capabilities, missing) = tools::capabilities(&self.server, &listed);
        if !missing.is_empty() {
            let message = format!(
                "the server does not list the tool(s) {} that the capabilities file names",
                missing.join(", ")
            );
            if listing == Listing::First {
                return Err(message);
            }
            tracing::warn!(server = %config.name, "{message}");
        }
        let names: HashSet<String> = listed.into_iter().map(|t| t.name).collect();
        tracing::info!(
            server = %config.name,
            transport = config.transport_kind(),
            tools = names.len(),
            capabilities = capabilities.len(),
            "MCP server listed its tools"
        );
        self.server.set_up(Live {
            peer: peer.clone(),
            tools: Arc::new(names),
            broken: Arc::clone(broken),
        });
        self.catalogue
            .set_discovered(self.server.index, &config.name, capabilities);
        Ok(())
    }
}
