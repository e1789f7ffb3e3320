//! The `http` binding against a real axum server on 127.0.0.1:0: path templates, query, body,
//! headers, 404 mapping, timeout, non-2xx, invalid results, and the load-time checks.

use std::path::Path;
use std::time::Duration;

use axum::extract::{OriginalUri, Path as UrlPath};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use parley_capabilities::{Capabilities, FileFormat};
use serde_json::{Value, json};

/// Starts the fake API and returns its base URL. The task ends with the test's runtime.
async fn spawn_api() -> String {
    async fn echo(uri: OriginalUri, headers: HeaderMap) -> Json<Value> {
        Json(json!({
            "path": uri.path(),
            "query": uri.query(),
            "apiKey": headers.get("x-api-key").and_then(|v| v.to_str().ok()),
        }))
    }
    async fn product(UrlPath(id): UrlPath<String>) -> Result<Json<Value>, StatusCode> {
        match id.as_str() {
            "P1" => Ok(Json(json!({"data": {"name": "Laptop", "price": 1299.99}}))),
            _ => Err(StatusCode::NOT_FOUND),
        }
    }
    async fn create(Json(body): Json<Value>) -> Json<Value> {
        Json(json!({ "received": body }))
    }
    async fn slow() -> Json<Value> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Json(json!({}))
    }
    let app = Router::new()
        .route("/echo/{id}", get(echo))
        .route("/products/{id}", get(product))
        .route("/orders", post(create))
        .route("/slow", get(slow))
        .route("/bad", get(|| async { Json(json!({"wrong": true})) }))
        .route("/text", get(|| async { "plain text" }))
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    format!("http://{addr}")
}

const ID_INPUT: &str = r#"input_schema = { type = "object", properties = { id = { type = "string" }, q = { type = "string" }, tags = { type = "array", items = { type = "string" } } }, required = ["id"] }"#;

fn file(base: &str) -> String {
    format!(
        r#"
[agent]
name = "http test"
description = "http bindings"

[[capabilities]]
name = "echo"
description = "echo"
{ID_INPUT}
output_schema = {{ type = "object" }}
binding = {{ type = "http", url = "{base}/echo/{{id}}", query = ["q", "tags"], headers = {{ X-Api-Key = "key-${{API_KEY}}" }} }}

[[capabilities]]
name = "product"
description = "product or null"
{ID_INPUT}
output_schema = {{ type = ["object", "null"], required = ["name"] }}
binding = {{ type = "http", url = "{base}/products/{{id}}", result_pointer = "/data", not_found = "null" }}

[[capabilities]]
name = "productStrict"
description = "product or not_found"
{ID_INPUT}
output_schema = {{ type = "object", required = ["name"] }}
binding = {{ type = "http", url = "{base}/products/{{id}}", result_pointer = "/data" }}

[[capabilities]]
name = "create"
description = "post an order"
input_schema = {{ type = "object", properties = {{ item = {{ type = "string" }}, qty = {{ type = "integer" }}, note = {{ type = "string" }} }}, required = ["item", "qty"] }}
output_schema = {{ type = "object", required = ["received"] }}
binding = {{ type = "http", method = "POST", url = "{base}/orders", body = ["item", "qty"] }}

[[capabilities]]
name = "slow"
description = "too slow"
input_schema = {{ type = "object" }}
output_schema = {{}}
binding = {{ type = "http", url = "{base}/slow", timeout_ms = 200 }}

[[capabilities]]
name = "bad"
description = "returns the wrong shape"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object", required = ["name"] }}
binding = {{ type = "http", url = "{base}/bad" }}

[[capabilities]]
name = "text"
description = "returns text"
input_schema = {{ type = "object" }}
output_schema = {{}}
binding = {{ type = "http", url = "{base}/text" }}

[[capabilities]]
name = "fail"
description = "returns 500"
input_schema = {{ type = "object" }}
output_schema = {{}}
binding = {{ type = "http", url = "{base}/fail" }}
"#
    )
}

