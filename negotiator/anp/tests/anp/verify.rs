//! Verification: a protocol's test cases through a fake runner, with precise failure reports.

use async_trait::async_trait;
use parley_anp::verify::{self, compare};
use parley_anp::{Fixtures, HandlerRunner, MatchMode};
use serde_json::{Value, json};

use crate::support::example;

// --- verification -----------------------------------------------------------------------------

/// A Rust stand-in for the sandbox: "runs" a handler named by `handler` — `good` behaves like the
/// generated product handler, `wrong-code` answers 200 for everything, `broken` throws.
#[derive(Debug)]
struct FakeRunner;

#[async_trait]
impl HandlerRunner for FakeRunner {
    async fn run(
        &self,
        handler: &str,
        request: Value,
        fixtures: Fixtures,
    ) -> Result<Value, String> {
        let id = request.get("messageId").cloned().unwrap_or(json!(""));
        let Some(product_id) = request.get("productId") else {
            return Ok(
                json!({"messageId": id, "type": "RESPONSE", "status": {"code": 400, "message": "missing productId"}, "productInfo": null}),
            );
        };
        let result = fixtures.answer("getProductInfo", &json!({"productId": product_id}));
        match handler {
            "good" => Ok(match result {
                Ok(Value::Null) => {
                    json!({"messageId": id, "type": "RESPONSE", "status": {"code": 404, "message": "Product not found"}, "productInfo": null})
                }
                Ok(p) => {
                    json!({"messageId": id, "type": "RESPONSE", "status": {"code": 200, "message": "Success"}, "productInfo": {
                        "productId": p["productId"], "productName": p["productName"],
                        "productDescription": p["productDescription"], "price": p["price"], "currency": p["currency"]
                    }})
                }
                Err(e) => {
                    json!({"messageId": id, "type": "RESPONSE", "status": {"code": 500, "message": e}})
                }
            }),
            "wrong-code" => Ok(
                json!({"messageId": id, "type": "RESPONSE", "status": {"code": 200, "message": "Success"}, "productInfo": null}),
            ),
            _ => Err("ReferenceError: hndle is not defined".into()),
        }
    }
}

#[tokio::test]
async fn verification_reports_pass_and_precise_failures() {
    let doc = example();
    let report = verify::verify(&doc, &FakeRunner, "good").await;
    assert!(report.passed(), "{}", report.failure_description());
    assert_eq!(report.summary(), "3/3 test cases passed");
    assert!(report.failure_description().is_empty());

    let report = verify::verify(&doc, &FakeRunner, "wrong-code").await;
    assert!(!report.passed());
    let failed: Vec<&str> = report.failed().map(|c| c.name.as_str()).collect();
    // The fake answers a request without productId itself, so that case still passes.
    assert_eq!(failed, ["known product", "unknown product"]);
    let known = &report.cases[0];
    assert!(
        known
            .failures
            .iter()
            .any(|f| f.starts_with("at /productInfo: expected {")),
        "{:?}",
        known.failures
    );
    assert_eq!(
        report.cases[1].failures,
        ["at /status/code: expected 404, got 200"]
    );
    let description = report.failure_description();
    assert!(
        description.starts_with("# Error Description"),
        "{description}"
    );
    assert!(description.contains("`unknown product`"), "{description}");

    let report = verify::verify(&doc, &FakeRunner, "broken").await;
    assert_eq!(
        report.cases[0].failures,
        ["the handler failed: ReferenceError: hndle is not defined"]
    );
}

#[tokio::test]
async fn schema_violations_fail_even_when_the_expectation_matches() {
    struct Sloppy;
    #[async_trait]
    impl HandlerRunner for Sloppy {
        async fn run(&self, _: &str, request: Value, _: Fixtures) -> Result<Value, String> {
            // Right fields for the expectation, but `status.message` missing and `type` wrong.
            Ok(
                json!({"messageId": request["messageId"], "type": "RESPONSE", "status": {"code": 400}, "extra": true}),
            )
        }
    }
    let doc = example();
    let case = doc.test_cases()[2].clone();
    let report = verify::verify_cases(&doc, &[case], &Sloppy, "h").await;
    assert!(!report.passed());
    assert!(
        report.cases[0]
            .failures
            .iter()
            .any(|f| f.contains("response schema violation at /status")),
        "{:?}",
        report.cases[0].failures
    );
    assert!(compare(&json!({"a": 1}), &json!({"a": 1.0}), MatchMode::Exact).is_empty());
}
