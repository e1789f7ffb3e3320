//! The work a protocol document may ask for is bounded: a proposal over its limits is refused
//! before its schemas compile, and every `pattern` matches in linear time. Findings of a hostile
//! trial: a schema `pattern` tuned below the backtracking limit, applied to each array item,
//! cost seconds of CPU for one small message; a proposal with 2,000 patterned properties cost
//! seconds of CPU and hundreds of megabytes to compile.

use parley_anp::{DocLimits, ProtocolDoc, ProtocolError, parse_test_cases_within};
use serde_json::{Value, json};

/// A protocol document with these two schemas and `cases` trivial test cases.
fn document(request: &Value, response: &Value, cases: usize) -> String {
    let cases: Vec<Value> = (0..cases)
        .map(|i| json!({"name": format!("c{i}"), "request": {}, "expectedResponse": {}}))
        .collect();
    format!(
        "# Requirements\nAnything.\n\n# Data Format\nRequest JSON schema:\n```json\n{request}\n```\n\n\
         Response JSON schema:\n```json\n{response}\n```\n\n# Test Cases\n```json\n{}\n```\n",
        Value::Array(cases)
    )
}

fn object() -> Value {
    json!({"type": "object"})
}

#[test]
fn a_proposal_with_thousands_of_patterned_properties_is_refused_before_it_compiles() {
    let properties: serde_json::Map<String, Value> = (0..2_000)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": format!("^(a|b{{1,{i}}})+x$")}),
            )
        })
        .collect();
    let request = json!({"type": "object", "properties": properties});
    let text = document(&request, &object(), 1);
    let limits = DocLimits {
        max_bytes: usize::MAX,
        ..DocLimits::default()
    };
    match ProtocolDoc::parse_within(text, &limits) {
        Err(ProtocolError::TooComplex { what, count, limit }) => {
            assert_eq!(what, "regular expressions in the schemas");
            assert_eq!(
                (count, limit),
                (2_000, DocLimits::default().max_schema_patterns)
            );
        }
        other => panic!("expected protocol_too_complex, got {other:?}"),
    }
}

#[test]
fn each_limit_names_what_is_over_it() {
    let limits = DocLimits {
        max_bytes: 4_000,
        max_schema_nodes: 20,
        max_schema_patterns: 2,
        max_test_cases: 3,
    };
    let refused = |text: String| match ProtocolDoc::parse_within(text, &limits) {
        Err(e @ ProtocolError::TooComplex { .. }) => {
            assert_eq!(e.code(), "protocol_too_complex");
            e.to_string()
        }
        other => panic!("expected protocol_too_complex, got {other:?}"),
    };
    let fine = document(&object(), &object(), 3);
    ProtocolDoc::parse_within(fine, &limits).expect("within every limit");

    let long = format!(
        "{}\n{}",
        document(&object(), &object(), 1),
        "x".repeat(4_000)
    );
    assert!(refused(long).contains("bytes of text"));
    let wide: serde_json::Map<String, Value> =
        (0..20).map(|i| (format!("p{i}"), json!({}))).collect();
    let wide = json!({"type": "object", "properties": wide});
    assert!(refused(document(&wide, &object(), 1)).contains("JSON values"));
    let patterned = json!({"type": "object", "patternProperties": {"^a": {}, "^b": {}, "^c": {}}});
    assert!(refused(document(&patterned, &object(), 1)).contains("regular expressions"));
    assert!(refused(document(&object(), &object(), 4)).contains("test cases"));

    let cases = Value::Array(vec![json!({"request": {}, "expectedResponse": {}}); 4]).to_string();
    let err = parse_test_cases_within(&cases, &limits).expect_err("four test cases");
    assert!(err.to_string().contains("4 test cases"), "{err}");
}

#[test]
fn patterns_run_without_backtracking() {
    // A pattern that backtracks exponentially on a near-miss, applied to every item of an array:
    // each item is an ordinary mismatch, found in one pass over it.
    let request = json!({"type": "array", "items": {"type": "string", "pattern": "^(a+)+$"}});
    let doc = ProtocolDoc::parse(document(&request, &object(), 0)).expect("a linear pattern");
    let near_miss = format!("{}!", "a".repeat(5_000));
    let items = Value::Array(vec![Value::String(near_miss); 200]);
    let violation = doc.validate_request(&items).expect_err("no item matches");
    assert!(
        violation.errors[0].contains("does not match"),
        "{:?}",
        violation.errors
    );

    // Look-around and back-references need backtracking: a schema using them does not compile.
    for pattern in ["^(?=a)a$", "^(a)\\1$"] {
        let request = json!({"type": "string", "pattern": pattern});
        let err = ProtocolDoc::parse(document(&request, &object(), 0)).expect_err(pattern);
        assert_eq!(err.code(), "invalid_schema", "{pattern}: {err}");
    }
}
