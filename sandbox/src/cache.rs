//! The on-disk cache of compiled artifacts.
//!
//! Wasmtime's precompiled artifacts are native code: loading one is `unsafe` because a tampered file is
//! arbitrary code execution in Parley's process. The cache therefore only loads files it can prove it
//! wrote itself: every artifact carries an HMAC-SHA256 over its bytes, keyed by a 32-byte secret that
//! the cache creates (from the OS's random source, mode 0600) the first time it is used. Anyone able to
//! forge that MAC can already read the key file, i.e. already runs as Parley's user.
//!
//! File layout: `MAGIC (8 bytes) || HMAC (32 bytes) || wasmtime serialized module`. Files are written to a
//! temporary name and renamed, so a crash never leaves a half-written artifact under a real key.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

use crate::error::SandboxError;

const MAGIC: &[u8; 8] = b"PRLYART1";
const KEY_FILE: &str = "artifact.key";
const MAC_LEN: usize = 32;
const ARTIFACT_SUFFIX: &str = ".cwasm";

/// An artifact no process has loaded or stored for this long is deleted by [`ArtifactCache::sweep`]:
/// left behind by an upgrade (a new runtime, wasmtime or engine configuration means a new key) or by
/// an older cache layout. Processes that share a cache directory with different configurations keep
/// their artifacts fresh by using them, so they do not delete each other's.
pub(crate) const STALE_AFTER: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 60 * 60);
/// A temporary file of a write that did not finish (the process died) is deleted after this long.
const STALE_TMP_AFTER: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The wasmtime version artifacts are compiled with; pinned with `=` in the workspace manifest and part
/// of every cache key (wasmtime also refuses artifacts of another version, this just avoids trying).
pub(crate) const WASMTIME_VERSION: &str = "48.0.8";

/// A cache directory and its MAC key.
#[derive(Debug)]
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    key: [u8; 32],
}

fn io_error(what: &str, path: &Path, error: std::io::Error) -> SandboxError {
    SandboxError::internal_with(format!("{what} {}", path.display()), error)
}

