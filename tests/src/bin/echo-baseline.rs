//! The benchmark's ceiling: a bare axum server that answers `POST /nlip` (and `/nlip/`)
//! with the request body as `application/json`, doing no NLIP work at all. Whatever it
//! reaches on a machine is the practical limit of the HTTP stack Parley is built on.
//!
//! Usage: `echo-baseline [--listen 127.0.0.1:8090]` (or `--port 8090`, loopback).

use std::net::SocketAddr;
use std::process::ExitCode;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};

async fn echo(body: Bytes) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], body)
}

async fn health() -> &'static str {
    "ok"
}

fn parse_listen() -> Result<SocketAddr, String> {
    let mut listen: SocketAddr = "127.0.0.1:8090".parse().map_err(|e| format!("{e}"))?;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--listen" => {
                let v = value()?;
                listen = v.parse().map_err(|e| format!("--listen {v:?}: {e}"))?;
            }
            "--port" => {
                let v = value()?;
                let port: u16 = v.parse().map_err(|e| format!("--port {v:?}: {e}"))?;
                listen.set_port(port);
            }
            "-h" | "--help" => {
                return Err("usage: echo-baseline [--listen ADDR | --port PORT]".into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(listen)
}

fn main() -> ExitCode {
    let listen = match parse_listen() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let app = Router::new()
            .route("/nlip", post(echo))
            .route("/nlip/", post(echo))
            .route("/health", get(health));
        let listener = tokio::net::TcpListener::bind(listen).await?;
        println!(
            "echo-baseline listening on http://{}",
            listener.local_addr()?
        );
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo-baseline: {e}");
            ExitCode::FAILURE
        }
    }
}
