//! JavaScript handler generation from a [`Mapping`].
//!
//! The handler ABI (see `sandbox/ABI.md`): the source defines `function handle(request)` that
//! returns the response object; the only way out is `host.call(name, args)`, synchronous,
//! returning the capability's JSON result or throwing. The generated handler:
//! 1. checks the request's fields (presence of required ones, JSON types, allowed values) and
//!    answers a bad request with the protocol's bad-request status;
//! 2. calls the one mapped capability with the mapped arguments;
//! 3. answers "not found" (a `null` result, or a thrown error mentioning "not found") and
//!    failures with the matching status, and a result by reshaping it into the response.
//!
//! The output is plain ES2020, small and commented, so an operator can read what runs.

use std::fmt::Write as _;

use serde_json::Value;

use parley_mapping::{Mapping, ResponseField, Source, StatusCodes, StatusShape};

use crate::planner::segments;

/// JavaScript source of a string/JSON literal.
fn js(value: &Value) -> String {
    // JSON is valid JavaScript for every value except the two line separators inside strings,
    // which ES2019 also accepts; escape them anyway for older parsers.
    value
        .to_string()
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn js_str(s: &str) -> String {
    js(&Value::String(s.to_owned()))
}

/// A property access for a mapping name (a plain field or a path, see
/// [`segments`](crate::planner::segments)), for assignment: `response.header.id`.
fn access(object: &str, field: &str) -> String {
    chain(object, field, "")
}

/// A property access for reading: a path goes through objects that may be missing with optional
/// chaining (`request.header?.id`), which yields `undefined` like a missing plain field.
fn read(object: &str, field: &str) -> String {
    chain(object, field, "?")
}

fn chain(object: &str, field: &str, optional: &str) -> String {
    let mut out = String::new();
    for (i, segment) in segments(field).iter().enumerate() {
        let base = if i == 0 {
            object.to_owned()
        } else {
            format!("{out}{optional}")
        };
        out = step(&base, segment);
    }
    out
}

/// One property step that works for any field name: `request.productId` or `request["a-b"]`
/// (`request?.["a-b"]` after an optional `?`).
fn step(object: &str, field: &str) -> String {
    let ident = field
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && field
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    match (ident, object.strip_suffix('?')) {
        (true, _) => format!("{object}.{field}"),
        (false, Some(base)) => format!("{base}?.[{}]", js_str(field)),
        (false, None) => format!("{object}[{}]", js_str(field)),
    }
}

/// `  if (cond) {\n    then\n  } else {\n    otherwise\n  }\n`, without the else when `None`.
fn if_ok(condition: &str, then: &str, otherwise: Option<String>) -> String {
    match otherwise {
        Some(e) => format!("  if ({condition}) {{\n    {then}\n  }} else {{\n    {e}\n  }}\n"),
        None => format!("  if ({condition}) {{\n    {then}\n  }}\n"),
    }
}

/// An object literal key: bare when it is an identifier.
fn literal_key(field: &str) -> String {
    let dotted = access("o", field);
    match dotted.strip_prefix("o.") {
        Some(ident) => ident.to_owned(),
        None => js_str(field),
    }
}

/// A JavaScript condition that is true when `value` has one of the JSON `types` (JSON Schema
/// names; an integer also counts as a number). `None` when any type is accepted.
fn type_condition(value: &str, types: &[String]) -> Option<String> {
    if types.is_empty() {
        return None;
    }
    let parts: Vec<String> = types
        .iter()
        .map(|t| match t.as_str() {
            "string" | "boolean" | "number" => format!("typeof {value} === {}", js_str(t)),
            "integer" => format!("Number.isInteger({value})"),
            "null" => format!("{value} === null"),
            "array" => format!("Array.isArray({value})"),
            "object" => format!(
                "({value} !== null && typeof {value} === \"object\" && !Array.isArray({value}))"
            ),
            // Not a JSON type: nothing can match it.
            _ => "false".to_owned(),
        })
        .collect();
    Some(parts.join(" || "))
}

/// `checkRequest(request)`: the first problem with the request, or null. One straight-line
/// block per field rather than a loop over a table: the handler runs on every application
/// message, and an interpreter pays for every iteration, destructuring and helper call.
fn check_request(mapping: &Mapping) -> String {
    let mut out = String::from(
        "// The first problem with the request, or null when it is well-formed.\n\
         function checkRequest(request) {\n  \
           if (request === null || typeof request !== \"object\" || Array.isArray(request)) {\n    \
             return \"the request must be a JSON object\";\n  \
           }\n  \
           let value;\n",
    );
    for c in &mapping.checks {
        let mut body = Vec::new();
        if let Some(condition) = type_condition("value", &c.types) {
            body.push(format!(
                "if (!({condition})) return {};",
                js_str(&format!(
                    "field {} must be of type {}",
                    c.field,
                    c.types.join(" or ")
                ))
            ));
        }
        if let Some(allowed) = &c.allowed {
            let message = js_str(&format!(
                "field {} must be one of {}",
                c.field,
                Value::Array(allowed.clone())
            ));
            let primitive = allowed.iter().all(|v| !(v.is_array() || v.is_object()));
            if primitive && !allowed.is_empty() {
                let differs: Vec<String> = allowed
                    .iter()
                    .map(|v| format!("value !== {}", js(v)))
                    .collect();
                body.push(format!("if ({}) return {message};", differs.join(" && ")));
            } else {
                // Structured allowed values: compare canonical JSON text.
                body.push(format!(
                    "if (!{}.some((v) => JSON.stringify(v) === JSON.stringify(value))) return {message};",
                    js(&Value::Array(allowed.clone()))
                ));
            }
        }
        let _ = writeln!(out, "  value = {};", read("request", &c.field));
        if c.required {
            let _ = writeln!(
                out,
                "  if (value === undefined) return {};",
                js_str(&format!("missing required field {}", c.field))
            );
            for line in &body {
                let _ = writeln!(out, "  {line}");
            }
        } else if !body.is_empty() {
            out.push_str("  if (value !== undefined) {\n");
            for line in &body {
                let _ = writeln!(out, "    {line}");
            }
            out.push_str("  }\n");
        }
    }
    out.push_str("  return null;\n}\n\n");
    out
}

/// Generates the handler source.
pub fn generate(mapping: &Mapping, protocol_hash: &str) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; `let _ =` keeps clippy quiet without unwraps.
    let _ = writeln!(
        out,
        "// Protocol handler generated by Parley's built-in reasoner.\n\
         // Protocol: sha256 {protocol_hash}\n\
         // Capability: {} (the only host.call this handler makes).\n\
         \"use strict\";\n",
        mapping.capability
    );
    out.push_str(HELPERS);
    out.push_str(&check_request(mapping));
    out.push_str(&respond(mapping));
    out.push_str(&handle(mapping));
    out
}

