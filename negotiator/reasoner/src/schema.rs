//! Reading the JSON Schemas of protocols and capabilities: properties, required fields, the
//! JSON types a schema allows and whether one schema's values fit another's.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// `(name, schema)` of an object schema's properties, in document order.
pub(crate) fn properties(schema: &Value) -> Vec<(String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default()
}

pub(crate) fn required(schema: &Value) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The JSON types a schema allows, `None` for "anything". Inferred from `const`/`enum` when
/// `type` is absent.
pub(crate) fn json_types(schema: &Value) -> Option<BTreeSet<String>> {
    match schema.get("type") {
        Some(Value::String(t)) => Some([t.clone()].into()),
        Some(Value::Array(ts)) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => {
            let values: Vec<&Value> = match (schema.get("const"), schema.get("enum")) {
                (Some(c), _) => vec![c],
                (None, Some(Value::Array(e))) => e.iter().collect(),
                _ => return None,
            };
            Some(values.into_iter().map(|v| type_of(v).to_owned()).collect())
        }
    }
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The values a schema allows, when it lists them (`const` or `enum`).
pub(crate) fn allowed_values(schema: &Value) -> Option<Vec<Value>> {
    if let Some(c) = schema.get("const") {
        return Some(vec![c.clone()]);
    }
    schema.get("enum").and_then(Value::as_array).cloned()
}

/// True when every value `from` may hold is accepted by `to`.
pub(crate) fn types_fit(from: &Value, to: &Value) -> bool {
    let (Some(from), Some(to)) = (json_types(from), json_types(to)) else {
        return true;
    };
    from.iter().all(|t| {
        to.contains(t)
            || (t == "integer" && to.contains("number"))
            || (t == "null" && from.len() > 1)
    })
}

/// A JSON object from pairs, in order.
pub(crate) fn object(pairs: impl IntoIterator<Item = (String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect::<Map<String, Value>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_fit_rules() {
        assert!(types_fit(
            &json!({"type": "integer"}),
            &json!({"type": "number"})
        ));
        assert!(!types_fit(
            &json!({"type": "number"}),
            &json!({"type": "integer"})
        ));
        assert!(types_fit(&json!({}), &json!({"type": "string"})));
        assert!(types_fit(
            &json!({"type": ["string", "null"]}),
            &json!({"type": "string"})
        ));
    }
}
