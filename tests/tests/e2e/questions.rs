//! The provider's model asks the requester about a proposal (`naturalLanguageNegotiation`)
//! before deciding: a Parley requester answers under the same `messageId`, over NLIP and over
//! seed 002's `/anp`, from its document or with a model of its own (an `agent` binding with the
//! server's); the provider's model decides with the answer; questions are bounded on both sides;
//! a `RESPONSE` to no question is an error.

use std::sync::Arc;

use parley::negotiation::anp::AnpOptions;
use parley::negotiation::requester::{Outcome, Requester, Wire};
use parley_anp::{MetaMessage, ProtocolHash};
use parley_nlip::ErrorInfo;
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{OpenAiConfig, OpenAiProtocolReasoner};
use parley_store::Direction;
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};

use crate::requester::store_of;
use crate::support::{MODEL, negotiated_product, new_requester, product_protocol, request};

const QUESTION: &str = "Is productId the catalogue's own product id?";

/// The provider model's question.
fn ask() -> ScriptedReply {
    ScriptedReply::text(
        json!({"decision": "ask", "reason": "the id decides the capability", "question": QUESTION})
            .to_string(),
    )
}

/// The provider model's acceptance, for the example catalogue's capability.
fn accept() -> ScriptedReply {
    ScriptedReply::text(
        json!({"decision": "accept", "reason": "getProductInfo serves it", "capability": "getProductInfo"})
            .to_string(),
    )
}

/// The provider model's handler: the one the built-in reasoner writes for the protocol.
async fn handler() -> ScriptedReply {
    let source = crate::support::builtin_handler().await.source;
    ScriptedReply::text(json!({"source": source, "grants": ["getProductInfo"]}).to_string())
}

/// A provider whose protocol reasoner is `model` alone.
fn model_settings(dir: &std::path::Path, model: &ScriptedOpenAi) -> parley::config::Settings {
    let mut settings = test_settings(dir);
    settings.reasoner = parley::config::ReasonerKind::Openai;
    settings.openai.base_url = model.base_url();
    settings.negotiation.backend = parley::config::ProtocolBackend::Openai;
    settings
}

/// The `naturalLanguageNegotiation` messages of a transcript: direction, type, messageId, text.
fn questions(transcript: &[(Direction, Value)]) -> Vec<(Direction, String, String, String)> {
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
    transcript
        .iter()
        .filter(|(_, v)| v["action"] == "naturalLanguageNegotiation")
        .map(|(d, v)| {
            (
                *d,
                text(v, "type"),
                text(v, "messageId"),
                text(v, "message"),
            )
        })
        .collect()
}

/// The system and user messages of the model's `n`th request, as one text.
fn prompt(model: &ScriptedOpenAi, n: usize) -> String {
    model.requests()[n].body["messages"].to_string()
}

/// The provider's transcript of its one negotiation of `hash`.
async fn provider_transcript(
    settings: &parley::config::Settings,
    hash: &ProtocolHash,
) -> Vec<(Direction, Value)> {
    let store = store_of(settings).await;
    let records = store
        .negotiations_for_protocol(&hash.to_string())
        .await
        .expect("negotiations");
    assert_eq!(records.len(), 1, "{records:?}");
    store
        .get_negotiation(records[0].id)
        .await
        .expect("query")
        .expect("the negotiation")
        .transcript
        .into_iter()
        .map(|m| (m.direction, m.message))
        .collect()
}

