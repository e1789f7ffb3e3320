//! ANP 1.2's JSON-RPC binding (`POST /anp/rpc`), Parley to Parley: discovery through the agent
//! description, a structured selection at 0-RTT, natural-language drafting to a verified
//! handler and then an application call over NLIP, a counter-proposal returned as an
//! alternative, every error code a caller can provoke, and garbage.

use parley::negotiation::requester::{Outcome, ProtocolRef, Requested, Requester, Wire};
use parley_anp::ProtocolHash;
use parley_anp::rpc::{Artifact, DigestInput, PROFILE, negotiation_digest};
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};

use crate::requester::orders_only_settings;
use crate::support::{new_requester, product_protocol, request};

/// A requester speaking the binding, with its own store in `dir`.
async fn rpc_requester(dir: &std::path::Path) -> Requester {
    Requester {
        wire: Wire::Anp12,
        ..new_requester(dir).await
    }
}

fn base(app: &TestApp) -> String {
    format!("http://{}", app.addr)
}

fn rpc_url(app: &TestApp) -> String {
    format!("http://{}/anp/rpc", app.addr)
}

/// POSTs raw `body` to the end-point: the HTTP status and the JSON answer (null for none).
async fn post_raw(app: &TestApp, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(rpc_url(app))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the end-point answers");
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("a body");
    let answer = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON-RPC answer is JSON")
    };
    (status, answer)
}

/// `anp.negotiate` with `body` and Parley's meta: the answer.
async fn negotiate(app: &TestApp, body: Value) -> Value {
    let request = json!({
        "jsonrpc": "2.0", "id": "t1", "method": "anp.negotiate",
        "params": {"meta": {"profile": PROFILE}, "body": body}
    });
    let (status, answer) = post_raw(app, request.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], "t1", "{answer}");
    answer
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error: {answer}"))
}

#[tokio::test]
async fn discovery_leads_to_the_json_rpc_end_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let http = reqwest::Client::new();
    let page: Value = http
        .get(format!("{}/.well-known/agent-descriptions", base(&app)))
        .send()
        .await
        .expect("discovery")
        .json()
        .await
        .expect("JSON");
    assert_eq!(page["@type"], "CollectionPage", "{page:#}");
    let description_url = page["items"][0]["@id"].as_str().expect("an @id");
    let description: Value = http
        .get(description_url)
        .send()
        .await
        .expect("the description")
        .json()
        .await
        .expect("JSON");
    assert_eq!(description["@type"], "ad:AgentDescription");
    let interfaces = description["interfaces"].as_array().expect("interfaces");
    let meta = interfaces
        .iter()
        .find(|i| i["type"] == "MetaProtocolInterface")
        .expect("a MetaProtocolInterface");
    assert_eq!(meta["profile"], PROFILE);
    assert_eq!(meta["binding"], "jsonrpc-2.0");
    assert_eq!(meta["url"], rpc_url(&app));
    assert!(
        interfaces
            .iter()
            .any(|i| i["url"] == format!("{}/nlip", base(&app))),
        "the NLIP end-point is listed: {interfaces:#?}"
    );

    let capabilities = json!({"jsonrpc": "2.0", "id": 1, "method": "anp.get_capabilities"});
    let (status, answer) = post_raw(&app, capabilities.to_string()).await;
    assert_eq!(status, 200);
    let result = &answer["result"];
    assert_eq!(result["supported_profiles"], json!([PROFILE]), "{answer:#}");
    assert_eq!(
        result["supported_security_profiles"],
        json!(["transport-protected"])
    );
    assert_eq!(
        result["negotiation"]["modes"],
        json!(["structured_selection", "natural_language_protocol_drafting"])
    );
    assert!(
        result["capabilities"]
            .as_array()
            .expect("capabilities")
            .iter()
            .any(|c| c["name"] == "getProductInfo"),
        "{result:#}"
    );
    app.stop().await;
}

