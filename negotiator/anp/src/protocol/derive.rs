//! JSON Schemas derived from example messages, for documents that show a message instead of
//! specifying it (AgentConnect's generator writes `{"messageId": "<16 chars>", …}`).
//!
//! The rules, applied recursively:
//! - an object's properties are the example's keys, and every key is required (an example shows
//!   a complete message); `additionalProperties` stays open;
//! - an array's items follow all its elements, merged as several examples are (below); an empty
//!   array says nothing of its items, which stays unclear;
//! - a string that is a placeholder, `<…>` (`"<string>"`, `"<16 chars>"`, `"<integer>"`,
//!   `"<string or null>"`, `"<ISO 8601 date>"`), names its type with its words: `int`/`integer`,
//!   `number`/`float`/`decimal`/`double`, `bool`/`boolean`, `object`, `array`/`list`,
//!   `null`/`optional` (then the field may also be null); anything else is a string, with a
//!   `format` where the words name one (`date`, `date-time`/`timestamp`, `uuid`, `email`,
//!   `uri`/`url`). A string that is only a JSON type's name (`"string"`, `"integer"`,
//!   `"boolean"`, …) is that type. A literal string under a key that names a kind (`type`,
//!   `messageType`, `action`, `kind`, `event`, in any case style) is that constant
//!   (`"messageType": "ProductQueryResponse"` tells every response's type); other strings are
//!   strings;
//! - a number is an `integer` when it has no fraction, else a `number`; `true`/`false` a
//!   `boolean`; `null` allows any value, and stays unclear unless another example of the same
//!   field shows its type (then the field is that type or null).
//!
//! Several examples of one message (a success and an error response, or an array's elements)
//! merge: a field every example shows is required, one that only some show is optional, the
//! types of a field are those of all its examples, and a kind's constants become an `enum`.
//!
//! Each derivation is described in words ([`Derived::notes`]) so a provider can say what it
//! inferred instead of silently agreeing to a guess; what no example settles is listed in
//! [`Derived::unclear`] too.

use serde_json::{Map, Value, json};

/// A schema derived from examples, what was inferred to get it, and what stays unclear.
pub(super) struct Derived {
    pub(super) schema: Value,
    pub(super) notes: Vec<String>,
    pub(super) unclear: Vec<String>,
}

/// Derives the schema of the message the `examples` (with their 1-based lines) show; `what`
/// names it in the notes.
pub(super) fn derive(what: &str, examples: &[(usize, &Value)]) -> Derived {
    let mut notes = Vec::new();
    let schemas: Vec<Value> = examples
        .iter()
        .map(|(_, example)| schema_of(example, "", &mut notes))
        .collect();
    let mut seen = std::collections::HashSet::new();
    notes.retain(|note| seen.insert(note.clone()));
    let merged = schemas
        .into_iter()
        .reduce(merge)
        .unwrap_or_else(|| json!({}));
    let mut unclear = Vec::new();
    let schema = settle(merged, "", &mut unclear);
    let fields = merged_fields(&schema);
    let head = match examples {
        [(line, _)] => format!(
            "the {what} schema was derived from the example at line {line}: {fields} fields, all required"
        ),
        _ => {
            let lines: Vec<String> = examples.iter().map(|(l, _)| l.to_string()).collect();
            let required = schema
                .get("required")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            format!(
                "the {what} schema was derived from the {} examples at lines {}: {fields} fields, {required} in every example and required",
                examples.len(),
                lines.join(", ")
            )
        }
    };
    notes.insert(0, head);
    notes.extend(unclear.iter().cloned());
    Derived {
        schema,
        notes,
        unclear,
    }
}

fn merged_fields(schema: &Value) -> usize {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map_or(0, Map::len)
}

