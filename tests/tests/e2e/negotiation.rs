//! Two Parley agents negotiate the product-information protocol of seed 002 over real NLIP
//! (the provider serving the example catalogue), the requester calls it, both restart, and
//! the next call needs no negotiation — on SQLite and on PostgreSQL. Plus the rule breaks a
//! provider must refuse.

use std::sync::Arc;

use parley::negotiation::requester::Outcome;
use parley_anp::{MetaMessage, ProtocolHash};
use parley_nlip::ErrorInfo;
use parley_store::{Direction, Role, Store};
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};

use crate::support::{MODEL, new_requester, product_protocol, request};

/// Counter value from the provider's /metrics (summed over label sets matching `filter`).
async fn metric(app: &TestApp, name: &str, filter: &str) -> f64 {
    let text = reqwest::get(app.http("/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `in:`/`out:` and the meta-protocol message kind of each transcript entry.
fn kinds(transcript: &[(Direction, Value)]) -> Vec<String> {
    transcript
        .iter()
        .map(|(d, v)| {
            let kind = MetaMessage::from_value(v.clone()).map_or("?", |m| m.kind());
            let way = if *d == Direction::Outbound {
                "out"
            } else {
                "in"
            };
            format!("{way}:{kind}")
        })
        .collect()
}

/// The transcript of negotiation `id` in `store`.
async fn transcript(store: &Arc<dyn Store>, id: &str) -> Vec<(Direction, Value)> {
    store
        .get_negotiation(id.parse().expect("a negotiation id"))
        .await
        .expect("query")
        .expect("the negotiation")
        .transcript
        .into_iter()
        .map(|m| (m.direction, m.message))
        .collect()
}

async fn negotiate_call_restart(provider_settings: parley::config::Settings) {
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);

    let provider = TestApp::spawn(&provider_settings).await;
    let mut stages = Vec::new();
    let negotiated = requester
        .negotiate(&provider.url(), &text, |p| stages.push(p.stage))
        .await
        .expect("negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    assert_eq!(negotiated.hash, hash);
    assert!(
        stages.contains(&"hello") && stages.contains(&"negotiating"),
        "{stages:?}"
    );
    assert_eq!(
        kinds(&negotiated.transcript),
        [
            "out:sourceHello",
            "in:destinationHello",
            "out:protocolNegotiation",
            "in:protocolNegotiation",
            "in:codeGeneration",
            "out:codeGeneration"
        ]
    );

    let found = requester
        .call(&provider.url(), &hash, request("m1", "P12345"))
        .await
        .expect("call");
    assert!(found.renegotiated.is_none());
    assert_eq!(found.answer["messageId"], "m1");
    assert_eq!(found.answer["status"]["code"], 200);
    assert_eq!(found.answer["productInfo"]["productId"], "P12345");
    assert_eq!(found.answer["productInfo"]["currency"], "USD");
    let missing = requester
        .call(&provider.url(), &hash, request("m2", "P99999"))
        .await
        .expect("call");
    assert_eq!(missing.answer["status"]["code"], 404);
    assert_eq!(missing.answer["productInfo"], Value::Null);
    // A request that breaks the protocol's request schema is refused before it is sent.
    let mut bad = request("m3", "P12345");
    bad["productId"] = json!(42);
    match requester.call(&provider.url(), &hash, bad).await {
        Err(parley::negotiation::requester::RequesterError::InvalidRequest(why)) => {
            assert!(why.contains("productId"), "{why}");
        }
        other => panic!("a request outside the schema: {other:?}"),
    }
    // The reply names its protocol: the token was echoed.
    let token = found
        .reply
        .as_ref()
        .expect("an NLIP reply")
        .tokens()
        .find(|t| t.subformat == "protocol")
        .expect("protocol token");
    assert_eq!(token.content.as_str(), Some(hash.to_string().as_str()));
    provider.stop().await;

    // Usage per peer is counted in memory and flushed at shutdown at the latest.
    let provider_store =
        parley_store::connect(&provider_settings.database_url(), Default::default())
            .await
            .expect("provider store");
    let usage = provider_store
        .usage("127.0.0.1", &hash.to_string())
        .await
        .expect("usage")
        .expect("usage recorded");
    assert_eq!(usage.calls(), 2);
    // The provider's transcript holds every message both ways, the hello exchange included,
    // though no negotiation existed yet when it happened: the requester's, mirrored.
    let negotiation = provider_store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("negotiations")
        .first()
        .expect("the negotiation is on record")
        .id
        .to_string();
    let transcript = transcript(&provider_store, &negotiation).await;
    assert_eq!(
        kinds(&transcript),
        [
            "in:sourceHello",
            "out:destinationHello",
            "in:protocolNegotiation",
            "out:protocolNegotiation",
            "out:codeGeneration",
            "in:codeGeneration"
        ]
    );
    // The built-in handler was verified and serves in its compiled form, which the restarted
    // provider below loads from the store.
    let active = provider_store
        .active_handler(&hash.to_string())
        .await
        .expect("query")
        .expect("an active handler");
    assert_eq!(active.backend, "builtin");
    assert_eq!(
        active
            .compiled
            .as_ref()
            .and_then(|m| m["capability"].as_str()),
        Some("getProductInfo")
    );
    drop(provider_store);

    // Both restart: a new provider process on the same database, a new requester on the same
    // local store. The next call needs no negotiation and no reasoner.
    let provider = TestApp::spawn(&provider_settings).await;
    let requester = new_requester(requester_dir.path()).await;
    // The provider's own store shows it did no negotiation for the call. (The /metrics
    // counters are process-wide, shared with the tests that run alongside this one, so they
    // cannot show what one provider did.)
    let provider_store =
        parley_store::connect(&provider_settings.database_url(), Default::default())
            .await
            .expect("provider store");
    let negotiations = || async {
        provider_store
            .negotiations_for_protocol(&hash.to_string())
            .await
            .expect("negotiations")
            .len()
    };
    let negotiations_before = negotiations().await;
    assert!(
        negotiations_before >= 1,
        "the first negotiation is on record"
    );
    let again = requester
        .call(&provider.url(), &hash, request("m3", "P12345"))
        .await
        .expect("call after restart");
    assert!(
        again.renegotiated.is_none(),
        "no renegotiation after restart"
    );
    assert_eq!(again.answer["productInfo"]["productId"], "P12345");
    assert_eq!(
        negotiations().await,
        negotiations_before,
        "no new negotiation"
    );

    // Negotiating the same text again is 0-RTT: the hello names the hash, the provider knows it.
    let zero = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("hello");
    assert_eq!(zero.outcome, Outcome::ZeroRtt);
    assert_eq!(zero.messages, 1);

    let agreements = requester
        .store
        .agreements_with_peer(&provider.url(), Role::Requester)
        .await
        .expect("agreements");
    assert_eq!(agreements[0].protocol_hash, hash.to_string());
    provider.stop().await;
}

#[tokio::test]
async fn product_info_end_to_end_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    negotiate_call_restart(test_settings(dir.path())).await;
}

#[tokio::test]
async fn product_info_end_to_end_on_postgres_with_a_second_instance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, guard) = parley_store::testing::fresh_postgres_url().await;
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(url.clone());
    negotiate_call_restart(settings.clone()).await;

    // Another instance on the same PostgreSQL database serves the hash immediately.
    let other_dir = tempfile::tempdir().expect("tempdir");
    let mut other = test_settings(other_dir.path());
    other.database_url = Some(url);
    let instance = TestApp::spawn(&other).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);
    let message = parley::negotiation::nlip::application_message(&hash, request("m9", "P12345"));
    let (status, reply) =
        parley_tests::post_json(&instance.url(), &parley_nlip::to_json_value(&message)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["content"]["productInfo"]["productId"], "P12345");
    instance.stop().await;
    guard.drop_database().await.expect("test database dropped");
}

