//! Fixtures the modules share: the example protocol that ships with the repository.

use parley_anp::ProtocolDoc;

/// The text of `examples/protocols/product-info.md` (seed 002's product protocol).
pub fn example_text() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/protocols/product-info.md"
    ))
    .expect("the example protocol ships with the repository")
}

/// The example protocol, parsed.
pub fn example() -> ProtocolDoc {
    ProtocolDoc::parse(example_text()).expect("example parses")
}
