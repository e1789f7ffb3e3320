//! The run-time `fixErrorNegotiation`, over real sockets: an answer that breaks the agreed
//! protocol is reported by the requester; the provider checks it again and either fixes its
//! handler (a new handler version of the same protocol hash, made by its model from the report)
//! or refuses with its reasons; over NLIP and over seed 002's framing (`/anp`); only a peer
//! that may call the protocol can make it rebuild, and reports count as negotiation messages
//! against the throttle.

use std::sync::Arc;

use parley::config::{ProtocolBackend, ReasonerKind, Settings};
use parley::negotiation::anp::AnpOptions;
use parley::negotiation::fix_report::{FixAnswer, FixReport};
use parley::negotiation::nlip::application_message;
use parley::negotiation::requester::{Outcome, Requester, RequesterError, Wire};
use parley::negotiation::runner::ProtocolCache;
use parley_anp::ProtocolHash;
use parley_auth::{Grants, Scope};
use parley_nlip::{ErrorInfo, Message};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_store::{AuditFilter, HandlerRecord, HandlerState, Store};
use parley_tests::{TestApp, test_settings};
use serde_json::json;

use crate::provider_cases::without_test_cases;
use crate::support::{
    MODEL, OTHER, client_from, negotiated_product, new_requester, post_coded, product_protocol,
    request,
};

/// The product the faulty handler answers outside the protocol (it is in the catalogue, and in
/// none of the protocol's test cases).
const BROKEN_FOR: &str = "P23456";

/// A provider whose model accepts the product protocol and generates a handler that passes
/// every test case but answers [`BROKEN_FOR`] with a `status` that is no object. What the model
/// answers a fix request with, the test pushes (`fix_with`).
struct Faulty {
    model: ScriptedOpenAi,
    provider: TestApp,
    settings: Settings,
    /// The correct handler's source.
    right: String,
    /// The faulty handler's source.
    faulty: String,
}

impl Faulty {
    /// The model's next answer, to a fix request: the handler `source`.
    fn fix_with(&self, source: &str) {
        self.model.push(ScriptedReply::text(
            json!({"source": source, "grants": ["getProductInfo"]}).to_string(),
        ));
    }
}

async fn faulty_provider(dir: &std::path::Path) -> Faulty {
    let right = crate::support::builtin_handler().await.source;
    assert!(right.contains("function handle(request)"), "{right}");
    let faulty = format!(
        "{}\nfunction handle(request) {{\n  if (request.productId === '{BROKEN_FOR}') {{\n    \
         return {{ messageId: request.messageId, type: 'RESPONSE', status: 'ok' }};\n  }}\n  \
         return correct(request);\n}}\n",
        right.replacen("function handle(request)", "function correct(request)", 1)
    );
    let model = ScriptedOpenAi::start().await;
    model.push(ScriptedReply::text(
        json!({"decision": "accept", "reason": "getProductInfo serves it", "capability": "getProductInfo"}).to_string(),
    ));
    model.push(ScriptedReply::text(
        json!({"source": faulty, "grants": ["getProductInfo"]}).to_string(),
    ));
    let mut settings = test_settings(dir);
    settings.reasoner = ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.negotiation.backend = ProtocolBackend::Openai;
    // Anonymous peers negotiate and use the catalogue, and call what they agreed themselves.
    settings.access.anonymous = Grants {
        negotiate: true,
        talk: true,
        capabilities: Scope::of(["getProductInfo"]),
        ..Grants::default()
    };
    let provider = TestApp::spawn(&settings).await;
    Faulty {
        model,
        provider,
        settings,
        right,
        faulty,
    }
}

async fn store_of(settings: &Settings) -> Arc<dyn Store> {
    parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the provider's store")
}

/// The active handler of `hash`.
async fn active(store: &Arc<dyn Store>, hash: &ProtocolHash) -> HandlerRecord {
    store
        .active_handler(&hash.to_string())
        .await
        .expect("query")
        .expect("an active handler")
}

/// The `handler.fix` audit events, newest first.
async fn fix_events(store: &Arc<dyn Store>) -> Vec<parley_store::AuditEvent> {
    store
        .list_audit(AuditFilter {
            action: Some("handler.fix".into()),
            limit: 50,
            ..AuditFilter::default()
        })
        .await
        .expect("the audit log")
}

