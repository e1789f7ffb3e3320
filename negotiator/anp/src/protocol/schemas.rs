//! Finding the request and response JSON Schemas in the Data Format section (see the parent
//! module's docs for how each one's role is decided).

use serde_json::Value;

use super::sections::Section;
use super::{ProtocolError, SchemaRole};
use crate::markdown::Element;

/// Which role the words of `text` point at, if exactly one.
pub(super) fn role_of(text: &str) -> Option<SchemaRole> {
    let t = text.to_lowercase();
    let req = t.contains("request");
    let resp = t.contains("response") || t.contains("reply");
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

pub(super) fn find_schemas(els: &[&Element]) -> Result<(Value, Value), ProtocolError> {
    struct Candidate {
        value: Value,
        line: usize,
        role: Option<SchemaRole>,
    }
    let mut candidates = Vec::new();
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
                if is_schema(value) && !context_says_example {
                    let role = last_text
                        .and_then(role_of)
                        .or_else(|| heading.and_then(role_of))
                        .or_else(|| value.get("title").and_then(Value::as_str).and_then(role_of));
                    candidates.push(Candidate {
                        value: value.clone(),
                        line: *line,
                        role,
                    });
                }
                last_text = None;
            }
            _ => {}
        }
    }
    // Unlabelled schemas take the roles still free, in document order.
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
        // Further unlabelled schemas (nested definitions shown separately) are ignored.
    }
    let pick = |mut v: Vec<Candidate>, role| match v.len() {
        0 => Err(ProtocolError::MissingSchema { role }),
        1 => Ok(v.remove(0).value),
        count => Err(ProtocolError::AmbiguousSchema {
            role,
            count,
            lines: v.iter().map(|c| c.line).collect(),
        }),
    };
    Ok((
        pick(request, SchemaRole::Request)?,
        pick(response, SchemaRole::Response)?,
    ))
}
