//! Embeds the guest runtime (`sandbox/guest`, built by `scripts/setup-guest.sh`) into the crate.
//!
//! The runtime is not built here: a nested cargo build for another target inside a build script fights
//! over the target-dir lock and hides the guest's own reproducibility settings. Instead this script
//! points `include_bytes!` at the verified copy the setup script leaves in the guest's target directory,
//! and fails with instructions when it is missing.

use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let runtime = manifest_dir.join("guest/target/parley-runtime.wasm");
    let committed_hash = manifest_dir.join("guest/runtime.sha256");
    println!("cargo:rerun-if-changed={}", runtime.display());
    println!("cargo:rerun-if-changed={}", committed_hash.display());

    let bytes = match std::fs::read(&runtime) {
        Ok(bytes) => bytes,
        Err(error) => panic!(
            "\n\nparley-sandbox: the JavaScript runtime guest is missing ({}: {error}).\n\
             Build it first with:\n\n    scripts/setup-guest.sh\n\n\
             (installs clang/lld/llvm/wasi-libc and the wasm32-wasip1 target if needed, builds \
             sandbox/guest reproducibly and verifies it against sandbox/guest/runtime.sha256)\n\n",
            runtime.display()
        ),
    };
    let hash = hex::encode(Sha256::digest(&bytes));
    if let Ok(expected) = std::fs::read_to_string(&committed_hash) {
        let expected = expected.split_whitespace().next().unwrap_or_default();
        if expected != hash {
            println!(
                "cargo:warning=the guest runtime's sha256 {hash} differs from sandbox/guest/runtime.sha256 \
                 ({expected}); rebuild with scripts/setup-guest.sh (or --update-hash after changing the guest)"
            );
        }
    }
    println!("cargo:rustc-env=PARLEY_RUNTIME_WASM={}", runtime.display());
    println!("cargo:rustc-env=PARLEY_RUNTIME_SHA256={hash}");
}