#[tokio::test]
async fn an_answer_out_of_schema_is_reported_and_the_fixed_handler_answers() {
    let _turn = MODEL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = faulty_provider(dir.path()).await;
    faulty.fix_with(&faulty.right);
    let Faulty {
        model,
        provider,
        settings,
        right,
        ..
    } = faulty;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let (requester, negotiated) = negotiated_product(requester_dir.path(), &provider.url()).await;
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    assert_eq!(model.requests().len(), 2, "evaluate, generate");
    let store = store_of(&settings).await;
    let before = active(&store, &negotiated.hash).await.id;
    let faulty = active(&store, &negotiated.hash).await.source;
    assert_ne!(faulty, right, "the faulty handler serves first");

    // A product the test cases do not cover: the handler answers outside the schema, the
    // requester reports it, the provider's model fixes the handler, and the call is answered.
    let called = requester
        .call(
            &provider.url(),
            &negotiated.hash,
            request("m-1", BROKEN_FOR),
        )
        .await
        .expect("answered by the fixed handler");
    assert_eq!(called.answer["status"]["code"], 200, "{:?}", called.answer);
    assert_eq!(called.answer["productInfo"]["productId"], BROKEN_FOR);
    let fixed = called.fixed.expect("the answer came after a fix");
    assert!(fixed.violation.contains("schema"), "{fixed:?}");
    assert!(fixed.provider.contains(&before.to_string()), "{fixed:?}");

    // The model was asked to fix the handler from the report, which named the request.
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "evaluate, generate, fix");
    let fix_request = requests[2].body.to_string();
    assert!(fix_request.contains(BROKEN_FOR), "{fix_request}");

    // The same protocol hash, a new handler version; the faulty one is retired.
    let after = active(&store, &negotiated.hash).await;
    assert_ne!(after.id, before);
    assert_eq!(after.source, right);
    let retired = store
        .get_handler(before)
        .await
        .expect("query")
        .expect("kept");
    assert_eq!(retired.state, HandlerState::Retired);
    let events = fix_events(&store).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].subject, negotiated.hash.to_string());
    assert_eq!(events[0].outcome, "accepted");

    // The next call needs no fix, and no model.
    let again = requester
        .call(
            &provider.url(),
            &negotiated.hash,
            request("m-2", BROKEN_FOR),
        )
        .await
        .expect("answered");
    assert!(again.fixed.is_none());
    assert_eq!(again.answer["status"]["code"], 200);
    assert_eq!(model.requests().len(), 3);
    provider.stop().await;
}

#[tokio::test]
async fn another_instance_on_the_same_database_serves_the_fixed_handler() {
    let _turn = MODEL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = faulty_provider(dir.path()).await;
    faulty.fix_with(&faulty.right);
    let Faulty {
        provider, settings, ..
    } = faulty;
    // A second instance of the same agent: its own listener, the same database.
    let second = TestApp::spawn(&settings).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let (requester, negotiated) = negotiated_product(requester_dir.path(), &provider.url()).await;
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    let broken = parley_nlip::to_json_value(&application_message(
        &negotiated.hash,
        request("b-1", BROKEN_FOR),
    ));
    let (_, reply, code) = post_coded(&second, &broken).await;
    assert_eq!(
        code, "invalid_response",
        "the faulty handler serves there: {reply}"
    );

    // The first instance fixes its handler; the second, once its cached copy is due for a look
    // at the store, serves the new version.
    let called = requester
        .call(
            &provider.url(),
            &negotiated.hash,
            request("m-1", BROKEN_FOR),
        )
        .await
        .expect("answered by the fixed handler");
    assert!(called.fixed.is_some());
    tokio::time::sleep(ProtocolCache::REVALIDATE_AFTER).await;
    let (status, reply, code) = post_coded(&second, &broken).await;
    assert_eq!((status, code.as_str()), (200, ""), "{reply}");
    assert!(
        reply.to_string().contains(BROKEN_FOR),
        "answered by the fixed handler: {reply}"
    );
    second.stop().await;
    provider.stop().await;
}