fn env(name: &str) -> Option<String> {
    (name == "API_KEY").then(|| "s3cret".to_owned())
}

async fn loaded() -> Capabilities {
    let base = spawn_api().await;
    Capabilities::parse(
        &file(&base),
        FileFormat::Toml,
        Path::new("."),
        "http.toml",
        env,
    )
    .expect("valid http capabilities")
}

#[tokio::test]
async fn path_template_is_percent_encoded_and_query_and_headers_are_sent() {
    let caps = loaded().await;
    let out = caps
        .invoke(
            "echo",
            json!({"id": "a b/c?d", "q": "x&y=z", "tags": ["t1", "t2"]}),
        )
        .await
        .expect("echo works");
    assert_eq!(
        out["path"], "/echo/a%20b%2Fc%3Fd",
        "one path segment, encoded"
    );
    assert_eq!(out["query"], "q=x%26y%3Dz&tags=t1&tags=t2");
    assert_eq!(out["apiKey"], "key-s3cret", "env resolved at load time");

    let out = caps
        .invoke("echo", json!({"id": "plain"}))
        .await
        .expect("echo works");
    assert_eq!(
        out["query"],
        Value::Null,
        "no dangling `?` without query fields"
    );
}

#[tokio::test]
async fn path_placeholders_cannot_leave_their_segment() {
    let caps = loaded().await;
    for id in ["..", ".", ""] {
        let err = caps
            .invoke("echo", json!({ "id": id }))
            .await
            .expect_err("a dot segment or an empty one is refused");
        assert_eq!(err.code(), "invalid_arguments", "{id:?}: {err}");
        assert!(err.to_string().contains("change the URL's path"), "{err}");
    }
    // Dots inside a value are ordinary characters of one segment.
    let out = caps
        .invoke("echo", json!({"id": "..x", "q": ".."}))
        .await
        .expect("a value that is not a dot segment is fine, and the query is not a path");
    assert_eq!(out["path"], "/echo/..x");
    assert_eq!(out["query"], "q=..");
}

#[tokio::test]
async fn result_pointer_and_404_mapping() {
    let caps = loaded().await;
    let found = caps
        .invoke("product", json!({"id": "P1"}))
        .await
        .expect("P1 exists");
    assert_eq!(found, json!({"name": "Laptop", "price": 1299.99}));
    let missing = caps
        .invoke("product", json!({"id": "P9"}))
        .await
        .expect("404 maps to null");
    assert_eq!(missing, Value::Null);
    let err = caps
        .invoke("productStrict", json!({"id": "P9"}))
        .await
        .expect_err("404 is an error by default");
    assert_eq!(err.code(), "not_found");
}

#[tokio::test]
async fn body_fields_are_sent_as_json() {
    let caps = loaded().await;
    let out = caps
        .invoke(
            "create",
            json!({"item": "P1", "qty": 2, "note": "not sent"}),
        )
        .await
        .expect("post works");
    assert_eq!(out, json!({"received": {"item": "P1", "qty": 2}}));
}

#[tokio::test]
async fn timeouts_errors_and_invalid_results_are_typed() {
    let caps = loaded().await;
    let started = std::time::Instant::now();
    let err = caps.invoke("slow", json!({})).await.expect_err("timeout");
    assert_eq!(err.code(), "timeout");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the timeout was honoured"
    );

    let err = caps.invoke("bad", json!({})).await.expect_err("bad shape");
    assert_eq!(err.code(), "invalid_result");
    assert!(err.to_string().contains("name"), "{err}");

    let err = caps.invoke("text", json!({})).await.expect_err("not json");
    assert_eq!(err.code(), "binding_failed");
    assert!(err.to_string().contains("not JSON"), "{err}");

    let err = caps.invoke("fail", json!({})).await.expect_err("500");
    assert_eq!(err.code(), "binding_failed");
    assert!(err.to_string().contains("500"), "{err}");
}

