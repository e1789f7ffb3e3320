//! The meta-protocol message parser on arbitrary bytes (JSON in practice). A message it accepts
//! writes back to JSON that parses to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use parley_anp::MetaMessage;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = MetaMessage::from_slice(data) else {
        return;
    };
    let value = message.to_value();
    let again = MetaMessage::from_value(value.clone()).expect("a written message parses");
    assert_eq!(again, message, "round trip changed the message");
    let bytes = serde_json::to_vec(&message).expect("a message serializes");
    let from_bytes = MetaMessage::from_slice(&bytes).expect("serialized bytes parse");
    assert_eq!(from_bytes, message);
});
