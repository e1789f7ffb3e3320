//! The built-in protocol reasoner against the example capabilities: accept, counter, reject,
//! drafts, and generated handlers (golden file, and run under Node.js when it is installed).

use std::path::Path;
use std::process::{Command, Stdio};

use async_trait::async_trait;
use parley_anp::verify;
use parley_anp::{Fixtures, HandlerRunner, ProtocolDoc, Verdict};
use parley_reasoner::mapping::Source;
use parley_reasoner::{BuiltinProtocolReasoner, Evaluation, GeneratedHandler, ProtocolReasoner};
use serde_json::{Value, json};

use crate::support::{declared_capabilities, product, product_text};

fn evaluate(text: &str) -> Evaluation {
    let doc = ProtocolDoc::parse(text).expect("test protocol parses");
    BuiltinProtocolReasoner.evaluate_sync(&doc, &declared_capabilities())
}

/// A protocol document from two schemas (and optional test cases JSON).
fn protocol(request: Value, response: Value, cases: Option<Value>) -> String {
    let mut text = format!(
        "# Requirements\nA lookup.\n\n# Data Format\n## Request\n```json\n{request:#}\n```\n## Response\n```json\n{response:#}\n```\n\n# Error Handling\n- 404 when nothing is found.\n"
    );
    if let Some(cases) = cases {
        text.push_str(&format!("\n# Test Cases\n```json\n{cases:#}\n```\n"));
    }
    text
}

/// Seed 002's product protocol with every field in snake_case.
fn snake_case_protocol() -> String {
    protocol(
        json!({
            "type": "object",
            "properties": {
                "message_id": {"type": "string"},
                "type": {"type": "string", "description": "Indicates whether the message is a REQUEST or RESPONSE"},
                "product_id": {"type": "string"}
            },
            "required": ["message_id", "type", "product_id"]
        }),
        json!({
            "type": "object",
            "properties": {
                "message_id": {"type": "string"},
                "type": {"type": "string", "description": "Indicates whether the message is a REQUEST or RESPONSE"},
                "status_code": {"type": "integer"},
                "error_message": {"type": "string"},
                "product_info": {
                    "type": ["object", "null"],
                    "properties": {
                        "product_id": {"type": "string"},
                        "product_name": {"type": "string"},
                        "price": {"type": "number"},
                        "currency": {"type": "string"},
                        "stock": {"type": "integer"}
                    },
                    "required": ["product_id", "product_name", "price"]
                }
            },
            "required": ["message_id", "type", "status_code"]
        }),
        Some(json!([
            {
                "name": "found",
                "request": {"message_id": "m1", "type": "REQUEST", "product_id": "P23456"},
                "expectedResponse": {
                    "message_id": "m1", "type": "RESPONSE", "status_code": 200,
                    "product_info": {"product_id": "P23456", "product_name": "Wireless Ergonomic Mouse", "price": 39.5, "currency": "USD", "stock": 310}
                },
                "match": "exact",
                "fixtures": {"getProductInfo": [{"args": {"productId": "P23456"}, "result": {
                    "productId": "P23456", "productName": "Wireless Ergonomic Mouse",
                    "productDescription": "Silent wireless mouse.", "price": 39.5, "currency": "USD", "stock": 310
                }}]}
            },
            {
                "name": "not found",
                "request": {"message_id": "m2", "type": "REQUEST", "product_id": "P00000"},
                "expectedResponse": {"message_id": "m2", "status_code": 404, "product_info": null},
                "fixtures": {"getProductInfo": [{"args": {"productId": "P00000"}, "result": null}]}
            },
            {
                "name": "capability failure",
                "request": {"message_id": "m3", "type": "REQUEST", "product_id": "P11111"},
                "expectedResponse": {"message_id": "m3", "status_code": 500, "error_message": "capability getProductInfo failed: catalogue offline"},
                "fixtures": {"getProductInfo": [{"args": {"productId": "P11111"}, "error": "capability getProductInfo failed: catalogue offline"}]}
            }
        ])),
    )
}