#[tokio::test]
async fn a_report_on_an_answer_that_follows_the_protocol_is_refused_with_reasons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let provider = TestApp::spawn(&settings).await;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let (requester, negotiated) = negotiated_product(requester_dir.path(), &provider.url()).await;
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    let store = store_of(&settings).await;
    let before = active(&store, &negotiated.hash).await.id;
    let asked = request("m-1", "P12345");
    let called = requester
        .call(&provider.url(), &negotiated.hash, asked.clone())
        .await
        .expect("answered");
    assert!(
        called.fixed.is_none(),
        "a conforming answer is not reported"
    );

    // The requester says the answer is wrong anyway.
    let mut client =
        parley::client::NlipClient::connect_as(&provider.url(), false, &requester.tls, None)
            .await
            .expect("client");
    let answer = requester
        .report_error(
            &mut client,
            &negotiated.hash,
            &asked,
            Some(&called.answer),
            "the price should be in EUR",
        )
        .await
        .expect("the provider answers the report");
    let FixAnswer::Refused { reason } = answer else {
        panic!("a conforming answer is not fixed: {answer:?}");
    };
    assert!(reason.contains("follows the response schema"), "{reason}");
    assert!(reason.contains("test cases"), "{reason}");
    assert_eq!(
        active(&store, &negotiated.hash).await.id,
        before,
        "unchanged"
    );
    let events = fix_events(&store).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].outcome, "rejected");

    // A protocol without test cases of its own is checked against those its handler was
    // verified against: the cases the provider wrote for it.
    let negotiated = requester
        .negotiate(&provider.url(), &without_test_cases(), |_| {})
        .await
        .expect("negotiate");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    let called = requester
        .call(&provider.url(), &negotiated.hash, asked.clone())
        .await
        .expect("answered");
    let answer = requester
        .report_error(
            &mut client,
            &negotiated.hash,
            &asked,
            Some(&called.answer),
            "the price should be in EUR",
        )
        .await
        .expect("the provider answers the report");
    let FixAnswer::Refused { reason } = answer else {
        panic!("a conforming answer is not fixed: {answer:?}");
    };
    assert!(
        reason.contains("test cases it was verified against"),
        "{reason}"
    );
    assert!(!reason.contains(" 0 test cases"), "{reason}");

    // A report that is not about a protocol served here is `unknown_protocol`.
    let unknown = FixReport::new(ProtocolHash::of("another protocol"), asked, None, "wrong");
    let reply = client
        .send(&unknown.to_message())
        .await
        .expect("a reply")
        .message;
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("an error").code,
        "unknown_protocol"
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_rebuild_that_still_answers_out_of_schema_is_refused_and_the_handler_kept() {
    let _turn = MODEL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = faulty_provider(dir.path()).await;
    // The model's "fix" is another version of the faulty handler: it passes the test cases
    // again, but not the reported request.
    faulty.fix_with(&format!(
        "{}\n// Checked the status again.\n",
        faulty.faulty
    ));
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let url = faulty.provider.url();
    let negotiated = requester
        .negotiate(&url, &product_protocol(), |_| {})
        .await
        .expect("negotiate");
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    let store = store_of(&faulty.settings).await;
    let before = active(&store, &negotiated.hash).await.id;

    let refused = requester
        .call(&url, &negotiated.hash, request("m-1", BROKEN_FOR))
        .await
        .expect_err("no fixed handler");
    let RequesterError::FixRefused {
        hash,
        violation,
        reason,
    } = &refused
    else {
        panic!("the provider's refusal: {refused}");
    };
    assert_eq!(hash, &negotiated.hash.to_string());
    assert!(violation.contains("schema"), "{violation}");
    assert!(
        reason.contains("does not answer the reported request"),
        "{reason}"
    );
    assert_eq!(faulty.model.requests().len(), 3, "evaluate, generate, fix");
    assert_eq!(active(&store, &negotiated.hash).await.id, before, "kept");
    let events = fix_events(&store).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].outcome, "rejected");
    // Other products are still served by the handler that was kept.
    let called = requester
        .call(&url, &negotiated.hash, request("m-2", "P12345"))
        .await
        .expect("answered");
    assert_eq!(called.answer["status"]["code"], 200);
    faulty.provider.stop().await;
}

