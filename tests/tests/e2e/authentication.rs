//! The NLIP authentication exchange (ECMA-430 §6.2.2) over real sockets: an anonymous peer asking
//! for what needs a credential gets a control message asking for one; it answers with its API key
//! or access token in an `authentication` token submessage; the reply carries a session token of
//! the agent's own, which the peer's later messages carry instead. Parley's client does all of
//! it by itself over HTTP and WebSocket. Credentials never reach the conversation log.

use parley::client::{BearerToken, Credential, NlipClient, Placement};
use parley_auth::Grants;
use parley_auth::testing::{Signer, now};
use parley_nlip::{ErrorInfo, Format, Message, Submessage};
use parley_store::{AuditFilter, Store};
use parley_tests::{TestApp, test_settings};
use serde_json::{Value, json};

/// The session tokens the test server hands out (its agent id is `parley`).
const SESSION: &str = "authentication_parley";

fn tool_call() -> Message {
    Message::json(json!({"tool": "getProductInfo", "arguments": {"productId": "P12345"}}))
}

fn token(subformat: &str, content: &str) -> Submessage {
    Submessage::new(Format::Token, subformat, content)
}

/// POSTs `message`: the status and the reply.
async fn post(url: &str, message: &Message) -> (u16, Message) {
    let response = reqwest::Client::new()
        .post(url)
        .json(&parley_nlip::to_json_value(message))
        .send()
        .await
        .expect("a reply");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON");
    (
        status,
        parley_nlip::from_json_value(&body).expect("an NLIP reply"),
    )
}

fn code(reply: &Message) -> Option<String> {
    ErrorInfo::from_message(reply).map(|e| e.code)
}

fn session_of(reply: &Message) -> Option<Submessage> {
    reply.tokens().find(|t| t.subformat == SESSION).cloned()
}

/// A tool call answering with `credential` in an authentication token: answered, and the
/// session token the reply carries.
async fn open_session(url: &str, credential: &str) -> Submessage {
    let answer = tool_call().with_submessage(token("authentication", credential));
    let (status, reply) = post(url, &answer).await;
    assert_eq!(status, 200, "{reply:?}");
    session_of(&reply).expect("a session")
}

/// A server whose anonymous peers may talk only, trusting one issuer; its store; the API key of
/// a store peer `shop` that may use `getProductInfo`; the issuer's signer.
async fn server(dir: &std::path::Path) -> (TestApp, std::sync::Arc<dyn Store>, String, Signer) {
    let signer = Signer::new("k1");
    let mut settings = test_settings(dir);
    settings.access = Default::default();
    settings.access.anonymous = Grants::talk_only();
    settings.access.issuers = vec![crate::support::trusted_issuer(dir, &signer, None)];
    let app = TestApp::spawn(&settings).await;
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the server's store");
    let key = parley_auth::ApiKey::generate().expect("a key");
    let stored = key.stored();
    store
        .add_peer(parley_store::NewPeer {
            id: "shop".into(),
            key_id: Some(stored.key_id),
            key_digest: Some(stored.digest),
            grants: json!({"talk": true, "capabilities": ["getProductInfo"]}),
        })
        .await
        .expect("the peer is declared");
    (app, store, key.reveal(), signer)
}