/// The helpers every handler starts with: JSON types of values, and echoing request values.
const HELPERS: &str = r#"function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number" && Number.isInteger(value)) return "integer";
  return typeof value;
}

function fits(value, types) {
  const t = typeOf(value);
  return types.length === 0 || types.includes(t) || (t === "integer" && types.includes("number"));
}

// An echoed request value, or a placeholder of the right type when the request lacks it.
function echo(value, types) {
  if (value !== undefined && fits(value, types)) return value;
  const placeholders = { string: "", integer: 0, number: 0, boolean: false, array: [], object: {} };
  for (const t of types) if (t in placeholders) return placeholders[t];
  return null;
}

"#;

/// `respond(request, code, message, result)`: builds every response, success or failure.
fn respond(mapping: &Mapping) -> String {
    let mut out = String::from(
        "// Builds the response. `result` is the capability's result, or undefined on failure.\n",
    );
    out.push_str("function respond(request, code, message, result) {\n");
    out.push_str("  const ok = result !== undefined && result !== null;\n");
    out.push_str("  const response = {};\n");
    // The objects that hold nested fields, each before the objects inside it.
    let mut objects: Vec<Vec<String>> = Vec::new();
    for r in &mapping.response {
        let path = segments(&r.field);
        for depth in 1..path.len() {
            let object = path[..depth].to_vec();
            if !objects.contains(&object) {
                let _ = writeln!(out, "  {} = {{}};", access("response", &pointer(&object)));
                objects.push(object);
            }
        }
    }
    for r in &mapping.response {
        out.push_str(&response_field(mapping, r));
    }
    out.push_str("  return response;\n}\n\n");
    out
}

/// The lines of `respond` that fill one response field from its source.
fn response_field(mapping: &Mapping, r: &ResponseField) -> String {
    let target = access("response", &r.field);
    let otherwise_null = || r.nullable.then(|| format!("{target} = null;"));
    match &r.source {
        Source::Constant { value } => format!("  {target} = {};\n", js(value)),
        Source::Echo { field } => {
            let types = mapping
                .checks
                .iter()
                .find(|c| &c.field == field)
                .map(|c| c.types.clone())
                .unwrap_or_default();
            let value = read("request", field);
            if r.required {
                let types = js(&Value::Array(
                    types.into_iter().map(Value::String).collect(),
                ));
                format!("  {target} = echo({value}, {types});\n")
            } else {
                format!("  if ({value} !== undefined) {target} = {value};\n")
            }
        }
        Source::Status { shape } => status_field(&target, shape, mapping.codes),
        Source::ErrorMessage => {
            if r.required {
                let fallback = if r.nullable { "null" } else { "\"\"" };
                format!("  {target} = code >= 400 ? message : {fallback};\n")
            } else {
                format!("  if (code >= 400) {target} = message;\n")
            }
        }
        Source::OutputField { field } => {
            let value = access("result", field);
            if_ok(
                &format!("ok && {value} !== undefined"),
                &format!("{target} = {value};"),
                otherwise_null(),
            )
        }
        Source::OutputObject { fields } => {
            // Straight-line copies: QuickJS interprets them several times faster than a
            // loop over [to, from] pairs.
            let mut then = String::from("const picked = {};");
            for (to, from) in fields {
                let value = access("result", from);
                let _ = write!(
                    then,
                    "\n    if ({value} !== undefined) {} = {value};",
                    access("picked", to)
                );
            }
            let _ = write!(then, "\n    {target} = picked;");
            if_ok("ok", &then, otherwise_null())
        }
        Source::Output => if_ok("ok", &format!("{target} = result;"), otherwise_null()),
    }
}