#[tokio::test]
async fn a_peer_that_may_not_call_the_protocol_cannot_make_it_rebuild() {
    let _turn = MODEL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = faulty_provider(dir.path()).await;
    // Were the report taken, the model would fix the handler.
    faulty.fix_with(&faulty.right);
    let Faulty {
        model,
        provider,
        settings,
        ..
    } = faulty;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let (_, negotiated) = negotiated_product(requester_dir.path(), &provider.url()).await;
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    let store = store_of(&settings).await;
    let before = active(&store, &negotiated.hash).await.id;

    // Another address, anonymous: the protocol is not its own, so its report of a genuinely
    // faulty answer is refused before anything runs, and it is asked to authenticate.
    let report = FixReport::new(
        negotiated.hash,
        request("m-1", BROKEN_FOR),
        None,
        "the status is not an object",
    );
    let body = parley_nlip::to_json_value(&report.to_message());
    let response = client_from(OTHER)
        .post(provider.url())
        .json(&body)
        .send()
        .await
        .expect("a reply");
    assert_eq!(response.status().as_u16(), 401);
    let reply: Message =
        parley_nlip::from_json_value(&response.json().await.expect("JSON")).expect("NLIP");
    assert_eq!(
        ErrorInfo::from_message(&reply).expect("an error").code,
        "authentication_required"
    );
    assert_eq!(model.requests().len(), 2, "no fix was asked of the model");
    assert_eq!(
        active(&store, &negotiated.hash).await.id,
        before,
        "unchanged"
    );
    let refused = store
        .list_audit(AuditFilter {
            action: Some("handler.fix".into()),
            outcome: Some("refused".into()),
            limit: 10,
            ..AuditFilter::default()
        })
        .await
        .expect("the audit log");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].address.as_deref(), Some("127.0.0.2"));
    provider.stop().await;
}

#[tokio::test]
async fn over_seed_002s_framing_the_report_goes_on_the_connection_of_the_call() {
    let _turn = MODEL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = faulty_provider(dir.path()).await;
    faulty.fix_with(&faulty.right);
    let Faulty {
        model,
        provider,
        settings,
        right,
        ..
    } = faulty;
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = Requester {
        wire: Wire::Anp(AnpOptions::default()),
        ..new_requester(requester_dir.path()).await
    };
    // No path: the provider's `/anp`.
    let base = format!("http://{}", provider.addr);
    let negotiated = requester
        .negotiate(&base, &product_protocol(), |_| {})
        .await
        .expect("negotiate");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:?}",
        negotiated.transcript
    );
    let store = store_of(&settings).await;
    let before = active(&store, &negotiated.hash).await.id;

    let called = requester
        .call(&base, &negotiated.hash, request("a-1", BROKEN_FOR))
        .await
        .expect("answered by the fixed handler");
    assert_eq!(called.answer["status"]["code"], 200, "{:?}", called.answer);
    assert!(called.fixed.is_some(), "{called:?}");
    assert_eq!(model.requests().len(), 3, "evaluate, generate, fix");
    let after = active(&store, &negotiated.hash).await;
    assert_ne!(after.id, before);
    assert_eq!(after.source, right);
    provider.stop().await;
}

#[tokio::test]
async fn error_reports_meet_the_negotiation_throttle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    // One a second, none saved up: the second report in a row is refused.
    settings.throttle.negotiations.per_address = parley::config::Rate::new(60, 1);
    let provider = TestApp::spawn(&settings).await;
    let report = FixReport::new(
        ProtocolHash::of("a protocol"),
        request("m-1", "P12345"),
        None,
        "wrong",
    );
    let body = parley_nlip::to_json_value(&report.to_message());
    let client = reqwest::Client::new();
    let mut codes = Vec::new();
    for _ in 0..2 {
        let response = client
            .post(provider.url())
            .json(&body)
            .send()
            .await
            .expect("a reply");
        let reply: Message =
            parley_nlip::from_json_value(&response.json().await.expect("JSON")).expect("NLIP");
        codes.push(ErrorInfo::from_message(&reply).expect("an error").code);
    }
    assert_eq!(codes, ["unknown_protocol", "rate_limited"]);
    provider.stop().await;
}
