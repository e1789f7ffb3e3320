//! Fields inside nested objects. A top-level field keeps its plain name (`productId`); a field
//! inside an object is named by its JSON Pointer (RFC 6901): `/header/id` is the `id` of the
//! `header` object. A mapping name is a path exactly when it starts with `/`, so the planner only
//! looks inside objects of schemas whose top-level names do not start with `/`.

use serde_json::Value;

use crate::schema::{json_types, properties, required};

/// One field of the protocol's request, top-level or nested.
#[derive(Debug, Clone)]
pub(super) struct RequestField<'a> {
    /// Plain name or JSON Pointer.
    pub name: String,
    pub schema: &'a Value,
    /// Required within its parent object.
    pub required: bool,
    /// Required in its parent and every ancestor: present in every valid request.
    pub always: bool,
}

/// `parent`'s child `name` as a path.
pub(super) fn child(parent: &str, name: &str) -> String {
    let escape = |s: &str| s.replace('~', "~0").replace('/', "~1");
    if parent.starts_with('/') {
        format!("{parent}/{}", escape(name))
    } else {
        format!("/{}/{}", escape(parent), escape(name))
    }
}

/// The segments of a name: one for a plain name, the unescaped pointer tokens for a path.
pub fn segments(name: &str) -> Vec<String> {
    match name.strip_prefix('/') {
        Some(pointer) => pointer
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect(),
        None => vec![name.to_owned()],
    }
}

/// The field's own name: the last segment.
pub(super) fn leaf(name: &str) -> String {
    segments(name).pop().unwrap_or_default()
}

/// The path of the object holding the field (`""` for a top-level field).
pub(super) fn parent(name: &str) -> Vec<String> {
    let mut s = segments(name);
    s.pop();
    s
}

/// Whether an object schema's fields can be named by path (see the module docs).
pub(super) fn nestable(schema: &Value) -> bool {
    let props = properties(schema);
    props.iter().any(|(_, s)| opens(s)) && !props.iter().any(|(n, _)| n.starts_with('/'))
}

/// Whether a field's schema is an object with declared properties, which the planner looks into.
pub(super) fn opens(schema: &Value) -> bool {
    !properties(schema).is_empty() && json_types(schema).is_none_or(|t| t.contains("object"))
}

/// The request's fields: the top-level ones, and with `nested` every field of the objects
/// inside, each object before its fields.
pub(super) fn request_fields(schema: &Value, nested: bool) -> Vec<RequestField<'_>> {
    let mut out = Vec::new();
    collect(schema, None, true, nested, &mut out);
    out
}

fn collect<'a>(
    schema: &'a Value,
    prefix: Option<&str>,
    always: bool,
    nested: bool,
    out: &mut Vec<RequestField<'a>>,
) {
    let req = required(schema);
    for (name, sub) in properties(schema) {
        let is_required = req.contains(name.as_str());
        let full = match prefix {
            Some(p) => child(p, &name),
            None => name.clone(),
        };
        out.push(RequestField {
            name: full.clone(),
            schema: sub,
            required: is_required,
            always: always && is_required,
        });
        if nested && opens(sub) {
            collect(sub, Some(&full), always && is_required, nested, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_round_trip() {
        assert_eq!(child("header", "id"), "/header/id");
        assert_eq!(child("/body", "a/b~c"), "/body/a~1b~0c");
        assert_eq!(segments("/body/a~1b~0c"), ["body", "a/b~c"]);
        assert_eq!(segments("productId"), ["productId"]);
        assert_eq!(leaf("/header/reply_to"), "reply_to");
        assert_eq!(parent("/header/reply_to"), ["header"]);
        assert!(parent("productId").is_empty());
    }

    #[test]
    fn nested_fields_follow_their_objects() {
        let schema = json!({
            "properties": {
                "header": {
                    "type": "object",
                    "properties": { "id": { "type": "string" }, "tag": { "type": "string" } },
                    "required": ["id"]
                },
                "body": { "type": "object", "properties": { "x": {} }, "required": ["x"] }
            },
            "required": ["header"]
        });
        let fields: Vec<(String, bool, bool)> = request_fields(&schema, true)
            .into_iter()
            .map(|f| (f.name, f.required, f.always))
            .collect();
        assert_eq!(
            fields,
            [
                ("header".to_owned(), true, true),
                ("/header/id".to_owned(), true, true),
                ("/header/tag".to_owned(), false, false),
                ("body".to_owned(), false, false),
                ("/body/x".to_owned(), true, false),
            ]
        );
        assert_eq!(request_fields(&schema, false).len(), 2);
    }
}
