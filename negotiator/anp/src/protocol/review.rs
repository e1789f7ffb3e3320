//! Reviewing test cases a peer proposes for an agreed protocol (`testCasesNegotiation`): the
//! side that receives them checks that each one speaks the protocol before agreeing to it.
//!
//! A case follows the protocol when its `request` is valid against the request schema and its
//! `expectedResponse` against the response schema. An `exact` expectation is a whole response
//! and is checked as one. A `subset` expectation lists only the fields that matter, so a field
//! the schema requires may be left out: it is checked against the response schema with every
//! `required` removed, which still refuses a field of the wrong type, a value outside an `enum`
//! or a field the schema does not allow. Every `checks` path must be a JSON Pointer.
//!
//! What the provider's handler answers is not judged here: the provider ran its own cases
//! before proposing them, and every answer is checked against the response schema when it
//! arrives.

use serde_json::Value;

use super::limits::compile;
use super::{DocLimits, MatchMode, ProtocolDoc, SchemaRole, TestCase, parse_test_cases_within};

/// Reads proposed test cases (`text`, a `testCasesNegotiation` body, within `limits`) and checks
/// each against `doc`'s schemas. `Ok` holds the cases when every one follows the protocol;
/// `Err` says why not, naming each case that does not.
pub fn review_test_cases(
    doc: &ProtocolDoc,
    text: &str,
    limits: &DocLimits,
) -> Result<Vec<TestCase>, String> {
    let cases = parse_test_cases_within(text, limits)
        .map_err(|e| format!("the proposed test cases do not read: {e}"))?;
    if cases.is_empty() {
        return Err("no test cases were proposed".into());
    }
    let relaxed = compile(
        SchemaRole::Response,
        &without_required(doc.response_schema()),
    )
    .map_err(|e| format!("the response schema cannot check a partial response: {e}"))?;
    let problems: Vec<String> = cases
        .iter()
        .flat_map(|case| problems(doc, &relaxed, case))
        .collect();
    if problems.is_empty() {
        Ok(cases)
    } else {
        Err(format!(
            "the proposed test cases do not follow the protocol: {}",
            problems.join("; ")
        ))
    }
}

/// What is wrong with one case, one line each, naming the case.
fn problems(doc: &ProtocolDoc, relaxed: &jsonschema::Validator, case: &TestCase) -> Vec<String> {
    let mut out = Vec::new();
    let name = &case.name;
    if let Err(v) = doc.validate_request(&case.request) {
        out.push(format!(
            "test case `{name}`: its request breaks the request schema ({})",
            v.errors.join(", ")
        ));
    }
    let expected = match case.match_mode {
        MatchMode::Exact => doc.validate_response(&case.expected_response),
        MatchMode::Subset => {
            super::violations(SchemaRole::Response, relaxed, &case.expected_response)
        }
    };
    if let Err(v) = expected {
        out.push(format!(
            "test case `{name}`: its expected response breaks the response schema ({})",
            v.errors.join(", ")
        ));
    }
    for check in &case.checks {
        if !(check.path.is_empty() || check.path.starts_with('/')) {
            out.push(format!(
                "test case `{name}`: check path {:?} is not a JSON Pointer",
                check.path
            ));
        }
    }
    out
}

/// `schema` with every `required` keyword removed, at any depth. Keywords whose values are data
/// (`const`, `enum`, `examples`, `default`) are kept as they are, and a property that happens
/// to be called `required` is not a keyword (its value is a schema, not a list of names).
fn without_required(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, value)| !(key.as_str() == "required" && value.is_array()))
                .map(|(key, value)| {
                    let kept = match key.as_str() {
                        "const" | "enum" | "examples" | "default" => value.clone(),
                        _ => without_required(value),
                    };
                    (key.clone(), kept)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_required).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DOC: &str = r#"# Data Format

Request JSON Schema:

```json
{"type": "object", "properties": {"id": {"type": "string", "pattern": "^P[0-9]+$"}},
 "required": ["id"], "additionalProperties": false}
```

Response JSON Schema:

```json
{"type": "object",
 "properties": {"code": {"type": "integer", "enum": [200, 404]},
                "item": {"type": ["object", "null"],
                         "properties": {"name": {"type": "string"}}, "required": ["name"]}},
 "required": ["code", "item"], "additionalProperties": false}
```
"#;

    fn doc() -> ProtocolDoc {
        ProtocolDoc::parse(DOC).expect("the test protocol")
    }

    fn body(cases: Value) -> String {
        format!("```json\n{cases}\n```\n")
    }

    #[test]
    fn cases_that_speak_the_protocol_are_accepted_with_partial_expectations() {
        let cases = json!([
            {"name": "found", "request": {"id": "P1"}, "expectedResponse": {"code": 200},
             "checks": [{"path": "/item", "is": "notNull"}]},
            {"name": "missing", "request": {"id": "P2"},
             "expectedResponse": {"code": 404, "item": null}, "match": "exact"}
        ]);
        let read =
            review_test_cases(&doc(), &body(cases), &DocLimits::default()).expect("accepted");
        assert_eq!(read.len(), 2);
    }

    #[test]
    fn cases_that_break_the_schemas_are_refused_by_name() {
        let cases = json!([
            {"name": "bad request", "request": {"id": 7}, "expectedResponse": {"code": 200}},
            {"name": "bad status", "request": {"id": "P1"}, "expectedResponse": {"code": 500}},
            {"name": "unknown field", "request": {"id": "P1"},
             "expectedResponse": {"code": 200, "price": 3}},
            {"name": "incomplete exact", "request": {"id": "P1"},
             "expectedResponse": {"code": 200}, "match": "exact"},
            {"name": "fine", "request": {"id": "P1"}, "expectedResponse": {"code": 404}}
        ]);
        let why =
            review_test_cases(&doc(), &body(cases), &DocLimits::default()).expect_err("refused");
        for name in [
            "bad request",
            "bad status",
            "unknown field",
            "incomplete exact",
        ] {
            assert!(why.contains(&format!("`{name}`")), "{name}: {why}");
        }
        assert!(!why.contains("`fine`"), "{why}");
        assert!(why.contains("request schema"), "{why}");
        assert!(why.contains("response schema"), "{why}");
    }

    #[test]
    fn nothing_readable_is_refused() {
        let limits = DocLimits::default();
        assert!(review_test_cases(&doc(), "no cases here", &limits).is_err());
        assert!(review_test_cases(&doc(), "```json\n[{\"request\": 1}]\n```", &limits).is_err());
    }

    #[test]
    fn only_the_required_keyword_is_removed() {
        let schema = json!({
            "required": ["a"],
            "properties": {"required": {"type": "string"}, "a": {"const": {"required": ["x"]}}},
            "items": [{"required": ["b"]}]
        });
        assert_eq!(
            without_required(&schema),
            json!({
                "properties": {"required": {"type": "string"}, "a": {"const": {"required": ["x"]}}},
                "items": [{}]
            })
        );
    }
}