#[tokio::test]
async fn an_anonymous_peer_is_asked_answers_with_its_key_and_continues_on_a_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, store, key, _) = server(dir.path()).await;

    // Asked: a control message saying what is missing and how to answer.
    let (status, asked) = post(&app.url(), &tool_call()).await;
    assert_eq!(status, 401);
    assert!(
        asked.is_control(),
        "a request for authentication is a control message"
    );
    assert_eq!(code(&asked).as_deref(), Some("authentication_required"));
    let how = asked
        .submessages
        .iter()
        .find(|s| s.label.as_deref() == Some("authenticate"))
        .expect("how to authenticate")
        .content
        .to_json();
    assert_eq!(how["token_subformat"], "authentication");
    assert_eq!(how["schemes"], json!(["api-key", "oauth-access-token"]));

    // Answered, in the standard's spelling and in the Python SDK's (`authorization`, `Bearer `).
    for (subformat, content) in [
        ("authentication", key.clone()),
        ("authorization", format!("Bearer {key}")),
    ] {
        let answer = tool_call().with_submessage(token(subformat, &content));
        let (status, reply) = post(&app.url(), &answer).await;
        assert_eq!(status, 200, "{subformat}: {reply:?}");
        assert!(
            parley_nlip::to_json_value(&reply)
                .to_string()
                .contains("Laptop"),
            "the tool ran for shop: {reply:?}"
        );
        assert!(
            reply.tokens().any(|t| t.subformat == subformat),
            "the peer's token is echoed (§6.2)"
        );
        let session = session_of(&reply).expect("a session token of the agent's own");

        // The session alone names the peer on later messages; no new session is opened.
        let (status, later) = post(&app.url(), &tool_call().with_submessage(session.clone())).await;
        assert_eq!(status, 200, "{later:?}");
        assert!(
            session_of(&later).is_none(),
            "the agent does not echo its own token"
        );
    }

    // A credential of this agent's form that is wrong is refused and audited; a token this
    // agent cannot read (the peer's own business) leaves the peer anonymous.
    let forged = format!("parley_0123456789abcdef_{}", "A".repeat(43));
    let (status, refused) = post(
        &app.url(),
        &tool_call().with_submessage(token("authentication", &forged)),
    )
    .await;
    assert_eq!(
        (status, code(&refused).as_deref()),
        (401, Some("unauthenticated"))
    );
    let (status, opaque) = post(
        &app.url(),
        &Message::text("english", "hi").with_submessage(token("authorization", "Bearer sdk")),
    )
    .await;
    assert_eq!(status, 200, "talking needs no credential: {opaque:?}");
    let (status, still) = post(
        &app.url(),
        &tool_call().with_submessage(token("authorization", "Bearer sdk")),
    )
    .await;
    assert_eq!(
        (status, code(&still).as_deref()),
        (401, Some("authentication_required"))
    );
    let failures = store
        .list_audit(AuditFilter {
            action: Some("authenticate".into()),
            limit: 10,
            ..AuditFilter::default()
        })
        .await
        .expect("the audit log");
    assert!(
        failures
            .iter()
            .any(|e| e.subject == "nlip-token" && e.outcome == "failed"),
        "{failures:?}"
    );

    // A session the agent does not know (expired, or from before a restart) is asked again.
    let (status, unknown) = post(
        &app.url(),
        &tool_call().with_submessage(token(SESSION, "pls_unknown")),
    )
    .await;
    assert_eq!(
        (status, code(&unknown).as_deref()),
        (401, Some("authentication_required"))
    );
    assert!(unknown.is_control());

    // Revoking the key ends its sessions.
    let session = open_session(&app.url(), &key).await;
    store.revoke_peer("shop").await.expect("revoked");
    tokio::time::sleep(parley::access::KEY_TTL + std::time::Duration::from_millis(300)).await;
    let (status, ended) = post(&app.url(), &tool_call().with_submessage(session)).await;
    assert_eq!(
        (status, code(&ended).as_deref()),
        (401, Some("unauthenticated"))
    );
    app.stop().await;
}

#[tokio::test]
async fn an_access_token_answers_too_and_its_session_ends_with_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, _, _, signer) = server(dir.path()).await;
    let claims = |exp: u64| {
        json!({"iss": "https://idp.test", "sub": "desk", "exp": exp,
               "scope": "parley:capability:getProductInfo"})
    };
    let jwt = signer.sign(&claims(now() + 300));
    let session = open_session(&app.url(), &jwt).await;
    let (status, _) = post(&app.url(), &tool_call().with_submessage(session)).await;
    assert_eq!(status, 200);

    // A token that expires in a second opens a session that ends with it.
    let short = signer.sign(&claims(now() + 1));
    let session = open_session(&app.url(), &short).await;
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (status, ended) = post(&app.url(), &tool_call().with_submessage(session)).await;
    assert_eq!(
        (status, code(&ended).as_deref()),
        (401, Some("authentication_required"))
    );
    app.stop().await;
}