#[tokio::test]
async fn a_provider_that_forgot_is_renegotiated_automatically() {
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let text = product_protocol();
    let hash = ProtocolHash::of(&text);
    let first_dir = tempfile::tempdir().expect("tempdir");
    let first = TestApp::spawn(&test_settings(first_dir.path())).await;
    requester
        .negotiate(&first.url(), &text, |_| {})
        .await
        .expect("negotiate");
    first.stop().await;

    // A provider with an empty database at a new address: unknown hash → negotiate → retry.
    let second_dir = tempfile::tempdir().expect("tempdir");
    let second = TestApp::spawn(&test_settings(second_dir.path())).await;
    let message = parley::negotiation::nlip::application_message(&hash, request("m1", "P12345"));
    let (status, reply) =
        parley_tests::post_json(&second.url(), &parley_nlip::to_json_value(&message)).await;
    assert_eq!(status, 404);
    let err = ErrorInfo::from_message(&parley_nlip::from_json_value(&reply).expect("nlip"))
        .expect("error");
    assert_eq!(err.code, "unknown_protocol");
    assert!(err.message.contains("negotiate"), "{}", err.message);

    let called = requester
        .call(&second.url(), &hash, request("m1", "P12345"))
        .await
        .expect("call renegotiates");
    assert_eq!(
        called.renegotiated.as_ref().map(|n| n.outcome.clone()),
        Some(Outcome::Agreed)
    );
    assert_eq!(called.answer["productInfo"]["productId"], "P12345");
    second.stop().await;
}