#[tokio::test]
async fn connection_refused_is_binding_failed() {
    // Bind then drop a listener to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let caps = Capabilities::parse(
        &file(&format!("http://127.0.0.1:{port}")),
        FileFormat::Toml,
        Path::new("."),
        "http.toml",
        env,
    )
    .expect("valid");
    let err = caps.invoke("bad", json!({})).await.expect_err("refused");
    assert_eq!(err.code(), "binding_failed");
}

/// Loads one http capability whose binding is `binding`.
fn load_one(
    binding: &str,
    env_fn: fn(&str) -> Option<String>,
) -> Result<Capabilities, parley_capabilities::LoadError> {
    let text = format!(
        r#"
[agent]
name = "a"
description = "b"
[[capabilities]]
name = "c"
description = "d"
input_schema = {{ type = "object", properties = {{ id = {{ type = "string" }}, opt = {{ type = "string" }} }}, required = ["id"] }}
output_schema = {{}}
binding = {{ type = "http", {binding} }}
"#
    );
    Capabilities::parse(&text, FileFormat::Toml, Path::new("."), "h.toml", env_fn)
}

#[test]
fn http_bindings_are_checked_at_load_time() {
    let cases: &[(&str, &str)] = &[
        (
            r#"url = "http://h/{sku}""#,
            "capability `c`, field `binding.url`: placeholder `{sku}` is not a property of input_schema",
        ),
        (
            r#"url = "http://h/{opt}""#,
            "placeholder `{opt}` must be listed in input_schema.required",
        ),
        (
            r#"url = "http://h/{id""#,
            "field `binding.url`: unclosed `{`",
        ),
        (
            r#"url = "http://h/${MISSING}""#,
            "field `binding.url`: environment variable `MISSING` is not set",
        ),
        (
            r#"url = "ftp://h/x""#,
            "must be an http:// or https:// URL with a host",
        ),
        (
            r#"url = "/relative/{id}""#,
            "field `binding.url`: not a valid URL",
        ),
        (
            r#"url = "http://h/", method = "BREW""#,
            "field `binding.method`: unsupported method `BREW`",
        ),
        (
            r#"url = "http://h/", query = ["nope"]"#,
            "field `binding.query`: `nope` is not a property of input_schema",
        ),
        (
            r#"url = "http://h/", method = "POST", body = ["nope"]"#,
            "field `binding.body`: `nope` is not a property of input_schema",
        ),
        (
            r#"url = "http://h/", body = ["id"]"#,
            "field `binding.body`: a GET request cannot carry a body",
        ),
        (
            r#"url = "http://h/", headers = { Authorization = "Bearer ${TOKEN}" }"#,
            "field `binding.headers.Authorization`: environment variable `TOKEN` is not set",
        ),
        (
            r#"url = "http://h/", headers = { "bad header" = "x" }"#,
            "`bad header` is not a valid header name",
        ),
        (
            r#"url = "http://h/", timeout_ms = 0"#,
            "field `binding.timeout_ms`: 0 is out of range",
        ),
        (
            r#"url = "http://h/", result_pointer = "data""#,
            "field `binding.result_pointer`: `data` is not a JSON pointer",
        ),
        (
            r#"url = "http://h/", not_found = "ignore""#,
            "field `binding.not_found`: unknown value `ignore`",
        ),
    ];
    for (binding, expected) in cases {
        let message = load_one(binding, |_| None)
            .expect_err("must be refused")
            .to_string();
        assert!(
            message.contains(expected),
            "binding {binding}: message {message:?} does not contain {expected:?}"
        );
    }
    // The same header loads once the variable is provided.
    load_one(
        r#"url = "http://h/", headers = { Authorization = "Bearer ${TOKEN}" }"#,
        |_| Some("t".into()),
    )
    .expect("TOKEN is set");
}
