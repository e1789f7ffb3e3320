//! Where a response field's value comes from, in the order of preference the planner's module
//! docs list.

use std::collections::BTreeSet;

use parley_mapping::{Source, StatusShape};
use serde_json::Value;

use super::names::key;
use super::paths::{RequestField, leaf, parent};
use crate::schema::{allowed_values, json_types, properties, required, types_fit};

/// Where response field `path` (a plain name or a path) comes from, if anywhere (see the
/// module docs for the order); adds the matched fields to `score`. Names match on the field's
/// own name, the last segment of its path.
pub(super) fn source_for(
    path: &str,
    schema: &Value,
    req_fields: &[RequestField<'_>],
    output: &Value,
    output_props: &[(String, &Value)],
    score: &mut usize,
) -> Option<Source> {
    let field = leaf(path);
    let field = field.as_str();
    // 1. A same-named output field.
    if let Some((name, out_schema)) = output_props
        .iter()
        .find(|(name, _)| key(name) == key(field))
        && types_fit(out_schema, schema)
    {
        *score += 1;
        return Some(Source::OutputField {
            field: name.clone(),
        });
    }
    // 2. The whole output, reshaped into an object field, or as is.
    let types = json_types(schema);
    if let Some(fields) = reshaped_output(schema, types.as_ref(), output_props) {
        *score += fields.len();
        return Some(Source::OutputObject { fields });
    }
    let output_types = json_types(output);
    let same_kind = |t: &str| {
        types.as_ref().is_some_and(|ts| ts.contains(t))
            && output_types.as_ref().is_some_and(|ts| ts.contains(t))
    };
    if output_props.is_empty() && same_kind("array") {
        *score += 1;
        return Some(Source::Output);
    }
    // 3. A status field.
    if let Some(shape) = status_shape(field, schema) {
        return Some(Source::Status { shape });
    }
    // 4. A constant.
    if let Some(value) = constant(field, schema) {
        return Some(Source::Constant { value });
    }
    // 5. An echoed request field.
    if let Some(f) = req_fields
        .iter()
        .find(|f| key(&leaf(&f.name)) == key(field))
        && types_fit(f.schema, schema)
    {
        return Some(Source::Echo {
            field: f.name.clone(),
        });
    }
    // 6. An error text.
    let k = key(field);
    if matches!(
        k.as_str(),
        "error" | "errormessage" | "errordescription" | "errordetail" | "errortext"
    ) && types.as_ref().is_none_or(|t| t.contains("string"))
    {
        return Some(Source::ErrorMessage);
    }
    None
}

/// The output's fields that fill object field `schema`, as (field, output field) pairs: when
/// every required property of `schema` has a same-named output field of a fitting type, and at
/// least one property does.
fn reshaped_output(
    schema: &Value,
    types: Option<&BTreeSet<String>>,
    output_props: &[(String, &Value)],
) -> Option<Vec<(String, String)>> {
    let sub_props = properties(schema);
    if output_props.is_empty()
        || sub_props.is_empty()
        || !types.is_none_or(|t| t.contains("object"))
    {
        return None;
    }
    let sub_required = required(schema);
    let mut fields = Vec::new();
    for (sub, sub_schema) in &sub_props {
        match output_props
            .iter()
            .find(|(o, o_schema)| key(o) == key(sub) && types_fit(o_schema, sub_schema))
        {
            Some((o, _)) => fields.push((sub.clone(), o.clone())),
            None if sub_required.contains(sub.as_str()) => return None,
            None => {}
        }
    }
    (!fields.is_empty()).then_some(fields)
}

/// The source of a field of a reply's message header, when `path` is one: an object (not the
/// top level) that also holds a reply link (`reply_to`, `in_reply_to`). In such a header
/// - the reply link echoes the request's message id (`id`, `message_id`) from the same place;
/// - `sender` echoes the request's `receiver` and `receiver` the request's `sender`;
/// - `id`, `message_id` and `timestamp` are the reply's own and never echo the request
///   (`Some(None)`: no source).
///
/// `None` when `path` is not such a field.
pub(super) fn reply_source(
    path: &str,
    siblings: &[String],
    req_fields: &[RequestField<'_>],
) -> Option<Option<Source>> {
    let is_link = |k: &str| matches!(k, "replyto" | "inreplyto");
    if !siblings.iter().any(|s| is_link(&key(s))) {
        return None;
    }
    let here = parent(path);
    let from_request = |names: &[&str]| {
        req_fields
            .iter()
            .find(|f| parent(&f.name) == here && names.contains(&key(&leaf(&f.name)).as_str()))
            .map(|f| Source::Echo {
                field: f.name.clone(),
            })
    };
    match key(&leaf(path)).as_str() {
        k if is_link(k) => Some(from_request(&["id", "messageid"])),
        "sender" => Some(from_request(&["receiver"])),
        "receiver" => Some(from_request(&["sender"])),
        "id" | "messageid" | "timestamp" => Some(None),
        _ => None,
    }
}

/// Whether a `type` field lists message types, one of them an error (`RESPONSE`, `ERROR`): a
/// word per outcome, like a text status.
fn message_type(field: &str, schema: &Value) -> bool {
    let words: Vec<String> = allowed_values(schema)
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(key))
        .collect();
    matches!(key(field).as_str(), "type" | "messagetype")
        && words.len() > 1
        && words
            .iter()
            .any(|w| w.contains("error") || w.contains("fail"))
}

/// The shape of a status field (`status`, `statusCode`, `code`, …): an object with a code and a
/// message field, an integer code, or a text status.
fn status_shape(field: &str, schema: &Value) -> Option<StatusShape> {
    if message_type(field, schema) {
        return Some(text_status(schema));
    }
    let k = key(field);
    if !matches!(
        k.as_str(),
        "status" | "statuscode" | "code" | "resultcode" | "httpstatus" | "responsecode"
    ) {
        return None;
    }
    let types = json_types(schema);
    if !properties(schema).is_empty() || types.as_ref().is_some_and(|t| t.contains("object")) {
        return object_status(schema);
    }
    if types
        .as_ref()
        .is_some_and(|t| t.contains("integer") || t.contains("number"))
    {
        return Some(StatusShape::Integer);
    }
    if types.as_ref().is_some_and(|t| t.contains("string")) {
        return Some(text_status(schema));
    }
    None
}

/// A status object: its code and message fields, when those are all it requires.
fn object_status(schema: &Value) -> Option<StatusShape> {
    let props = properties(schema);
    let code_field = props
        .iter()
        .find(|(n, s)| {
            matches!(
                key(n).as_str(),
                "code" | "statuscode" | "httpcode" | "status"
            ) && json_types(s).is_none_or(|t| t.contains("integer") || t.contains("number"))
        })
        .map(|(n, _)| n.clone());
    let message_field = props
        .iter()
        .find(|(n, s)| {
            matches!(
                key(n).as_str(),
                "message" | "msg" | "description" | "text" | "reason"
            ) && json_types(s).is_none_or(|t| t.contains("string"))
        })
        .map(|(n, _)| n.clone());
    // Any other required sub-field would be left empty: not a status we can fill.
    let known: BTreeSet<&str> = code_field
        .iter()
        .chain(message_field.iter())
        .map(String::as_str)
        .collect();
    if required(schema).iter().any(|r| !known.contains(r)) || known.is_empty() {
        return None;
    }
    Some(StatusShape::Object {
        code_field,
        message_field,
    })
}

/// A text status: the schema's allowed words for each outcome, or plain defaults.
fn text_status(schema: &Value) -> StatusShape {
    let words: Vec<String> = allowed_values(schema)
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let pick = |patterns: &[&str], default: &str| {
        words
            .iter()
            .find(|w| {
                let k = key(w);
                patterns.iter().any(|p| k.contains(p))
            })
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    };
    if words.is_empty() {
        return StatusShape::Text {
            ok: "success".into(),
            bad_request: "bad_request".into(),
            not_found: "not_found".into(),
            internal: "error".into(),
        };
    }
    let error = pick(&["error", "fail"], &words[words.len() - 1]);
    StatusShape::Text {
        ok: pick(&["success", "ok", "found"], &words[0]),
        bad_request: pick(&["invalid", "bad", "error", "fail"], &error),
        not_found: pick(&["notfound", "missing", "unknown"], &error),
        internal: error.clone(),
    }
}

fn constant(field: &str, schema: &Value) -> Option<Value> {
    if let Some(c) = schema.get("const") {
        return Some(c.clone());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && values.len() == 1
    {
        return Some(values[0].clone());
    }
    // Seed 002's `type`: "Indicates whether the message is a REQUEST or RESPONSE".
    let described = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    if key(field) == "type" && described.contains("RESPONSE") {
        return Some(Value::String("RESPONSE".into()));
    }
    None
}