/// Sends meta-protocol messages in one control message and returns status and reply.
pub(crate) async fn send_meta(
    app: &TestApp,
    metas: &[Value],
    conversation: Option<&parley_nlip::Submessage>,
) -> (u16, parley_nlip::Message) {
    let mut message = parley_nlip::Message::text("english", "negotiation").into_control();
    for m in metas {
        message.submessages.push(
            parley_nlip::Submessage::new(parley_nlip::Format::Structured, "json", m.clone())
                .with_label("anp"),
        );
    }
    if let Some(t) = conversation {
        message.submessages.push(t.clone());
    }
    let (status, reply) =
        parley_tests::post_json(&app.url(), &parley_nlip::to_json_value(&message)).await;
    (
        status,
        parley_nlip::from_json_value(&reply).expect("NLIP reply"),
    )
}

#[tokio::test]
async fn rule_breaks_are_nlip_errors_and_end_the_negotiation_as_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let rejected_before = metric(&app, "parley_negotiations_total", "outcome=\"rejected\"").await;
    let text = product_protocol();
    let proposal = |seq: u64, status: &str| json!({"action": "protocolNegotiation", "sequenceId": seq, "candidateProtocols": text, "status": status});

    // A first message already marked accepted is never accepted without evaluation.
    let (status, reply) = send_meta(&app, &[proposal(0, "accepted")], None).await;
    assert_eq!(status, 422);
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("error").code,
        "unevaluated_acceptance"
    );
    assert!(
        reply.is_control(),
        "a control request gets a control reply, even an error"
    );

    // A wrong sequenceId is refused, not logged and ignored.
    let (status, reply) = send_meta(&app, &[proposal(5, "negotiating")], None).await;
    assert_eq!(status, 422);
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("error").code,
        "sequence_error"
    );

    // An unknown status is an error, never a crash; the server stays healthy.
    let (status, reply) = send_meta(&app, &[proposal(0, "maybe")], None).await;
    assert_eq!(status, 422, "{reply:?}");
    let health = reqwest::get(app.http("/health")).await.expect("health");
    assert_eq!(health.status().as_u16(), 200);

    // Each one ended its negotiation as rejected (metrics are process-wide: at least 3 more).
    let rejected = metric(&app, "parley_negotiations_total", "outcome=\"rejected\"").await;
    assert!(
        rejected >= rejected_before + 3.0,
        "{rejected_before} -> {rejected}"
    );
    app.stop().await;
}