#[test]
fn accepts_the_example_protocol() {
    let Evaluation::Accept { mapping } =
        BuiltinProtocolReasoner.evaluate_sync(&product(), &declared_capabilities())
    else {
        panic!("the example protocol must be accepted");
    };
    assert_eq!(mapping.capability, "getProductInfo");
    assert_eq!(mapping.arguments.len(), 1);
    assert_eq!(mapping.arguments[0].input, "productId");
    assert_eq!(mapping.entity, "Product");
    let sources: Vec<(&str, &Source)> = mapping
        .response
        .iter()
        .map(|r| (r.field.as_str(), &r.source))
        .collect();
    assert!(matches!(sources[0], ("messageId", Source::Echo { .. })));
    assert!(matches!(sources[1], ("type", Source::Constant { .. })));
    assert!(matches!(sources[2], ("status", Source::Status { .. })));
    assert!(matches!(
        sources[3],
        ("productInfo", Source::OutputObject { .. })
    ));
}

#[test]
fn accepts_across_case_styles() {
    let Evaluation::Accept { mapping } = evaluate(&snake_case_protocol()) else {
        panic!("snake_case protocol must be accepted");
    };
    assert_eq!(mapping.capability, "getProductInfo");
    assert_eq!(mapping.arguments[0].request, "product_id");
    assert_eq!(mapping.arguments[0].input, "productId");
}

#[test]
fn accepts_the_seed_document_itself() {
    // Seed 002's protocol as printed (bare JSON, prose test cases).
    let seed = include_str!("../data/seed-002-product.md");
    assert!(matches!(evaluate(seed), Evaluation::Accept { .. }));
}

#[test]
fn accepts_order_status_in_kebab_case() {
    let text = protocol(
        json!({"type": "object", "properties": {"order-id": {"type": "string"}}, "required": ["order-id"]}),
        json!({"type": "object", "properties": {
            "order-id": {"type": "string"},
            "status": {"type": "string"},
            "items": {"type": "array"},
            "expected-delivery": {"type": ["string", "null"]}
        }, "required": ["order-id", "status", "items"]}),
        None,
    );
    let Evaluation::Accept { mapping } = evaluate(&text) else {
        panic!("accept");
    };
    assert_eq!(mapping.capability, "getOrderStatus");
    // `status` here is the order's status, from the output, not an outcome code.
    assert!(mapping.response.iter().any(|r| r.field == "status"
        && r.source
            == Source::OutputField {
                field: "status".into()
            }));
}

#[test]
fn counter_proposes_what_it_can_serve() {
    // Asks for a warranty the catalogue does not have, and makes the id optional.
    let text = protocol(
        json!({"type": "object", "properties": {
            "messageId": {"type": "string"}, "productId": {"type": "string"}
        }, "required": ["messageId"]}),
        json!({"type": "object", "properties": {
            "messageId": {"type": "string"},
            "status": {"type": "object", "properties": {"code": {"type": "integer"}}, "required": ["code"]},
            "product": {"type": ["object", "null"], "properties": {
                "productId": {"type": "string"}, "price": {"type": "number"}
            }},
            "warrantyYears": {"type": "integer"}
        }, "required": ["messageId", "status", "warrantyYears"]}),
        Some(json!([{
            "name": "warranty",
            "request": {"messageId": "m", "productId": "P12345"},
            "expectedResponse": {"messageId": "m", "warrantyYears": 2}
        }])),
    );
    let Evaluation::Counter {
        text: counter,
        summary,
    } = evaluate(&text)
    else {
        panic!("expected a counter-proposal, got {:?}", evaluate(&text));
    };
    assert!(summary.contains("warrantyYears"), "{summary}");
    assert!(summary.contains("`productId` is now required"), "{summary}");
    let doc = ProtocolDoc::parse(counter.clone()).expect("the counter-proposal parses");
    assert!(
        doc.response_schema()["properties"]
            .get("warrantyYears")
            .is_none()
    );
    assert_eq!(
        doc.request_schema()["required"],
        json!(["messageId", "productId"])
    );
    // The kept test case no longer expects the removed field.
    assert_eq!(doc.test_cases().len(), 1);
    assert!(
        doc.test_cases()[0]
            .expected_response
            .get("warrantyYears")
            .is_none()
    );
    // And we accept our own counter-proposal.
    assert!(matches!(evaluate(&counter), Evaluation::Accept { .. }));
    // The requirements are carried over.
    assert!(counter.contains("A lookup."));
}

