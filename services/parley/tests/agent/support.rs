//! What the tests of the `parley` executable share: where it is, and the example files.

use std::path::{Path, PathBuf};

/// The `parley` executable Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_parley");

/// The repository's `examples/` directory.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}
