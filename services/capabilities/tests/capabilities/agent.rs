//! The `agent` binding's own side: the load-time checks, the request it builds from the input,
//! and how it turns the peer's answer (through the protocol, in natural language, a failure, no
//! answer in time) into the capability's result. The peer here is the test's [`AgentCaller`],
//! which records each request and answers as told; the server's requester, talking to real
//! Parley agents, is tested end to end in `tests/tests/e2e/agent_binding.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_capabilities::{
    AgentAnswer, AgentCallError, AgentCaller, AgentFuture, AgentRequest, Capabilities, FileFormat,
    LoadError,
};
use serde_json::{Value, json};

/// Answers every request with `answer` (after `delay`) and keeps the requests.
#[derive(Debug)]
struct Peer {
    answer: Result<AgentAnswer, AgentCallError>,
    delay: Duration,
    asked: Mutex<Vec<AgentRequest>>,
}

impl Peer {
    fn answering(answer: Result<AgentAnswer, AgentCallError>) -> Arc<Peer> {
        Arc::new(Peer {
            answer,
            delay: Duration::ZERO,
            asked: Mutex::new(Vec::new()),
        })
    }

    fn asked(&self) -> Vec<AgentRequest> {
        self.asked.lock().expect("not poisoned").clone()
    }
}

impl AgentCaller for Peer {
    fn request(&self, request: AgentRequest) -> AgentFuture<'_> {
        self.asked.lock().expect("not poisoned").push(request);
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.answer.clone()
        })
    }
}

const PROTOCOL: &str = "# Requirements\n\nLook up a product.\n";

/// A capabilities file in `dir` with one agent-bound capability, `binding` being the binding
/// table's fields after `type`, `url` and `protocol`, and `output` its output schema.
fn load(dir: &Path, binding: &str, output: &str) -> Result<Capabilities, LoadError> {
    std::fs::write(dir.join("lookup.md"), PROTOCOL).expect("write protocol");
    let text = format!(
        r#"
[agent]
name = "front desk"
description = "Answers from the product desk."

[[capabilities]]
name = "getProductInfo"
description = "A product by id, from the product desk."
read_only = true
input_schema = {{ type = "object", properties = {{ productId = {{ type = "string" }} }}, required = ["productId"] }}
output_schema = {output}
binding = {{ type = "agent", url = "${{DESK}}", protocol = "lookup.md"{binding} }}
"#
    );
    Capabilities::parse(&text, FileFormat::Toml, dir, "front.toml", |k| match k {
        "DESK" => Some("desk.internal:8080".to_owned()),
        "DESK_TOKEN" => Some("parley_key_for_the_desk".to_owned()),
        "SPACED" => Some("two words".to_owned()),
        _ => None,
    })
}

fn loaded(binding: &str, output: &str) -> Capabilities {
    let dir = tempfile::tempdir().expect("temp dir");
    load(dir.path(), binding, output).expect("valid capabilities")
}

const PRODUCT_OR_NULL: &str = r#"{ type = ["object", "null"], required = ["productId"] }"#;

