//! The mapping runtime answers exactly as the JavaScript generated from the same mapping.
//!
//! For the seed-002 product protocol (mapped onto the example catalogue by the built-in reasoner)
//! and for hand-made mappings that use every kind of response source, status shape and request
//! check, every request of a generated set (well-formed, each field missing, each field of every
//! JSON type, values outside an enum, requests that are not objects, extra fields) meets every
//! capability behaviour (a full result, an empty one, null, an array, a string, "not found" and
//! "invalid argument" failures in several spellings, other failures), once through the JavaScript
//! in QuickJS and once through the mapping runtime, both in the sandbox. The two answers must be
//! the same JSON text: same fields, same values, same order.

use std::path::Path;
use std::sync::Arc;

use parley_anp::ProtocolDoc;
use parley_capabilities::Capabilities;
use parley_reasoner::mapping::{Mapping, Source};
use parley_reasoner::{BuiltinProtocolReasoner, DeclaredCapability, Evaluation};
use parley_sandbox::{Dialect, Grants, Sandbox, SandboxConfig};
use serde_json::{Map, Value, json};

fn product_mapping() -> Mapping {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("examples/protocols/product-info.md"))
        .expect("the example protocol");
    let doc = ProtocolDoc::parse(text).expect("a protocol document");
    let capabilities = Capabilities::load(&root.join("examples/capabilities.toml"), |_| None)
        .expect("the example capabilities");
    match BuiltinProtocolReasoner.evaluate_sync(&doc, &DeclaredCapability::all(&capabilities)) {
        Evaluation::Accept { mapping } => mapping,
        other => panic!("the built-in reasoner must accept the product protocol: {other:?}"),
    }
}

/// Every source, status shape and check kind the built-in reasoner produces, in one mapping per
/// status shape.
fn hand_made_mappings() -> Vec<Mapping> {
    let base = json!({
        "capability": "lookup_item",
        "checks": [
            { "field": "messageId", "types": ["string"], "required": true },
            { "field": "item-id", "types": ["integer"], "required": true },
            { "field": "kind", "types": ["string"], "required": false,
              "allowed": ["book", "film"] },
            { "field": "size", "types": ["number", "null"], "required": false,
              "allowed": [1, 2.5, null] },
            { "field": "filter", "types": ["object", "array"], "required": false,
              "allowed": [{ "a": 1, "b": [true] }, [1, 2]] },
            { "field": "tags", "types": [], "required": false },
            { "field": "odd", "types": ["date"], "required": false },
            { "field": "never", "types": ["string"], "required": false, "allowed": [] }
        ],
        "arguments": [
            { "input": "itemId", "request": "item-id" },
            { "input": "kind", "request": "kind" }
        ],
        "response": [
            { "field": "type", "source": { "kind": "constant", "value": "RESPONSE" },
              "required": true, "nullable": false },
            { "field": "messageId", "source": { "kind": "echo", "field": "messageId" },
              "required": true, "nullable": false },
            { "field": "itemId", "source": { "kind": "echo", "field": "item-id" },
              "required": true, "nullable": false },
            { "field": "kind", "source": { "kind": "echo", "field": "kind" },
              "required": false, "nullable": false },
            { "field": "status", "source": { "kind": "status", "shape": null },
              "required": true, "nullable": false },
            { "field": "title", "source": { "kind": "outputField", "field": "title" },
              "required": false, "nullable": true },
            { "field": "price", "source": { "kind": "outputField", "field": "price" },
              "required": true, "nullable": false },
            { "field": "item", "source": { "kind": "outputObject",
                "fields": [["name", "title"], ["cost", "price"], ["stock", "in-stock"]] },
              "required": false, "nullable": true },
            { "field": "raw", "source": { "kind": "output" },
              "required": false, "nullable": true },
            { "field": "rawStrict", "source": { "kind": "output" },
              "required": false, "nullable": false },
            { "field": "error", "source": { "kind": "errorMessage" },
              "required": true, "nullable": true },
            { "field": "errorText", "source": { "kind": "errorMessage" },
              "required": true, "nullable": false },
            { "field": "detail", "source": { "kind": "errorMessage" },
              "required": false, "nullable": false }
        ],
        "codes": { "ok": 200, "badRequest": 422, "notFound": 410, "internal": 503 },
        "entity": "Item",
        "outputNullable": true
    });
    let shapes = [
        json!({ "kind": "object", "code_field": "code", "message_field": "message" }),
        json!({ "kind": "object", "code_field": null, "message_field": "text" }),
        json!({ "kind": "integer" }),
        json!({ "kind": "text", "ok": "success", "bad_request": "bad",
                "not_found": "gone", "internal": "down" }),
    ];
    shapes
        .into_iter()
        .map(|shape| {
            let mut mapping = base.clone();
            mapping["response"][4]["source"]["shape"] = shape;
            serde_json::from_value(mapping).expect("a mapping")
        })
        .collect()
}