/// A directory of agents at `/.well-known/agent-descriptions`: `pages`, served at
/// `/.well-known/agent-descriptions` (the first) and `/directory/<n>` (the rest), and one
/// agent description without a negotiation interface at `/agents/weather/ad.json`.
async fn directory(pages: Vec<Value>) -> String {
    use axum::response::IntoResponse as _;
    let pages = std::sync::Arc::new(pages);
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let pages = std::sync::Arc::clone(&pages);
        async move {
            let path = uri.path();
            let page = if path == "/.well-known/agent-descriptions" {
                pages.first().cloned()
            } else if let Some(n) = path.strip_prefix("/directory/") {
                n.parse::<usize>().ok().and_then(|n| pages.get(n).cloned())
            } else if path == "/agents/weather/ad.json" {
                Some(json!({
                    "@type": "ad:AgentDescription",
                    "name": "Weather",
                    "interfaces": [{"type": "NaturalLanguageInterface", "url": "/chat"}]
                }))
            } else {
                None
            };
            match page {
                Some(page) => axum::Json(page).into_response(),
                None => axum::http::StatusCode::NOT_FOUND.into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn page(items: Value, next: Option<&str>) -> Value {
    let mut page = json!({"@type": "CollectionPage", "items": items});
    if let Some(next) = next {
        page["next"] = json!(next);
    }
    page
}

#[tokio::test]
async fn discovery_walks_a_directorys_pages_to_the_agent_that_negotiates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let parley = format!("{}/agents/parley/ad.json", base(&app));
    // Page one lists an agent inline and one by @id, neither negotiating, and one that is
    // gone; Parley is on page two.
    let host = directory(vec![
        page(
            json!([
                {"name": "Echo", "interfaces": [{"type": "NaturalLanguageInterface", "url": "/echo"}]},
                {"@id": "/agents/weather/ad.json"},
                {"@id": "/agents/gone/ad.json"}
            ]),
            Some("/directory/1"),
        ),
        page(json!([{"@id": parley}]), None),
    ])
    .await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = rpc_requester(local.path()).await;
    let negotiated = requester
        .negotiate(&host, &product_protocol(), |_| {})
        .await
        .expect("discovery finds Parley on the second page");
    assert_eq!(negotiated.outcome, Outcome::Agreed);

    // A directory whose pages lead back to themselves ends, and says why.
    let looping = directory(vec![
        page(
            json!([{"@id": "/agents/weather/ad.json"}]),
            Some("/directory/1"),
        ),
        page(json!([]), Some("/.well-known/agent-descriptions")),
    ])
    .await;
    let err = requester
        .negotiate(&looping, &product_protocol(), |_| {})
        .await
        .expect_err("no negotiation end-point");
    assert!(err.to_string().contains("already read"), "{err}");

    // One with no negotiating agent says so.
    let none = directory(vec![page(
        json!([{"@id": "/agents/weather/ad.json"}]),
        None,
    )])
    .await;
    let err = requester
        .negotiate(&none, &product_protocol(), |_| {})
        .await
        .expect_err("no negotiation end-point");
    assert!(err.to_string().contains("MetaProtocolInterface"), "{err}");
    app.stop().await;
}

#[tokio::test]
async fn parley_drafts_then_calls_over_nlip_then_selects_at_zero_rtt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.negotiation.agreement_valid_for_s = 120;
    let app = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = rpc_requester(local.path()).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);

    // Not served yet: the selection is 1601, the draft is agreed.
    let negotiated = requester
        .negotiate(&base(&app), &text, |_| {})
        .await
        .expect("negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    assert_eq!(negotiated.hash, hash);
    let answers: Vec<&Value> = negotiated
        .transcript
        .iter()
        .filter(|(d, _)| *d == parley_store::Direction::Inbound)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(answers.len(), 2, "{:#?}", negotiated.transcript);
    assert_eq!(answers[0]["error"]["code"], 1601);
    let result = &answers[1]["result"];
    assert_eq!(result["status"], "accepted");
    assert_eq!(result["selected"]["protocolArtifact"], hash.prefixed());
    assert_eq!(result["selected"]["url"], format!("{}/nlip", base(&app)));
    // The digest is recomputable from the result alone.
    let digest = negotiation_digest(&DigestInput {
        negotiation_id: result["negotiationId"].as_str().expect("an id"),
        protocol: &hash,
        caller: None,
        target: &rpc_url(&app),
        endpoint: result["selected"]["url"].as_str().expect("a url"),
        valid_until: result["validUntil"].as_str().expect("validUntil"),
    });
    assert_eq!(result["negotiationDigest"], digest);
    // Valid for what `negotiation.agreement_valid_for_s` says.
    let valid_until =
        chrono::DateTime::parse_from_rfc3339(result["validUntil"].as_str().expect("validUntil"))
            .expect("RFC 3339");
    let left = valid_until.signed_duration_since(chrono::Utc::now());
    assert!(
        (60..=120).contains(&left.num_seconds()),
        "validUntil {valid_until} is {left} away"
    );

    // The application call goes over NLIP with the protocol token.
    let called = requester
        .call(&base(&app), &hash, request("m1", "P12345"))
        .await
        .expect("called");
    assert_eq!(called.answer["status"]["code"], 200, "{:#?}", called.answer);
    assert!(called.renegotiated.is_none());

    // Another requester, knowing nothing: selected at 0-RTT, then called.
    let other = tempfile::tempdir().expect("tempdir");
    let fresh = rpc_requester(other.path()).await;
    let again = fresh
        .negotiate(&base(&app), &text, |_| {})
        .await
        .expect("selection");
    assert_eq!(again.outcome, Outcome::ZeroRtt);
    assert_eq!(again.transcript.len(), 2, "one request, one answer");
    let requested = fresh
        .request(
            &rpc_url(&app),
            ProtocolRef::Text(text.clone()),
            request("m2", "P99999"),
            false,
            |_| {},
        )
        .await
        .expect("requested");
    let Requested::Protocol {
        negotiated, called, ..
    } = requested
    else {
        panic!("through the protocol: {requested:?}");
    };
    assert!(negotiated.is_none(), "selected, not negotiated");
    assert_eq!(called.answer["status"]["code"], 404);
    app.stop().await;
}

/// The product protocol asking for a warranty the catalogue does not have.
fn warranty_protocol() -> String {
    let text = product_protocol();
    let text = text.replacen(
        r#""messageId": { "type": "string", "description": "The messageId of the request" },"#,
        r#""messageId": { "type": "string", "description": "The messageId of the request" },
    "warrantyYears": { "type": "integer" },"#,
        1,
    );
    let text = text.replacen(
        r#""required": ["messageId", "type", "status"]"#,
        r#""required": ["messageId", "type", "status", "warrantyYears"]"#,
        1,
    );
    assert_ne!(text, product_protocol());
    text
}

#[tokio::test]
async fn a_counter_proposal_comes_back_as_an_alternative_and_is_agreed_when_drafted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let draft = |text: &str| {
        json!({
            "negotiation_id": "n-counter",
            "mode": "natural_language_protocol_drafting",
            "intent": {"name": "product_lookup", "description": "Look up products with their warranty."},
            "candidateProtocols": [Artifact::of(text, None)],
        })
    };
    let answer = negotiate(&app, draft(&warranty_protocol())).await;
    let result = &answer["result"];
    assert_eq!(result["status"], "needs_more_information", "{answer:#}");
    assert_eq!(result["negotiationId"], "n-counter");
    let counter = result["alternatives"][0]["document"]
        .as_str()
        .expect("an alternative");
    assert!(!counter.contains("warrantyYears"), "{counter}");
    assert!(
        result["alternatives"][0]["modificationSummary"].is_string(),
        "{result:#}"
    );

    let answer = negotiate(&app, draft(counter)).await;
    assert_eq!(answer["result"]["status"], "accepted", "{answer:#}");
    assert_eq!(
        answer["result"]["selected"]["protocolArtifact"],
        ProtocolHash::of(counter).prefixed()
    );

    // Parley as the caller declines a counter-proposal that drops what it asked for.
    let local = tempfile::tempdir().expect("tempdir");
    let requester = rpc_requester(local.path()).await;
    let other = warranty_protocol().replacen(
        "The product name may be sent",
        "A product name may be sent",
        1,
    );
    let negotiated = requester
        .negotiate(&base(&app), &other, |_| {})
        .await
        .expect("negotiation runs");
    let Outcome::Rejected { code, .. } = &negotiated.outcome else {
        panic!("declined: {:#?}", negotiated.transcript);
    };
    assert_eq!(code, "declined");
    app.stop().await;
}

