//! The built-in reasoner's handler plan, and the code that answers a request from it.
//!
//! A [`Mapping`] says how one capability serves a protocol: which request fields to check, which
//! become the capability's arguments, and where every response field comes from. The reasoner
//! plans mappings (`parley_reasoner`'s planner) and generates the JavaScript handler from one
//! (`parley_reasoner`'s `handler_gen`); [`serve`] answers a request from a mapping directly. The
//! sandbox's mapping runtime (`sandbox/mapping-guest`) runs [`serve`] inside wasmtime as the
//! compiled form of that JavaScript: same checks, same capability call, same answer, without a
//! JavaScript engine.
//!
//! [`serve`] follows the generated JavaScript step by step, JavaScript's semantics included where
//! they show in an answer: numbers compare by value (`1` equals `1.0`), an integer is any number
//! without a fraction, structured allowed values compare as their JSON text does, and a failed
//! capability's message is `capability <name> failed: <message>`. Where JavaScript would look past
//! a JSON value's own fields (a request field named `constructor` or `toString` finds
//! `Object.prototype`'s) this reads own fields only; the provider only serves the compiled form
//! after it gave the JavaScript's answers on every test case.
//!
//! No IO, no allocation beyond the answer's, deterministic.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// Status codes the handler answers with, read from the protocol's Error Handling section
/// (HTTP-style defaults when it says nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusCodes {
    pub ok: u16,
    pub bad_request: u16,
    pub not_found: u16,
    pub internal: u16,
}

impl Default for StatusCodes {
    fn default() -> Self {
        Self {
            ok: 200,
            bad_request: 400,
            not_found: 404,
            internal: 500,
        }
    }
}

/// The shape of a status field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum StatusShape {
    /// `{ "<code>": 200, "<message>": "Success" }`; either field name may be absent.
    Object {
        code_field: Option<String>,
        message_field: Option<String>,
    },
    /// The bare number.
    Integer,
    /// A word per outcome (from the field's `enum` when it has one).
    Text {
        ok: String,
        bad_request: String,
        not_found: String,
        internal: String,
    },
}

/// Where one response field's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Source {
    /// `result[field]`.
    OutputField {
        field: String,
    },
    /// An object built from the result: `(response sub-field, output field)` pairs.
    OutputObject {
        fields: Vec<(String, String)>,
    },
    /// The whole result.
    Output,
    /// The call's outcome.
    Status {
        shape: StatusShape,
    },
    Constant {
        value: Value,
    },
    /// `request[field]`.
    Echo {
        field: String,
    },
    /// The failure text when the call fails.
    ErrorMessage,
}

impl Source {
    /// Whether the field carries the capability's result (not a status, constant or echo).
    pub fn carries_data(&self) -> bool {
        matches!(
            self,
            Source::OutputField { .. } | Source::OutputObject { .. } | Source::Output
        )
    }
}

/// A request field checked by the handler before calling the capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestCheck {
    pub field: String,
    /// Accepted JSON types; empty = any.
    pub types: Vec<String>,
    pub required: bool,
    /// Allowed values (`enum`/`const`), if restricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
}

/// One capability argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    /// The capability's input field.
    pub input: String,
    /// The protocol request field it is taken from.
    pub request: String,
}

/// One response field and its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseField {
    pub field: String,
    pub source: Source,
    pub required: bool,
    /// The field's schema allows `null` (used on failures for data fields).
    pub nullable: bool,
}

/// How a handler serves the protocol with one capability. Serialisable, so a language-model
/// backend can be handed the built-in analysis as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mapping {
    pub capability: String,
    pub checks: Vec<RequestCheck>,
    pub arguments: Vec<Argument>,
    pub response: Vec<ResponseField>,
    pub codes: StatusCodes,
    /// Noun used in messages ("Product not found").
    pub entity: String,
    /// The capability may return `null` for "nothing found".
    pub output_nullable: bool,
}

/// Answers `request` the way the JavaScript generated from `mapping` does. `call` runs the
/// mapping's capability with its arguments and returns its result or its error message; a
/// refused capability never returns to here (the sandbox ends the call).
pub fn serve(
    mapping: &Mapping,
    request: &Value,
    mut call: impl FnMut(&str, Value) -> Result<Value, String>,
) -> Value {
    let mut answer = answer(mapping, request, &mut call);
    js_numbers(&mut answer);
    answer
}

