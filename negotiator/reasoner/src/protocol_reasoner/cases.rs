//! Test cases the provider writes for a protocol that has none, from the capability that serves
//! it: what the provider offers in a counter-proposal, or in a `testCasesNegotiation` message.
//!
//! Each case is built from the plan's [`Mapping`] and checked by running it:
//! - **found**: a request with example values (the capability input's `examples`, else the
//!   request schema's `const`, `enum`, `examples` or `default`, else a value of the field's type),
//!   a fixture answering the capability call with an example result built from its output
//!   schema; the expectation holds the status, the constants and the echoed fields of the
//!   answer, and a [`FieldCheck`] that each field carrying the result is not null;
//! - **not found**: the same request, the capability answering `null` (or failing with "not
//!   found" when its output cannot be null); only when the response has a status field;
//! - **missing input**: the request without a required field feeding the capability, answered
//!   as a bad request; only when the response has a status field.
//!
//! A case is kept only when [`parley_mapping::serve`], the handler's compiled form, answers it
//! as expected and its answer is valid against the protocol's response schema: the provider
//! never proposes a case its own handler would fail.

use parley_anp::protocol::{
    Condition, FieldCheck, Fixture, Fixtures, MatchMode, ProtocolDoc, TestCase,
};
use parley_anp::verify::check_case;
use parley_mapping::{Mapping, Source, serve};
use serde_json::{Map, Value, json};

use crate::draft::example_value;
use crate::planner::DeclaredCapability;
use crate::schema::{json_types, properties, required};

/// Test cases for `doc` as `mapping` serves it with `cap` (see the module docs).
pub(super) fn generate(
    doc: &ProtocolDoc,
    cap: &DeclaredCapability,
    mapping: &Mapping,
) -> Vec<TestCase> {
    let Some(request) = example_request(doc, cap, mapping) else {
        return Vec::new();
    };
    let has_status = mapping
        .response
        .iter()
        .any(|r| matches!(r.source, Source::Status { .. }));
    let args = arguments(mapping, &request);
    let result = sample(&cap.output_schema, "");
    let mut cases = vec![case(
        doc,
        mapping,
        "found",
        "A well-formed request for an existing record gets the record.",
        request.clone(),
        Some(Fixture {
            args: args.clone(),
            result,
            error: None,
        }),
        true,
    )];
    if has_status {
        let missing = Fixture {
            args: args.clone(),
            result: Value::Null,
            error: (!mapping.output_nullable).then(|| format!("{} not found", mapping.entity)),
        };
        cases.push(case(
            doc,
            mapping,
            "not found",
            "A request for a record that does not exist is answered as not found.",
            request.clone(),
            Some(missing),
            false,
        ));
        let required_inputs = required(&cap.input_schema);
        let request_required = required(doc.request_schema());
        if let Some(argument) = mapping.arguments.iter().find(|a| {
            required_inputs.contains(a.input.as_str())
                && request_required.contains(a.request.as_str())
        }) {
            let mut without = request.clone();
            if let Some(obj) = without.as_object_mut() {
                obj.shift_remove(&argument.request);
            }
            cases.push(case(
                doc,
                mapping,
                "missing input",
                &format!(
                    "A request without `{}` is refused as malformed.",
                    argument.request
                ),
                without,
                None,
                false,
            ));
        }
    }
    cases.into_iter().flatten().collect()
}

/// One case: the compiled handler's answer to `request`, reduced to what a requester can rely
/// on; `None` when that answer is not valid against the protocol.
fn case(
    doc: &ProtocolDoc,
    mapping: &Mapping,
    name: &str,
    description: &str,
    request: Value,
    fixture: Option<Fixture>,
    found: bool,
) -> Option<TestCase> {
    let fixtures = Fixtures(
        fixture
            .map(|f| (mapping.capability.clone(), vec![f]))
            .into_iter()
            .collect(),
    );
    let answer = serve(mapping, &request, |capability, args| {
        fixtures.answer(capability, &args)
    });
    let mut expected = Map::new();
    let mut checks = Vec::new();
    for field in mapping
        .response
        .iter()
        .filter(|r| !r.field.starts_with('/'))
    {
        let Some(value) = answer.get(&field.field) else {
            continue;
        };
        match &field.source {
            Source::Status { .. } | Source::Constant { .. } | Source::Echo { .. } => {
                expected.insert(field.field.clone(), value.clone());
            }
            source if source.carries_data() && found => checks.push(FieldCheck {
                path: format!("/{}", field.field.replace('~', "~0").replace('/', "~1")),
                is: Condition::NotNull,
            }),
            source if source.carries_data() && value.is_null() => {
                expected.insert(field.field.clone(), Value::Null);
            }
            _ => {}
        }
    }
    let case = TestCase {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        request,
        expected_response: Value::Object(expected),
        match_mode: MatchMode::Subset,
        fixtures,
        checks,
    };
    check_case(doc, &case, Ok(answer)).passed.then_some(case)
}

/// The capability arguments the mapping passes for `request`.
fn arguments(mapping: &Mapping, request: &Value) -> Value {
    let mut args = Map::new();
    for argument in &mapping.arguments {
        if let Some(value) = request.get(&argument.request) {
            args.insert(argument.input.clone(), value.clone());
        }
    }
    Value::Object(args)
}

/// A request with every top-level field the schema lists: a capability input's example where
/// the field feeds one, else the schema's own example, else a value of its type. `None` when
/// the mapping names fields inside objects (not generated here).
fn example_request(
    doc: &ProtocolDoc,
    cap: &DeclaredCapability,
    mapping: &Mapping,
) -> Option<Value> {
    if mapping.arguments.iter().any(|a| a.request.starts_with('/')) {
        return None;
    }
    let input_props = properties(&cap.input_schema);
    let mut request = Map::new();
    let schema_required = required(doc.request_schema());
    for (name, schema) in properties(doc.request_schema()) {
        let from_input = mapping
            .arguments
            .iter()
            .find(|a| a.request == name)
            .and_then(|a| input_props.iter().find(|(i, _)| *i == a.input))
            .and_then(|(_, s)| example_value(s));
        let value = from_input
            .or_else(|| example_value(schema))
            .unwrap_or_else(|| sample(schema, &name));
        let argument = mapping.arguments.iter().any(|a| a.request == name);
        if argument || schema_required.contains(name.as_str()) {
            request.insert(name, value);
        }
    }
    Some(Value::Object(request))
}

/// A value `schema` accepts, for a field called `name`: its example when it gives one, else one
/// of its type (objects with their required properties).
fn sample(schema: &Value, name: &str) -> Value {
    if let Some(example) = example_value(schema) {
        return example;
    }
    let types = json_types(schema).unwrap_or_default();
    let has = |t: &str| types.contains(t);
    if has("object") || (types.is_empty() && !properties(schema).is_empty()) {
        let mut object = Map::new();
        for (field, sub) in properties(schema) {
            let value = sample(sub, &field);
            object.insert(field, value);
        }
        Value::Object(object)
    } else if has("string") {
        json!(format!(
            "test-{}",
            if name.is_empty() { "value" } else { name }
        ))
    } else if has("integer") {
        json!(1)
    } else if has("number") {
        json!(1.5)
    } else if has("boolean") {
        json!(true)
    } else if has("array") {
        json!([])
    } else {
        Value::Null
    }
}
