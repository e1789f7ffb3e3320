//! The NLIP JSON decoder on arbitrary bytes. A message it accepts is what the decoder of the
//! parsed JSON value makes of the same document (the converse does not hold: a parsed value
//! has lost duplicate keys, which the bytes decoder refuses), and re-encodes as JSON to bytes
//! that decode to the same message and as CBOR to bytes that decode to the same canonical JSON
//! (binary content is a base64 string in JSON and a byte string in CBOR).
#![no_main]

use libfuzzer_sys::fuzz_target;
use parley_nlip::{
    from_cbor_slice, from_json_slice, from_json_value, to_cbor_vec, to_json_value, to_json_vec,
};

fuzz_target!(|data: &[u8]| {
    let Ok(message) = from_json_slice(data) else {
        return;
    };
    let value: serde_json::Value = serde_json::from_slice(data).expect("decoded JSON parses");
    let from_value = from_json_value(&value).expect("the value decoder accepts it too");
    assert_eq!(from_value, message, "bytes and value decoders disagree");
    let json = to_json_vec(&message);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&json).expect("canonical JSON parses"),
        to_json_value(&message)
    );
    let again = from_json_slice(&json).expect("canonical JSON decodes");
    assert_eq!(again, message, "JSON round trip changed the message");
    let cbor = to_cbor_vec(&message);
    let via_cbor = from_cbor_slice(&cbor).expect("canonical CBOR decodes");
    assert_eq!(
        to_json_value(&via_cbor),
        to_json_value(&message),
        "CBOR round trip changed it"
    );
});
