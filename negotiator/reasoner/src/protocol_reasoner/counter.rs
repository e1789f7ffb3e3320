//! The built-in counter-proposal: a protocol document rewritten so that one capability serves it.
//!
//! Two rewrites, in this order:
//! - [`renamed`]: a proposal close to what the provider serves names a request field differently
//!   from the capability's input (`sku` for `productId`): the one request field that could feed
//!   a required identifying input nothing feeds (a field of a fitting type whose name says it
//!   identifies something: `…Id`, `sku`, `…Code`, `…Number`; the required one when several
//!   could) is renamed, in the request, the response and the test cases;
//! - [`counter_proposal`]: each remaining gap closed (inputs added or made required, a response
//!   field named after the capability's output without its entity renamed — `name` for
//!   `productName` of `getProductInfo` —, other fields nothing fills removed, a field for the
//!   capability's result added).
//!
//! Both give the document's [`DocParts`], which Parley writes in its normalised form (JSON
//! Schemas and machine-checkable test cases, see [`crate::draft::render`]).

use parley_anp::protocol::{ProtocolDoc, TestCase};
use parley_mapping::Mapping;
use serde_json::{Map, Value};

use crate::draft::{DEFAULT_ERROR_HANDLING, DocParts};
use crate::planner::{CaseStyle, DeclaredCapability, Gap, entity_words, key, segments, words};
use crate::schema::{allowed_values, properties, required, types_fit};

/// `doc` as parts, ready to be written in the normalised form: its sections' prose (or Parley's
/// defaults where it has none), its schemas and its test cases as read.
pub(super) fn parts_of(doc: &ProtocolDoc) -> DocParts {
    let sections = doc.sections();
    DocParts {
        requirements: sections
            .requirements
            .clone()
            .unwrap_or_else(|| "Serve the requests described below.".into()),
        process: sections.process.clone().unwrap_or_else(|| {
            "The requester sends one request message; the provider answers with one response message.".into()
        }),
        request_schema: doc.request_schema().clone(),
        response_schema: doc.response_schema().clone(),
        error_handling: sections
            .error_handling
            .clone()
            .unwrap_or_else(|| DEFAULT_ERROR_HANDLING.into()),
        test_cases: doc.test_cases().to_vec(),
    }
}

/// Rewrites `doc` so that `cap` can serve it. Returns the parts and the modification summary
/// (one markdown list item per change), or `None` when nothing would change.
pub(super) fn counter_proposal(
    doc: &ProtocolDoc,
    cap: &DeclaredCapability,
    gaps: &[Gap],
) -> Option<(DocParts, Vec<String>)> {
    let mut rewrite = Rewrite::new(doc);
    for gap in gaps {
        rewrite.close(gap, cap);
    }
    if rewrite.summary.is_empty() {
        return None;
    }
    let test_cases = rewrite.kept_test_cases(doc);
    let parts = DocParts {
        request_schema: rewrite.request,
        response_schema: rewrite.response,
        test_cases,
        ..parts_of(doc)
    };
    Some((parts, rewrite.summary))
}

/// Request field names that only tell envelope data (ids of the message, its kind, its time),
/// never a capability's input.
const ENVELOPE: [&str; 14] = [
    "messageid",
    "requestid",
    "correlationid",
    "type",
    "messagetype",
    "action",
    "operation",
    "method",
    "timestamp",
    "time",
    "sender",
    "receiver",
    "version",
    "replyto",
];

