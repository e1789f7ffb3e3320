//! Recovering from storage faults, and noticing a database file that is gone.
//!
//! A SQLite connection that met a storage fault may stay unusable after the storage is back: one
//! opened while the file or its directory was read-only stays read-only ("attempt to write a
//! readonly database"), and one whose transaction SQLite rolled back on its own (disk full) is
//! still in a transaction as far as the driver knows ("begin_with at non-zero transaction
//! depth"). So the store remembers when the last fault happened ([`Faults`]), and the pool hands
//! out no connection opened before it, nor one the driver believes inside a transaction: they
//! are closed, and fresh ones opened in their place.
//!
//! A database file deleted or replaced while the server runs is another matter: the open
//! connections still write to the deleted file, so what they write is lost when they close,
//! and fresh connections would open a new, empty database. Every operation therefore first
//! checks that the file at the database's path is still the one opened at start
//! ([`FileIdentity`], one `stat`); when it is not, the operation is refused as unavailable and
//! readiness fails, until an operator restores the file and restarts.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::error::BackendError;

/// When the last storage fault happened.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    last: Mutex<Option<Instant>>,
}

impl Faults {
    pub(crate) fn record(&self) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some(Instant::now());
    }

    /// Whether a connection `age` old was opened before the last fault (and is not to be used
    /// again).
    pub(crate) fn predates_last(&self, age: Duration) -> bool {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.is_some_and(|fault| {
            Instant::now()
                .checked_sub(age)
                .is_none_or(|opened| opened <= fault)
        })
    }
}

/// The database file as it was opened: its path, and its device, inode and (where the file
/// system keeps one) creation time, which tells a new file from the old one when the new one
/// was given the freed inode.
#[derive(Debug, Clone)]
pub(crate) struct FileIdentity {
    path: PathBuf,
    id: Option<FileId>,
}

type FileId = (u64, u64, Option<std::time::SystemTime>);

/// Why the database file is not the one opened.
#[derive(Debug, thiserror::Error)]
#[error("the database file {} was deleted or replaced while the server ran; restore it and restart", .0.display())]
struct FileGone(PathBuf);

impl FileIdentity {
    /// The identity of the file at `path` now.
    pub(crate) fn of(path: &Path) -> FileIdentity {
        FileIdentity {
            path: path.to_owned(),
            id: file_id(path),
        }
    }

    /// Whether the file at the path is still the one this identity was taken of.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.id.is_some() && file_id(&self.path) != self.id {
            return Err(StoreError::Unavailable(BackendError::new(FileGone(
                self.path.clone(),
            ))));
        }
        Ok(())
    }
}

#[cfg(unix)]
fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.created().ok()))
}

#[cfg(not(unix))]
fn file_id(_path: &Path) -> Option<FileId> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_opened_before_the_last_fault_predate_it() {
        let faults = Faults::default();
        assert!(
            !faults.predates_last(Duration::from_secs(3600)),
            "no fault yet"
        );
        faults.record();
        assert!(faults.predates_last(Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!faults.predates_last(Duration::ZERO), "opened after it");
    }

    #[test]
    fn a_file_deleted_or_replaced_is_not_the_one_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        std::fs::write(&path, b"one").expect("write");
        let identity = FileIdentity::of(&path);
        identity.check().expect("the same file");
        std::fs::remove_file(&path).expect("delete");
        assert!(identity.check().expect_err("deleted").is_transient());
        std::fs::write(&path, b"two").expect("a new file at the path");
        let err = identity.check().expect_err("replaced");
        let why = std::error::Error::source(&err)
            .expect("a cause")
            .to_string();
        assert!(why.contains("deleted or replaced"), "{why}");
    }
}
