//! Loading capabilities files (valid and invalid, each refusal's message checked), dataset
//! lookups, what an installed observer is told of calls, and the shipped example file.

use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use parley_capabilities::{
    Capabilities, CapabilityError, FileFormat, Invocation, InvokeObserver, LoadError,
};
use serde_json::{Value, json};

const PRODUCTS: &str = r#"[
  {"productId": "P1", "productName": "Laptop", "price": 1299.99, "currency": "USD", "secret": "x"},
  {"productId": "P2", "productName": "Mouse", "price": 39.5, "currency": "USD", "secret": "y"}
]"#;

/// A directory with `products.json` in it, standing in for the capabilities file's directory.
fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("products.json"), PRODUCTS).expect("write dataset");
    dir
}

fn no_env(_: &str) -> Option<String> {
    None
}

const AGENT: &str = "[agent]\nname = \"Test agent\"\ndescription = \"For tests.\"\n";

/// One dataset capability; `binding_extra` is appended to its binding table and `extra` to the
/// file, so each test changes one thing.
fn product_file(binding_extra: &str, extra: &str) -> String {
    format!(
        r#"{AGENT}
[[capabilities]]
name = "getProductInfo"
description = "Product by id."
read_only = true
input_schema = {{ type = "object", properties = {{ productId = {{ type = "string" }} }}, required = ["productId"] }}
output_schema = '''{{
  "type": ["object", "null"],
  "properties": {{
    "productId": {{"type": "string"}}, "productName": {{"type": "string"}},
    "price": {{"type": "number"}}, "currency": {{"type": "string"}}
  }},
  "required": ["productId", "productName", "price", "currency"]
}}'''
[capabilities.binding]
type = "dataset"
file = "products.json"
key = "productId"
{binding_extra}
{extra}"#
    )
}

fn load_toml(text: &str, dir: &Path) -> Result<Capabilities, LoadError> {
    Capabilities::parse(text, FileFormat::Toml, dir, "test.toml", no_env)
}

/// Asserts the text is refused with a message containing every fragment.
#[track_caller]
fn check_refused(text: &str, fragments: &[&str]) {
    let dir = data_dir();
    let err = load_toml(text, dir.path()).expect_err("the file must be refused");
    let message = err.to_string();
    for f in fragments {
        assert!(
            message.contains(f),
            "error message {message:?} does not contain {f:?}"
        );
    }
}

#[test]
fn valid_toml_file_loads_with_description_and_summary() {
    let dir = data_dir();
    let caps = load_toml(&product_file("not_found = \"null\"", ""), dir.path()).expect("valid");
    assert_eq!(caps.agent().name, "Test agent");
    assert_eq!(caps.len(), 1);
    let cap = caps.get("getProductInfo").expect("declared");
    assert!(cap.read_only());
    assert_eq!(cap.binding_kind(), "dataset");
    let described = caps.describe();
    assert_eq!(described[0].name, "getProductInfo");
    assert_eq!(described[0].input_schema["required"], json!(["productId"]));
    let summary = caps.summary();
    assert!(summary.contains("Test agent: For tests."), "{summary}");
    assert!(
        summary.contains("- getProductInfo(productId): Product by id. [read-only]"),
        "{summary}"
    );
}

#[test]
fn valid_json_file_loads_from_disk() {
    let dir = data_dir();
    let file = json!({
        "agent": {"name": "J", "description": "JSON agent"},
        "capabilities": [{
            "name": "lookup",
            "description": "d",
            "input_schema": {"type": "object", "properties": {"productId": {"type": "string"}}, "required": ["productId"]},
            "output_schema": {"type": "object"},
            "binding": {"type": "dataset", "file": "products.json", "key": "productId"}
        }]
    });
    let path = dir.path().join("caps.json");
    std::fs::write(&path, file.to_string()).expect("write");
    let caps = Capabilities::load(&path, no_env).expect("valid JSON file");
    assert!(
        !caps.get("lookup").expect("declared").read_only(),
        "read_only defaults to false"
    );
}