/// `doc` with its request fields renamed after the capability's inputs where the proposal
/// names one differently (see the module docs), and one summary line per renaming; `None` when
/// no field can be renamed.
pub(super) fn renamed(
    doc: &ProtocolDoc,
    cap: &DeclaredCapability,
    mapping: &Mapping,
    gaps: &[Gap],
) -> Option<(DocParts, Vec<String>)> {
    let request = doc.request_schema();
    let fields = properties(request);
    let style = CaseStyle::detect(fields.iter().map(|(n, _)| n.as_str()));
    let inputs = properties(&cap.input_schema);
    let needed = required(request);
    let mut renames: Vec<(String, String, String)> = Vec::new();
    for gap in gaps {
        let Gap::MissingInput { input } = gap else {
            continue;
        };
        let Some((_, input_schema)) = inputs.iter().find(|(n, _)| n == input) else {
            continue;
        };
        if !identifies(input) {
            continue;
        }
        let candidates: Vec<&String> = fields
            .iter()
            .filter(|(name, schema)| {
                !mapping.arguments.iter().any(|a| &a.request == name)
                    && !ENVELOPE.contains(&key(name).as_str())
                    && allowed_values(schema).is_none()
                    && identifies(name)
                    && types_fit(schema, input_schema)
                    && !renames.iter().any(|(old, _, _)| old == name)
            })
            .map(|(name, _)| name)
            .collect();
        // Several could: the one the request requires, as the input is required.
        let required_ones: Vec<&String> = candidates
            .iter()
            .copied()
            .filter(|name| needed.contains(name.as_str()))
            .collect();
        let chosen = match (&candidates[..], &required_ones[..]) {
            ([one], _) | (_, [one]) => Some(*one),
            _ => None,
        };
        if let Some(old) = chosen {
            renames.push((old.clone(), style.apply(input), input.clone()));
        }
    }
    if renames.is_empty() {
        return None;
    }
    let mut parts = parts_of(doc);
    let mut summary = Vec::new();
    for (old, new, input) in &renames {
        rename_in(&mut parts.request_schema, old, new, true);
        let in_response = rename_in(&mut parts.response_schema, old, new, true);
        for case in &mut parts.test_cases {
            rename_in(&mut case.request, old, new, false);
            rename_in(&mut case.expected_response, old, new, false);
        }
        let what = inputs
            .iter()
            .find(|(n, _)| n == input)
            .and_then(|(_, s)| s.get("description"))
            .and_then(Value::as_str)
            .map(|d| format!(": {}", d.trim()))
            .unwrap_or_default();
        summary.push(format!(
            "- Request: `{old}` renamed `{new}`, the input `{input}` of `{}`{what}{}.",
            cap.name,
            if in_response {
                "; the response's fields of that name too"
            } else {
                ""
            }
        ));
    }
    Some((parts, summary))
}

/// Whether a field's name says it identifies something (`productId`, `sku`, `order_number`,
/// `itemCode`): only such a field is taken for an identifying input named otherwise.
fn identifies(name: &str) -> bool {
    const WORDS: [&str; 13] = [
        "id",
        "code",
        "key",
        "number",
        "no",
        "sku",
        "ref",
        "reference",
        "identifier",
        "handle",
        "slug",
        "uuid",
        "ean",
    ];
    words(name)
        .last()
        .is_some_and(|last| WORDS.contains(&last.as_str()))
}

/// Renames every object key `old` (compared by [`key`]) to `new` in `value`: in a schema
/// (`schema`) the properties and `required` entries at any depth, in a message the fields at
/// any depth. Whether anything was renamed.
fn rename_in(value: &mut Value, old: &str, new: &str, schema: bool) -> bool {
    let mut renamed = false;
    match value {
        Value::Object(map) => {
            if schema {
                if let Some(Value::Object(props)) = map.get_mut("properties") {
                    renamed |= rename_key(props, old, new);
                }
                if let Some(Value::Array(required)) = map.get_mut("required") {
                    for r in required.iter_mut() {
                        if r.as_str().is_some_and(|r| key(r) == key(old)) {
                            *r = Value::String(new.to_owned());
                            renamed = true;
                        }
                    }
                }
                if let Some(Value::Object(props)) = map.get_mut("properties") {
                    for sub in props.values_mut() {
                        renamed |= rename_in(sub, old, new, true);
                    }
                }
                if let Some(items) = map.get_mut("items") {
                    renamed |= rename_in(items, old, new, true);
                }
            } else {
                renamed |= rename_key(map, old, new);
                for sub in map.values_mut() {
                    renamed |= rename_in(sub, old, new, false);
                }
            }
        }
        Value::Array(items) if !schema => {
            for item in items {
                renamed |= rename_in(item, old, new, false);
            }
        }
        _ => {}
    }
    renamed
}