/// Rewrites every whole number held as a float (`1.0`) as an integer (`1`), the way JavaScript
/// writes it, when it fits 64 bits. Integers beyond 2^53 stay exact here; JavaScript would round
/// them to the nearest double.
fn js_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if !(n.is_i64() || n.is_u64()) => {
            if let Some(f) = n.as_f64().filter(|f| f.is_finite() && f.fract() == 0.0) {
                if f >= -(2f64.powi(63)) && f < 2f64.powi(63) {
                    *value = Value::from(f as i64);
                } else if f >= 0.0 && f < 2f64.powi(64) {
                    *value = Value::from(f as u64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(js_numbers),
        Value::Object(fields) => fields.values_mut().for_each(js_numbers),
        _ => {}
    }
}

fn answer(
    mapping: &Mapping,
    request: &Value,
    call: &mut impl FnMut(&str, Value) -> Result<Value, String>,
) -> Value {
    let codes = mapping.codes;
    let not_found = || format!("{} not found", mapping.entity);
    if let Some(problem) = check_request(mapping, request) {
        let echo_from = if request.is_object() {
            request
        } else {
            &Value::Null
        };
        return respond(mapping, echo_from, codes.bad_request, &problem, None);
    }
    let mut args = Map::new();
    for argument in &mapping.arguments {
        if let Some(value) = field(request, &argument.request) {
            args.insert(argument.input.clone(), value.clone());
        }
    }
    match call(&mapping.capability, Value::Object(args)) {
        Err(message) => {
            let text = format!("capability {} failed: {message}", mapping.capability);
            if contains_words(&text, "not", "found") {
                respond(mapping, request, codes.not_found, &not_found(), None)
            } else if contains_words(&text, "invalid", "argument") {
                respond(mapping, request, codes.bad_request, &text, None)
            } else {
                respond(mapping, request, codes.internal, &text, None)
            }
        }
        Ok(Value::Null) => respond(mapping, request, codes.not_found, &not_found(), None),
        Ok(result) => respond(mapping, request, codes.ok, "Success", Some(&result)),
    }
}

/// `object[name]` for an object's own field; nothing for anything else.
fn field<'a>(object: &'a Value, name: &str) -> Option<&'a Value> {
    object.as_object().and_then(|o| o.get(name))
}

/// JavaScript's `Number.isInteger` for a JSON number.
fn is_integer(n: &Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// Whether `value` has one of the JSON Schema `types` (an integer is also a number); names that
/// are not JSON types match nothing.
fn has_type(value: &Value, types: &[String]) -> bool {
    types.iter().any(|t| match t.as_str() {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => value.as_number().is_some_and(is_integer),
        "null" => value.is_null(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    })
}

/// JavaScript's `===` between two primitives (numbers by value).
fn strictly_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        _ => a == b,
    }
}

/// Whether `JSON.stringify(a) === JSON.stringify(b)`: numbers by value, object fields in order.
fn same_json_text(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json_text(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && same_json_text(va, vb))
        }
        _ => strictly_equal(a, b),
    }
}

/// The first problem with the request, or `None` when it is well-formed.
fn check_request(mapping: &Mapping, request: &Value) -> Option<String> {
    if !request.is_object() {
        return Some("the request must be a JSON object".to_owned());
    }
    for check in &mapping.checks {
        let Some(value) = field(request, &check.field) else {
            if check.required {
                return Some(format!("missing required field {}", check.field));
            }
            continue;
        };
        if !check.types.is_empty() && !has_type(value, &check.types) {
            return Some(format!(
                "field {} must be of type {}",
                check.field,
                check.types.join(" or ")
            ));
        }
        if let Some(allowed) = &check.allowed {
            let primitive = allowed.iter().all(|v| !(v.is_array() || v.is_object()));
            let listed = if primitive && !allowed.is_empty() {
                allowed.iter().any(|v| strictly_equal(value, v))
            } else {
                allowed.iter().any(|v| same_json_text(v, value))
            };
            if !listed {
                return Some(format!(
                    "field {} must be one of {}",
                    check.field,
                    Value::Array(allowed.clone())
                ));
            }
        }
    }
    None
}

/// A request value to echo, or a placeholder of the right type when the request lacks it. (The
/// generated `echo`'s `fits` is `has_type`, any type when none is declared.)
fn echo(value: Option<&Value>, types: &[String]) -> Value {
    if let Some(value) = value.filter(|v| types.is_empty() || has_type(v, types)) {
        return value.clone();
    }
    types
        .iter()
        .find_map(|t| match t.as_str() {
            "string" => Some(Value::String(String::new())),
            "integer" | "number" => Some(Value::from(0)),
            "boolean" => Some(Value::Bool(false)),
            "array" => Some(Value::Array(Vec::new())),
            "object" => Some(Value::Object(Map::new())),
            _ => None,
        })
        .unwrap_or(Value::Null)
}