#[test]
fn counter_adds_missing_inputs_and_data() {
    // Knows nothing of product ids and asks only for an acknowledgement.
    let text = protocol(
        json!({"type": "object", "properties": {"messageId": {"type": "string"}, "productName": {"type": "string"}}, "required": ["messageId"]}),
        json!({"type": "object", "properties": {"messageId": {"type": "string"}, "productName": {"type": "string"}}, "required": ["messageId"]}),
        None,
    );
    let Evaluation::Counter {
        text: counter,
        summary,
    } = evaluate(&text)
    else {
        panic!("expected a counter-proposal, got {:?}", evaluate(&text));
    };
    assert!(
        summary.contains("added required field `productId`"),
        "{summary}"
    );
    let doc = ProtocolDoc::parse(counter.clone()).expect("parses");
    assert!(
        doc.request_schema()["properties"]
            .get("productId")
            .is_some()
    );
    assert!(matches!(evaluate(&counter), Evaluation::Accept { .. }));
}

#[test]
fn rejects_what_no_capability_serves() {
    let text = protocol(
        json!({"type": "object", "properties": {"city": {"type": "string"}, "date": {"type": "string"}}, "required": ["city"]}),
        json!({"type": "object", "properties": {"temperature": {"type": "number"}, "humidity": {"type": "number"}}, "required": ["temperature"]}),
        None,
    );
    let Evaluation::Reject { reason } = evaluate(&text) else {
        panic!("expected a rejection");
    };
    assert!(reason.contains("capabilit"), "{reason}");
    assert!(matches!(
        Evaluation::Reject { reason }.verdict(),
        Verdict::Reject { .. }
    ));
}

#[tokio::test]
async fn drafts_a_protocol_the_provider_accepts() {
    let caps = declared_capabilities();
    let product = caps
        .iter()
        .find(|c| c.name == "getProductInfo")
        .expect("example");
    let input = json!({
        "type": "object",
        "properties": {"productId": {"type": "string", "examples": ["P12345"]}},
        "required": ["productId"]
    });
    let text = BuiltinProtocolReasoner
        .draft(
            "Get a product's price by its id.",
            &input,
            &product.output_schema,
        )
        .await
        .expect("draft");
    let doc = ProtocolDoc::parse(text).expect("drafts parse");
    assert_eq!(doc.test_cases().len(), 2);
    assert!(
        doc.sections()
            .requirements
            .as_deref()
            .unwrap_or("")
            .contains("price")
    );
    let eval = BuiltinProtocolReasoner
        .evaluate(&doc, &caps)
        .await
        .expect("evaluates");
    assert!(matches!(eval, Evaluation::Accept { .. }), "{eval:?}");

    let err = BuiltinProtocolReasoner
        .draft("x", &json!({"type": "string"}), &json!({}))
        .await
        .expect_err("not an object schema");
    assert_eq!(err.code(), "invalid_input");
}

#[tokio::test]
async fn handler_for_the_example_matches_the_golden_file() {
    let doc = product();
    let handler = BuiltinProtocolReasoner
        .generate_handler(&doc, &declared_capabilities(), None)
        .await
        .expect("generates");
    assert_eq!(handler.grants, ["getProductInfo"]);
    let source = &handler.source;
    // Plausibility without a JS engine: the ABI entry point, the host call, balanced brackets.
    assert!(source.contains("function handle(request)"));
    assert!(source.contains("host.call(\"getProductInfo\", args)"));
    for (open, close) in [('{', '}'), ('(', ')'), ('[', ']')] {
        assert_eq!(
            source.matches(open).count(),
            source.matches(close).count(),
            "unbalanced {open}{close}"
        );
    }
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/product-info.handler.js");
    if std::env::var_os("PARLEY_BLESS").is_some() {
        std::fs::write(&golden, source).expect("bless golden file");
    }
    let expected = std::fs::read_to_string(&golden)
        .expect("golden file (regenerate with PARLEY_BLESS=1 cargo test -p parley-reasoner)");
    // The protocol hash line differs only if the example changed; compare the rest too.
    assert_eq!(
        source, &expected,
        "generated handler changed; re-bless if intended"
    );

    // fix_handler cannot do better than regenerate.
    let err = BuiltinProtocolReasoner
        .fix_handler(
            &doc,
            &declared_capabilities(),
            &handler,
            "status.code was 500",
        )
        .await
        .expect_err("nothing to fix");
    assert_eq!(err.code(), "cannot_fix");
}

