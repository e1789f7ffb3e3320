//! The built-in counter-proposal: a protocol document rewritten so that one capability serves it.

use parley_anp::protocol::{ProtocolDoc, TestCase};
use serde_json::Value;

use crate::draft::{self, DEFAULT_ERROR_HANDLING, DocParts};
use crate::planner::{CaseStyle, DeclaredCapability, Gap, key};
use crate::schema::properties;

/// Rewrites `doc` so that `cap` can serve it. Returns the text and the modification summary, or
/// `None` when nothing would change.
pub(super) fn counter_proposal(
    doc: &ProtocolDoc,
    cap: &DeclaredCapability,
    gaps: &[Gap],
) -> Option<(String, String)> {
    let mut rewrite = Rewrite::new(doc);
    for gap in gaps {
        rewrite.close(gap, cap);
    }
    if rewrite.summary.is_empty() {
        return None;
    }
    let test_cases = rewrite.kept_test_cases(doc);
    let sections = doc.sections();
    let text = draft::render(&DocParts {
        requirements: sections
            .requirements
            .clone()
            .unwrap_or_else(|| "Serve the requests described below.".into()),
        process: sections.process.clone().unwrap_or_else(|| {
            "The requester sends one request message; the provider answers with one response message.".into()
        }),
        request_schema: rewrite.request,
        response_schema: rewrite.response,
        error_handling: sections
            .error_handling
            .clone()
            .unwrap_or_else(|| DEFAULT_ERROR_HANDLING.into()),
        test_cases,
    });
    Some((text, rewrite.summary.join("\n")))
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
            if let Some(obj) = case.expected_response.as_object_mut() {
                for f in &self.removed_response {
                    obj.remove(f);
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

fn remove_property(schema: &mut Value, name: &str) {
    if let Some(p) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        p.shift_remove(name);
    }
    if let Some(r) = schema.get_mut("required").and_then(Value::as_array_mut) {
        r.retain(|x| x != name);
    }
}