/// HMAC-SHA256 (RFC 2104) over `parts`, concatenated.
fn hmac(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// Compares two MACs without an early exit.
fn mac_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl ArtifactCache {
    /// Opens (creating if needed) the cache directory and its key.
    pub(crate) fn open(dir: &Path) -> Result<Self, SandboxError> {
        if !dir.exists() {
            create_private_dir(dir)?;
        }
        let key_path = dir.join(KEY_FILE);
        let key = match read_key(&key_path)? {
            Some(key) => key,
            None => create_key(&key_path)?,
        };
        check_private(dir, &key_path)?;
        Ok(ArtifactCache {
            dir: dir.to_path_buf(),
            key,
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}{ARTIFACT_SUFFIX}"))
    }

    /// Deletes artifacts other than `key`'s that nobody stored or loaded for `stale_after` (their
    /// modification time: `store` writes it, `load` renews it), and temporary files of writes
    /// that never finished. Failures are logged: the cache is an optimisation. Returns how many
    /// files it deleted.
    pub(crate) fn sweep(&self, key: &str, stale_after: std::time::Duration) -> usize {
        let now = std::time::SystemTime::now();
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "sandbox.cache: cannot list the cache");
                return 0;
            }
        };
        let current = format!("{key}{ARTIFACT_SUFFIX}");
        let mut deleted = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let max_age = if name.ends_with(ARTIFACT_SUFFIX) && name != current {
                stale_after
            } else if name.starts_with('.') && name.ends_with(".tmp") {
                STALE_TMP_AFTER
            } else {
                continue;
            };
            let age = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok());
            if age.is_some_and(|age| age >= max_age) {
                match fs::remove_file(entry.path()) {
                    Ok(()) => deleted += 1,
                    Err(error) => {
                        tracing::debug!(file = name, %error, "sandbox.cache: could not delete");
                    }
                }
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "sandbox.cache: deleted unused artifacts");
        }
        deleted
    }

    /// Loads the artifact stored under `key`, if there is one with a valid MAC. A missing file is `None`;
    /// a file that fails its MAC or wasmtime's own checks is logged, deleted and reported as `None`, so
    /// the caller recompiles.
    pub(crate) fn load(&self, engine: &Engine, key: &str) -> Option<Module> {
        let path = self.path(key);
        let mut bytes = Vec::new();
        match fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut bytes)) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "sandbox.cache: unreadable artifact");
                return None;
            }
        }
        let verified = bytes.len() > MAGIC.len() + MAC_LEN
            && &bytes[..MAGIC.len()] == MAGIC
            && mac_eq(
                &bytes[MAGIC.len()..MAGIC.len() + MAC_LEN],
                &hmac(
                    &self.key,
                    &[key.as_bytes(), &bytes[MAGIC.len() + MAC_LEN..]],
                ),
            );
        if !verified {
            tracing::warn!(path = %path.display(), "sandbox.cache: artifact failed its MAC; discarding");
            let _ = fs::remove_file(&path);
            return None;
        }
        match deserialize_verified(engine, &bytes[MAGIC.len() + MAC_LEN..]) {
            Ok(module) => {
                // Marked as in use: its modification time is what `sweep` goes by.
                if let Err(error) = fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|file| file.set_modified(std::time::SystemTime::now()))
                {
                    tracing::debug!(key, %error, "sandbox.cache: could not mark the artifact in use");
                }
                Some(module)
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), error = %format!("{error:#}"),
                    "sandbox.cache: artifact rejected by wasmtime; discarding");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `module` under `key`. Failures are logged, not returned: the cache is an optimisation.
    pub(crate) fn store(&self, key: &str, module: &Module) {
        if let Err(error) = self.try_store(key, module) {
            tracing::warn!(key, error = %error, "sandbox.cache: could not store artifact");
        }
    }

    fn try_store(&self, key: &str, module: &Module) -> Result<(), SandboxError> {
        let serialized = module
            .serialize()
            .map_err(|e| SandboxError::wasmtime("serializing module", e))?;
        let mac = hmac(&self.key, &[key.as_bytes(), &serialized]);
        let path = self.path(key);
        let tmp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(MAGIC)?;
            file.write_all(&mac)?;
            file.write_all(&serialized)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_error("writing artifact", &path, e)
        })
    }
}

/// Turns verified artifact bytes back into a module.
#[allow(unsafe_code)]
fn deserialize_verified(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Module> {
    // SAFETY: `Module::deserialize` trusts its input to be an artifact produced by
    // `Module::serialize` of a compatible wasmtime. The only caller, `ArtifactCache::load`, passes bytes
    // whose HMAC-SHA256 (keyed by this cache's secret, which only Parley's user can read) verified, and
    // the MAC also covers the cache key, which includes the wasmtime version and the engine's
    // compatibility hash. So these bytes are exactly what this crate serialized itself; wasmtime
    // additionally checks version and engine settings in the artifact header.
    unsafe { Module::deserialize(engine, bytes) }
}

fn create_private_dir(dir: &Path) -> Result<(), SandboxError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| io_error("creating cache directory", dir, e))
}