#[tokio::test]
async fn the_provider_asks_the_requester_and_its_model_decides_with_the_answer() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.push(ask());
    model.push(accept());
    model.push(handler().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = model_settings(dir.path(), &model);
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(local.path()).await;
    let text = product_protocol();

    let negotiated = requester
        .negotiate(&provider.url(), &text, |_| {})
        .await
        .expect("negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );

    // The question came in, and went back answered under its messageId, from the document.
    let asked = questions(&negotiated.transcript);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let (ref d, ref kind, ref id, ref question) = asked[0];
    assert_eq!((*d, kind.as_str()), (Direction::Inbound, "REQUEST"));
    assert_eq!(question, QUESTION);
    assert!(!id.is_empty());
    let (ref d, ref kind, ref answered_id, ref answer) = asked[1];
    assert_eq!((*d, kind.as_str()), (Direction::Outbound, "RESPONSE"));
    assert_eq!(
        answered_id, id,
        "the answer carries the question's messageId"
    );
    assert!(answer.contains("no other information"), "{answer}");
    assert!(answer.contains("Look up one product"), "{answer}");

    // The model was asked three times: the question, the decision with the answer, the handler.
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    assert!(
        prompt(&model, 0).contains(r#"\"ask\""#),
        "asking is allowed"
    );
    assert!(!prompt(&model, 0).contains("no other information"));
    let second = prompt(&model, 1);
    assert!(second.contains(QUESTION), "{second}");
    assert!(second.contains("no other information"), "{second}");
    assert!(
        second.contains("untrusted-data-"),
        "the answer is delimited: {second}"
    );

    // The provider has both on record, in its negotiation's transcript.
    let recorded = questions(&provider_transcript(&settings, &negotiated.hash).await);
    assert_eq!(
        recorded
            .iter()
            .map(|(d, k, i, _)| (*d, k.as_str(), i.as_str()))
            .collect::<Vec<_>>(),
        [
            (Direction::Outbound, "REQUEST", id.as_str()),
            (Direction::Inbound, "RESPONSE", id.as_str())
        ]
    );

    // And the agreed protocol serves.
    let called = requester
        .call(&provider.url(), &negotiated.hash, request("m1", "P12345"))
        .await
        .expect("call");
    assert_eq!(called.answer["status"]["code"], 200);
    provider.stop().await;
}

#[tokio::test]
async fn over_anp_a_requester_with_a_model_answers_with_it() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.push(ask());
    model.push(accept());
    model.push(handler().await);
    let own = ScriptedOpenAi::start().await;
    const ANSWER: &str = "Yes: the id is the one in your catalogue, such as P12345.";
    own.push(ScriptedReply::text(json!({"answer": ANSWER}).to_string()));
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = model_settings(dir.path(), &model);
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let answerer = OpenAiProtocolReasoner::new(OpenAiConfig::new(own.base_url(), "own-model"))
        .expect("answerer");
    let requester = Requester {
        wire: Wire::Anp(AnpOptions::default()),
        answerer: Some(Arc::new(answerer)),
        ..new_requester(local.path()).await
    };

    let negotiated = requester
        .negotiate(
            &format!("http://{}", provider.addr),
            &product_protocol(),
            |_| {},
        )
        .await
        .expect("negotiation runs");
    assert_eq!(
        negotiated.outcome,
        Outcome::Agreed,
        "{:#?}",
        negotiated.transcript
    );
    let asked = questions(&negotiated.transcript);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[1].1, "RESPONSE");
    assert_eq!(asked[1].2, asked[0].2, "the same messageId");
    assert_eq!(asked[1].3, ANSWER);

    // The requester's model saw the question as delimited data beside its document.
    let own_requests = own.requests();
    assert_eq!(own_requests.len(), 1);
    let seen = own_requests[0].body["messages"].to_string();
    assert!(
        seen.contains(QUESTION) && seen.contains("Look up one product"),
        "{seen}"
    );
    assert!(seen.contains(r#"name=\"question\""#), "{seen}");
    // The provider's model decided with that answer.
    assert!(prompt(&model, 1).contains(ANSWER));
    provider.stop().await;
}

#[tokio::test]
async fn a_model_that_keeps_asking_must_decide_after_the_question_limit() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.set_fallback(ask());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = model_settings(dir.path(), &model);
    settings.negotiation.max_questions = 2;
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let (_, negotiated) = negotiated_product(local.path(), &provider.url()).await;
    let Outcome::Rejected { code, reason } = &negotiated.outcome else {
        panic!("no agreement without a decision: {:?}", negotiated.outcome);
    };
    assert_eq!(code, "peer_rejected", "{reason}");
    assert!(reason.contains("still unclear"), "{reason}");
    let requests = questions(&negotiated.transcript)
        .into_iter()
        .filter(|q| q.1 == "REQUEST")
        .count();
    assert_eq!(requests, 2, "{:#?}", negotiated.transcript);
    // Two questions, then a third evaluation told to decide.
    assert_eq!(model.requests().len(), 3);
    let last = prompt(&model, 2);
    assert!(last.contains("Decide now"), "{last}");
    assert!(!last.contains(r#"\"decision\": \"ask\""#), "{last}");
    provider.stop().await;
}

#[tokio::test]
async fn questions_count_as_rounds() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.set_fallback(ask());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = model_settings(dir.path(), &model);
    // The proposal is one round, the one question the other.
    settings.negotiation.max_rounds = 2;
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let (_, negotiated) = negotiated_product(local.path(), &provider.url()).await;
    assert!(
        matches!(&negotiated.outcome, Outcome::Rejected { code, .. } if code == "peer_rejected"),
        "{:?}",
        negotiated.outcome
    );
    let asked = questions(&negotiated.transcript);
    assert_eq!(asked.len(), 2, "one question, one answer: {asked:?}");
    assert_eq!(model.requests().len(), 2);
    provider.stop().await;
}

#[tokio::test]
async fn a_requester_answers_at_most_its_round_limit_of_questions() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.set_fallback(ask());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = model_settings(dir.path(), &model);
    settings.negotiation.max_questions = 5;
    let provider = TestApp::spawn(&settings).await;
    let local = tempfile::tempdir().expect("tempdir");
    let requester = Requester {
        max_rounds: 2,
        ..new_requester(local.path()).await
    };

    let negotiated = requester
        .negotiate(&provider.url(), &product_protocol(), |_| {})
        .await
        .expect("negotiation runs");
    assert!(
        matches!(&negotiated.outcome, Outcome::Rejected { code, .. } if code == "too_many_questions"),
        "{:?}",
        negotiated.outcome
    );
    let kinds: Vec<String> = questions(&negotiated.transcript)
        .into_iter()
        .map(|q| q.1)
        .collect();
    assert_eq!(
        kinds,
        ["REQUEST", "RESPONSE", "REQUEST", "RESPONSE", "REQUEST"]
    );
    // The provider was told, and its negotiation ended with it.
    let (direction, last) = negotiated.transcript.last().expect("a transcript");
    assert_eq!(*direction, Direction::Outbound);
    assert_eq!(
        (&last["action"], &last["status"]),
        (&json!("protocolNegotiation"), &json!("rejected"))
    );
    let ended = store_of(&settings)
        .await
        .list_audit(parley_store::AuditFilter {
            action: Some("negotiation.end".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("audit");
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].outcome, "rejected");
    assert_eq!(
        ended[0].detail.as_ref().map(|d| &d["reason"]),
        Some(&json!("peer_rejected"))
    );
    provider.stop().await;
}

/// Meta-protocol messages in one control message of `conversation`: status and reply.
async fn send_meta(
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
    message.submessages.extend(conversation.cloned());
    let (status, reply) =
        parley_tests::post_json(&app.url(), &parley_nlip::to_json_value(&message)).await;
    let reply = parley_nlip::from_json_value(&reply).expect("NLIP reply");
    (status, reply)
}

fn nl_response(message_id: &str, text: &str) -> Value {
    MetaMessage::natural_language(
        parley_anp::messages::NlMessageType::Response,
        message_id,
        text,
    )
    .to_value()
}

#[tokio::test]
async fn a_response_under_another_message_id_is_an_error_and_the_question_stays_open() {
    let _turn = MODEL.lock().await;
    let model = ScriptedOpenAi::start().await;
    model.push(ask());
    model.push(accept());
    model.push(handler().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = TestApp::spawn(&model_settings(dir.path(), &model)).await;
    let hello = MetaMessage::source_hello(parley_anp::messages::MetaProtocolInfo::parley([]));
    let proposal = json!({"action": "protocolNegotiation", "sequenceId": 0,
                          "candidateProtocols": product_protocol(), "status": "negotiating"});

    let (status, reply) = send_meta(&provider, &[hello.to_value(), proposal], None).await;
    assert_eq!(status, 200, "{reply:?}");
    let conversation = reply
        .tokens()
        .find(|t| t.token_kind() == Some(parley_nlip::TokenKind::Conversation))
        .expect("a conversation token")
        .clone();
    let metas = parley::negotiation::nlip::meta_values(&reply);
    let question = metas
        .iter()
        .find(|v| v["action"] == "naturalLanguageNegotiation")
        .unwrap_or_else(|| panic!("a question: {metas:?}"));
    assert_eq!(question["type"], "REQUEST");
    let id = question["messageId"].as_str().expect("messageId");

    // An answer to another question is refused, clearly, and the negotiation waits on.
    let (status, reply) = send_meta(
        &provider,
        &[nl_response("not-the-question", "yes")],
        Some(&conversation),
    )
    .await;
    assert_eq!(status, 422, "{reply:?}");
    let error = ErrorInfo::from_message(&reply).expect("an error");
    assert_eq!(error.code, "unknown_message_id");
    assert!(
        error.message.contains("not-the-question") && error.message.contains(id),
        "{}",
        error.message
    );
    assert_eq!(model.requests().len(), 1, "nothing was evaluated again");

    // The right messageId is answered with the decision.
    let (status, reply) =
        send_meta(&provider, &[nl_response(id, "It is.")], Some(&conversation)).await;
    assert_eq!(status, 200, "{reply:?}");
    let metas = parley::negotiation::nlip::meta_values(&reply);
    assert!(
        metas
            .iter()
            .any(|v| v["action"] == "protocolNegotiation" && v["status"] == "accepted"),
        "{metas:?}"
    );
    assert!(prompt(&model, 1).contains("It is."));

    // The same answer again answers nothing: no question is open any more.
    let (status, reply) =
        send_meta(&provider, &[nl_response(id, "It is.")], Some(&conversation)).await;
    assert_eq!(status, 422, "{reply:?}");
    let error = ErrorInfo::from_message(&reply).expect("an error");
    assert_eq!(error.code, "unknown_message_id");
    assert!(error.message.contains("no question"), "{}", error.message);
    provider.stop().await;
}

#[tokio::test]
async fn an_agent_binding_answers_with_the_servers_model() {
    let _turn = MODEL.lock().await;
    let desk_model = ScriptedOpenAi::start().await;
    desk_model.push(ask());
    desk_model.push(accept());
    desk_model.push(handler().await);
    let front_model = ScriptedOpenAi::start().await;
    const ANSWER: &str = "The front desk passes on the catalogue's own ids.";
    front_model.push(ScriptedReply::text(json!({"answer": ANSWER}).to_string()));
    let desk_dir = tempfile::tempdir().expect("tempdir");
    let desk = TestApp::spawn(&model_settings(desk_dir.path(), &desk_model)).await;
    let front_dir = tempfile::tempdir().expect("tempdir");
    let mut front_settings = test_settings(front_dir.path());
    front_settings.capabilities = None;
    front_settings.sandbox.deadline_ms = 10_000;
    front_settings.reasoner = parley::config::ReasonerKind::Openai;
    front_settings.openai.base_url = front_model.base_url();
    let file = parley_tests::repo_root().join("examples/front-desk/capabilities.toml");
    let base = format!("http://{}", desk.addr);
    let capabilities = parley_tests::capabilities_with(&file, &[("PRODUCT_DESK_URL", &base)]);
    let front = TestApp::spawn_with(&front_settings, capabilities).await;

    // A tool call: the front desk's binding negotiates with the desk, whose model asks first.
    let call = json!({"format": "structured", "subformat": "json",
                      "content": {"tool": "getProductInfo", "arguments": {"productId": "P12345"}}});
    let (status, reply) = parley_tests::post_json(&front.url(), &call).await;
    assert_eq!(status, 200, "{reply}");
    assert!(
        reply.to_string().contains("High-performance Laptop"),
        "{reply}"
    );
    let asked = front_model.requests();
    assert_eq!(
        asked.len(),
        1,
        "the front desk's model answered the question"
    );
    assert!(asked[0].body["messages"].to_string().contains(QUESTION));
    assert!(
        prompt(&desk_model, 1).contains(ANSWER),
        "the desk decided with it"
    );
    front.stop().await;
    desk.stop().await;
}