#[test]
fn unsupported_extension_and_missing_file_are_refused() {
    let dir = data_dir();
    let err = Capabilities::load(&dir.path().join("caps.yaml"), no_env).expect_err("yaml");
    assert!(
        err.to_string()
            .contains("unsupported capabilities file extension")
    );
    let err = Capabilities::load(&dir.path().join("missing.toml"), no_env).expect_err("missing");
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[test]
fn syntax_and_shape_errors_name_the_key() {
    check_refused("[agent\nname=1", &["test.toml", "TOML parse error"]);
    check_refused(
        &product_file("", "").replace("read_only = true", "read_only = true\ncolour = 1"),
        &["unknown field `colour`"],
    );
    check_refused(
        &product_file("", "").replace("type = \"dataset\"", "type = \"ftp\""),
        &["unknown variant `ftp`"],
    );
    check_refused(
        &product_file("projekt = true", ""),
        &["unknown field `projekt`"],
    );
}

#[test]
fn agent_fields_must_not_be_empty() {
    check_refused(
        &product_file("", "").replace("name = \"Test agent\"", "name = \" \""),
        &["agent, field `agent.name`: must not be empty"],
    );
}

#[test]
fn duplicate_capability_names_are_refused() {
    let mut text = product_file("", "");
    let second = text[text.find("[[capabilities]]").expect("one capability")..].to_owned();
    text.push_str(&second);
    check_refused(
        &text,
        &[
            "capability #1, field `name`",
            "duplicate capability name `getProductInfo` (already declared by capability #0)",
        ],
    );
}

#[test]
fn invalid_names_and_descriptions_are_refused() {
    check_refused(
        &product_file("", "").replace("name = \"getProductInfo\"", "name = \"get product\""),
        &[
            "capability #0, field `name`",
            "`get product` is not a valid capability name",
        ],
    );
    check_refused(
        &product_file("", "").replace("\"Product by id.\"", "\"\""),
        &["capability `getProductInfo`, field `description`: must not be empty"],
    );
}

#[test]
fn invalid_schemas_are_refused() {
    check_refused(
        &product_file("", "").replace("type = \"object\", properties", "type = 12, properties"),
        &["field `input_schema`", "invalid JSON Schema"],
    );
    check_refused(
        &product_file("", "").replace(
            "type = \"object\", properties",
            "type = \"array\", properties",
        ),
        &["field `input_schema`: must declare `\"type\": \"object\"`"],
    );
    check_refused(
        &product_file("", "").replace("\"type\": [\"object\", \"null\"]", "\"type\": \"thing\""),
        &["field `output_schema`", "invalid JSON Schema"],
    );
    check_refused(
        &product_file("", "").replace("'''{", "'''{{"),
        &["field `output_schema`: is a string but not valid JSON text"],
    );
}

#[test]
fn dataset_problems_are_refused_precisely() {
    check_refused(
        &product_file("", "").replace("products.json", "nope.json"),
        &[
            "capability `getProductInfo`, field `binding.file`",
            "cannot read dataset file",
            "nope.json",
        ],
    );
    check_refused(
        &product_file("input = \"sku\"", ""),
        &["field `binding.input`: input field `sku` is not a property of input_schema"],
    );
    check_refused(
        &product_file("", "").replace("required = [\"productId\"] }", "required = [] }"),
        &["input field `productId` must be listed in input_schema.required"],
    );
    check_refused(
        &product_file("not_found = \"maybe\"", ""),
        &["field `binding.not_found`: unknown value `maybe`"],
    );
    check_refused(
        &product_file("not_found = { result = { found = false } }", ""),
        &[
            "field `binding.not_found`: the not-found result {\"found\":false} does not match output_schema",
        ],
    );

    let dir = data_dir();
    std::fs::write(dir.path().join("products.json"), r#"{"not": "an array"}"#).expect("write");
    let err = load_toml(&product_file("", ""), dir.path()).expect_err("not an array");
    assert!(
        err.to_string()
            .contains("must hold a JSON array of records"),
        "{err}"
    );

    std::fs::write(
        dir.path().join("products.json"),
        "[{\"productId\": \"P1\"}, {}]",
    )
    .expect("write");
    let err = load_toml(&product_file("", ""), dir.path()).expect_err("keyless record");
    // The first record is checked against the output schema before the second is reached.
    assert!(err.to_string().contains("record #0"), "{err}");
    assert!(
        err.to_string().contains("does not match output_schema"),
        "{err}"
    );

    let dup = r#"[{"productId": "P1", "productName": "a", "price": 1, "currency": "USD"},
                  {"productId": "P1", "productName": "b", "price": 2, "currency": "USD"}]"#;
    std::fs::write(dir.path().join("products.json"), dup).expect("write");
    let err = load_toml(&product_file("", ""), dir.path()).expect_err("duplicate key");
    assert!(
        err.to_string()
            .contains("field `binding.key`: record #1 of ")
            && err
                .to_string()
                .contains("repeats key \"P1\" (first at record #0)"),
        "{err}"
    );

    std::fs::write(
        dir.path().join("products.json"),
        r#"[{"productName": "x"}]"#,
    )
    .expect("write");
    let err = load_toml(&product_file("", ""), dir.path()).expect_err("missing key field");
    assert!(
        err.to_string()
            .contains("has no string, number or boolean field `productId`"),
        "{err}"
    );
}

#[test]
fn projection_needs_output_properties() {
    let text = product_file("project = true", "");
    let start = text.find("output_schema = '''").expect("output schema");
    let end = text[start..].find("}'''").expect("end of schema") + start + 4;
    let text = format!(
        "{}output_schema = {{ type = \"object\" }}{}",
        &text[..start],
        &text[end..]
    );
    check_refused(
        &text,
        &["field `binding.project`: projection needs top-level `properties` in output_schema"],
    );
}

#[tokio::test]
async fn dataset_lookup_found_projected_and_not_found_policies() {
    let dir = data_dir();
    let caps = load_toml(
        &product_file("project = true\nnot_found = \"null\"", ""),
        dir.path(),
    )
    .expect("valid");
    let found = caps
        .invoke("getProductInfo", json!({"productId": "P1"}))
        .await
        .expect("P1 exists");
    assert_eq!(
        found,
        json!({"productId": "P1", "productName": "Laptop", "price": 1299.99, "currency": "USD"}),
        "projection drops `secret`"
    );
    let missing = caps
        .invoke("getProductInfo", json!({"productId": "P99999"}))
        .await
        .expect("not found maps to null");
    assert_eq!(missing, Value::Null);

    // Without projection the whole record comes back.
    let caps = load_toml(&product_file("", ""), dir.path()).expect("valid");
    let found = caps
        .invoke("getProductInfo", json!({"productId": "P2"}))
        .await
        .expect("P2 exists");
    assert_eq!(found["secret"], "y");
    // Default not_found is a typed error.
    let err = caps
        .invoke("getProductInfo", json!({"productId": "P99999"}))
        .await
        .expect_err("typed not found");
    assert_eq!(err.code(), "not_found");
    assert!(matches!(err, CapabilityError::NotFound { .. }));

    // A configured result is returned as is.
    let text = product_file("not_found = { result = { found = false } }", "")
        .replace("\"type\": [\"object\", \"null\"]", "\"type\": \"object\"")
        .replace(
            "\"required\": [\"productId\", \"productName\", \"price\", \"currency\"]",
            "\"required\": []",
        );
    let caps = load_toml(&text, dir.path()).expect("valid");
    let missing = caps
        .invoke("getProductInfo", json!({"productId": "nope"}))
        .await
        .expect("configured result");
    assert_eq!(missing, json!({"found": false}));
}

#[tokio::test]
async fn invoke_rejects_unknown_capabilities_and_bad_arguments() {
    let dir = data_dir();
    let caps = load_toml(&product_file("", ""), dir.path()).expect("valid");
    let err = caps
        .invoke("launchRocket", json!({}))
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), "unknown_capability");
    let err = caps
        .invoke("getProductInfo", json!({"productId": 5}))
        .await
        .expect_err("wrong type");
    assert_eq!(err.code(), "invalid_arguments");
    assert!(err.to_string().contains("at /productId"), "{err}");
    let err = caps
        .invoke("getProductInfo", json!({}))
        .await
        .expect_err("missing field");
    assert_eq!(err.code(), "invalid_arguments");
}