#[tokio::test]
async fn every_refusal_has_its_code_and_garbage_never_a_500() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = orders_only_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);

    // JSON-RPC's own codes.
    for (body, code) in [
        ("{not json", -32700),
        ("\u{0}\u{1}", -32700),
        ("[]", -32600),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"anp.negotiate\"}]",
            -32600,
        ),
        ("\"anp.negotiate\"", -32600),
        (r#"{"jsonrpc":"2.0","id":1}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"anp.explode"}"#, -32601),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"anp.negotiate"}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"anp.negotiate","params":[1,2]}"#,
            -32602,
        ),
    ] {
        let (status, answer) = post_raw(&app, body).await;
        assert_eq!(status, 200, "{body}: {answer}");
        assert_eq!(error_code(&answer), code, "{body}: {answer}");
    }
    // Another method than POST.
    let get = reqwest::get(rpc_url(&app)).await.expect("an answer");
    assert_eq!(get.status().as_u16(), 405);
    let answer: Value = get.json().await.expect("a JSON-RPC error");
    assert_eq!(error_code(&answer), -32600);
    // A notification is not answered.
    let (status, answer) =
        post_raw(&app, r#"{"jsonrpc":"2.0","method":"anp.get_capabilities"}"#).await;
    assert_eq!((status, answer), (204, Value::Null));

    // The draft's codes.
    let meta = |meta: Value, body: Value| {
        json!({
            "jsonrpc": "2.0", "id": "e", "method": "anp.negotiate", "params": {"meta": meta, "body": body}
        })
    };
    let intent = json!({"name": "product_lookup"});
    for (request, code) in [
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "mode": "telepathy"}),
            ),
            1602,
        ),
        (
            meta(json!({"profile": "anp.rpc.v1"}), json!({"intent": intent})),
            1603,
        ),
        (
            meta(
                json!({"profile": PROFILE, "security_profile": "direct-e2ee"}),
                json!({"intent": intent}),
            ),
            1604,
        ),
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "callerCapabilities": {"supportedContentTypes": ["text/plain"]}}),
            ),
            1605,
        ),
        (
            meta(json!({"profile": PROFILE}), json!({"intent": intent})),
            1606,
        ),
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "mode": "natural_language_protocol_drafting"}),
            ),
            1606,
        ),
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "candidateProtocols": [hash.prefixed()]}),
            ),
            1601,
        ),
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "candidateProtocols": [
                    {"protocolArtifact": hash.prefixed(), "validUntil": "2020-01-01T00:00:00Z"}
                ]}),
            ),
            1608,
        ),
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "candidateProtocols": [
                    {"protocolArtifact": hash.prefixed(), "validUntil": "last tuesday"}
                ]}),
            ),
            -32602,
        ),
        (
            meta(
                json!({"profile": PROFILE}),
                json!({"intent": intent, "candidateProtocols": [
                    {"protocolArtifact": ProtocolHash::of("another").prefixed(), "document": text}
                ]}),
            ),
            -32602,
        ),
    ] {
        let (status, answer) = post_raw(&app, request.to_string()).await;
        assert_eq!(status, 200, "{request}: {answer}");
        assert_eq!(error_code(&answer), code, "{request}: {answer}");
        if code > 0 {
            assert!(
                answer["error"]["data"]["anp_code"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("meta.")),
                "{answer}"
            );
        }
    }

    // A draft this provider cannot serve (it only knows orders) is rejected: 1600.
    let answer = negotiate(
        &app,
        json!({
            "mode": "natural_language_protocol_drafting",
            "intent": intent,
            "candidateProtocols": [{"document": text}],
        }),
    )
    .await;
    assert_eq!(error_code(&answer), 1600, "{answer:#}");
    assert_eq!(
        answer["error"]["data"]["anp_code"],
        "meta.negotiation_rejected"
    );

    // A capability named in the intent is drafted into a protocol here, verified and agreed.
    let answer = negotiate(
        &app,
        json!({
            "mode": "natural_language_protocol_drafting",
            "intent": {"name": "getOrderStatus", "description": "Tell me where my order is."},
        }),
    )
    .await;
    assert_eq!(answer["result"]["status"], "accepted", "{answer:#}");

    // The server is still well.
    let health = reqwest::get(format!("{}/health/live", base(&app)))
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
    app.stop().await;
}
