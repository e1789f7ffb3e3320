//! The protocol-document reader on arbitrary UTF-8 Markdown, under the default limits a peer's
//! document is read with. A document it accepts keeps its exact text and that text's hash, and
//! its compiled schemas judge its own test cases' messages without panicking (verification
//! does this with every negotiated document).
#![no_main]

use libfuzzer_sys::fuzz_target;
use parley_anp::{DocLimits, ProtocolDoc, ProtocolHash};

fuzz_target!(|text: &str| {
    let Ok(doc) = ProtocolDoc::parse_within(text, &DocLimits::default()) else {
        return;
    };
    assert_eq!(doc.text(), text);
    assert_eq!(doc.hash(), ProtocolHash::of(text));
    for case in doc.test_cases() {
        let _ = doc.validate_request(&case.request);
        let _ = doc.validate_response(&case.expected_response);
    }
});
