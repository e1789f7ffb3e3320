//! Fixtures the modules share: the repository's example capabilities and its product protocol
//! (seed 002's product information).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parley_anp::ProtocolDoc;
use parley_capabilities::Capabilities;
use parley_reasoner::DeclaredCapability;

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate lives in the workspace, at negotiator/reasoner")
        .to_path_buf()
}

/// `examples/capabilities.toml`, loaded.
pub fn capabilities() -> Arc<Capabilities> {
    Arc::new(
        Capabilities::load(&repo().join("examples/capabilities.toml"), |_| None)
            .expect("the example capabilities load"),
    )
}

/// The example capabilities as a protocol reasoner sees them.
pub fn declared_capabilities() -> Vec<DeclaredCapability> {
    DeclaredCapability::all(&capabilities())
}

/// The text of `examples/protocols/product-info.md`.
pub fn product_text() -> String {
    std::fs::read_to_string(repo().join("examples/protocols/product-info.md"))
        .expect("example protocol")
}

/// The example product protocol, parsed.
pub fn product() -> ProtocolDoc {
    ProtocolDoc::parse(product_text()).expect("example parses")
}