#[tokio::test]
async fn each_negotiation_s_transcript_opens_with_the_hello_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    let text = product_protocol();
    let hello = |tag: &str| {
        let mut hello =
            MetaMessage::source_hello(parley_anp::messages::MetaProtocolInfo::parley([]))
                .to_value();
        hello["sessionId"] = json!(tag);
        hello
    };
    let proposal = |status: &str| json!({"action": "protocolNegotiation", "sequenceId": 0, "candidateProtocols": text, "status": status});

    // A hello alone: the provider mints the conversation the rest goes through.
    let (status, reply) = send_meta(&app, &[hello("first")], None).await;
    assert_eq!(status, 200, "{reply:?}");
    let conversation = reply
        .tokens()
        .find(|t| t.token_kind() == Some(parley_nlip::TokenKind::Conversation))
        .expect("a conversation token")
        .clone();
    // A negotiation that ends at once (accepted before any evaluation), then a second hello,
    // which no negotiation is open to take, then a second negotiation.
    let (status, _) = send_meta(&app, &[proposal("accepted")], Some(&conversation)).await;
    assert_eq!(status, 422);
    for metas in [vec![hello("second")], vec![proposal("negotiating")]] {
        let (status, reply) = send_meta(&app, &metas, Some(&conversation)).await;
        assert_eq!(status, 200, "{reply:?}");
    }
    app.stop().await;

    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("store");
    // The conversation's state names its current negotiation: the second one.
    let id = conversation.content.as_str().expect("a conversation id");
    let state = store
        .get_conversation(id)
        .await
        .expect("query")
        .expect("the conversation")
        .state;
    let negotiation = state["negotiation"]["negotiation_id"]
        .as_str()
        .expect("a negotiation in the conversation's state");
    assert!(
        state.get("hello_transcript").is_none(),
        "the hello went into a transcript: {state}"
    );
    let transcript = transcript(&store, negotiation).await;
    assert_eq!(
        kinds(&transcript)[..3],
        [
            "in:sourceHello",
            "out:destinationHello",
            "in:protocolNegotiation"
        ]
    );
    assert_eq!(transcript[0].1["sessionId"], "second", "{transcript:?}");
    assert_eq!(
        transcript
            .iter()
            .filter(|(_, v)| v["type"] == "sourceHello")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_deliberately_wrong_first_handler_is_fixed_from_its_verification_failure() {
    use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
    let _turn = MODEL.lock().await;
    let text = product_protocol();
    let right = crate::support::builtin_handler().await;
    let wrong = "function handle(r) { return { messageId: r.messageId, type: 'RESPONSE', status: { code: 500, message: 'broken' }, productInfo: null }; }";

    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::text(
        json!({"decision": "accept", "reason": "getProductInfo serves it", "capability": "getProductInfo"}).to_string(),
    ));
    model.push(ScriptedReply::text(
        json!({"source": wrong, "grants": ["getProductInfo"]}).to_string(),
    ));
    model.push(ScriptedReply::text(
        json!({"source": right.source, "grants": ["getProductInfo"]}).to_string(),
    ));

    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    settings.reasoner = parley::config::ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.negotiation.backend = parley::config::ProtocolBackend::Openai;
    let provider = TestApp::spawn(&settings).await;
    // The process's model counters before this negotiation (other tests' servers count there).
    let calls_before = metric(&provider, "parley_model_calls_total", "purpose=").await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiate");
    assert_eq!(negotiated.outcome, Outcome::Agreed);

    let requests = model.requests();
    assert_eq!(requests.len(), 3, "evaluate, generate, fix: {requests:?}");
    let fix_request = requests[2].body.to_string();
    assert!(
        fix_request.contains("broken") || fix_request.contains("500"),
        "the failure reached the model: {fix_request}"
    );
    assert_eq!(
        // evaluate, generate_handler and fix_handler: one call each.
        metric(&provider, "parley_model_calls_total", "purpose=").await - calls_before,
        3.0
    );

    // The wrong handler is on record as failed; the fixed one serves.
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("store");
    let active = store
        .active_handler(&negotiated.hash.to_string())
        .await
        .expect("query")
        .expect("active");
    assert_eq!(active.source, right.source);
    assert_eq!(active.verification_passed, Some(true));
    assert_eq!(
        active.compiled, None,
        "a model's JavaScript has no compiled form"
    );
    let answer = requester
        .call(&provider.url(), &negotiated.hash, request("m1", "P12345"))
        .await
        .expect("call");
    assert_eq!(answer.answer["status"]["code"], 200);
    provider.stop().await;
}

