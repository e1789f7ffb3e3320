//! The corpus of protocol documents as other agents write them (`negotiator/tests/documents/`):
//! each `NAME.md` parses, and yields the schemas, inference notes, unclear points, number of test
//! cases and (where listed) the test cases themselves that its `NAME.expected.json` lists. The
//! built-in reasoner's decision on each (`evaluation`) is checked by `parley-reasoner`'s
//! `corpus` tests.

use std::path::{Path, PathBuf};

use parley_anp::ProtocolDoc;
use serde_json::{Value, json};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/documents")
}

#[test]
fn every_corpus_document_reads_as_expected() {
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(corpus())
        .expect("the corpus directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(&path).expect("a readable document");
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(path.with_extension("expected.json"))
                .unwrap_or_else(|e| panic!("{name}: its expected.json: {e}")),
        )
        .unwrap_or_else(|e| panic!("{name}: expected.json is not JSON: {e}"));
        let doc = ProtocolDoc::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            doc.request_schema(),
            &expected["request"],
            "{name}: request"
        );
        assert_eq!(
            doc.response_schema(),
            &expected["response"],
            "{name}: response"
        );
        assert_eq!(
            json!(doc.inferred()),
            expected["inferred"],
            "{name}: inferred"
        );
        assert_eq!(
            json!(doc.unclear()),
            expected
                .get("unclear")
                .cloned()
                .unwrap_or_else(|| json!([])),
            "{name}: unclear"
        );
        assert_eq!(
            json!(doc.test_cases().len()),
            expected["test_cases"],
            "{name}: test cases"
        );
        if let Some(cases) = expected.get("cases") {
            assert_eq!(&json!(doc.test_cases()), cases, "{name}: the cases as read");
        }
        checked += 1;
    }
    assert!(checked >= 8, "the corpus has documents ({checked})");
}

#[test]
fn a_derived_schema_checks_messages_like_a_written_one() {
    let text = std::fs::read_to_string(corpus().join("agentconnect-product.md")).expect("doc");
    let doc = ProtocolDoc::parse(text).expect("parses");
    let request =
        json!({"messageType": "ProductQuery", "messageId": "a1b2c3d4e5f6a7b8", "productId": "P1"});
    assert!(doc.validate_request(&request).is_ok());
    let missing = json!({"messageType": "ProductQuery", "messageId": "a1b2c3d4e5f6a7b8"});
    let violation = doc
        .validate_request(&missing)
        .expect_err("productId is required");
    assert!(
        violation.errors.join(" ").contains("productId"),
        "{violation}"
    );
    let wrong_type = json!({
        "messageType": "ProductQueryResponse", "messageId": "m", "code": "200",
        "productInfo": {"name": "Laptop", "price": 1299.99, "inStock": true}, "error": null
    });
    assert!(
        doc.validate_response(&wrong_type).is_err(),
        "code is an integer"
    );
}

#[test]
fn prose_test_cases_read_expected_result_and_output_headings() {
    let text = std::fs::read_to_string(corpus().join("headings-and-prose-cases.md")).expect("doc");
    let doc = ProtocolDoc::parse(text).expect("parses");
    let cases = doc.test_cases();
    assert_eq!(cases[0].request, json!({"city": "Oslo"}));
    assert_eq!(cases[0].expected_response["status"], 200);
    assert_eq!(cases[1].expected_response["temperatureC"], Value::Null);
    assert!(
        doc.sections().process.is_some(),
        "`Message Flow` is the process section"
    );
    assert_eq!(
        doc.sections().requirements.as_deref(),
        Some("Current weather for a city.")
    );
}

#[test]
fn prose_expectations_are_checked_by_the_verifier() {
    use parley_anp::verify::check_case;
    let text = std::fs::read_to_string(corpus().join("prose-expected-results.md")).expect("doc");
    let doc = ProtocolDoc::parse(text).expect("parses");
    let found = &doc.test_cases()[0];
    let product = json!({"productId": "P12345", "productName": "Laptop", "price": 1299.99});
    let good = json!({"messageId": "t1", "code": 200, "productInfo": product});
    assert!(check_case(&doc, found, Ok(good)).passed);
    // `productInfo is not null` is a check of its own; the schema allows null.
    let empty = json!({"messageId": "t1", "code": 200, "productInfo": null});
    let report = check_case(&doc, found, Ok(empty));
    assert_eq!(
        report.failures,
        ["at /productInfo: expected it not null, got null"]
    );
    let wrong_code = json!({"messageId": "t1", "code": 404, "productInfo": product});
    assert_eq!(
        check_case(&doc, found, Ok(wrong_code)).failures,
        ["at /code: expected 200, got 404"]
    );
}

#[test]
fn a_non_empty_check_fails_on_an_empty_value() {
    use parley_anp::verify::check_case;
    let text = std::fs::read_to_string(corpus().join("alternative-headings.md")).expect("doc");
    let doc = ProtocolDoc::parse(text).expect("parses");
    let known = &doc.test_cases()[0];
    assert_eq!(known.name, "Known product");
    let empty = json!({"messageId": "n1", "code": 200, "productInfo": {}});
    let report = check_case(&doc, known, Ok(empty));
    assert!(!report.passed);
    assert!(
        report.failures.iter().any(|f| f.contains("non-empty")),
        "{:?}",
        report.failures
    );
}
