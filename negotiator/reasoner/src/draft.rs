//! Writing protocol documents: the requester's first draft and the provider's counter-proposals.
//!
//! Both produce the document shape [`parley_anp::protocol`] reads, with schemas and test cases in
//! ```` ```json ```` fences, so every text Parley writes parses back into a [`ProtocolDoc`]
//! (tested).
//!
//! [`ProtocolDoc`]: parley_anp::protocol::ProtocolDoc

use serde_json::{Value, json};

use crate::planner::CaseStyle;
use crate::schema::{json_types, object, properties, required};
use parley_anp::protocol::{MatchMode, TestCase};

/// The parts of a protocol document.
#[derive(Debug, Clone, PartialEq)]
pub struct DocParts {
    pub requirements: String,
    pub process: String,
    pub request_schema: Value,
    pub response_schema: Value,
    pub error_handling: String,
    pub test_cases: Vec<TestCase>,
}

fn pretty(value: &Value) -> String {
    // Serialising a `Value` to a string cannot fail.
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The test cases as the body of a protocol's `# Test Cases` section (also what a
/// `testCasesNegotiation` message carries): a line saying how to read them and the cases as a
/// JSON array.
pub fn render_test_cases(test_cases: &[TestCase]) -> String {
    let cases = serde_json::to_value(test_cases).unwrap_or_else(|_| json!([]));
    format!(
        "Each case lists a request, the fields its response must contain (`match`: `subset` or \
         `exact`), under `checks` the fields that must be present, not null or non-empty, and \
         under `fixtures` the capability results to use instead of real calls.\n\n\
         ```json\n{}\n```\n",
        pretty(&cases)
    )
}

/// Renders the parts as markdown.
pub fn render(parts: &DocParts) -> String {
    format!(
        "# Requirements\n\n{}\n\n# Process\n\n{}\n\n# Data Format\n\nRequests and responses are JSON objects (RFC 8259).\n\n\
         ## Request Message\n\nRequest JSON Schema:\n\n```json\n{}\n```\n\n\
         ## Response Message\n\nResponse JSON Schema:\n\n```json\n{}\n```\n\n\
         # Error Handling\n\n{}\n\n# Test Cases\n\n{}",
        parts.requirements.trim(),
        parts.process.trim(),
        pretty(&parts.request_schema),
        pretty(&parts.response_schema),
        parts.error_handling.trim(),
        render_test_cases(&parts.test_cases),
    )
}

/// The Error Handling text Parley writes.
pub const DEFAULT_ERROR_HANDLING: &str = "- Status codes follow HTTP: 200 on success.\n\
- 400 when the request is malformed (a required field is missing or has the wrong type).\n\
- 404 when nothing matches the request.\n\
- 500 when the provider could not complete the request.\n\
- The status message is a short natural-language description.";

/// Drafts a protocol for a requirement, given the JSON Schemas of what the requester will send
/// (`input_schema`) and what it wants back (`output_schema`).
///
/// The request carries `messageId`, `type` (`REQUEST`) and the input's fields; the response
/// carries `messageId`, `type` (`RESPONSE`), `status` `{code, message}` and `result` holding the
/// output (or `null` when nothing matches). Names follow the case style of the given schemas.
/// Generated test cases: a request missing the required fields answered with 400, and, when the
/// input schema gives example values for every required field, a well-formed request whose
/// response must echo the `messageId`.
pub fn draft(
    requirement: &str,
    input_schema: &Value,
    output_schema: &Value,
) -> Result<String, String> {
    if properties(input_schema).is_empty() {
        return Err("the input schema must be an object schema with properties".into());
    }
    if !output_schema.is_object() {
        return Err("the output schema must be a JSON Schema object".into());
    }
    let names = Names::new(input_schema, output_schema);
    let message_id = &names.message_id;
    Ok(render(&DocParts {
        requirements: requirement.trim().to_owned(),
        process: format!(
            "1. The requester sends a request message with a fresh `{message_id}`, `type` `REQUEST` and the fields below.\n\
             2. The provider answers with one response message repeating the `{message_id}`, with `type` `RESPONSE`, a `status` (HTTP-style `code` and a short `message`) and the `result`.\n\
             3. A response that does not arrive within 15 seconds is a timeout."
        ),
        request_schema: request_schema(&names, input_schema),
        response_schema: response_schema(&names, output_schema),
        error_handling: DEFAULT_ERROR_HANDLING.to_owned(),
        test_cases: test_cases(&names, input_schema),
    }))
}

/// The names of the fields a draft adds, in the case style of the given schemas.
struct Names {
    message_id: String,
    type_field: String,
    status: String,
    result: String,
}

impl Names {
    fn new(input_schema: &Value, output_schema: &Value) -> Self {
        let names: Vec<String> = properties(input_schema)
            .into_iter()
            .chain(properties(output_schema))
            .map(|(n, _)| n)
            .collect();
        let style = CaseStyle::detect(names.iter().map(String::as_str));
        Self {
            message_id: style.apply("messageId"),
            type_field: "type".to_owned(),
            status: "status".to_owned(),
            result: "result".to_owned(),
        }
    }
}

/// `messageId`, `type` (`REQUEST`) and the input's fields.
fn request_schema(names: &Names, input_schema: &Value) -> Value {
    let mut req_props = vec![
        (
            names.message_id.clone(),
            json!({"type": "string", "description": "Identifier chosen by the requester, echoed in the response"}),
        ),
        (
            names.type_field.clone(),
            json!({"type": "string", "enum": ["REQUEST"], "description": "Always REQUEST"}),
        ),
    ];
    let mut req_required = vec![json!(names.message_id), json!(names.type_field)];
    for (name, schema) in properties(input_schema) {
        if req_props.iter().any(|(n, _)| *n == name) {
            continue;
        }
        req_props.push((name.clone(), schema.clone()));
    }
    for r in required(input_schema) {
        if !req_required.iter().any(|x| x == r) {
            req_required.push(json!(r));
        }
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Request",
        "type": "object",
        "properties": object(req_props),
        "required": req_required,
    })
}

