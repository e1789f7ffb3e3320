//! The seed-002 frame reader on arbitrary bytes, and a meta frame's message parser. A frame it
//! reads re-encodes to a frame that reads the same; its JSON, when it has some, re-encodes in
//! the frame's own form (bare or with a header) to a frame of the same type and JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use parley_anp::MetaMessage;
use parley_anp::frame::{Frame, ProtocolType, encode, encode_application, encode_json};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = Frame::decode(data) else {
        assert!(data.is_empty());
        return;
    };
    let bytes = if frame.bare {
        frame.data.to_vec()
    } else {
        encode(frame.kind, frame.data)
    };
    assert_eq!(Frame::decode(&bytes).as_ref(), Ok(&frame));
    let Ok(value) = frame.json() else { return };
    let bytes = if frame.kind == ProtocolType::Application {
        encode_application(&value, frame.bare)
    } else {
        encode_json(frame.kind, &value)
    };
    let again = Frame::decode(&bytes).expect("an encoded frame reads");
    assert_eq!((again.kind, again.bare), (frame.kind, frame.bare));
    assert_eq!(again.json().expect("encoded JSON parses"), value);
    if frame.kind == ProtocolType::Meta {
        let _ = MetaMessage::from_value(value);
    }
});
