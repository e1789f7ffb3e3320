//! The built-in protocol reasoner on the corpus of documents as other agents write them
//! (`negotiator/tests/documents/`): each document's `evaluation` in its `NAME.expected.json` is
//! what the reasoner decides with the example capabilities. A counter-proposal's summary is
//! checked line by line, and its text must be one the reasoner accepts, with nothing unclear,
//! whose test cases (the document's, or written by the provider) pass against the handler
//! generated for it.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use parley_anp::verify::{self, VerificationReport};
use parley_anp::{Fixtures, HandlerRunner, ProtocolDoc};
use parley_reasoner::mapping::{Mapping, serve};
use parley_reasoner::{BuiltinProtocolReasoner, Evaluation, ProtocolReasoner};
use serde_json::{Value, json};

use crate::support::{capabilities, declared_capabilities, product};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/documents")
}

fn document(name: &str) -> ProtocolDoc {
    let text = std::fs::read_to_string(corpus().join(format!("{name}.md"))).expect("a document");
    ProtocolDoc::parse(text).expect("parses")
}

/// Runs a handler's compiled form, the mapping as JSON, answering its capability call from the
/// case's fixtures, or with the example capability itself for a case without fixtures (as the
/// provider's verification does): what the sandbox's mapping runtime does, without the sandbox.
struct MappingRunner;

#[async_trait]
impl HandlerRunner for MappingRunner {
    async fn run(
        &self,
        handler: &str,
        request: Value,
        fixtures: Fixtures,
    ) -> Result<Value, String> {
        let mapping: Mapping = serde_json::from_str(handler).map_err(|e| e.to_string())?;
        if !fixtures.is_empty() {
            return Ok(serve(&mapping, &request, |capability, args| {
                fixtures.answer(capability, &args)
            }));
        }
        // The call the handler makes, then its answer with the real result.
        let mut call = None;
        serve(&mapping, &request, |capability, args| {
            call = Some((capability.to_owned(), args));
            Err("not called yet".into())
        });
        let result = match call {
            Some((capability, args)) => capabilities()
                .invoke(&capability, args)
                .await
                .map_err(|e| e.to_string()),
            None => Ok(Value::Null),
        };
        Ok(serve(&mapping, &request, |_, _| result.clone()))
    }
}

/// `doc`'s test cases run against the handler the built-in reasoner generates for it.
async fn verified(doc: &ProtocolDoc) -> VerificationReport {
    let handler = BuiltinProtocolReasoner
        .generate_handler(doc, &declared_capabilities(), None)
        .await
        .expect("a handler");
    let compiled = handler.compiled.expect("a compiled form").to_string();
    verify::verify(doc, &MappingRunner, &compiled).await
}

