//! Health end-points: liveness, readiness, and the combined `/health`.
//!
//! | path | `200` when | `503` when |
//! | --- | --- | --- |
//! | `GET /health/live` | the process answers HTTP | never (a process that cannot answer is not live) |
//! | `GET /health/ready` | the sandbox has warmed up (or warm-up is off), the database takes a write within [`STORE_DEADLINE`], and the reasoner is configured | any of those is not (yet) so |
//! | `GET /health` | the database takes a write: liveness plus the database, as orchestrators that know one health check expect | the database does not take one |
//!
//! "Takes a write" is `Store::check_writable`: one row rewritten in a write transaction, so a
//! full disk, a read-only data directory or a database file deleted under the server fail the
//! check as they fail the server's own writes, and pass it again once the storage is back (the
//! store replaces connections a storage fault left unusable).
//!
//! Readiness is what a load balancer or `docker compose --wait` should wait for: before the
//! sandbox has warmed up, the first negotiation pays for compiling the guest runtimes. The
//! reasoner is configured once the server runs (a configuration it cannot use stops it at
//! start); for the `openai` backend the body also says what the start-up probe of the model
//! end-point found (`reachable`, `unauthorized`, `unreachable`, `probing`), without gating
//! readiness on it: the end-point is another service, which may come and go while this one
//! still serves negotiated protocols.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;

/// How long `/health/ready` waits for the database.
pub const STORE_DEADLINE: Duration = Duration::from_secs(2);

/// The sandbox's warm-up, as readiness sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Sandbox {
    /// Warm-up is off: handlers compile on first use, nothing to wait for.
    Off = 0,
    Warming = 1,
    Warm = 2,
    /// Warm-up failed: handlers will not run.
    Failed = 3,
}

/// What the start-up probe of the model end-point found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ModelEndpoint {
    /// No model configured (the built-in reasoner).
    None = 0,
    Probing = 1,
    /// The end-point answered with a status other than 401/403.
    Reachable = 2,
    /// The end-point answered 401 or 403: the API key is missing or refused.
    Unauthorized = 3,
    /// No answer: connection refused, name not resolved, TLS failure or timeout.
    Unreachable = 4,
}

/// What readiness depends on beyond the database, set by start-up as it learns it.
#[derive(Debug)]
pub struct Readiness {
    sandbox: AtomicU8,
    model: AtomicU8,
}

impl Readiness {
    pub fn new(sandbox: Sandbox, model: ModelEndpoint) -> Readiness {
        Readiness {
            sandbox: AtomicU8::new(sandbox as u8),
            model: AtomicU8::new(model as u8),
        }
    }

    pub fn set_sandbox(&self, state: Sandbox) {
        self.sandbox.store(state as u8, Ordering::Release);
    }

    pub fn set_model(&self, state: ModelEndpoint) {
        self.model.store(state as u8, Ordering::Release);
    }

    pub fn sandbox(&self) -> Sandbox {
        match self.sandbox.load(Ordering::Acquire) {
            0 => Sandbox::Off,
            1 => Sandbox::Warming,
            2 => Sandbox::Warm,
            _ => Sandbox::Failed,
        }
    }

    pub fn model(&self) -> ModelEndpoint {
        match self.model.load(Ordering::Acquire) {
            0 => ModelEndpoint::None,
            1 => ModelEndpoint::Probing,
            2 => ModelEndpoint::Reachable,
            3 => ModelEndpoint::Unauthorized,
            _ => ModelEndpoint::Unreachable,
        }
    }
}

impl Sandbox {
    fn as_str(self) -> &'static str {
        match self {
            Sandbox::Off => "off",
            Sandbox::Warming => "warming",
            Sandbox::Warm => "warm",
            Sandbox::Failed => "failed",
        }
    }
}

impl ModelEndpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelEndpoint::None => "none",
            ModelEndpoint::Probing => "probing",
            ModelEndpoint::Reachable => "reachable",
            ModelEndpoint::Unauthorized => "unauthorized",
            ModelEndpoint::Unreachable => "unreachable",
        }
    }
}

/// `GET /health/live`.
pub(super) async fn live() -> Response {
    (StatusCode::OK, axum::Json(json!({"status": "live"}))).into_response()
}

/// `GET /health/ready` (see the module docs).
pub(super) async fn ready(State(state): State<AppState>) -> Response {
    let sandbox = state.readiness.sandbox();
    let store_ok = matches!(
        tokio::time::timeout(STORE_DEADLINE, state.agent.store_writable()).await,
        Ok(Ok(()))
    );
    let backends = state.agent.backends();
    let ready = store_ok && matches!(sandbox, Sandbox::Off | Sandbox::Warm);
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "sandbox": sandbox.as_str(),
        "store": if store_ok { "ok" } else { "not_writable" },
        "reasoner": backends.reasoner,
        "model_endpoint": state.readiness.model().as_str(),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// `GET /health` (see the module docs).
pub(super) async fn health(State(state): State<AppState>) -> Response {
    let writable = tokio::time::timeout(STORE_DEADLINE, state.agent.store_writable()).await;
    let failure = match writable {
        Ok(Ok(())) => {
            let body = json!({
                "status": "ok",
                "store": state.agent.backends().store,
                "reasoner": state.agent.backends().reasoner,
            });
            return (StatusCode::OK, axum::Json(body)).into_response();
        }
        Ok(Err(e)) => crate::error::chain(&e),
        Err(_) => format!("no answer within {} ms", STORE_DEADLINE.as_millis()),
    };
    tracing::warn!(error = %failure, "health check: the database takes no writes");
    let body = json!({"status": "unavailable", "store": "not_writable"});
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}