/// `messageId`, `type` (`RESPONSE`), `status` `{code, message}` and the output as a nullable
/// `result`.
fn response_schema(names: &Names, output_schema: &Value) -> Value {
    let mut result_schema = output_schema.clone();
    if let Some(types) = json_types(output_schema)
        && !types.contains("null")
        && let Some(obj) = result_schema.as_object_mut()
    {
        let mut t: Vec<Value> = types.into_iter().map(Value::String).collect();
        t.push(json!("null"));
        obj.insert("type".into(), Value::Array(t));
    }
    if let Some(obj) = result_schema.as_object_mut() {
        obj.remove("$schema");
        obj.entry("description")
            .or_insert_with(|| json!("The result, or null when nothing matches"));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Response",
        "type": "object",
        "properties": object([
            (names.message_id.clone(), json!({"type": "string", "description": "The messageId of the request"})),
            (names.type_field.clone(), json!({"type": "string", "enum": ["RESPONSE"], "description": "Always RESPONSE"})),
            (names.status.clone(), json!({
                "type": "object",
                "properties": {
                    "code": {"type": "integer", "description": "HTTP status code"},
                    "message": {"type": "string", "description": "Human-readable status"}
                },
                "required": ["code", "message"]
            })),
            (names.result.clone(), result_schema),
        ]),
        "required": [names.message_id, names.type_field, names.status],
    })
}

/// A request missing the required fields (answered with 400), and a well-formed request when the
/// input schema gives an example value for every required field.
fn test_cases(names: &Names, input_schema: &Value) -> Vec<TestCase> {
    let mut test_cases = Vec::new();
    let input_required: Vec<&str> = required(input_schema).into_iter().collect();
    let Some(first) = input_required.first() else {
        return test_cases;
    };
    test_cases.push(TestCase {
        name: format!("request without {first}"),
        description: Some("A request missing required fields is refused with 400.".into()),
        request: object([
            (names.message_id.clone(), json!("test-missing")),
            (names.type_field.clone(), json!("REQUEST")),
        ]),
        expected_response: object([
            (names.message_id.clone(), json!("test-missing")),
            (names.type_field.clone(), json!("RESPONSE")),
            (names.status.clone(), json!({"code": 400})),
        ]),
        match_mode: MatchMode::Subset,
        fixtures: Default::default(),
        checks: Vec::new(),
    });
    let examples: Option<Vec<(String, Value)>> = input_required
        .iter()
        .map(|name| {
            input_schema
                .get("properties")
                .and_then(|p| p.get(*name))
                .and_then(example_value)
                .map(|v| ((*name).to_owned(), v))
        })
        .collect();
    if let Some(examples) = examples {
        let mut request = vec![
            (names.message_id.clone(), json!("test-echo")),
            (names.type_field.clone(), json!("REQUEST")),
        ];
        request.extend(examples);
        test_cases.push(TestCase {
            name: "well-formed request".into(),
            description: Some(
                "A well-formed request gets a response echoing its messageId.".into(),
            ),
            request: object(request),
            expected_response: object([
                (names.message_id.clone(), json!("test-echo")),
                (names.type_field.clone(), json!("RESPONSE")),
            ]),
            match_mode: MatchMode::Subset,
            fixtures: Default::default(),
            checks: Vec::new(),
        });
    }
    test_cases
}

/// An example value the schema itself provides: `const`, `examples[0]`, `default`, `enum[0]`.
pub(crate) fn example_value(schema: &Value) -> Option<Value> {
    schema
        .get("const")
        .cloned()
        .or_else(|| {
            schema
                .get("examples")
                .and_then(Value::as_array)
                .and_then(|e| e.first().cloned())
        })
        .or_else(|| schema.get("example").cloned())
        .or_else(|| schema.get("default").cloned())
        .or_else(|| {
            schema
                .get("enum")
                .and_then(Value::as_array)
                .and_then(|e| e.first().cloned())
        })
}