#[tokio::test]
async fn every_corpus_document_is_evaluated_as_expected() {
    let mut names: Vec<String> = std::fs::read_dir(corpus())
        .expect("the corpus")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .expect("a name")
                .to_owned()
        })
        .collect();
    names.sort();
    let mut checked = 0;
    for name in names {
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(corpus().join(format!("{name}.expected.json")))
                .expect("expected.json"),
        )
        .expect("JSON");
        let want = &expected["evaluation"];
        assert!(
            want.is_object(),
            "{name}: its expected.json has an evaluation"
        );
        let doc = document(&name);
        let evaluation = BuiltinProtocolReasoner.evaluate_sync(&doc, &declared_capabilities());
        assert_eq!(
            evaluation.decision(),
            want["decision"],
            "{name}: {evaluation:?}"
        );
        match evaluation {
            Evaluation::Accept { mapping } => {
                assert_eq!(mapping.capability, want["capability"], "{name}");
            }
            Evaluation::Counter { text, summary } => {
                let lines: Vec<&str> = summary.lines().collect();
                assert_eq!(json!(lines), want["summary"], "{name}: the summary");
                let counter = ProtocolDoc::parse(text.clone()).expect("the counter parses");
                assert!(
                    counter.unclear().is_empty(),
                    "{name}: {:?}",
                    counter.unclear()
                );
                assert!(counter.inferred().is_empty(), "{name}: JSON Schemas");
                assert_eq!(
                    json!(counter.test_cases().len()),
                    want["counter_cases"],
                    "{name}: the counter's test cases"
                );
                assert!(
                    matches!(
                        BuiltinProtocolReasoner.evaluate_sync(&counter, &declared_capabilities()),
                        Evaluation::Accept { .. }
                    ),
                    "{name}: the provider accepts its own counter-proposal"
                );
                let report = verified(&counter).await;
                assert!(report.passed(), "{name}: {}", report.failure_description());
            }
            Evaluation::Reject { reason } => {
                for part in want["reason_contains"].as_array().expect("reason parts") {
                    let part = part.as_str().expect("text");
                    assert!(reason.contains(part), "{name}: {reason}");
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 8, "the corpus has documents ({checked})");
}

#[tokio::test]
async fn test_cases_for_a_document_without_any_are_written_from_the_capability() {
    // AgentConnect usually sends no test cases; the provider can propose these in a
    // `testCasesNegotiation` message.
    let doc = product();
    let cases = BuiltinProtocolReasoner.generate_test_cases(&doc, &declared_capabilities());
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["found", "not found", "missing input"]);
    assert_eq!(
        cases[0].request,
        json!({"messageId": "test-messageId", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"})
    );
    assert_eq!(cases[0].expected_response["status"]["code"], 200);
    assert_eq!(cases[1].expected_response["status"]["code"], 404);
    assert_eq!(cases[1].expected_response["productInfo"], Value::Null);
    assert_eq!(cases[2].expected_response["status"]["code"], 400);
    // A protocol whose response cannot say "not found" (AgentConnect's `productInfo` is never
    // null) gets only the cases its handler passes.
    let catalogue = document("agentconnect-catalogue");
    assert!(catalogue.test_cases().is_empty());
    let only: Vec<String> = BuiltinProtocolReasoner
        .generate_test_cases(&catalogue, &declared_capabilities())
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(only, ["found"]);
    // Written as a test cases section, they read back as they are.
    let body = parley_reasoner::draft::render_test_cases(&cases);
    assert_eq!(parley_anp::parse_test_cases(&body).expect("parses"), cases);
    // And the provider's own handler passes them.
    let handler = BuiltinProtocolReasoner
        .generate_handler(&doc, &declared_capabilities(), None)
        .await
        .expect("a handler");
    let compiled = handler.compiled.expect("compiled").to_string();
    let report = verify::verify_cases(&doc, &cases, &MappingRunner, &compiled).await;
    assert!(report.passed(), "{}", report.failure_description());
    // A document no capability serves gets none.
    let weather = document("headings-and-prose-cases");
    assert!(
        BuiltinProtocolReasoner
            .generate_test_cases(&weather, &declared_capabilities())
            .is_empty()
    );
}

#[test]
fn a_near_miss_is_countered_in_the_providers_terms() {
    let Evaluation::Counter { text, .. } =
        BuiltinProtocolReasoner.evaluate_sync(&document("near-miss-sku"), &declared_capabilities())
    else {
        panic!("a counter-proposal");
    };
    let counter = ProtocolDoc::parse(text).expect("parses");
    let request = counter.request_schema();
    assert!(request["properties"].get("sku").is_none());
    assert_eq!(
        request["required"],
        json!(["messageId", "action", "productId"])
    );
    // The differently named action and the extra optional fields stay as proposed.
    assert_eq!(request["properties"]["action"]["const"], "getProduct");
    assert!(request["properties"].get("locale").is_some());
    assert!(
        counter.response_schema()["properties"]
            .get("warrantyYears")
            .is_some()
    );
    let case = &counter.test_cases()[0];
    assert_eq!(case.request["productId"], "P12345");
    assert_eq!(
        case.expected_response["product"],
        json!({"productId": "P12345"})
    );
}