/// Renames key `old` (by [`key`]) to `new` in place, keeping the order of the keys.
fn rename_key(map: &mut Map<String, Value>, old: &str, new: &str) -> bool {
    let Some(found) = map.keys().find(|k| key(k) == key(old)).cloned() else {
        return false;
    };
    let entries = std::mem::take(map);
    for (k, v) in entries {
        map.insert(if k == found { new.to_owned() } else { k }, v);
    }
    true
}

/// The request and response schemas being rewritten, and what changed so far.
struct Rewrite {
    request: Value,
    response: Value,
    /// The naming style of the document's fields, for the fields the rewrite adds.
    style: CaseStyle,
    /// One markdown list item per change.
    summary: Vec<String>,
    /// Request fields that became required.
    new_required_request: Vec<String>,
    /// Response fields that were removed.
    removed_response: Vec<String>,
    /// Response fields renamed after the capability's output: (path, new name).
    renamed_response: Vec<(String, String)>,
}

impl Rewrite {
    fn new(doc: &ProtocolDoc) -> Self {
        let request = doc.request_schema().clone();
        let response = doc.response_schema().clone();
        let style = CaseStyle::detect(
            properties(&request)
                .iter()
                .chain(properties(&response).iter())
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
        );
        Self {
            request,
            response,
            style,
            summary: Vec::new(),
            new_required_request: Vec::new(),
            removed_response: Vec::new(),
            renamed_response: Vec::new(),
        }
    }

    /// Changes the schemas so that `gap` is gone.
    fn close(&mut self, gap: &Gap, cap: &DeclaredCapability) {
        match gap {
            Gap::MissingInput { input } => {
                let Some(input_schema) = cap
                    .input_schema
                    .get("properties")
                    .and_then(|p| p.get(input))
                else {
                    return;
                };
                // Replace a same-named field of the wrong type, or add a new one.
                let existing = properties(&self.request)
                    .into_iter()
                    .find(|(n, _)| key(n) == key(input))
                    .map(|(n, _)| n);
                let name = existing.unwrap_or_else(|| self.style.apply(input));
                set_property(&mut self.request, &name, input_schema.clone());
                add_required(&mut self.request, &name);
                self.new_required_request.push(name.clone());
                self.summary.push(format!(
                    "- Request: added required field `{name}` (input `{input}` of `{}`).",
                    cap.name
                ));
            }
            Gap::OptionalInput { request: field, .. } => {
                add_required(&mut self.request, field);
                self.new_required_request.push(field.clone());
                self.summary.push(format!(
                    "- Request: `{field}` is now required (the lookup needs it)."
                ));
            }
            Gap::UnservedResponse { field } | Gap::UnservedOptional { field } => {
                // A near miss (`name` where the capability says `productName`): renamed.
                if let Some(output) = entity_named(&self.response, field, cap) {
                    if let Some((parent, last)) = parent_schema(&mut self.response, field)
                        && let Some(Value::Object(props)) = parent.get_mut("properties")
                    {
                        rename_key(props, &last, &output);
                        if let Some(Value::Array(required)) = parent.get_mut("required") {
                            for r in required.iter_mut().filter(|r| *r == last.as_str()) {
                                *r = Value::String(output.clone());
                            }
                        }
                    }
                    self.renamed_response.push((field.clone(), output.clone()));
                    self.summary.push(format!(
                        "- Response: `{field}` renamed `{output}`, the field of `{}`'s result.",
                        cap.name
                    ));
                    return;
                }
                remove_property(&mut self.response, field);
                self.removed_response.push(field.clone());
                self.summary.push(format!(
                    "- Response: removed `{field}`; this provider has no data for it."
                ));
            }
            Gap::NoData => {
                let name = self.style.apply("result");
                let mut schema = cap.output_schema.clone();
                if let Some(obj) = schema.as_object_mut() {
                    obj.remove("$schema");
                }
                set_property(&mut self.response, &name, schema);
                self.summary.push(format!(
                    "- Response: added `{name}`, the result of `{}` ({}).",
                    cap.name,
                    cap.description.trim()
                ));
            }
        }
    }

