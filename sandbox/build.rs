//! Checks the committed guest runtimes (`sandbox/runtimes/`) against their committed sha256 files
//! and hands each hash to the crate, which embeds the runtime's bytes with `include_bytes!`.
//!
//! The runtimes are committed, not built here: building them needs clang, lld and wasi-libc
//! besides the `wasm32-wasip1` target, and a nested cargo build for another target inside a build
//! script fights over the target-dir lock. So `cargo build` needs only the Rust toolchain, and
//! `scripts/setup-guest.sh` rebuilds the runtimes from `sandbox/guest` and `sandbox/mapping-guest`
//! and fails when a fresh build differs from the committed bytes.

use sha2::{Digest, Sha256};
use std::path::Path;

/// Checks `runtimes/<file>` against `runtimes/<file>.sha256` and exports the hash as
/// `PARLEY_<var>_SHA256`. Panics (failing the build) when either is missing or they disagree.
fn check(runtimes: &Path, file: &str, var: &str) {
    let runtime = runtimes.join(file);
    let hash_file = runtimes.join(format!("{file}.sha256"));
    println!("cargo:rerun-if-changed={}", runtime.display());
    println!("cargo:rerun-if-changed={}", hash_file.display());

    let read_error = |path: &Path, error: std::io::Error| -> ! {
        panic!(
            "\n\nparley-sandbox: cannot read {} ({error}). The guest runtimes and their hashes are \
             committed under sandbox/runtimes/; restore them from git, or rebuild them with \
             `scripts/setup-guest.sh --update`.\n\n",
            path.display()
        )
    };
    let bytes = std::fs::read(&runtime).unwrap_or_else(|e| read_error(&runtime, e));
    let recorded =
        std::fs::read_to_string(&hash_file).unwrap_or_else(|e| read_error(&hash_file, e));
    let recorded = recorded
        .lines()
        .find(|line| !line.starts_with('#') && !line.trim().is_empty())
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_default();
    let hash = hex::encode(Sha256::digest(&bytes));
    if hash != recorded {
        panic!(
            "\n\nparley-sandbox: sandbox/runtimes/{file} has sha256 {hash}, but \
             sandbox/runtimes/{file}.sha256 records {recorded:?}.\n\
             The committed runtime and its hash must match: restore both from git, or rebuild the \
             runtime with `scripts/setup-guest.sh --update` (which writes both) and commit them.\n\n"
        );
    }
    println!("cargo:rustc-env=PARLEY_{var}_SHA256={hash}");
}

fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it");
    let runtimes = Path::new(&manifest_dir).join("runtimes");
    check(&runtimes, "parley-runtime.wasm", "RUNTIME");
    check(&runtimes, "parley-mapping-runtime.wasm", "MAPPING_RUNTIME");
}
