//! Isolated databases for integration tests (feature `testing`).
//!
//! Every test run gets its own database, so tests never see each other's rows and can run in
//! parallel: [`fresh_postgres_url`] creates `parley_test_<uuid>` on a PostgreSQL server and drops it
//! when the guard goes; [`fresh_sqlite_url`] points into a temporary directory. [`SqliteWriteLock`]
//! holds a SQLite database's write lock from outside the store, for tests of a busy database.
//!
//! This is the one place in the crate that reads the environment ([`PG_URL_ENV`]): it serves tests,
//! not the service. A PostgreSQL server that cannot be reached makes the test **fail** with
//! instructions; a test that silently skips proves nothing.

use std::time::Duration;

use sqlx::{Connection, PgConnection, SqliteConnection};
use uuid::Uuid;

use crate::StoreError;
use crate::error::SqlError;

/// Names a PostgreSQL database the tests may connect to and whose user may `CREATE DATABASE`.
pub const PG_URL_ENV: &str = "PARLEY_TEST_PG_URL";

/// Used when [`PG_URL_ENV`] is not set: the development server (trust authentication).
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// How long to wait for the server before declaring it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL database created for one test. Dropping the guard drops the database (terminating
/// connections still open); [`PgTestDatabase::drop_database`] does the same from async code and
/// reports errors.
#[derive(Debug)]
#[must_use = "the database is dropped as soon as the guard is"]
pub struct PgTestDatabase {
    admin_url: String,
    name: String,
    dropped: bool,
}

impl PgTestDatabase {
    /// The database name, `parley_test_<uuid>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database now. Preferred over letting the guard drop in async code: errors are
    /// returned instead of printed.
    pub async fn drop_database(mut self) -> Result<(), StoreError> {
        self.dropped = true;
        Ok(drop_database(&self.admin_url, &self.name).await?)
    }
}

impl Drop for PgTestDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // `Drop` cannot await, and may run inside or outside a runtime (or while a test panics):
        // a helper thread with its own runtime works in every case.
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let outcome = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime
                .block_on(drop_database(&admin_url, &name))
                .map_err(|e| chain(&StoreError::from(e)))
        })
        .join();
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: could not drop test database {}: {e}", self.name),
            Err(_) => eprintln!("warning: dropping test database {} panicked", self.name),
        }
    }
}

/// Creates a fresh, empty PostgreSQL database and returns its URL and the guard that drops it.
///
/// # Panics
/// When the server named by [`PG_URL_ENV`] (default [`DEFAULT_PG_URL`]) cannot be reached or
/// refuses `CREATE DATABASE`; the message says how to start it.
pub async fn fresh_postgres_url() -> (String, PgTestDatabase) {
    let admin_url = std::env::var(PG_URL_ENV).unwrap_or_else(|_| DEFAULT_PG_URL.to_owned());
    let mut admin =
        match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(&admin_url)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => panic!("{}", unreachable_message(&admin_url, &e.to_string())),
            Err(_) => panic!("{}", unreachable_message(&admin_url, "timed out")),
        };
    let name = format!("parley_test_{}", Uuid::new_v4().simple());
    if let Err(e) = sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut admin)
        .await
    {
        panic!(
            "could not CREATE DATABASE on {}: {e}; the user in {PG_URL_ENV} needs CREATEDB",
            redact(&admin_url)
        );
    }
    // Closing politely is best effort; the server reaps the session either way.
    let _ = admin.close().await;
    let url = with_database(&admin_url, &name);
    (
        url,
        PgTestDatabase {
            admin_url,
            name,
            dropped: false,
        },
    )
}

/// A second connection to a SQLite database that holds its write lock, for tests of what callers do
/// while the database is locked: the store's writes wait for its busy timeout and then fail as
/// [`StoreError::Unavailable`]; reads go on. Dropping the guard without [`SqliteWriteLock::release`]
/// also releases the lock, when its connection closes.
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SqliteWriteLock {
    connection: SqliteConnection,
}

impl SqliteWriteLock {
    /// Opens the database at `url` (as [`crate::connect`] takes it) and takes its write lock.
    pub async fn acquire(url: &str) -> Result<Self, StoreError> {
        let mut connection = SqliteConnection::connect(url)
            .await
            .map_err(SqlError::from)?;
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut connection)
            .await
            .map_err(SqlError::from)?;
        Ok(Self { connection })
    }

    /// Releases the lock (nothing was written under it).
    pub async fn release(mut self) -> Result<(), StoreError> {
        sqlx::query("ROLLBACK")
            .execute(&mut self.connection)
            .await
            .map_err(SqlError::from)?;
        Ok(self.connection.close().await.map_err(SqlError::from)?)
    }
}

/// A SQLite URL in a fresh temporary directory (removed when the `TempDir` drops). The file does not
/// exist yet; `connect` creates it.
pub fn fresh_sqlite_url() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("the system temporary directory is writable");
    let url = format!("sqlite://{}/parley.db?mode=rwc", dir.path().display());
    (url, dir)
}

async fn drop_database(admin_url: &str, name: &str) -> Result<(), SqlError> {
    let mut admin = PgConnection::connect(admin_url).await?;
    // FORCE (PostgreSQL 13+) terminates sessions a test left open, e.g. a pool not yet closed.
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    Ok(admin.close().await?)
}

/// An error and its causes, one after another, for a message.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn unreachable_message(admin_url: &str, error: &str) -> String {
    format!(
        "PostgreSQL is not reachable at {url} ({error}).\n\
         The store tests run against a real PostgreSQL server and never skip. Start the local one with\n\
         \n    pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n\n\
         or set {PG_URL_ENV} to a server whose user may CREATE DATABASE.",
        url = redact(admin_url)
    )
}

/// The URL with any password replaced, for messages.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &url[..scheme_end],
                &rest[..colon],
                &rest[at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The same server URL naming another database (query parameters kept).
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/test?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h:5432", "x"),
            "postgres://h:5432/x"
        );
    }

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}