/// What an observer was told: (capability, outcome) per call.
#[derive(Debug, Default)]
struct Seen(Mutex<Vec<(String, &'static str)>>);

impl InvokeObserver for Seen {
    fn invoked(&self, call: &Invocation<'_>) {
        assert!(call.elapsed.as_secs() < 10, "{call:?}");
        let mut seen = self.0.lock().expect("not poisoned");
        seen.push((call.capability.to_owned(), call.outcome));
    }
}

#[tokio::test]
async fn the_installed_observer_is_told_of_every_call_and_how_it_went() {
    let dir = data_dir();
    let caps = load_toml(&product_file("", ""), dir.path()).expect("valid");
    // Calls before one is installed are nobody's.
    let _ = caps
        .invoke("getProductInfo", json!({"productId": "P1"}))
        .await;
    let seen = Arc::new(Seen::default());
    assert!(caps.observe(seen.clone()));
    assert!(!caps.observe(Arc::new(Seen::default())), "installed once");
    for (name, args) in [
        ("getProductInfo", json!({"productId": "P1"})),
        ("getProductInfo", json!({"productId": "P99999"})),
        ("getProductInfo", json!({"productId": 5})),
        ("launchRocket", json!({})),
    ] {
        let _ = caps.invoke(name, args).await;
    }
    let seen = seen.0.lock().expect("not poisoned").clone();
    let expected = [
        ("getProductInfo", "ok"),
        ("getProductInfo", "not_found"),
        ("getProductInfo", "invalid_arguments"),
        ("launchRocket", "unknown_capability"),
    ];
    let expected: Vec<(String, &str)> = expected
        .iter()
        .map(|&(name, outcome)| (name.to_owned(), outcome))
        .collect();
    assert_eq!(seen, expected);
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/capabilities.toml")
}

#[tokio::test]
async fn example_file_loads_and_serves_seed_002() {
    let caps = Capabilities::load(&example_path(), no_env).expect("the shipped example is valid");
    let names = caps.names();
    assert_eq!(names, ["getOrderStatus", "getProductInfo"]);

    // Test case 1 of seed 002.
    let product = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("P12345 exists");
    assert_eq!(product["productName"], "High-performance Laptop");
    assert_eq!(
        product["productDescription"],
        "High-performance laptop with the latest processor and large memory capacity."
    );
    assert_eq!(product["price"], json!(1299.99));
    assert_eq!(product["currency"], "USD");
    assert!(
        product.get("supplier").is_none(),
        "internal fields are projected away"
    );
    // Test case 2 of seed 002.
    let missing = caps
        .invoke("getProductInfo", json!({"productId": "P99999"}))
        .await
        .expect("not found is null");
    assert_eq!(missing, Value::Null);

    let order = caps
        .invoke("getOrderStatus", json!({"orderId": "O-1001"}))
        .await
        .expect("order exists");
    assert_eq!(order["status"], "shipped");
    let err = caps
        .invoke("getOrderStatus", json!({"orderId": "O-9"}))
        .await
        .expect_err("unknown order");
    assert_eq!(err.code(), "not_found");
}
