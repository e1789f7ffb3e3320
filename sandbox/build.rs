//! Embeds the guest runtimes (`sandbox/guest`, the JavaScript runtime, and `sandbox/mapping-guest`,
//! the mapping runtime; both built by `scripts/setup-guest.sh`) into the crate.
//!
//! The runtimes are not built here: a nested cargo build for another target inside a build script
//! fights over the target-dir lock and hides the guests' own reproducibility settings. Instead this
//! script points `include_bytes!` at the verified copies the setup script leaves in the guests' target
//! directories, and fails with instructions when one is missing.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Embeds `<guest>/target/<file>` as `PARLEY_<var>_WASM` and its sha256 as `PARLEY_<var>_SHA256`.
fn embed(manifest_dir: &Path, guest: &str, file: &str, var: &str, what: &str) {
    let runtime = manifest_dir.join(guest).join("target").join(file);
    let committed_hash = manifest_dir.join(guest).join("runtime.sha256");
    println!("cargo:rerun-if-changed={}", runtime.display());
    println!("cargo:rerun-if-changed={}", committed_hash.display());

    let bytes = match std::fs::read(&runtime) {
        Ok(bytes) => bytes,
        Err(error) => panic!(
            "\n\nparley-sandbox: the {what} guest is missing ({}: {error}).\n\
             Build it first with:\n\n    scripts/setup-guest.sh\n\n\
             (installs clang/lld/llvm/wasi-libc and the wasm32-wasip1 target if needed, builds \
             the guests reproducibly and verifies them against their runtime.sha256 files)\n\n",
            runtime.display()
        ),
    };
    let hash = hex::encode(Sha256::digest(&bytes));
    if let Ok(expected) = std::fs::read_to_string(&committed_hash) {
        let expected = expected.split_whitespace().next().unwrap_or_default();
        if expected != hash {
            println!(
                "cargo:warning=the {what} guest's sha256 {hash} differs from sandbox/{guest}/runtime.sha256 \
                 ({expected}); rebuild with scripts/setup-guest.sh (or --update-hash after changing the guest)"
            );
        }
    }
    println!("cargo:rustc-env=PARLEY_{var}_WASM={}", runtime.display());
    println!("cargo:rustc-env=PARLEY_{var}_SHA256={hash}");
}

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    embed(
        &manifest_dir,
        "guest",
        "parley-runtime.wasm",
        "RUNTIME",
        "JavaScript runtime",
    );
    embed(
        &manifest_dir,
        "mapping-guest",
        "parley-mapping-runtime.wasm",
        "MAPPING_RUNTIME",
        "mapping runtime",
    );
}
