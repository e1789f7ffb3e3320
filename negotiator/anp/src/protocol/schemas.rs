//! Finding the request and response JSON Schemas in the Data Format section (see the parent
//! module's docs for how each one's role is decided), or deriving one from an example message
//! when the section shows no schema for that role.

use serde_json::Value;

use super::derive::derive;
use super::sections::Section;
use super::{ProtocolError, SchemaRole};
use crate::markdown::Element;

/// Which role the words of `text` point at, if exactly one.
pub(super) fn role_of(text: &str) -> Option<SchemaRole> {
    let t = text.to_lowercase();
    let req = t.contains("request") || t.contains("input");
    let resp = ["response", "reply", "expected", "output", "result"]
        .iter()
        .any(|w| t.contains(w));
    match (req, resp) {
        (true, false) => Some(SchemaRole::Request),
        (false, true) => Some(SchemaRole::Response),
        _ => None,
    }
}

fn is_schema(value: &Value) -> bool {
    const TYPES: [&str; 7] = [
        "object", "array", "string", "number", "integer", "boolean", "null",
    ];
    let Some(obj) = value.as_object() else {
        return false;
    };
    let type_ok = |t: &Value| t.as_str().is_some_and(|s| TYPES.contains(&s));
    obj.contains_key("$schema")
        || obj.get("properties").is_some_and(Value::is_object)
        || obj.get("type").is_some_and(|t| {
            type_ok(t)
                || t.as_array()
                    .is_some_and(|a| !a.is_empty() && a.iter().all(type_ok))
        })
}

/// The two schemas of a Data Format section, and what was inferred where one was derived.
pub(super) struct Schemas {
    pub(super) request: Value,
    pub(super) response: Value,
    pub(super) inferred: Vec<String>,
    /// What no example settles (also among `inferred`).
    pub(super) unclear: Vec<String>,
}

struct Candidate {
    value: Value,
    line: usize,
    role: Option<SchemaRole>,
}

pub(super) fn find_schemas(els: &[&Element]) -> Result<Schemas, ProtocolError> {
    let mut schemas = Vec::new();
    let mut examples = Vec::new();
    let mut heading: Option<&str> = None;
    let mut last_text: Option<&str> = None;
    for el in els {
        match el {
            Element::Heading { text, .. } => {
                heading = Some(text);
                last_text = None;
            }
            Element::Text { text, .. } if !text.trim().is_empty() => last_text = Some(text),
            Element::Json { value, line, .. } => {
                let value = value
                    .as_ref()
                    .map_err(|message| ProtocolError::InvalidJson {
                        section: Section::DataFormat.title(),
                        line: *line,
                        message: message.clone(),
                    })?;
                let context_says_example = last_text
                    .is_some_and(|t| t.to_lowercase().contains("example"))
                    || heading.is_some_and(|h| h.to_lowercase().contains("example"));
                let role = last_text
                    .and_then(role_of)
                    .or_else(|| heading.and_then(role_of))
                    .or_else(|| value.get("title").and_then(Value::as_str).and_then(role_of));
                let candidate = Candidate {
                    value: value.clone(),
                    line: *line,
                    role,
                };
                if is_schema(value) && !context_says_example {
                    schemas.push(candidate);
                } else if value.is_object() {
                    examples.push(candidate);
                }
                last_text = None;
            }
            _ => {}
        }
    }
    let (request, response) = by_role(schemas);
    let mut inferred = Vec::new();
    let mut unclear = Vec::new();
    let (example_request, example_response) = by_role(examples);
    let mut pick = |schemas: Vec<Candidate>, examples: Vec<Candidate>, role: SchemaRole| {
        if schemas.is_empty() && !examples.is_empty() {
            let shown: Vec<(usize, &Value)> = examples.iter().map(|e| (e.line, &e.value)).collect();
            let derived = derive(&role.to_string(), &shown);
            inferred.extend(derived.notes);
            unclear.extend(derived.unclear);
            return Ok(derived.schema);
        }
        one(schemas, role)
    };
    let request = pick(request, example_request, SchemaRole::Request)?;
    let response = pick(response, example_response, SchemaRole::Response)?;
    Ok(Schemas {
        request,
        response,
        inferred,
        unclear,
    })
}

/// Sorts candidates into request and response: labelled ones by their label, then unlabelled
/// ones into the roles still free, in document order.
fn by_role(candidates: Vec<Candidate>) -> (Vec<Candidate>, Vec<Candidate>) {
    let mut request = Vec::new();
    let mut response = Vec::new();
    let mut unlabelled = Vec::new();
    for c in candidates {
        match c.role {
            Some(SchemaRole::Request) => request.push(c),
            Some(SchemaRole::Response) => response.push(c),
            None => unlabelled.push(c),
        }
    }
    for c in unlabelled {
        if request.is_empty() {
            request.push(c);
        } else if response.is_empty() {
            response.push(c);
        }
        // Further unlabelled values (nested definitions shown separately) are ignored.
    }
    (request, response)
}

/// The one candidate for `role`.
fn one(mut candidates: Vec<Candidate>, role: SchemaRole) -> Result<Value, ProtocolError> {
    match candidates.len() {
        0 => Err(ProtocolError::MissingSchema { role }),
        1 => Ok(candidates.remove(0).value),
        count => Err(ProtocolError::AmbiguousSchema {
            role,
            count,
            lines: candidates.iter().map(|c| c.line).collect(),
        }),
    }
}
