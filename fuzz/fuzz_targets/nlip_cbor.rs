//! The NLIP CBOR decoder on arbitrary bytes. A message it accepts re-encodes (as CBOR and as
//! JSON) to bytes that decode to the same message (to the same canonical JSON through JSON, where
//! binary content is a base64 string rather than bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use parley_nlip::{from_cbor_slice, from_json_slice, to_cbor_vec, to_json_value, to_json_vec};

fuzz_target!(|data: &[u8]| {
    let Ok(message) = from_cbor_slice(data) else {
        return;
    };
    let cbor = to_cbor_vec(&message);
    let again = from_cbor_slice(&cbor).expect("canonical CBOR decodes");
    assert_eq!(again, message, "CBOR round trip changed the message");
    assert_eq!(to_cbor_vec(&again), cbor, "canonical CBOR is not stable");
    let json = to_json_vec(&message);
    let via_json = from_json_slice(&json).expect("canonical JSON decodes");
    assert_eq!(
        to_json_value(&via_json),
        to_json_value(&message),
        "JSON round trip changed it"
    );
});
