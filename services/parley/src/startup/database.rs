//! Connecting to PostgreSQL at start: a TCP connection is tried first, so that an unreachable
//! server fails at once with the system's reason, and a failure names the server's host and
//! port (never the URL, which may hold a password).

use std::sync::Arc;
use std::time::Duration;

use parley_store::{Store, StoreError, StoreOptions};
use tokio::time::{Instant, timeout_at};

/// Why PostgreSQL could not be opened at start; each names the server.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    #[error("cannot connect to PostgreSQL at {server}")]
    Unreachable {
        server: PostgresServer,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to PostgreSQL at {server}: no answer within {} ms", .timeout.as_millis())]
    Timeout {
        server: PostgresServer,
        timeout: Duration,
    },
    #[error("cannot open the PostgreSQL database at {server}")]
    Store {
        server: PostgresServer,
        #[source]
        source: StoreError,
    },
}

/// Where a `postgres://` URL points: a host and port, or a Unix socket directory (a `host`
/// starting with `/`, as libpq takes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresServer {
    host: String,
    port: u16,
}

impl std::fmt::Display for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.is_socket(), self.host.contains(':')) {
            (true, _) => write!(f, "{}/.s.PGSQL.{}", self.host, self.port),
            (false, true) => write!(f, "[{}]:{}", self.host, self.port),
            (false, false) => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl PostgresServer {
    /// The server a `postgres://` or `postgresql://` URL names (`host` and `port` query
    /// parameters win over the authority, as in libpq); `None` for other URLs.
    pub fn of(url: &str) -> Option<PostgresServer> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return None;
        }
        let parsed = url::Url::parse(url).ok();
        let query = |name: &str| {
            parsed.as_ref().and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
            })
        };
        let host = query("host")
            .or_else(|| {
                let host = parsed.as_ref()?.host_str()?;
                Some(
                    host.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_owned(),
                )
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        let port = query("port")
            .and_then(|p| p.parse().ok())
            .or_else(|| parsed.as_ref()?.port())
            .unwrap_or(5432);
        Some(PostgresServer { host, port })
    }

    fn is_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// Connects to the database at `url` on this server with `options` and migrates it; the
    /// server must be reached and must answer within `timeout` (the migrations after that are
    /// not bounded: another instance may be running them).
    pub async fn connect(
        self,
        url: &str,
        timeout: Duration,
        options: StoreOptions,
    ) -> Result<Arc<dyn Store>, PostgresError> {
        let deadline = Instant::now() + timeout;
        if !self.is_socket() {
            let probe = tokio::net::TcpStream::connect((self.host.as_str(), self.port));
            match timeout_at(deadline, probe).await {
                Ok(Ok(_reachable)) => {}
                Ok(Err(source)) => {
                    return Err(PostgresError::Unreachable {
                        server: self,
                        source,
                    });
                }
                Err(_) => {
                    return Err(PostgresError::Timeout {
                        server: self,
                        timeout,
                    });
                }
            }
        }
        let options = StoreOptions {
            connect_timeout: deadline.saturating_duration_since(Instant::now()),
            ..options
        };
        parley_store::connect(url, options).await.map_err(|source| {
            // The store's first connection gave up at the deadline: the server did not answer.
            if source.is_transient() && Instant::now() >= deadline {
                PostgresError::Timeout {
                    server: self,
                    timeout,
                }
            } else {
                PostgresError::Store {
                    server: self,
                    source,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_comes_from_the_url_without_its_credentials() {
        let cases = [
            (
                "postgres://u:secret@db.example:6543/parley",
                "db.example:6543",
            ),
            ("postgresql://u@127.0.0.1/parley", "127.0.0.1:5432"),
            ("postgres:///parley", "localhost:5432"),
            ("postgres://u@[::1]:5433/parley", "[::1]:5433"),
            (
                "postgres:///parley?host=/run/postgresql&port=5433",
                "/run/postgresql/.s.PGSQL.5433",
            ),
        ];
        for (url, server) in cases {
            let found = PostgresServer::of(url).expect(url);
            assert_eq!(found.to_string(), server, "{url}");
        }
        assert_eq!(PostgresServer::of("sqlite://data/parley.db"), None);
    }
}