#[tokio::test]
async fn no_handler_without_a_mapping() {
    let text = protocol(
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        json!({"type": "object", "properties": {"temperature": {"type": "number"}}}),
        None,
    );
    let doc = ProtocolDoc::parse(text).expect("parses");
    let err = BuiltinProtocolReasoner
        .generate_handler(&doc, &declared_capabilities(), None)
        .await
        .expect_err("nothing to generate");
    assert_eq!(err.code(), "no_mapping");
}

#[tokio::test]
async fn test_case_negotiation_verdicts() {
    let doc = product();
    let ok = BuiltinProtocolReasoner
        .evaluate_test_cases(
            &doc,
            "```json\n[{\"name\":\"x\",\"request\":{\"messageId\":\"m\"},\"expectedResponse\":{\"status\":{\"code\":400}}}]\n```",
        )
        .await
        .expect("evaluates");
    assert_eq!(ok, Verdict::Accept);
    let bad = BuiltinProtocolReasoner
        .evaluate_test_cases(&doc, "no cases here")
        .await
        .expect("evaluates");
    assert!(matches!(bad, Verdict::Reject { .. }));
}

// --- generated handlers under Node.js ---------------------------------------------------------

/// Runs handlers with Node.js when it is installed, emulating the sandbox ABI: `handle(request)`,
/// `host.call(name, args)` answered from fixtures (deep JSON equality, like `Fixtures::answer`).
struct NodeRunner;

const NODE_HOST: &str = r#"
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => k in b && same(a[k], b[k]));
}
const host = Object.freeze({
  call(name, args) {
    const entry = (input.fixtures[name] || []).find((f) => same(f.args, args));
    if (!entry) throw new Error("capability " + name + " failed: no fixture for " + JSON.stringify(args));
    if (entry.error !== undefined) throw new Error(entry.error);
    return entry.result === undefined ? null : JSON.parse(JSON.stringify(entry.result));
  },
});
const handle = new Function("host", input.source + "\nreturn handle;")(host);
process.stdout.write(JSON.stringify(handle(input.request)));
"#;

