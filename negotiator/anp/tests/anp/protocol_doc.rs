//! Protocol documents: sections, schemas, test cases, validation errors, hashing.

use parley_anp::{MatchMode, ProtocolDoc, ProtocolError, ProtocolHash, SchemaRole};
use serde_json::json;

use crate::support::example_text;

/// Seed 002's own document shape: unfenced JSON, `# Test Case 2` at the top level, prose
/// labels for test data.
const SEED_STYLE: &str = r#"# Requirements
Retrieve product information

# Process Description
The requester includes the product ID.

# Data Format Description
## Request Message
Request JSON schema defined as follows:
{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "ProductInfoRequest",
  "type": "object",
  "properties": { "messageId": { "type": "string" }, "productId": { "type": "string" } },
  "required": ["messageId", "productId"]
}

## Response Message
Response JSON schema defined as follows:
{
  "title": "ProductInfoResponse",
  "type": "object",
  "properties": { "messageId": { "type": "string" }, "status": { "type": "object" } },
  "required": ["messageId", "status"]
}

# Test Cases

## Test Case 1

- **Test Request Data**:
{
  "messageId": "msg001",
  "productId": "P12345"
}

- **Test Response Data**:
{
  "messageId": "msg001",
  "status": { "code": 200, "message": "Success" }
}

- **Expected Test Result**:
Successfully retrieved product information, status code 200.

# Test Case 2

- **Test Request Data**:
{ "messageId": "msg002", "productId": "P99999" }

- **Test Response Data**:
{ "messageId": "msg002", "status": { "code": 404, "message": "Product not found" } }
"#;

#[test]
fn parses_the_shipped_example() {
    let doc = ProtocolDoc::parse(example_text()).expect("the example parses");
    assert_eq!(doc.request_schema()["title"], "ProductInfoRequest");
    assert_eq!(doc.response_schema()["title"], "ProductInfoResponse");
    let names: Vec<&str> = doc.test_cases().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["known product", "unknown product", "missing product id"]
    );
    let first = &doc.test_cases()[0];
    assert_eq!(first.match_mode, MatchMode::Subset);
    assert_eq!(
        first
            .fixtures
            .answer("getProductInfo", &json!({"productId": "P12345"}))
            .expect("fixture")["price"],
        1299.99
    );
    assert!(
        first
            .fixtures
            .answer("getProductInfo", &json!({"productId": "P1"}))
            .is_err()
    );
    let sections = doc.sections();
    assert!(
        sections
            .requirements
            .as_deref()
            .unwrap_or("")
            .contains("catalogue")
    );
    assert!(
        sections
            .error_handling
            .as_deref()
            .unwrap_or("")
            .contains("404")
    );
    assert!(sections.process.is_some());
    assert_eq!(doc.hash(), ProtocolHash::of(&example_text()));
    assert_eq!(doc.text(), example_text());
}

#[test]
fn parses_seed_style_documents() {
    let doc = ProtocolDoc::parse(SEED_STYLE).expect("seed-style parses");
    assert_eq!(doc.request_schema()["title"], "ProductInfoRequest");
    let cases = doc.test_cases();
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0].name, "Test Case 1");
    assert_eq!(cases[1].name, "Test Case 2");
    assert_eq!(cases[1].expected_response["status"]["code"], 404);
    assert!(cases[0].fixtures.is_empty());
}

#[test]
fn lenient_on_heading_levels_and_case() {
    let text = "# Protocol: lookup\n\n## 1. REQUIREMENTS\nFind things.\n\n## 3. data format:\n### Request\n```json\n{\"type\": \"object\"}\n```\n### Response\n```json\n{\"type\": \"object\", \"required\": [\"ok\"]}\n```\n## Error handling\nNone.\n";
    let doc = ProtocolDoc::parse(text).expect("parses");
    assert_eq!(doc.response_schema()["required"], json!(["ok"]));
    assert_eq!(doc.sections().requirements.as_deref(), Some("Find things."));
    assert!(doc.test_cases().is_empty());
}

#[test]
fn unlabelled_schemas_go_by_order() {
    let text = "# Data Format\n```json\n{\"type\":\"object\",\"title\":\"A\"}\n```\n```json\n{\"type\":\"object\",\"title\":\"B\"}\n```\n";
    let doc = ProtocolDoc::parse(text).expect("parses");
    assert_eq!(doc.request_schema()["title"], "A");
    assert_eq!(doc.response_schema()["title"], "B");
}

#[test]
fn examples_in_data_format_are_not_schemas() {
    let text = "# Data Format\n## Request\n```json\n{\"type\":\"object\"}\n```\nExample request:\n```json\n{\"type\":\"REQUEST\",\"productId\":\"P1\"}\n```\n## Response\n```json\n{\"type\":\"object\"}\n```\n";
    assert!(ProtocolDoc::parse(text).is_ok());
}

