//! Meta-protocol messages round-trip exactly as seed 002 spells them, and no input panics the parser.

use parley_anp::ProtocolHash;
use parley_anp::messages::{
    CodeGenerationStatus, MetaMessage, MetaProtocolInfo, MetaStatus, NlMessageType,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Parses `value`, checks it serialises back to exactly `value` (field names, order, values).
fn round_trip(value: Value) -> MetaMessage {
    let msg = MetaMessage::from_value(value.clone()).expect("valid message");
    assert_eq!(msg.to_value(), value);
    // Through text too, with serde.
    let text = serde_json::to_string(&msg).expect("serialises");
    assert_eq!(text, serde_json::to_string(&value).expect("serialises"));
    let back: MetaMessage = serde_json::from_str(&text).expect("parses");
    assert_eq!(back, msg);
    msg
}

#[test]
fn protocol_negotiation_as_in_the_seed() {
    let msg = round_trip(json!({
        "action": "protocolNegotiation",
        "sequenceId": 0,
        "candidateProtocols": "# Requirements\n...",
        "modificationSummary": "",
        "status": "negotiating"
    }));
    let MetaMessage::ProtocolNegotiation(m) = msg else {
        panic!("wrong variant")
    };
    assert_eq!(m.status, MetaStatus::Negotiating);
    for status in ["accepted", "rejected", "timeout"] {
        round_trip(json!({
            "action": "protocolNegotiation",
            "sequenceId": 3,
            "candidateProtocols": "",
            "status": status
        }));
    }
}

#[test]
fn code_generation() {
    for (status, expected) in [
        ("generated", CodeGenerationStatus::Generated),
        ("error", CodeGenerationStatus::Error),
    ] {
        let msg = round_trip(json!({"action": "codeGeneration", "status": status}));
        assert_eq!(msg, MetaMessage::code_generation(expected));
    }
    assert!(
        MetaMessage::from_value(json!({"action": "codeGeneration", "status": "done"})).is_err()
    );
}

#[test]
fn test_cases_negotiation() {
    round_trip(json!({
        "action": "testCasesNegotiation",
        "testCases": "# Test Cases\n...",
        "modificationSummary": "added a 404 case",
        "status": "negotiating"
    }));
    round_trip(json!({"action": "testCasesNegotiation", "testCases": "", "status": "accepted"}));
}

#[test]
fn fix_error_negotiation() {
    round_trip(json!({
        "action": "fixErrorNegotiation",
        "errorDescription": "# Error Description\n- In the response message, the status field is missing the code field",
        "status": "negotiating"
    }));
    round_trip(
        json!({"action": "fixErrorNegotiation", "errorDescription": "", "status": "timeout"}),
    );
}

#[test]
fn natural_language_negotiation() {
    let msg = round_trip(json!({
        "action": "naturalLanguageNegotiation",
        "type": "REQUEST",
        "messageId": "a1b2c3d4e5f6a7b8",
        "message": "Can you also return stock levels?"
    }));
    assert_eq!(
        msg,
        MetaMessage::natural_language(
            NlMessageType::Request,
            "a1b2c3d4e5f6a7b8",
            "Can you also return stock levels?"
        )
    );
    round_trip(json!({
        "action": "naturalLanguageNegotiation",
        "type": "RESPONSE",
        "messageId": "a1b2c3d4e5f6a7b8",
        "message": "Yes."
    }));
    assert!(
        MetaMessage::from_value(json!({
            "action": "naturalLanguageNegotiation", "type": "request", "messageId": "x", "message": "y"
        }))
        .is_err()
    );
}

#[test]
fn hellos_as_in_the_seed() {
    let source = round_trip(json!({
        "version": "1.0",
        "type": "sourceHello",
        "metaProtocol": {
            "version": "1.0",
            "supportedCapabilities": [
                "naturalLanguageProtocol", "verificationProtocol", "naturalLanguageNegotiation",
                "testCasesNegotiation", "fixErrorNegotiation"
            ],
            "protocolHash": "1234567890abcdef",
            "candidateProtocols": ["https://example.com/protocol/1.0", "https://example.com/protocol/2.0"]
        },
        "sessionId": "kept as received"
    }));
    let MetaMessage::SourceHello(hello) = source else {
        panic!("wrong variant")
    };
    assert!(hello.meta_protocol.supports("fixErrorNegotiation"));
    // Neither a 16-digit hash nor a URI is a protocol hash.
    assert!(hello.meta_protocol.offered_hashes().is_empty());
    assert_eq!(hello.extra["sessionId"], "kept as received");

    round_trip(json!({
        "version": "1.0",
        "type": "destinationHello",
        "metaProtocol": {
            "version": "1.0",
            "supportedCapabilities": ["naturalLanguageProtocol"],
            "selectedProtocol": "https://example.com/protocol/1.0"
        }
    }));

    // Parley's own hello, offering in the seed's fields.
    let h = ProtocolHash::of("agreed protocol text");
    let msg = MetaMessage::source_hello(MetaProtocolInfo::parley([h]));
    let value = msg.to_value();
    assert_eq!(value["type"], "sourceHello");
    assert_eq!(value["metaProtocol"]["protocolHash"], json!(h.to_hex()));
    assert_eq!(
        value["metaProtocol"]["candidateProtocols"],
        json!([h.to_hex()])
    );
    let MetaMessage::SourceHello(back) = MetaMessage::from_value(value).expect("parses") else {
        panic!("wrong variant")
    };
    assert_eq!(back.meta_protocol.offered_hashes(), vec![h]);
}

#[test]
fn malformed_messages_are_errors() {
    for bad in [
        json!(null),
        json!([]),
        json!("protocolNegotiation"),
        json!({}),
        json!({"action": 7}),
        json!({"action": "launchMissiles"}),
        json!({"type": "REQUEST"}),
        json!({"action": "protocolNegotiation", "sequenceId": -1, "candidateProtocols": "x", "status": "negotiating"}),
        json!({"action": "protocolNegotiation", "sequenceId": "0", "candidateProtocols": "x", "status": "negotiating"}),
        json!({"action": "protocolNegotiation", "sequenceId": 0, "candidateProtocols": "x"}),
        json!({"action": "protocolNegotiation", "sequenceId": 0, "candidateProtocols": "x", "status": "Accepted"}),
        json!({"action": "protocolNegotiation", "sequenceId": 0, "candidateProtocols": " ", "status": "negotiating"}),
        json!({"action": "testCasesNegotiation", "status": "negotiating"}),
        json!({"action": "fixErrorNegotiation", "errorDescription": "", "status": "negotiating"}),
        json!({"type": "sourceHello"}),
    ] {
        assert!(MetaMessage::from_value(bad.clone()).is_err(), "{bad}");
    }
    assert!(MetaMessage::from_slice(b"{not json").is_err());
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-zA-Z]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("protocolNegotiation"),
            Just("codeGeneration"),
            Just("testCasesNegotiation"),
            Just("fixErrorNegotiation"),
            Just("naturalLanguageNegotiation"),
            Just("sourceHello"),
            Just("destinationHello"),
            Just("negotiating"),
            Just("accepted"),
            Just("timeout"),
            Just("generated"),
            Just("error"),
            Just("REQUEST"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        let key = prop_oneof![
            Just("action".to_owned()),
            Just("type".to_owned()),
            Just("status".to_owned()),
            Just("sequenceId".to_owned()),
            Just("candidateProtocols".to_owned()),
            Just("modificationSummary".to_owned()),
            Just("testCases".to_owned()),
            Just("errorDescription".to_owned()),
            Just("messageId".to_owned()),
            Just("message".to_owned()),
            Just("metaProtocol".to_owned()),
            Just("version".to_owned()),
            Just("supportedCapabilities".to_owned()),
            "[a-z]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_json_never_panics(value in arb_json()) {
        if let Ok(msg) = MetaMessage::from_value(value) {
            // Whatever parses, serialises and parses back to the same message.
            let again = MetaMessage::from_value(msg.to_value());
            prop_assert_eq!(again, Ok(msg));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = MetaMessage::from_slice(&bytes);
    }
}