/// Builds the response; `result` is the capability's result, `None` on failure (a null result
/// is "not found", a failure too: `answer` never passes it here).
fn respond(
    mapping: &Mapping,
    request: &Value,
    code: u16,
    message: &str,
    result: Option<&Value>,
) -> Value {
    let codes = mapping.codes;
    let mut response = Map::new();
    for r in &mapping.response {
        let value = match &r.source {
            Source::Constant { value } => Some(value.clone()),
            Source::Echo { field: name } => {
                let value = field(request, name);
                if r.required {
                    let types = mapping
                        .checks
                        .iter()
                        .find(|c| &c.field == name)
                        .map_or(&[][..], |c| &c.types[..]);
                    Some(echo(value, types))
                } else {
                    value.cloned()
                }
            }
            Source::Status { shape } => Some(status_value(shape, &codes, code, message)),
            Source::ErrorMessage => {
                if code >= 400 {
                    Some(Value::from(message))
                } else if r.required {
                    Some(if r.nullable {
                        Value::Null
                    } else {
                        Value::from("")
                    })
                } else {
                    None
                }
            }
            Source::OutputField { field: from } => result
                .and_then(|result| field(result, from))
                .cloned()
                .or_else(|| r.nullable.then_some(Value::Null)),
            Source::OutputObject { fields } => match result {
                Some(result) => {
                    let mut picked = Map::new();
                    for (to, from) in fields {
                        if let Some(value) = field(result, from) {
                            picked.insert(to.clone(), value.clone());
                        }
                    }
                    Some(Value::Object(picked))
                }
                None => r.nullable.then_some(Value::Null),
            },
            Source::Output => result
                .cloned()
                .or_else(|| r.nullable.then_some(Value::Null)),
        };
        if let Some(value) = value {
            response.insert(r.field.clone(), value);
        }
    }
    Value::Object(response)
}

/// The value of a status field of `shape` for status `code` with `message`.
fn status_value(shape: &StatusShape, codes: &StatusCodes, code: u16, message: &str) -> Value {
    match shape {
        StatusShape::Object {
            code_field,
            message_field,
        } => {
            let mut status = Map::new();
            if let Some(c) = code_field {
                status.insert(c.clone(), Value::from(code));
            }
            if let Some(m) = message_field {
                status.insert(m.clone(), Value::from(message));
            }
            Value::Object(status)
        }
        StatusShape::Integer => Value::from(code),
        StatusShape::Text {
            ok,
            bad_request,
            not_found,
            internal,
        } => Value::from(if code == codes.ok {
            ok.as_str()
        } else if code == codes.not_found {
            not_found
        } else if code == codes.bad_request {
            bad_request
        } else {
            internal
        }),
    }
}

/// The regular expression `/<first>[ _-]?<second>/i` on ASCII words: whether `text` holds
/// `first`, then at most one space, underscore or hyphen, then `second`, in any letter case.
fn contains_words(text: &str, first: &str, second: &str) -> bool {
    let text = text.to_ascii_lowercase();
    let text = text.as_bytes();
    (0..text.len()).any(|at| {
        let Some(rest) = text[at..].strip_prefix(first.as_bytes()) else {
            return false;
        };
        rest.starts_with(second.as_bytes())
            || (matches!(rest.first(), Some(b' ' | b'_' | b'-'))
                && rest[1..].starts_with(second.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failure_words_match_like_the_javascript_regular_expressions() {
        for text in [
            "x not found",
            "NOT_FOUND",
            "Not-Found",
            "notfound",
            "cannotfound",
        ] {
            assert!(contains_words(text, "not", "found"), "{text}");
        }
        for text in ["not  found", "not__found", "found not", "no found", ""] {
            assert!(!contains_words(text, "not", "found"), "{text}");
        }
        assert!(contains_words("Invalid arguments", "invalid", "argument"));
        assert!(contains_words("invalid-argument", "invalid", "argument"));
        assert!(!contains_words("invalid: argument", "invalid", "argument"));
    }

    #[test]
    fn whole_numbers_are_written_as_javascript_writes_them() {
        let mut value = json!({ "a": 1.0, "b": [2.5, -0.0, 1e300], "c": u64::MAX, "d": -7 });
        js_numbers(&mut value);
        assert_eq!(
            value.to_string(),
            json!({ "a": 1, "b": [2.5, 0, 1e300], "c": u64::MAX, "d": -7 }).to_string()
        );
    }

    #[test]
    fn allowed_values_compare_as_javascript_compares_them() {
        assert!(strictly_equal(&json!(1), &json!(1.0)));
        assert!(!strictly_equal(&json!(1), &json!("1")));
        assert!(!strictly_equal(&json!([1]), &json!([1])));
        assert!(same_json_text(&json!({ "a": [1] }), &json!({ "a": [1.0] })));
        // JSON.stringify keeps field order, so a reordered object is another value.
        assert!(!same_json_text(
            &json!({ "a": 1, "b": 2 }),
            &json!({ "b": 2, "a": 1 })
        ));
        assert!(has_type(&json!(3.0), &["integer".into()]));
        assert!(!has_type(&json!(3.5), &["integer".into()]));
        assert!(!has_type(&json!("x"), &["date".into()]));
    }
}