#[test]
fn strict_on_missing_and_broken_schemas() {
    let cases: [(&str, &str); 7] = [
        ("", "empty_protocol"),
        ("# Requirements\nsomething\n", "missing_section"),
        (
            "# Data Format\n## Request\n```json\n{\"type\":\"object\"}\n```\n",
            "missing_schema",
        ),
        (
            "# Data Format\n## Response\n```json\n{\"type\":\"object\"}\n```\n",
            "missing_schema",
        ),
        (
            "# Data Format\n## Request\n```json\n{\"type\": \"object\",}\n```\n",
            "invalid_json",
        ),
        (
            "# Data Format\n## Request\n```json\n{\"type\":\"object\"}\n```\n## Response\n```json\n{\"type\":\"objekt\", \"properties\": {}}\n```\n",
            "invalid_schema",
        ),
        (
            "# Data Format\nRequest schema:\n```json\n{\"type\":\"object\"}\n```\nRequest schema again:\n```json\n{\"type\":\"object\"}\n```\nResponse:\n```json\n{\"type\":\"object\"}\n```\n",
            "ambiguous_schema",
        ),
    ];
    for (text, code) in cases {
        let err = ProtocolDoc::parse(text).expect_err(text);
        assert_eq!(err.code(), code, "{text:?}: {err}");
    }
    let err =
        ProtocolDoc::parse("# Data Format\n## Request\n```json\n{\"type\":\"object\"}\n```\n")
            .expect_err("no response");
    assert_eq!(
        err,
        ProtocolError::MissingSchema {
            role: SchemaRole::Response
        }
    );
    assert!(err.to_string().contains("response"), "{err}");
}

#[test]
fn bad_test_cases_are_named() {
    let base = "# Data Format\n## Request\n```json\n{\"type\":\"object\"}\n```\n## Response\n```json\n{\"type\":\"object\"}\n```\n# Test Cases\n";
    let missing_expectation =
        format!("{base}```json\n[{{\"name\":\"a\",\"request\":{{}}}}]\n```\n");
    let err = ProtocolDoc::parse(missing_expectation).expect_err("no expectedResponse");
    assert_eq!(err.code(), "invalid_test_case");
    assert!(err.to_string().contains("expectedResponse"), "{err}");

    let bad_fixture = format!(
        "{base}```json\n[{{\"name\":\"a\",\"request\":{{}},\"expectedResponse\":{{}},\"fixtures\":{{\"cap\":[{{\"argz\":{{}}}}]}}}}]\n```\n"
    );
    assert_eq!(
        ProtocolDoc::parse(bad_fixture).expect_err("typo").code(),
        "invalid_test_case"
    );

    let duplicate = format!(
        "{base}```json\n[{{\"name\":\"a\",\"request\":{{}},\"expectedResponse\":{{}}}},{{\"name\":\"a\",\"request\":{{}},\"expectedResponse\":{{}}}}]\n```\n"
    );
    assert_eq!(
        ProtocolDoc::parse(duplicate).expect_err("dup").code(),
        "invalid_test_case"
    );

    let unnamed = format!(
        "{base}```json\n[{{\"request\":{{}},\"expectedResponse\":{{}},\"match\":\"exact\"}}]\n```\n"
    );
    let doc = ProtocolDoc::parse(unnamed).expect("unnamed ok");
    assert_eq!(doc.test_cases()[0].name, "case 1");
    assert_eq!(doc.test_cases()[0].match_mode, MatchMode::Exact);
}

#[test]
fn validation_errors_are_precise() {
    let doc = ProtocolDoc::parse(example_text()).expect("parses");
    doc.validate_request(&json!({
        "messageId": "m", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"
    }))
    .expect("valid");
    let err = doc
        .validate_request(&json!({"messageId": 5, "type": "REQUEST", "action": "getProductInfo"}))
        .expect_err("invalid");
    assert_eq!(err.role, SchemaRole::Request);
    let text = err.to_string();
    assert!(text.contains("at /messageId"), "{text}");
    assert!(text.contains("productId"), "{text}");

    let err = doc
        .validate_response(
            &json!({"messageId": "m", "type": "RESPONSE", "status": {"code": "200"}}),
        )
        .expect_err("invalid");
    let text = err.to_string();
    assert!(text.contains("at /status/code"), "{text}");
    assert!(text.contains("at /status"), "{text}");
}

#[test]
fn hash_is_over_exact_bytes() {
    let text = example_text();
    let a = ProtocolDoc::parse(text.clone()).expect("parses");
    let b = ProtocolDoc::parse(format!("{text} ")).expect("parses");
    assert_ne!(a.hash(), b.hash());
    assert_eq!(a.hash().to_string().len(), 64);
    assert_eq!(
        a.hash().prefixed().to_uppercase().parse::<ProtocolHash>(),
        Ok(a.hash())
    );
}