/// A value of JSON type `t`.
fn sample(t: &str) -> Value {
    match t {
        "string" => json!("P12345"),
        "integer" => json!(7),
        "number" => json!(2.5),
        "boolean" => json!(true),
        "array" => json!([1, 2]),
        "object" => json!({ "a": 1, "b": [true] }),
        _ => Value::Null,
    }
}

/// Values of every JSON type, including numbers JavaScript treats specially.
fn palette() -> Vec<Value> {
    vec![
        Value::Null,
        json!(false),
        json!(0),
        json!(1),
        json!(1.0),
        json!(2.5),
        json!(-0.0),
        json!(-3),
        json!(""),
        json!("book"),
        json!("x y"),
        json!([]),
        json!([1, 2]),
        json!({}),
        json!({ "b": [true], "a": 1 }),
        json!({ "a": 1, "b": [true] }),
    ]
}

fn requests(mapping: &Mapping) -> Vec<Value> {
    let mut valid = Map::new();
    for check in &mapping.checks {
        let value = match &check.allowed {
            Some(allowed) if !allowed.is_empty() => allowed[0].clone(),
            _ => sample(check.types.first().map_or("string", String::as_str)),
        };
        if check.required || check.allowed.as_ref().is_some_and(|a| !a.is_empty()) {
            valid.insert(check.field.clone(), value);
        }
    }
    let mut out = vec![Value::Object(valid.clone())];
    for check in &mapping.checks {
        let mut missing = valid.clone();
        missing.remove(&check.field);
        out.push(Value::Object(missing));
        for value in palette() {
            let mut changed = valid.clone();
            changed.insert(check.field.clone(), value);
            out.push(Value::Object(changed));
        }
    }
    let mut extra = valid.clone();
    extra.insert("unrelated".into(), json!({ "deep": [1, { "x": null }] }));
    out.push(Value::Object(extra));
    out.extend([
        Value::Null,
        json!(12),
        json!("a request"),
        json!([Value::Object(valid)]),
    ]);
    out
}

/// What the capability does: a full result (every output field the mapping reads), partial and
/// odd results, and failures whose messages the handler classifies.
fn behaviours(mapping: &Mapping) -> Vec<Result<Value, String>> {
    let mut full = Map::new();
    for r in &mapping.response {
        match &r.source {
            Source::OutputField { field } => {
                full.insert(field.clone(), json!(format!("{field} value")));
            }
            Source::OutputObject { fields } => {
                for (_, from) in fields {
                    full.insert(from.clone(), json!(3.0));
                }
            }
            _ => {}
        }
    }
    full.insert("extra".into(), json!([1.5, { "z": 1 }]));
    vec![
        Ok(Value::Object(full)),
        Ok(json!({})),
        Ok(json!({ "title": null, "price": 0 })),
        Ok(Value::Null),
        Ok(json!([1, 2])),
        Ok(json!("text")),
        Ok(json!(0)),
        Err("product P1 not found".into()),
        Err("Not_Found".into()),
        Err("NOT-FOUND: gone".into()),
        Err("invalid arguments: itemId".into()),
        Err("Invalid-Argument".into()),
        Err("notfound".into()),
        Err("boom".into()),
        Err(String::new()),
    ]
}

#[test]
fn the_mapping_runtime_answers_exactly_as_the_generated_javascript() {
    let sandbox = Sandbox::new(SandboxConfig::default()).expect("a sandbox");
    let mut mappings = vec![product_mapping()];
    mappings.extend(hand_made_mappings());
    let mut compared = 0;
    for mapping in &mappings {
        let source = parley_reasoner::handler_gen::generate(mapping, "0".repeat(64).as_str());
        let javascript = sandbox.publish(&source).expect("the JavaScript publishes");
        let compiled = sandbox
            .publish_as(
                Dialect::Mapping,
                &serde_json::to_string(mapping).expect("JSON"),
            )
            .expect("the mapping publishes");
        let grants: Grants = [mapping.capability.clone()].into_iter().collect();
        for behaviour in behaviours(mapping) {
            let shown = format!("{behaviour:?}");
            let host = Arc::new(move |_: &str, _: Value| behaviour.clone());
            for request in requests(mapping) {
                let run = |handler| {
                    sandbox
                        .call_blocking(handler, &request, &grants, host.clone())
                        .map(|out| out.output.to_string())
                        .map_err(|e| e.code())
                };
                let (expected, actual) = (run(&javascript), run(&compiled));
                assert_eq!(
                    actual, expected,
                    "capability {} answering {shown}, request {request}",
                    mapping.capability
                );
                compared += 1;
            }
        }
    }
    // Not vacuous: several thousand request/behaviour pairs across the mappings.
    assert!(compared > 2_000, "only {compared} comparisons");
}