/// The mapping name of the field at `path`: the plain name at the top level, else its pointer.
fn pointer(path: &[String]) -> String {
    match path {
        [name] => name.clone(),
        _ => path
            .iter()
            .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
            .collect(),
    }
}

/// The line of `respond` that fills a status field with the outcome's code.
fn status_field(target: &str, shape: &StatusShape, codes: StatusCodes) -> String {
    match shape {
        StatusShape::Object {
            code_field,
            message_field,
        } => {
            let mut parts = Vec::new();
            if let Some(c) = code_field {
                parts.push(format!("{}: code", literal_key(c)));
            }
            if let Some(m) = message_field {
                parts.push(format!("{}: message", literal_key(m)));
            }
            format!("  {target} = {{ {} }};\n", parts.join(", "))
        }
        StatusShape::Integer => format!("  {target} = code;\n"),
        StatusShape::Text {
            ok,
            bad_request,
            not_found,
            internal,
        } => format!(
            "  {target} = code === {} ? {} : code === {} ? {} : code === {} ? {} : {};\n",
            codes.ok,
            js_str(ok),
            codes.not_found,
            js_str(not_found),
            codes.bad_request,
            js_str(bad_request),
            js_str(internal),
        ),
    }
}

/// `handle(request)`: check the request, call the capability, answer from the outcome.
fn handle(mapping: &Mapping) -> String {
    let codes = mapping.codes;
    let cap = js_str(&mapping.capability);
    let not_found_message = js_str(&format!("{} not found", mapping.entity));
    let mut out = String::from("function handle(request) {\n");
    out.push_str("  const problem = checkRequest(request);\n");
    let _ = writeln!(
        out,
        "  if (problem !== null) return respond(typeOf(request) === \"object\" ? request : {{}}, {}, problem);",
        codes.bad_request
    );
    out.push_str("  const args = {};\n");
    for a in &mapping.arguments {
        let from = read("request", &a.request);
        let to = access("args", &a.input);
        let required = mapping
            .checks
            .iter()
            .any(|c| c.field == a.request && c.required);
        if required {
            let _ = writeln!(out, "  {to} = {from};");
        } else {
            let _ = writeln!(out, "  if ({from} !== undefined) {to} = {from};");
        }
    }
    let _ = writeln!(
        out,
        "  let result;\n  \
         try {{\n    \
           result = host.call({cap}, args);\n  \
         }} catch (error) {{\n    \
           const text = String(error && error.message ? error.message : error);\n    \
           if (/not[ _-]?found/i.test(text)) return respond(request, {nf}, {nfm});\n    \
           if (/invalid[ _-]?arguments?/i.test(text)) return respond(request, {br}, text);\n    \
           return respond(request, {internal}, text);\n  \
         }}",
        nf = codes.not_found,
        nfm = not_found_message,
        br = codes.bad_request,
        internal = codes.internal,
    );
    let _ = writeln!(
        out,
        "  if (result === null || result === undefined) return respond(request, {}, {});",
        codes.not_found, not_found_message
    );
    let _ = writeln!(
        out,
        "  return respond(request, {}, \"Success\", result);\n}}",
        codes.ok
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_conditions_follow_json_schema_types() {
        let types = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(type_condition("v", &[]), None);
        assert_eq!(
            type_condition("v", &types(&["string", "null"])).as_deref(),
            Some("typeof v === \"string\" || v === null")
        );
        assert_eq!(
            type_condition("v", &types(&["integer"])).as_deref(),
            Some("Number.isInteger(v)")
        );
        assert_eq!(
            type_condition("v", &types(&["object", "array"])).as_deref(),
            Some(
                "(v !== null && typeof v === \"object\" && !Array.isArray(v)) || Array.isArray(v)"
            )
        );
        assert_eq!(
            type_condition("v", &types(&["date"])).as_deref(),
            Some("false")
        );
    }

    #[test]
    fn access_quotes_odd_names() {
        assert_eq!(access("r", "productId"), "r.productId");
        assert_eq!(access("r", "product-id"), "r[\"product-id\"]");
        assert_eq!(access("r", "2x"), "r[\"2x\"]");
        assert_eq!(access("r", "a\"b"), "r[\"a\\\"b\"]");
        assert_eq!(access("r", "/header/reply_to"), "r.header.reply_to");
        assert_eq!(read("r", "/header/id"), "r.header?.id");
        assert_eq!(read("r", "/a-b/c~1d"), "r[\"a-b\"]?.[\"c/d\"]");
        assert_eq!(pointer(&["a".into(), "b/c".into()]), "/a/b~1c");
    }
}
