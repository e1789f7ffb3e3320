//! JSON Schemas derived from example messages, for documents that show a message instead of
//! specifying it (AgentConnect's generator writes `{"messageId": "<16 chars>", …}`).
//!
//! The rules, applied recursively:
//! - an object's properties are the example's keys, and every key is required (an example shows
//!   a complete message); `additionalProperties` stays open;
//! - an array's items follow its first element (any items when it is empty);
//! - a string that is a placeholder, `<…>` (`"<string>"`, `"<16 chars>"`, `"<integer>"`,
//!   `"<string or null>"`), names its type with its words: `int`/`integer`, `number`/`float`/
//!   `decimal`/`double`, `bool`/`boolean`, `object`, `array`/`list`, `null`/`optional` (then the
//!   field may also be null); anything else is a string. A literal string under a key that names
//!   a kind (`type`, `messageType`, `action`, `kind`, `event`, in any case style) is that
//!   constant (`"messageType": "ProductQueryResponse"` tells every response's type); other
//!   strings are strings;
//! - a number is an `integer` when it has no fraction, else a `number`; `true`/`false` a
//!   `boolean`; `null` allows any value.
//!
//! Each derivation is described in words ([`Derived::notes`]) so a provider can say what it
//! inferred instead of silently agreeing to a guess.

use serde_json::{Map, Value, json};

/// A schema derived from an example, and what was inferred to get it.
pub(super) struct Derived {
    pub(super) schema: Value,
    pub(super) notes: Vec<String>,
}

/// Derives the schema of the message `example` shows; `what` names it in the notes.
pub(super) fn derive(what: &str, line: usize, example: &Value) -> Derived {
    let mut notes = Vec::new();
    let schema = schema_of(example, "", &mut notes);
    let fields = example.as_object().map_or(0, Map::len);
    notes.insert(
        0,
        format!(
            "the {what} schema was derived from the example at line {line}: {fields} fields, all required"
        ),
    );
    Derived { schema, notes }
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
        Value::Array(items) => match items.first() {
            Some(first) => {
                json!({"type": "array", "items": schema_of(first, &format!("{path}/0"), notes)})
            }
            None => json!({"type": "array"}),
        },
        Value::String(text) => match placeholder(text) {
            Some(types) => {
                let field = if path.is_empty() { "/" } else { path };
                notes.push(format!(
                    "`{field}`: {} from the placeholder {text:?}",
                    types.join(" or ")
                ));
                let types: Vec<Value> = types.into_iter().map(Value::from).collect();
                match &types[..] {
                    [one] => json!({"type": one}),
                    _ => json!({"type": types}),
                }
            }
            None => json!({"type": "string"}),
        },
        Value::Number(n) if n.is_f64() && n.as_f64().is_some_and(|f| f.fract() != 0.0) => {
            json!({"type": "number"})
        }
        Value::Number(_) => json!({"type": "integer"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Null => {
            let field = if path.is_empty() { "/" } else { path };
            notes.push(format!("`{field}`: any value (the example shows null)"));
            json!({})
        }
    }
}

/// Whether a key names the kind of a message (`type`, `messageType`, `message_type`, `action`,
/// `kind`, `event`), whose literal value in an example is a constant rather than sample data.
fn names_a_kind(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace(['_', '-'], "");
    ["type", "action", "kind", "event"]
        .iter()
        .any(|word| key == *word || (key.ends_with(word) && key.starts_with("message")))
}

/// The JSON types a placeholder string such as `"<16 chars>"` names, or `None` when `text` is
/// not a placeholder.
fn placeholder(text: &str) -> Option<Vec<&'static str>> {
    let inner = text.trim().strip_prefix('<')?.strip_suffix('>')?;
    let words: Vec<String> = inner
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let says = |names: &[&str]| words.iter().any(|w| names.contains(&w.as_str()));
    let mut types = Vec::new();
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
    } else {
        types.push("string");
    }
    if says(&["null", "optional", "nullable"]) {
        types.push("null");
    }
    Some(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_name_their_types() {
        assert_eq!(placeholder("<16 chars>"), Some(vec!["string"]));
        assert_eq!(placeholder("<string>"), Some(vec!["string"]));
        assert_eq!(placeholder("<integer>"), Some(vec!["integer"]));
        assert_eq!(placeholder("<float, e.g. 9.99>"), Some(vec!["number"]));
        assert_eq!(
            placeholder("<string or null>"),
            Some(vec!["string", "null"])
        );
        assert_eq!(placeholder("<Boolean>"), Some(vec!["boolean"]));
        assert_eq!(placeholder("plain"), None);
        assert_eq!(placeholder("<unclosed"), None);
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
        let derived = derive("request", 12, &example);
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
                "`/detail`: any value (the example shows null)",
                "`/owner/id`: integer from the placeholder \"<integer>\"",
            ]
        );
    }
}