#[tokio::test]
async fn the_request_is_built_from_template_input_id_and_time() {
    let caps = loaded(
        r#", request = { type = "REQUEST", header = { version = "1.0" } }, input = "/body", message_id = "/header/id", timestamp = "/header/timestamp""#,
        "{}",
    );
    let capability = caps.get("getProductInfo").expect("declared");
    assert_eq!(capability.binding_kind(), "agent");
    let peer_agent = capability.peer_agent().expect("an agent binding");
    assert_eq!(peer_agent.url, "http://desk.internal:8080");
    assert_eq!(peer_agent.protocol, PROTOCOL);
    assert!(peer_agent.protocol_path.ends_with("lookup.md"));

    let peer = Peer::answering(Ok(AgentAnswer::Protocol(json!({"ok": true}))));
    assert!(caps.connect_agents(peer.clone()));
    assert!(!caps.connect_agents(Peer::answering(Ok(AgentAnswer::Protocol(Value::Null)))));
    let result = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("answered");
    assert_eq!(result, json!({"ok": true}));
    caps.invoke("getProductInfo", json!({"productId": "P23456"}))
        .await
        .expect("answered");

    let asked = peer.asked();
    assert_eq!(asked.len(), 2);
    let first = &asked[0];
    assert_eq!(first.capability, "getProductInfo");
    assert_eq!(first.url, "http://desk.internal:8080");
    assert_eq!(&*first.protocol, PROTOCOL);
    assert!(
        first.fallback,
        "natural language is allowed unless switched off"
    );
    assert_eq!(first.token, None, "no token unless the binding has one");
    let request = &first.request;
    assert_eq!(request["type"], "REQUEST");
    assert_eq!(request["body"], json!({"productId": "P12345"}));
    assert_eq!(request["header"]["version"], "1.0");
    let id = request["header"]["id"].as_str().expect("a fresh id");
    assert_eq!(id.len(), 36, "a UUID: {id}");
    assert_ne!(asked[1].request["header"]["id"], request["header"]["id"]);
    let time = request["header"]["timestamp"].as_str().expect("a time");
    assert!(
        time.len() == 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "RFC 3339 in UTC: {time}"
    );
}