/// The MAC is only as good as the key's secrecy and integrity: whoever can replace the key file (or
/// write the directory, and so swap the file) can forge artifacts. Refuse a cache that others can
/// write to or read the key of.
fn check_private(dir: &Path, key_path: &Path) -> Result<(), SandboxError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| {
            fs::metadata(path)
                .map(|m| m.permissions().mode())
                .map_err(|e| io_error("inspecting", path, e))
        };
        if mode(dir)? & 0o022 != 0 {
            return Err(SandboxError::internal(format!(
                "cache directory {} is writable by group or others; `chmod go-w` it",
                dir.display()
            )));
        }
        if mode(key_path)? & 0o077 != 0 {
            return Err(SandboxError::internal(format!(
                "cache key {} is accessible by group or others; `chmod 600` it",
                key_path.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (dir, key_path);
    Ok(())
}

fn read_key(path: &Path) -> Result<Option<[u8; 32]>, SandboxError> {
    match fs::read(path) {
        Ok(bytes) => {
            let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                SandboxError::internal(format!(
                    "cache key file {} is not 32 bytes; delete the cache directory",
                    path.display()
                ))
            })?;
            Ok(Some(key))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io_error("reading cache key", path, error)),
    }
}

fn create_key(path: &Path) -> Result<[u8; 32], SandboxError> {
    let mut key = [0u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(|e| io_error("reading random bytes from", Path::new("/dev/urandom"), e))?;
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .map_err(|e| io_error("writing cache key", path, e))?;
            Ok(key)
        }
        // Another process created it first: use theirs.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => read_key(path)?
            .ok_or_else(|| SandboxError::internal("cache key vanished while being created")),
        Err(error) => Err(io_error("creating cache key", path, error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231_case_2_shape() {
        // RFC 4231 test case 2 uses a 4-byte key; ours are always 32 bytes, zero-padded to the block
        // size exactly as HMAC pads short keys, so the same vector applies.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac(&key, &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[cfg(unix)]
    #[test]
    fn caches_others_can_write_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let cache_dir = dir.path().join("cache");
        ArtifactCache::open(&cache_dir).expect("a fresh private cache opens");
        let mode = fs::metadata(&cache_dir)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);

        fs::set_permissions(&cache_dir, fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(ArtifactCache::open(&cache_dir).is_err());
        fs::set_permissions(&cache_dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        fs::set_permissions(cache_dir.join(KEY_FILE), fs::Permissions::from_mode(0o644))
            .expect("chmod");
        assert!(ArtifactCache::open(&cache_dir).is_err());
    }

    #[test]
    fn sweep_deletes_only_stale_artifacts_and_abandoned_writes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = ArtifactCache::open(dir.path()).expect("open");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 3600);
        let file = |name: &str, modified: Option<std::time::SystemTime>| {
            let path = dir.path().join(name);
            fs::write(&path, b"x").expect("write");
            if let Some(modified) = modified {
                fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(modified))
                    .expect("set mtime");
            }
            path
        };
        // The artifact in use: a real one (an empty module), stored long ago and loaded now.
        let engine = Engine::default();
        let module = Module::new(&engine, b"\0asm\x01\0\0\0").expect("an empty module");
        cache.store("current", &module);
        let current = dir.path().join("current.cwasm");
        fs::File::options()
            .write(true)
            .open(&current)
            .and_then(|f| f.set_modified(old))
            .expect("set mtime");
        assert!(
            cache.load(&engine, "current").is_some(),
            "the artifact loads"
        );
        let stale = file("previous-version.cwasm", Some(old));
        let fresh = file("other-config.cwasm", None);
        let abandoned = file(".current.123.tmp", Some(old));
        let writing = file(".current.456.tmp", None);
        let unrelated = file("notes.txt", Some(old));

        let deleted = cache.sweep("current", std::time::Duration::from_secs(3600));
        assert_eq!(deleted, 2);
        assert!(current.exists(), "the artifact in use stays");
        assert!(
            !stale.exists(),
            "an artifact unused for longer than the limit goes"
        );
        assert!(
            fresh.exists(),
            "a recently used artifact of another configuration stays"
        );
        assert!(!abandoned.exists(), "an old temporary file goes");
        assert!(writing.exists(), "a write in progress stays");
        assert!(unrelated.exists(), "files the cache did not write stay");
        assert!(dir.path().join(KEY_FILE).exists(), "the key stays");
        let touched = fs::metadata(&current)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert!(touched > old, "the artifact in use is marked as used");
    }

    #[test]
    fn mac_eq_compares_everything() {
        assert!(mac_eq(b"abc", b"abc"));
        assert!(!mac_eq(b"abc", b"abd"));
        assert!(!mac_eq(b"abc", b"ab"));
    }
}
