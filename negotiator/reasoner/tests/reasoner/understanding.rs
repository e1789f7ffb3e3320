//! The built-in reasoner reading simple requests: every phrasing of `data/phrasings.toml`
//! against the example capabilities, plus typos, conversations that saw the list already, and
//! an agent without capabilities.

use std::path::Path;
use std::sync::Arc;

use parley_capabilities::{Capabilities, FileFormat};
use parley_reasoner::{DialogueTurn, NlAnswer, NlRequest, Reasoner, ReasonerConfig, build};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::capabilities;

fn example() -> Arc<dyn Reasoner> {
    build(ReasonerConfig::Builtin, capabilities()).expect("builtin always builds")
}

async fn ask(reasoner: &Arc<dyn Reasoner>, text: &str) -> NlAnswer {
    reasoner
        .answer(NlRequest::english(text))
        .await
        .expect("builtin answers")
}

#[derive(Debug, Deserialize)]
struct Phrasings {
    call: Vec<Call>,
    needs_input: Vec<About>,
    read_only: Vec<ReadOnly>,
    refuse: Refuse,
    flights: Domain,
}

/// Phrasings for another capabilities file.
#[derive(Debug, Deserialize)]
struct Domain {
    call: Vec<Call>,
    refuse: Refuse,
}

#[derive(Debug, Deserialize)]
struct Call {
    capability: String,
    arguments: Value,
    phrasings: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct About {
    capability: String,
    phrasings: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct ReadOnly {
    verb: String,
    phrasings: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Refuse {
    phrasings: Vec<String>,
}

fn phrasings() -> Phrasings {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/phrasings.toml");
    toml::from_str(&std::fs::read_to_string(path).expect("phrasings file")).expect("phrasings")
}

#[tokio::test]
async fn every_request_phrasing_calls_its_capability_and_says_which() {
    let checked = check_calls(&example(), phrasings().call).await;
    assert!(checked >= 20, "{checked} phrasings");
}

#[tokio::test]
async fn a_second_domain_is_read_by_the_same_rules() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/flights.toml");
    let caps = Capabilities::load(&path, |_| None).expect("the flight capabilities load");
    let reasoner = build(ReasonerConfig::Builtin, Arc::new(caps)).expect("builds");
    let domain = phrasings().flights;
    check_calls(&reasoner, domain.call).await;
    for text in &domain.refuse.phrasings {
        let answer = ask(&reasoner, text).await;
        assert!(
            answer.capability_calls.is_empty(),
            "{text:?}: {}",
            answer.text
        );
        assert!(
            answer.text.starts_with("I cannot"),
            "{text:?}: {}",
            answer.text
        );
    }
    let answer = ask(&reasoner, "Which gate does flight LH400 leave from?").await;
    assert!(
        answer
            .text
            .starts_with("getFlightStatus (flightNumber LH400): gate Z15."),
        "{}",
        answer.text
    );
}

/// Asks every phrasing of `cases` and checks the call made; returns how many were asked.
async fn check_calls(reasoner: &Arc<dyn Reasoner>, cases: Vec<Call>) -> usize {
    let mut checked = 0;
    for case in cases {
        for text in &case.phrasings {
            let answer = ask(reasoner, text).await;
            let calls: Vec<(&str, &Value)> = answer
                .capability_calls
                .iter()
                .map(|c| (c.capability.as_str(), &c.arguments))
                .collect();
            assert_eq!(
                calls,
                [(case.capability.as_str(), &case.arguments)],
                "{text:?} → {}",
                answer.text
            );
            assert!(
                answer.text.starts_with(&case.capability),
                "{text:?}: the answer names the capability: {}",
                answer.text
            );
            let call = &answer.capability_calls[0];
            assert!(call.result.is_ok(), "{text:?}: {:?}", call.result);
            assert_eq!(answer.failure, None);
            checked += 1;
        }
    }
    checked
}

#[tokio::test]
async fn answers_put_the_asked_for_field_first() {
    let reasoner = example();
    let answer = ask(&reasoner, "How much is product P12345?").await;
    assert!(
        answer
            .text
            .starts_with("getProductInfo (productId P12345): price 1299.99"),
        "{}",
        answer.text
    );
    assert!(
        answer.text.contains("High-performance Laptop"),
        "{}",
        answer.text
    );
    let answer = ask(&reasoner, "has o-1003 shipped?").await;
    assert!(
        answer
            .text
            .starts_with("getOrderStatus (orderId O-1003): status pending."),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn requests_without_their_input_name_the_capability_and_ask_for_it() {
    let reasoner = example();
    for case in phrasings().needs_input {
        for text in &case.phrasings {
            let answer = ask(&reasoner, text).await;
            assert!(answer.capability_calls.is_empty(), "{text:?}");
            assert!(
                answer
                    .text
                    .starts_with(&format!("That sounds like {}", case.capability)),
                "{text:?}: {}",
                answer.text
            );
            assert!(answer.text.contains("for example"), "{}", answer.text);
        }
    }
}

#[tokio::test]
async fn changes_are_never_answered_by_a_lookup() {
    let reasoner = example();
    for case in phrasings().read_only {
        for text in &case.phrasings {
            let answer = ask(&reasoner, text).await;
            assert!(answer.capability_calls.is_empty(), "{text:?}");
            assert!(
                answer
                    .text
                    .starts_with(&format!("I cannot {} anything", case.verb)),
                "{text:?}: {}",
                answer.text
            );
        }
    }
}

#[tokio::test]
async fn what_it_cannot_tell_is_refused_with_a_brief_list() {
    let reasoner = example();
    for text in &phrasings().refuse.phrasings {
        let answer = ask(&reasoner, text).await;
        assert!(
            answer.capability_calls.is_empty(),
            "{text:?} called {:?}",
            answer.capability_calls
        );
        assert!(
            answer
                .text
                .starts_with("I cannot tell what you are asking for"),
            "{text:?}: {}",
            answer.text
        );
        assert!(
            answer.text.contains("I can: getOrderStatus (look up a customer order by its id); getProductInfo (look up a product by its id)."),
            "{}",
            answer.text
        );
        assert!(answer.text.len() < 300, "brief: {}", answer.text);
    }
}

#[tokio::test]
async fn a_question_about_what_it_can_do_in_more_words_gets_the_help() {
    let reasoner = example();
    let help = ask(&reasoner, "help").await.text;
    for text in [
        "Hello! What can you do for me?",
        "so, what are your capabilities?",
    ] {
        assert_eq!(ask(&reasoner, text).await.text, help, "{text:?}");
    }
}

#[tokio::test]
async fn a_conversation_gets_the_list_once() {
    let reasoner = example();
    let first = ask(&reasoner, "Tell me a joke").await;
    let second = reasoner
        .answer(NlRequest {
            history: vec![
                DialogueTurn::peer("Tell me a joke"),
                DialogueTurn::agent(first.text.clone()),
            ],
            ..NlRequest::english("What about a poem?")
        })
        .await
        .expect("answers");
    assert!(first.text.contains("I can: "), "{}", first.text);
    assert!(!second.text.contains("I can: "), "{}", second.text);
    assert!(second.text.contains("\"help\""), "{}", second.text);
}

#[tokio::test]
async fn typos_of_capability_names_get_did_you_mean() {
    let reasoner = example();
    let answer = ask(&reasoner, r#"getProdutInfo {"productId": "P12345"}"#).await;
    assert!(answer.capability_calls.is_empty());
    assert_eq!(
        answer.failure.as_ref().map(|f| f.code()),
        Some("unknown_capability")
    );
    assert!(
        answer.text.contains("Did you mean getProductInfo?"),
        "{}",
        answer.text
    );
    let answer = ask(&reasoner, "getorderstats").await;
    assert!(answer.failure.is_none());
    assert!(
        answer
            .text
            .starts_with("There is no capability getorderstats. Did you mean getOrderStatus?"),
        "{}",
        answer.text
    );
    let answer = ask(&reasoner, "please explain getProductInf0s to me").await;
    assert!(answer.capability_calls.is_empty());
    assert!(
        answer
            .text
            .starts_with("There is no capability getProductInf0s; did you mean getProductInfo?"),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn a_capability_named_with_plain_words_reads_them_for_its_input() {
    let reasoner = example();
    let answer = ask(&reasoner, "getProductInfo P23456").await;
    assert_eq!(answer.capability_calls.len(), 1, "{}", answer.text);
    assert_eq!(
        answer.capability_calls[0].arguments,
        json!({"productId": "P23456"})
    );
    let answer = ask(&reasoner, "getProductInfo the mouse").await;
    assert!(answer.capability_calls.is_empty());
    assert!(answer.text.contains("one JSON object"), "{}", answer.text);
}

#[tokio::test]
async fn a_failed_call_is_reported_as_a_failure() {
    let reasoner = example();
    let answer = ask(&reasoner, "status of order O-9999").await;
    assert_eq!(answer.capability_calls.len(), 1);
    let failure = answer.failure.as_ref().expect("the call failed");
    assert_eq!(failure.code(), "not_found");
    assert!(
        answer
            .text
            .starts_with("getOrderStatus (orderId O-9999) failed (not_found): no record"),
        "{}",
        answer.text
    );
    // A product that does not exist is a result (null), not a failure.
    let answer = ask(&reasoner, "price of P99999").await;
    assert_eq!(answer.failure, None);
    assert_eq!(
        answer.text,
        "getProductInfo (productId P99999) found nothing."
    );
}

#[tokio::test]
async fn an_agent_without_capabilities_says_so_and_offers_no_help_to_call_them() {
    let caps = Capabilities::parse(
        "[agent]\nname = \"Bare\"\ndescription = \"Nothing declared.\"\n",
        FileFormat::Toml,
        Path::new("."),
        "test",
        |_| None,
    )
    .expect("valid");
    let reasoner = build(ReasonerConfig::Builtin, Arc::new(caps)).expect("builds");
    for text in ["hello", "How much is product P12345?", "help"] {
        let answer = ask(&reasoner, text).await;
        assert!(answer.capability_calls.is_empty());
        assert!(
            !answer.text.contains("how to call") && !answer.text.contains("Send \"help\""),
            "{text:?}: {}",
            answer.text
        );
        assert!(
            answer.text.contains("o capabilities"),
            "{text:?}: {}",
            answer.text
        );
    }
}