#[tokio::test]
async fn the_token_is_resolved_at_load_and_handed_to_the_caller_unshown() {
    let caps = loaded(r#", token = "${DESK_TOKEN}""#, "{}");
    let peer = Peer::answering(Ok(AgentAnswer::Protocol(json!({}))));
    caps.connect_agents(peer.clone());
    caps.invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("answered");
    let asked = peer.asked();
    let token = asked[0].token.as_ref().expect("the binding's token");
    assert_eq!(token.expose(), "parley_key_for_the_desk");
    assert!(!format!("{:?} {caps:?}", asked[0]).contains("parley_key_for_the_desk"));
}

#[tokio::test]
async fn the_answer_or_the_part_at_the_pointer_is_the_result() {
    let caps = loaded(r#", result_pointer = "/productInfo""#, PRODUCT_OR_NULL);
    let answer = json!({"status": {"code": 200}, "productInfo": {"productId": "P12345"}});
    caps.connect_agents(Peer::answering(Ok(AgentAnswer::Protocol(answer))));
    let result = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("answered");
    assert_eq!(result, json!({"productId": "P12345"}));

    let caps = loaded(r#", result_pointer = "/productInfo""#, PRODUCT_OR_NULL);
    caps.connect_agents(Peer::answering(Ok(AgentAnswer::Protocol(
        json!({"status": {"code": 500}}),
    ))));
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("nothing at the pointer");
    assert_eq!(error.code(), "binding_failed");
    assert!(error.to_string().contains("/productInfo"), "{error}");

    // A result outside the output schema is refused like any binding's.
    let caps = loaded("", PRODUCT_OR_NULL);
    caps.connect_agents(Peer::answering(Ok(AgentAnswer::Protocol(json!(42)))));
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("not an object");
    assert_eq!(error.code(), "invalid_result");
}

#[tokio::test]
async fn a_natural_language_answer_is_the_fallback_object_when_the_schema_admits_it() {
    let answer = AgentAnswer::NaturalLanguage {
        reason: "the negotiation ended without agreement (declined): no capability".into(),
        text: "P12345 costs 1299.99 EUR.".into(),
        data: Some(json!({"price": 1299.99})),
    };
    let admits = r#"{ anyOf = [ { type = "object", required = ["productId"] }, { type = "object", required = ["fallback"] } ] }"#;
    let caps = loaded("", admits);
    caps.connect_agents(Peer::answering(Ok(answer.clone())));
    let result = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect("the fallback fits");
    assert_eq!(
        result,
        json!({"fallback": {
            "reason": "the negotiation ended without agreement (declined): no capability",
            "text": "P12345 costs 1299.99 EUR.",
            "data": {"price": 1299.99}
        }})
    );

    let caps = loaded("", PRODUCT_OR_NULL);
    caps.connect_agents(Peer::answering(Ok(answer)));
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("the schema has no room for it");
    assert_eq!(error.code(), "binding_failed");
    let message = error.to_string();
    assert!(message.contains("declined"), "{message}");
    assert!(message.contains("P12345 costs 1299.99 EUR."), "{message}");

    let caps = loaded(", fallback = false", PRODUCT_OR_NULL);
    let peer = Peer::answering(Err(AgentCallError {
        message: "no protocol could be agreed".into(),
    }));
    caps.connect_agents(peer.clone());
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("the peer's failure");
    assert!(!peer.asked()[0].fallback);
    assert_eq!(error.code(), "binding_failed");
    assert!(
        error.to_string().contains("no protocol could be agreed"),
        "{error}"
    );
}

#[tokio::test]
async fn without_a_requester_or_in_time_the_call_fails() {
    let caps = loaded("", PRODUCT_OR_NULL);
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("nothing installed");
    assert_eq!(error.code(), "binding_failed");
    assert!(error.to_string().contains("no requester"), "{error}");

    let caps = loaded(", timeout_ms = 50", PRODUCT_OR_NULL);
    caps.connect_agents(Arc::new(Peer {
        answer: Ok(AgentAnswer::Protocol(Value::Null)),
        delay: Duration::from_secs(30),
        asked: Mutex::new(Vec::new()),
    }));
    let error = caps
        .invoke("getProductInfo", json!({"productId": "P12345"}))
        .await
        .expect_err("too slow");
    assert_eq!(error.code(), "timeout");
}

#[test]
fn bad_agent_bindings_are_refused_at_load() {
    let dir = tempfile::tempdir().expect("temp dir");
    let refused = |binding: &str, fragments: &[&str]| {
        let message = load(dir.path(), binding, "{}")
            .expect_err(binding)
            .to_string();
        for fragment in fragments {
            assert!(message.contains(fragment), "{binding}: {message}");
        }
    };
    refused(
        r#", request = ["x"]"#,
        &["getProductInfo", "binding.request", "table"],
    );
    refused(
        r#", request = { body = 1 }, input = "/body""#,
        &["binding.input", "/body"],
    );
    refused(r#", input = "body""#, &["binding.input"]);
    refused(
        r#", request = { header = "x" }, message_id = "/header/id""#,
        &["binding.message_id", "/header/id"],
    );
    refused(r#", timestamp = """#, &["binding.timestamp"]);
    refused(r#", result_pointer = "data""#, &["binding.result_pointer"]);
    refused(", timeout_ms = 0", &["binding.timeout_ms", "out of range"]);
    refused(", retries = 2", &["retries"]);
    refused(
        r#", token = "${NOPE}""#,
        &["binding.token", "NOPE", "not set"],
    );
    refused(r#", token = "${SPACED}""#, &["binding.token", "one word"]);
    let message = load(dir.path(), r#", token = "${SPACED}""#, "{}")
        .expect_err("refused")
        .to_string();
    assert!(!message.contains("two words"), "{message}");

    let text = |url: &str, protocol: &str| {
        format!(
            r#"
[agent]
name = "a"
description = "b"
[[capabilities]]
name = "x"
description = "y"
input_schema = {{ type = "object" }}
output_schema = {{}}
binding = {{ type = "agent", url = "{url}", protocol = "{protocol}" }}
"#
        )
    };
    let parse = |url: &str, protocol: &str| {
        Capabilities::parse(
            &text(url, protocol),
            FileFormat::Toml,
            dir.path(),
            "f.toml",
            |_| None,
        )
        .expect_err("refused")
        .to_string()
    };
    let missing = parse("http://desk:8080", "missing.md");
    assert!(
        missing.contains("binding.protocol") && missing.contains("missing.md"),
        "{missing}"
    );
    let scheme = parse("ftp://desk", "lookup.md");
    assert!(
        scheme.contains("binding.url") && scheme.contains("ftp"),
        "{scheme}"
    );
    let unset = parse("${NOWHERE}", "lookup.md");
    assert!(unset.contains("NOWHERE"), "{unset}");
    std::fs::write(dir.path().join("empty.md"), " \n").expect("write");
    let empty = parse("http://desk:8080", "empty.md");
    assert!(empty.contains("empty"), "{empty}");
}