fn node_available() -> bool {
    Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[async_trait]
impl HandlerRunner for NodeRunner {
    async fn run(
        &self,
        handler: &str,
        request: Value,
        fixtures: Fixtures,
    ) -> Result<Value, String> {
        use std::io::Write;
        let input = json!({"source": handler, "request": request, "fixtures": fixtures});
        let mut child = Command::new("node")
            .arg("-e")
            .arg(NODE_HOST)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        child
            .stdin
            .take()
            .ok_or("no stdin")?
            .write_all(input.to_string().as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
    }
}

async fn generate_and_verify(text: &str) -> (GeneratedHandler, verify::VerificationReport) {
    let doc = ProtocolDoc::parse(text).expect("parses");
    let handler = BuiltinProtocolReasoner
        .generate_handler(&doc, &declared_capabilities(), None)
        .await
        .expect("generates");
    let report = verify::verify(&doc, &NodeRunner, &handler.source).await;
    (handler, report)
}

#[tokio::test]
async fn generated_handlers_pass_their_test_cases_under_node() {
    if !node_available() {
        eprintln!(
            "skipped: `node` is not installed (the sandbox integration tests run handlers for real)"
        );
        return;
    }
    for text in [product_text(), snake_case_protocol()] {
        let (handler, report) = generate_and_verify(&text).await;
        assert!(
            report.passed(),
            "{}\n{}",
            report.failure_description(),
            handler.source
        );
        assert!(!report.cases.is_empty());
    }

    // Malformed requests get the bad-request status, with the echoed id.
    let doc = product();
    let handler = BuiltinProtocolReasoner
        .generate_sync(&doc, &declared_capabilities(), None)
        .expect("generates");
    for (request, code) in [
        (
            json!({"messageId": "x", "type": "REQUEST", "action": "getProductInfo", "productId": 7}),
            400,
        ),
        (
            json!({"messageId": "x", "type": "RESPONSE", "action": "getProductInfo", "productId": "P1"}),
            400,
        ),
        (json!("not an object"), 400),
        (json!(["an", "array"]), 400),
        (json!(null), 400),
        (
            json!({"messageId": "x", "type": "REQUEST", "action": "getProductInfo"}),
            400,
        ),
        (
            json!({"messageId": "x", "type": "REQUEST", "action": "getProductInfo", "productId": "P1", "productName": 3}),
            400,
        ),
    ] {
        let response = NodeRunner
            .run(&handler.source, request.clone(), Fixtures::default())
            .await
            .expect("runs");
        assert_eq!(response["status"]["code"], code, "{request} -> {response}");
        assert!(
            response["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("field") || m.contains("JSON object")),
            "the message names the problem: {response}"
        );
        doc.validate_response(&response)
            .expect("error responses follow the schema");
    }
}

#[tokio::test]
async fn drafts_and_counter_proposals_verify_under_node() {
    if !node_available() {
        eprintln!(
            "skipped: `node` is not installed (the sandbox integration tests run handlers for real)"
        );
        return;
    }
    let caps = declared_capabilities();
    let product = caps
        .iter()
        .find(|c| c.name == "getProductInfo")
        .expect("example");
    let input = json!({
        "type": "object",
        "properties": {"product_id": {"type": "string", "examples": ["P12345"]}},
        "required": ["product_id"]
    });
    let drafted = BuiltinProtocolReasoner
        .draft("Product details by id.", &input, &product.output_schema)
        .await
        .expect("draft");
    let (_, report) = generate_and_verify(&drafted).await;
    assert!(report.passed(), "{}", report.failure_description());
    assert_eq!(report.cases.len(), 2);

    let asks_too_much = protocol(
        json!({"type": "object", "properties": {"messageId": {"type": "string"}, "productId": {"type": "string"}}, "required": ["messageId"]}),
        json!({"type": "object", "properties": {
            "messageId": {"type": "string"},
            "code": {"type": "integer"},
            "price": {"type": "number"},
            "warrantyYears": {"type": "integer"}
        }, "required": ["messageId", "code", "warrantyYears"]}),
        Some(json!([{
            "name": "price",
            "request": {"messageId": "m", "productId": "P45678"},
            "expectedResponse": {"messageId": "m", "code": 200, "price": 119.0, "warrantyYears": 1},
            "fixtures": {"getProductInfo": [{"args": {"productId": "P45678"}, "result": {
                "productId": "P45678", "productName": "Mechanical Keyboard", "price": 119.0, "currency": "EUR"
            }}]}
        }])),
    );
    let Evaluation::Counter { text, .. } = evaluate(&asks_too_much) else {
        panic!("expected a counter-proposal");
    };
    let (_, report) = generate_and_verify(&text).await;
    assert!(report.passed(), "{}", report.failure_description());
    assert_eq!(report.cases.len(), 1);
}

/// The seed-003 example: messages are envelopes (`header` + `body`), so the plan reads and
/// writes fields inside objects, named by JSON Pointer.
mod envelope {
    use parley_capabilities::Capabilities;
    use parley_reasoner::DeclaredCapability;

    use super::*;
    use crate::support::repo;

    fn capabilities() -> Vec<DeclaredCapability> {
        // Planning reads declarations only: the log's address is never called.
        let log = |k: &str| (k == "STATION_LOG_URL").then(|| "http://127.0.0.1:9".to_owned());
        let caps = Capabilities::load(&repo().join("examples/seed003/capabilities.toml"), log)
            .expect("the seed-003 capabilities load");
        DeclaredCapability::all(&caps)
    }

    fn text() -> String {
        seed003_text("station-reading.md")
    }

    fn seed003_text(name: &str) -> String {
        std::fs::read_to_string(repo().join("examples/seed003/protocols").join(name))
            .expect("seed-003 protocol")
    }

    #[test]
    fn an_inform_is_planned_onto_the_recording_capability() {
        let doc = ProtocolDoc::parse(seed003_text("station-note.md")).expect("parses");
        let Evaluation::Accept { mapping } =
            BuiltinProtocolReasoner.evaluate_sync(&doc, &capabilities())
        else {
            panic!("the seed-003 note protocol is served");
        };
        assert_eq!(mapping.capability, "recordStationNote");
        let arguments: Vec<(&str, &str)> = mapping
            .arguments
            .iter()
            .map(|a| (a.input.as_str(), a.request.as_str()))
            .collect();
        assert_eq!(
            arguments,
            [("note", "/body/note"), ("stationId", "/body/stationId")]
        );
        assert_eq!(
            source_of(&mapping, "/header/reply_to"),
            &Source::Echo {
                field: "/header/id".to_owned()
            }
        );
        let Source::Status {
            shape: parley_reasoner::mapping::StatusShape::Text { ok, internal, .. },
        } = source_of(&mapping, "/header/type")
        else {
            panic!("the message type follows the outcome: {mapping:#?}");
        };
        assert_eq!((ok.as_str(), internal.as_str()), ("ACKNOWLEDGE", "ERROR"));
        assert_eq!(
            source_of(&mapping, "/body/record"),
            &Source::OutputObject {
                fields: vec![("id".to_owned(), "id".to_owned())]
            }
        );
    }

    fn source_of<'m>(mapping: &'m parley_reasoner::mapping::Mapping, field: &str) -> &'m Source {
        &mapping
            .response
            .iter()
            .find(|r| r.field == field)
            .unwrap_or_else(|| panic!("no response field {field}: {mapping:#?}"))
            .source
    }

    #[test]
    fn plans_nested_request_and_reply_header_fields() {
        let doc = ProtocolDoc::parse(text()).expect("parses");
        let Evaluation::Accept { mapping } =
            BuiltinProtocolReasoner.evaluate_sync(&doc, &capabilities())
        else {
            panic!("the seed-003 protocol is served");
        };
        assert_eq!(mapping.capability, "getStationReading");
        assert_eq!(mapping.arguments.len(), 1);
        assert_eq!(mapping.arguments[0].input, "stationId");
        assert_eq!(mapping.arguments[0].request, "/body/stationId");
        let echo = |field: &str| Source::Echo {
            field: field.to_owned(),
        };
        assert_eq!(source_of(&mapping, "/header/reply_to"), &echo("/header/id"));
        assert_eq!(
            source_of(&mapping, "/header/sender"),
            &echo("/header/receiver")
        );
        assert_eq!(
            source_of(&mapping, "/header/receiver"),
            &echo("/header/sender")
        );
        assert_eq!(
            source_of(&mapping, "/header/conversation_id"),
            &echo("/header/conversation_id")
        );
        assert!(matches!(
            source_of(&mapping, "/header/type"),
            Source::Status { .. }
        ));
        assert!(matches!(
            source_of(&mapping, "/body/reading"),
            Source::OutputObject { .. }
        ));
        // The reply's own id and timestamp are never the query's.
        assert!(
            !mapping
                .response
                .iter()
                .any(|r| r.field == "/header/id" || r.field == "/header/timestamp"),
            "{mapping:#?}"
        );
        let handler = BuiltinProtocolReasoner
            .generate_sync(&doc, &capabilities(), Some(&mapping))
            .expect("generates");
        assert!(
            handler.compiled.is_none(),
            "the mapping runtime reads top-level fields only"
        );
    }

    #[tokio::test]
    async fn generated_handler_passes_its_test_cases_under_node() {
        if !node_available() {
            eprintln!("skipped: `node` is not installed");
            return;
        }
        let doc = ProtocolDoc::parse(text()).expect("parses");
        let handler = BuiltinProtocolReasoner
            .generate_handler(&doc, &capabilities(), None)
            .await
            .expect("generates");
        let report = verify::verify(&doc, &NodeRunner, &handler.source).await;
        assert!(
            report.passed(),
            "{}\n{}",
            report.failure_description(),
            handler.source
        );
        assert_eq!(report.cases.len(), 3);
        // A body that is not an object, and a header that is missing, are bad requests too.
        for request in [
            json!({"header": {"version": "1.0", "sender": "a", "receiver": "b", "type": "QUERY",
                "id": "q", "timestamp": "t", "content_type": "application/json"}, "body": "WS-101"}),
            json!({"body": {"stationId": "WS-101"}}),
        ] {
            let answer = NodeRunner
                .run(&handler.source, request.clone(), Fixtures::default())
                .await
                .expect("runs");
            assert_eq!(
                answer["body"]["status"]["code"], 400,
                "{request} → {answer}"
            );
            assert_eq!(answer["header"]["type"], "ERROR", "{answer}");
        }
    }

    /// An INFORM answered by an ACKNOWLEDGE plans the same way, given a capability that records
    /// what it is told (declared here: the example's bindings are read-only lookups).
    #[tokio::test]
    async fn inform_is_acknowledged() {
        let header = |types: Value, reply: bool| {
            let mut props = json!({
                "version": {"type": "string", "const": "1.0"},
                "sender": {"type": "string"}, "receiver": {"type": "string"},
                "type": {"type": "string", "enum": types},
                "id": {"type": "string"}, "content_type": {"type": "string", "const": "application/json"}
            });
            let mut required = vec!["version", "sender", "receiver", "type", "content_type"];
            if reply {
                props["reply_to"] = json!({"type": "string"});
                required.push("reply_to");
            } else {
                required.push("id");
            }
            json!({"type": "object", "properties": props, "required": required})
        };
        let text = protocol(
            json!({"type": "object", "required": ["header", "body"], "properties": {
                "header": header(json!(["INFORM"]), false),
                "body": {"type": "object", "required": ["stationId", "temperatureC"], "properties": {
                    "stationId": {"type": "string"}, "temperatureC": {"type": "number"}}}}}),
            json!({"type": "object", "required": ["header", "body"], "properties": {
                "header": header(json!(["ACKNOWLEDGE", "ERROR"]), true),
                "body": {"type": "object", "required": ["status"], "properties": {
                    "status": {"type": "object", "required": ["code"], "properties": {
                        "code": {"type": "integer"}, "message": {"type": "string"}}},
                    "receiptId": {"type": "string"}}}}}),
            Some(json!([{
                "name": "reading recorded",
                "request": {"header": {"version": "1.0", "sender": "a", "receiver": "b",
                    "type": "INFORM", "id": "i-1", "content_type": "application/json"},
                    "body": {"stationId": "WS-101", "temperatureC": 6.5}},
                "expectedResponse": {"header": {"type": "ACKNOWLEDGE", "reply_to": "i-1",
                    "sender": "b", "receiver": "a"},
                    "body": {"status": {"code": 200}, "receiptId": "r-9"}},
                "fixtures": {"recordObservation": [{
                    "args": {"stationId": "WS-101", "temperatureC": 6.5},
                    "result": {"receiptId": "r-9"}}]}
            }])),
        );
        let capability = DeclaredCapability {
            name: "recordObservation".into(),
            description: "Records a station's observation and returns a receipt.".into(),
            input_schema: json!({"type": "object", "required": ["stationId", "temperatureC"],
                "properties": {"stationId": {"type": "string"}, "temperatureC": {"type": "number"}}}),
            output_schema: json!({"type": "object", "required": ["receiptId"],
                "properties": {"receiptId": {"type": "string"}}}),
            read_only: false,
        };
        let doc = ProtocolDoc::parse(text).expect("parses");
        let handler = BuiltinProtocolReasoner
            .generate_handler(&doc, &[capability], None)
            .await
            .expect("an INFORM protocol is served");
        if !node_available() {
            eprintln!("skipped running it: `node` is not installed");
            return;
        }
        let report = verify::verify(&doc, &NodeRunner, &handler.source).await;
        assert!(
            report.passed(),
            "{}\n{}",
            report.failure_description(),
            handler.source
        );
    }
}

#[test]
fn a_document_with_example_messages_instead_of_schemas_is_accepted() {
    // AgentConnect's style: placeholders instead of JSON Schemas (negotiator/tests/documents).
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/documents");
    let text = std::fs::read_to_string(corpus.join("agentconnect-catalogue.md")).expect("corpus");
    let Evaluation::Accept { mapping } = evaluate(&text) else {
        panic!("the catalogue document is served by getProductInfo");
    };
    assert_eq!(mapping.capability, "getProductInfo");
    let source = |field: &str| {
        mapping
            .response
            .iter()
            .find(|r| r.field == field)
            .map(|r| r.source.clone())
            .unwrap_or_else(|| panic!("{field} is mapped"))
    };
    // The example's literal message type is the response's constant, not an echo of the request's.
    assert_eq!(
        source("messageType"),
        Source::Constant {
            value: json!("ProductQueryResponse")
        }
    );
    assert_eq!(
        source("messageId"),
        Source::Echo {
            field: "messageId".into()
        }
    );
}