#[tokio::test]
async fn a_wrong_test_expectation_goes_to_the_peer_as_fix_error_negotiation() {
    // The requester's test case expects EUR where the catalogue says USD: every answer the
    // provider's handler gives is valid, only the expectation is off.
    let text = product_protocol().replacen("\"currency\": \"USD\"", "\"currency\": \"EUR\"", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiate");
    let Outcome::Rejected { code, .. } = &negotiated.outcome else {
        panic!("no handler may be activated: {:?}", negotiated.outcome);
    };
    assert_eq!(code, "code_generation_failed");
    let fix_errors: Vec<&Value> = negotiated
        .transcript
        .iter()
        .filter(|(_, v)| v["action"] == "fixErrorNegotiation")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        fix_errors.len(),
        2,
        "the provider's report and the requester's answer: {:?}",
        negotiated.transcript
    );
    assert!(
        fix_errors[0]["errorDescription"]
            .as_str()
            .expect("description")
            .contains("currency")
    );
    // Nothing is served for that hash.
    let message =
        parley::negotiation::nlip::application_message(&negotiated.hash, request("m1", "P12345"));
    let (status, _) =
        parley_tests::post_json(&provider.url(), &parley_nlip::to_json_value(&message)).await;
    assert_eq!(status, 404);
    provider.stop().await;
}

#[tokio::test]
async fn negotiation_and_calls_work_over_websocket_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let text = product_protocol();
    for url in [provider.ws("/nlip/ws"), provider.ws("/nlip/ws/text")] {
        let negotiated = requester
            .negotiate(&url, &text, |_| {})
            .await
            .expect("negotiate over WebSocket");
        assert!(
            matches!(negotiated.outcome, Outcome::Agreed | Outcome::ZeroRtt),
            "{url}: {:?}",
            negotiated.outcome
        );
        let called = requester
            .call(&url, &negotiated.hash, request("w1", "P12345"))
            .await
            .expect("call");
        assert_eq!(called.answer["productInfo"]["productId"], "P12345", "{url}");
    }
    provider.stop().await;
}