#[tokio::test]
async fn parleys_client_answers_the_request_itself_over_http_and_websocket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, _, key, _) = server(dir.path()).await;
    let credential: Credential = BearerToken::new(&key)
        .expect("a token")
        .presented(Placement::InMessage)
        .into();
    for url in [app.url(), app.ws("/nlip/ws"), app.ws("/nlip/ws/text")] {
        let mut client =
            NlipClient::connect_as(&url, false, &Default::default(), Some(&credential))
                .await
                .expect("connected");
        for round in 0..3 {
            let received = client.send(&tool_call()).await.expect("a reply");
            assert_eq!(
                received.status, 200,
                "{url} round {round}: {:?}",
                received.message
            );
            assert!(
                parley_nlip::to_json_value(&received.message)
                    .to_string()
                    .contains("Laptop"),
                "{url}: {:?}",
                received.message
            );
            // The first answer opened the session; later messages ride on it.
            assert_eq!(
                session_of(&received.message).is_some(),
                round == 0,
                "{url} round {round}"
            );
        }
    }
    // Without a credential, the client passes the request on to its caller.
    let mut anonymous = NlipClient::connect(&app.url(), false)
        .await
        .expect("client");
    let received = anonymous.send(&tool_call()).await.expect("a reply");
    assert_eq!(received.status, 401);
    assert_eq!(
        code(&received.message).as_deref(),
        Some("authentication_required")
    );
    // A question the reasoner answers with a capability the peer may not use asks too.
    let question = Message::text("english", "getProductInfo P12345");
    let received = anonymous.send(&question).await.expect("a reply");
    assert_eq!(
        (received.status, code(&received.message).as_deref()),
        (401, Some("authentication_required"))
    );
    let mut keyed =
        NlipClient::connect_as(&app.url(), false, &Default::default(), Some(&credential))
            .await
            .expect("connected");
    let received = keyed.send(&question).await.expect("a reply");
    assert_eq!(received.status, 200, "{:?}", received.message);
    assert!(
        received
            .message
            .text_content()
            .is_some_and(|t| t.contains("Laptop")),
        "{:?}",
        received.message
    );
    app.stop().await;
}

#[tokio::test]
async fn credentials_never_reach_the_conversation_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (app, store, key, _) = server(dir.path()).await;
    let message = Message::text("english", "hello")
        .with_submessage(token("conversation_client", "c-secret-log"))
        .with_submessage(token("authentication", &key));
    let (status, reply) = post(&app.url(), &message).await;
    assert_eq!(status, 200, "{reply:?}");
    let conversation = reply
        .tokens()
        .find(|t| t.subformat == "conversation_parley")
        .and_then(|t| t.content.as_str())
        .expect("a conversation")
        .to_owned();
    let session = session_of(&reply).expect("a session");
    let follow = Message::text("english", "again")
        .with_submessage(token("conversation_parley", &conversation))
        .with_submessage(session.clone());
    let (status, _) = post(&app.url(), &follow).await;
    assert_eq!(status, 200);
    let logged = store
        .list_messages(&conversation, 0, 100)
        .await
        .expect("the log");
    assert_eq!(logged.len(), 4, "two messages each way");
    let text = serde_json::to_string(&logged.iter().map(|m| &m.message).collect::<Vec<_>>())
        .expect("JSON");
    let secret = session.content.as_str().expect("text");
    assert!(!text.contains(&key), "the key is not logged: {text}");
    assert!(!text.contains(secret), "nor the session token: {text}");
    assert!(text.contains(parley_nlip::REDACTED), "{text}");
    app.stop().await;
}