/// A field's path for the notes (`/` for the whole message).
fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn schema_of(value: &Value, path: &str, notes: &mut Vec<String>) -> Value {
    match value {
        Value::Object(map) => {
            let mut properties = Map::new();
            for (key, item) in map {
                let at = format!("{path}/{key}");
                let schema = match item {
                    Value::String(text) if names_a_kind(key) && placeholder(text).is_none() => {
                        notes.push(format!(
                            "`{at}`: always {text:?} (a literal in the example)"
                        ));
                        json!({"type": "string", "const": text})
                    }
                    _ => schema_of(item, &at, notes),
                };
                properties.insert(key.clone(), schema);
            }
            let required: Vec<&String> = map.keys().collect();
            json!({"type": "object", "properties": properties, "required": required})
        }
        Value::Array(items) => {
            let at = format!("{path}/0");
            match items
                .iter()
                .map(|item| schema_of(item, &at, notes))
                .reduce(merge)
            {
                Some(items) => json!({"type": "array", "items": items}),
                None => json!({"type": "array", "items": {"$unknown": "empty"}}),
            }
        }
        Value::String(text) => match placeholder(text) {
            Some(named) => {
                let what = if named.literal {
                    "the type name"
                } else {
                    "the placeholder"
                };
                let mut said = named.types.join(" or ");
                if let Some(format) = named.format {
                    said.push_str(&format!(" ({format})"));
                }
                notes.push(format!("`{}`: {said} from {what} {text:?}", shown(path)));
                let types: Vec<Value> = named.types.into_iter().map(Value::from).collect();
                let mut schema = match &types[..] {
                    [one] => json!({"type": one}),
                    _ => json!({"type": types}),
                };
                if let Some(format) = named.format {
                    schema["format"] = json!(format);
                }
                schema
            }
            None => json!({"type": "string"}),
        },
        Value::Number(n) if n.is_f64() && n.as_f64().is_some_and(|f| f.fract() != 0.0) => {
            json!({"type": "number"})
        }
        Value::Number(_) => json!({"type": "integer"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Null => json!({"type": "null"}),
    }
}

/// The JSON types a derived schema allows (its `type`, one name or a list).
fn types_of(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// One schema for two examples of the same value (see the module docs).
fn merge(a: Value, b: Value) -> Value {
    let (Value::Object(mut a), Value::Object(b)) = (a, b) else {
        return json!({});
    };
    // Types: the union, in the order first seen.
    let mut types = types_of(&Value::Object(a.clone()));
    for t in types_of(&Value::Object(b.clone())) {
        if !types.contains(&t) {
            types.push(t);
        }
    }
    match &types[..] {
        [] => {}
        [one] => {
            a.insert("type".into(), json!(one));
        }
        _ => {
            a.insert("type".into(), json!(types));
        }
    }
    // Constants: one stays a `const`, different ones become an `enum`.
    let values = |s: &Map<String, Value>| -> Vec<Value> {
        match (s.get("const"), s.get("enum")) {
            (Some(c), _) => vec![c.clone()],
            (None, Some(Value::Array(e))) => e.clone(),
            _ => Vec::new(),
        }
    };
    let (mut ca, cb) = (values(&a), values(&b));
    if !ca.is_empty() && !cb.is_empty() {
        for v in cb {
            if !ca.contains(&v) {
                ca.push(v);
            }
        }
        a.shift_remove("const");
        a.shift_remove("enum");
        match &ca[..] {
            [one] => a.insert("const".into(), one.clone()),
            _ => a.insert("enum".into(), Value::Array(ca)),
        };
    } else if !ca.is_empty() && types_of(&Value::Object(b.clone())) != ["null"] {
        // A constant in one example and free text in another: no constant.
        a.shift_remove("const");
        a.shift_remove("enum");
    }
    if a.get("format") != b.get("format") {
        a.shift_remove("format");
    }
    // Properties: the union; required only where every example has the field.
    if let Some(Value::Object(pb)) = b.get("properties") {
        let pa = a
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(pa) = pa.as_object_mut() {
            for (key, sb) in pb {
                match pa.get_mut(key) {
                    Some(sa) => *sa = merge(sa.take(), sb.clone()),
                    None => {
                        pa.insert(key.clone(), sb.clone());
                    }
                }
            }
        }
    }
    let required_in = |s: &Map<String, Value>| -> Option<Vec<Value>> {
        s.get("required").and_then(Value::as_array).cloned()
    };
    match (required_in(&a), required_in(&b)) {
        (Some(ra), Some(rb)) => {
            let both: Vec<Value> = ra.into_iter().filter(|r| rb.contains(r)).collect();
            a.insert("required".into(), Value::Array(both));
        }
        // An example that is not an object (null) requires nothing of the object's fields.
        (Some(ra), None) => {
            a.insert("required".into(), Value::Array(ra));
        }
        (None, Some(rb)) => {
            a.insert("required".into(), Value::Array(rb));
        }
        (None, None) => {}
    }
    if let Some(ib) = b.get("items") {
        let merged = match a.shift_remove("items") {
            Some(ia) if ia.get("$unknown").is_some() => ib.clone(),
            Some(ia) if ib.get("$unknown").is_some() => ia,
            Some(ia) => merge(ia, ib.clone()),
            None => ib.clone(),
        };
        a.insert("items".into(), merged);
    }
    Value::Object(a)
}

/// Turns what no example settles into an open schema and says so: a value only ever shown as
/// `null` accepts any value, an array only ever shown empty any items.
fn settle(schema: Value, path: &str, unclear: &mut Vec<String>) -> Value {
    let Value::Object(mut map) = schema else {
        return schema;
    };
    if types_of(&Value::Object(map.clone())) == ["null"] && map.len() == 1 {
        unclear.push(format!(
            "`{}`: any value (the example shows only null)",
            shown(path)
        ));
        return json!({});
    }
    if let Some(Value::Object(props)) = map.shift_remove("properties") {
        let settled: Map<String, Value> = props
            .into_iter()
            .map(|(key, sub)| {
                let at = format!("{path}/{key}");
                (key, settle(sub, &at, unclear))
            })
            .collect();
        map.insert("properties".into(), Value::Object(settled));
        // Keep `properties` before `required`, as written.
        if let Some(required) = map.shift_remove("required") {
            map.insert("required".into(), required);
        }
    }
    if let Some(items) = map.shift_remove("items") {
        if items.get("$unknown").is_some() {
            unclear.push(format!(
                "`{}`: an array of any items (the example's array is empty)",
                shown(path)
            ));
        } else {
            let at = format!("{path}/0");
            map.insert("items".into(), settle(items, &at, unclear));
        }
    }
    Value::Object(map)
}

/// Whether a key names the kind of a message (`type`, `messageType`, `message_type`, `action`,
/// `kind`, `event`), whose literal value in an example is a constant rather than sample data.
fn names_a_kind(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace(['_', '-'], "");
    ["type", "action", "kind", "event"]
        .iter()
        .any(|word| key == *word || (key.ends_with(word) && key.starts_with("message")))
}

/// What a placeholder names.
#[derive(Debug, PartialEq)]
struct Named {
    types: Vec<&'static str>,
    format: Option<&'static str>,
    /// The string is only a type's name (`"string"`), not a `<…>` placeholder.
    literal: bool,
}

/// What a placeholder string such as `"<16 chars>"` or `"integer"` names, or `None` when `text`
/// is sample data.
fn placeholder(text: &str) -> Option<Named> {
    let trimmed = text.trim();
    let (inner, literal) = match trimmed.strip_prefix('<').and_then(|t| t.strip_suffix('>')) {
        Some(inner) => (inner, false),
        None => (trimmed, true),
    };
    let words: Vec<String> = inner
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if literal {
        // Only a JSON type's name on its own ("string", "Integer", "string|null").
        const NAMES: [&str; 11] = [
            "string", "integer", "int", "number", "float", "double", "boolean", "bool", "object",
            "array", "null",
        ];
        if words.is_empty() || !words.iter().all(|w| NAMES.contains(&w.as_str())) {
            return None;
        }
    }
    let says = |names: &[&str]| words.iter().any(|w| names.contains(&w.as_str()));
    let mut types = Vec::new();
    let mut format = None;
    if says(&["int", "integer", "long"]) {
        types.push("integer");
    } else if says(&["number", "float", "decimal", "double", "numeric"]) {
        types.push("number");
    } else if says(&["bool", "boolean"]) {
        types.push("boolean");
    } else if says(&["object", "dict", "map"]) {
        types.push("object");
    } else if says(&["array", "list"]) {
        types.push("array");
    } else if literal && words == ["null"] {
        types.push("null");
    } else {
        types.push("string");
        format = if says(&["datetime", "timestamp"]) || (says(&["date"]) && says(&["time"])) {
            Some("date-time")
        } else if says(&["date"]) {
            Some("date")
        } else if says(&["uuid", "guid"]) {
            Some("uuid")
        } else if says(&["email"]) {
            Some("email")
        } else if says(&["uri", "url"]) {
            Some("uri")
        } else {
            None
        };
    }
    if types != ["null"] && says(&["null", "optional", "nullable"]) {
        types.push("null");
    }
    Some(Named {
        types,
        format,
        literal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(text: &str) -> Option<Vec<&'static str>> {
        placeholder(text).map(|n| n.types)
    }

    #[test]
    fn placeholders_name_their_types() {
        assert_eq!(types("<16 chars>"), Some(vec!["string"]));
        assert_eq!(types("<string>"), Some(vec!["string"]));
        assert_eq!(types("<integer>"), Some(vec!["integer"]));
        assert_eq!(types("<number>"), Some(vec!["number"]));
        assert_eq!(types("<float, e.g. 9.99>"), Some(vec!["number"]));
        assert_eq!(types("<string or null>"), Some(vec!["string", "null"]));
        assert_eq!(types("<Boolean>"), Some(vec!["boolean"]));
        assert_eq!(types("plain"), None);
        assert_eq!(types("<unclosed"), None);
        // A type's bare name is that type; other words are sample data.
        assert_eq!(types("string"), Some(vec!["string"]));
        assert_eq!(types("Integer"), Some(vec!["integer"]));
        assert_eq!(types("string|null"), Some(vec!["string", "null"]));
        assert_eq!(types("Laptop"), None);
        assert_eq!(types("a string"), None);
        let date = placeholder("<ISO 8601 date>").expect("a placeholder");
        assert_eq!((date.types, date.format), (vec!["string"], Some("date")));
        let when = placeholder("<ISO 8601 date-time>").expect("a placeholder");
        assert_eq!(when.format, Some("date-time"));
        assert_eq!(
            placeholder("<timestamp>").and_then(|n| n.format),
            Some("date-time")
        );
    }

    #[test]
    fn an_example_becomes_a_schema_with_notes() {
        let example = json!({
            "messageId": "<16 chars>",
            "price": 9.5,
            "count": 3,
            "tags": ["a"],
            "detail": null,
            "owner": {"id": "<integer>"}
        });
        let derived = derive("request", &[(12, &example)]);
        assert_eq!(
            derived.schema,
            json!({
                "type": "object",
                "properties": {
                    "messageId": {"type": "string"},
                    "price": {"type": "number"},
                    "count": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "detail": {},
                    "owner": {
                        "type": "object",
                        "properties": {"id": {"type": "integer"}},
                        "required": ["id"]
                    }
                },
                "required": ["messageId", "price", "count", "tags", "detail", "owner"]
            })
        );
        assert_eq!(
            derived.notes,
            vec![
                "the request schema was derived from the example at line 12: 6 fields, all required",
                "`/messageId`: string from the placeholder \"<16 chars>\"",
                "`/owner/id`: integer from the placeholder \"<integer>\"",
                "`/detail`: any value (the example shows only null)",
            ]
        );
        assert_eq!(
            derived.unclear,
            vec!["`/detail`: any value (the example shows only null)"]
        );
    }

    #[test]
    fn several_examples_merge() {
        let found = json!({
            "messageType": "ProductResponse",
            "code": 200,
            "product": {"name": "string", "price": 0.5},
            "items": [{"sku": "<string>"}, {"sku": "<string>", "qty": 2}],
            "error": null
        });
        let missing = json!({
            "messageType": "ErrorResponse",
            "code": 404,
            "product": null,
            "items": [],
            "error": "<string>"
        });
        let derived = derive("response", &[(10, &found), (20, &missing)]);
        assert_eq!(
            derived.schema,
            json!({
                "type": "object",
                "properties": {
                    "messageType": {"type": "string", "enum": ["ProductResponse", "ErrorResponse"]},
                    "code": {"type": "integer"},
                    "product": {
                        "type": ["object", "null"],
                        "properties": {"name": {"type": "string"}, "price": {"type": "number"}},
                        "required": ["name", "price"]
                    },
                    "items": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                        "required": ["sku"]
                    }},
                    "error": {"type": ["null", "string"]}
                },
                "required": ["messageType", "code", "product", "items", "error"]
            })
        );
        assert!(derived.unclear.is_empty(), "{:?}", derived.unclear);
        assert_eq!(
            derived.notes[0],
            "the response schema was derived from the 2 examples at lines 10, 20: 5 fields, 5 in every example and required"
        );
        assert!(
            derived
                .notes
                .contains(&"`/product/name`: string from the type name \"string\"".to_owned()),
            "{:?}",
            derived.notes
        );
    }
}