#[tokio::test]
async fn only_what_both_sides_support_is_used() {
    // A requester that does not announce fixErrorNegotiation never receives one: the
    // provider reports the failed verification as a failed code generation instead.
    let text = product_protocol().replacen("\"currency\": \"USD\"", "\"currency\": \"EUR\"", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&test_settings(dir.path())).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate_with(
            &provider.url(),
            &text,
            &["testCasesNegotiation".to_owned()],
            |_| {},
        )
        .await
        .expect("negotiate");
    assert!(
        matches!(&negotiated.outcome, Outcome::Rejected { code, .. } if code == "code_generation_failed"),
        "{:?}",
        negotiated.outcome
    );
    assert!(
        negotiated
            .transcript
            .iter()
            .all(|(_, v)| v["action"] != "fixErrorNegotiation"),
        "{:?}",
        negotiated.transcript
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_peer_without_the_meta_protocol_gets_natural_language() {
    // A real NLIP peer that knows nothing of ANP: the bare echo server of the benchmarks.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let mut echo = std::process::Command::new(env!("CARGO_BIN_EXE_echo-baseline"))
        .args(["--listen", &addr.to_string()])
        .spawn()
        .expect("echo peer starts");
    let url = format!("http://{addr}/nlip");
    for _ in 0..100 {
        if reqwest::get(format!("http://{addr}/health")).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let err = requester
        .negotiate(&url, &product_protocol(), |_| {})
        .await
        .expect_err("no meta-protocol");
    assert!(
        matches!(
            err,
            parley::negotiation::requester::RequesterError::NotSupported
        ),
        "{err}"
    );
    let tls = parley::tls::ClientTls::default();
    let answer = parley::negotiation::requester::ask_in_natural_language(
        &url,
        &product_protocol(),
        &tls,
        None,
    )
    .await
    .expect("natural language");
    assert!(
        answer.contains("product"),
        "the requirement went out as text: {answer}"
    );
    let _ = echo.kill();
    let _ = echo.wait();
}

#[tokio::test]
async fn a_document_with_example_messages_is_agreed_and_the_provider_says_what_it_inferred() {
    // AgentConnect writes example messages with placeholders instead of JSON Schemas; Parley
    // activates only verified handlers, so this one carries test cases in the seed's prose form.
    let mut text = std::fs::read_to_string(
        parley_tests::repo_root().join("negotiator/tests/documents/agentconnect-catalogue.md"),
    )
    .expect("corpus document");
    text.push_str(concat!(
        "\n# Test Cases\n\n## Test Case 1: a known product\n\nRequest:\n\n",
        "{\"messageType\": \"ProductQuery\", \"messageId\": \"m1\", \"productId\": \"P12345\"}\n\n",
        "Expected Result:\n\n",
        "{\"messageType\": \"ProductQueryResponse\", \"messageId\": \"m1\", \"code\": 200}\n",
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiate");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    let called = requester
        .call(
            &provider.url(),
            &negotiated.hash,
            json!({"messageType": "ProductQuery", "messageId": "a1b2c3d4e5f6a7b8", "productId": "P12345"}),
        )
        .await
        .expect("call");
    assert_eq!(called.answer["messageType"], "ProductQueryResponse");
    assert_eq!(called.answer["messageId"], "a1b2c3d4e5f6a7b8");
    assert_eq!(called.answer["code"], 200);
    assert!(
        called.answer["productInfo"]["price"].is_number(),
        "{}",
        called.answer
    );

    // The provider's side of the conversation tells the peer how it read the examples.
    let store = parley::startup::open_store(&settings)
        .await
        .expect("the provider's store");
    let negotiation = &store
        .negotiations_for_protocol(&negotiated.hash.to_string())
        .await
        .expect("query")[0];
    let log = store
        .list_messages(&negotiation.conversation_id, 0, parley_store::MAX_PAGE)
        .await
        .expect("the conversation log");
    let said = log
        .iter()
        .filter(|m| m.direction == Direction::Outbound)
        .map(|m| m.message.to_string())
        .collect::<String>();
    assert!(said.contains("Read from the document's examples"), "{said}");
    assert!(
        said.contains("`/messageId`: string from the placeholder"),
        "{said}"
    );
    provider.stop().await;
}

/// One test case of the product protocol for `product`, whose lookup finds nothing, expecting
/// the status `code`.
fn unknown_product_case(product: &str, code: u16) -> Value {
    json!({
        "name": format!("{product} answers {code}"),
        "request": {"messageId": "own-1", "type": "REQUEST", "action": "getProductInfo",
                    "productId": product},
        "expectedResponse": {"messageId": "own-1", "type": "RESPONSE", "status": {"code": code}},
        "fixtures": {"getProductInfo": [{"args": {"productId": product}, "result": null}]}
    })
}

#[tokio::test]
async fn a_requesters_own_test_cases_are_run_by_the_provider_and_a_failing_handler_is_not_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = TestApp::spawn(&test_settings(dir.path())).await;
    let cases = |code| {
        let cases = json!([unknown_product_case("P99999", code)]);
        format!("# Test Cases\n\n```json\n{cases:#}\n```\n")
    };

    // Cases the handler passes: agreed, and the transcript shows them accepted.
    let local = tempfile::tempdir().expect("tempdir");
    let mut requester = new_requester(local.path()).await;
    requester.test_cases = Some(cases(404));
    let agreed = requester
        .negotiate(&app.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiated");
    assert_eq!(agreed.outcome, Outcome::Agreed, "{:#?}", agreed.transcript);
    let test_cases: Vec<&Value> = agreed
        .transcript
        .iter()
        .map(|(_, v)| v)
        .filter(|v| v["action"] == "testCasesNegotiation")
        .collect();
    assert_eq!(
        test_cases.len(),
        2,
        "proposed, then accepted: {test_cases:#?}"
    );
    assert_eq!(test_cases[0]["status"], "negotiating");
    assert_eq!(test_cases[1]["status"], "accepted");

    // Cases the handler fails: the provider says why, and the requester keeps no agreement.
    let other = tempfile::tempdir().expect("tempdir");
    let mut strict = new_requester(other.path()).await;
    strict.test_cases = Some(cases(200));
    let refused = strict
        .negotiate(&app.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiated");
    match &refused.outcome {
        Outcome::Rejected { code, reason } => {
            assert_eq!(code, "test_cases_failed");
            assert!(
                reason.contains("P99999") || reason.contains("200"),
                "{reason}"
            );
        }
        other => panic!("{other:?}: {:#?}", refused.transcript),
    }
    let hash = ProtocolHash::of(&product_protocol()).to_string();
    let kept = strict
        .store
        .agreements_for_protocol(&hash)
        .await
        .expect("query");
    assert!(kept.is_empty(), "{kept:?}");
    app.stop().await;
}