    /// The test cases that still make sense: removed fields dropped from expectations, and
    /// cases whose request lacks a field that became required dropped (and listed in the
    /// summary).
    fn kept_test_cases(&mut self, doc: &ProtocolDoc) -> Vec<TestCase> {
        let mut test_cases: Vec<TestCase> = Vec::new();
        for case in doc.test_cases() {
            let lacks = self
                .new_required_request
                .iter()
                .find(|f| case.request.get(f.as_str()).is_none());
            if let Some(field) = lacks {
                self.summary.push(format!(
                    "- Test cases: dropped `{}` (its request has no `{field}`).",
                    case.name
                ));
                continue;
            }
            let mut case = case.clone();
            for f in &self.removed_response {
                remove_field(&mut case.expected_response, f);
            }
            for (f, output) in &self.renamed_response {
                if let Some((parent, last)) = parent_message(&mut case.expected_response, f)
                    && let Some(obj) = parent.as_object_mut()
                {
                    rename_key(obj, &last, output);
                }
            }
            test_cases.push(case);
        }
        test_cases
    }
}

fn set_property(schema: &mut Value, name: &str, property: Value) {
    if let Some(obj) = schema.as_object_mut() {
        let props = obj
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(p) = props.as_object_mut() {
            p.insert(name.to_owned(), property);
        }
    }
}

fn add_required(schema: &mut Value, name: &str) {
    if let Some(obj) = schema.as_object_mut() {
        let req = obj
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(r) = req.as_array_mut()
            && !r.iter().any(|x| x == name)
        {
            r.push(Value::String(name.to_owned()));
        }
    }
}

/// The object schema holding field `name` (a plain name, or a path to a field inside
/// objects), and the field's own name.
fn parent_schema<'a>(schema: &'a mut Value, name: &str) -> Option<(&'a mut Value, String)> {
    let mut path = segments(name);
    let last = path.pop()?;
    let mut object = schema;
    for segment in &path {
        object = object.get_mut("properties")?.get_mut(segment.as_str())?;
    }
    Some((object, last))
}

/// The object holding field `name` (a plain name or a path) in a message, and the field's
/// own name.
fn parent_message<'a>(message: &'a mut Value, name: &str) -> Option<(&'a mut Value, String)> {
    let mut path = segments(name);
    let last = path.pop()?;
    let mut object = message;
    for segment in &path {
        object = object.get_mut(segment.as_str())?;
    }
    Some((object, last))
}

/// Removes field `name` (a plain name, or a path to a field inside objects) from a schema.
fn remove_property(schema: &mut Value, name: &str) {
    let Some((object, last)) = parent_schema(schema, name) else {
        return;
    };
    if let Some(p) = object.get_mut("properties").and_then(Value::as_object_mut) {
        p.shift_remove(&last);
    }
    if let Some(r) = object.get_mut("required").and_then(Value::as_array_mut) {
        r.retain(|x| x != last.as_str());
    }
}

/// Removes field `name` (a plain name or a path) from a message.
fn remove_field(message: &mut Value, name: &str) {
    if let Some((object, last)) = parent_message(message, name)
        && let Some(obj) = object.as_object_mut()
    {
        obj.shift_remove(&last);
    }
}

/// The capability's output field that response field `field` names without the entity
/// (`name` for `productName` of `getProductInfo`), when its type fits and the object holding
/// the field has no field of that name already.
fn entity_named(response: &Value, field: &str, cap: &DeclaredCapability) -> Option<String> {
    let mut path = segments(field);
    let last = path.pop()?;
    let mut object = response;
    for segment in &path {
        object = object.get("properties")?.get(segment.as_str())?;
    }
    let schema = object.get("properties")?.get(last.as_str())?;
    let siblings = properties(object);
    let wanted = format!("{}{}", entity_words(&cap.name).concat(), key(&last));
    properties(&cap.output_schema)
        .into_iter()
        .find(|(name, out)| key(name) == wanted && types_fit(out, schema))
        .map(|(name, _)| name)
        .filter(|name| !siblings.iter().any(|(s, _)| key(s) == key(name)))
}
