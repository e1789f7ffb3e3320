//! The codecs on examples: what is accepted and how it decodes, what is refused and how the
//! error names the field, and the exact bytes written.

use parley_nlip::{
    Content, DecodeError, Format, Message, Submessage, TokenKind, from_cbor_slice, from_json_slice,
    from_json_value, to_cbor_vec, to_json_value, to_json_vec,
};
use serde_json::{Value, json};

use crate::reference;

/// How deep CBOR items may nest (arrays, maps and tags), and content once it is JSON.
const MAX_DEPTH: usize = 256;
const MAX_CONTENT_DEPTH: usize = 128;

#[test]
fn keys_and_values_are_case_insensitive_and_output_is_lowercase() {
    let m = from_json_value(&json!({
        "MessageType": "Control", "FORMAT": "Text", "SubFormat": "English", "Content": "hi",
        "Submessages": [{"Label": "x", "Format": "TOKEN", "Subformat": "conversation_7", "Content": "c1"}]
    }))
    .expect("valid");
    assert!(m.is_control());
    assert_eq!(m.format, Format::Text);
    assert_eq!(m.submessages[0].token_kind(), Some(TokenKind::Conversation));
    assert_eq!(
        to_json_value(&m),
        json!({"messagetype": "Control", "format": "text", "subformat": "English", "content": "hi",
               "submessages": [{"label": "x", "format": "token", "subformat": "conversation_7", "content": "c1"}]})
    );
}

#[test]
fn legacy_control_flag_and_error_format_are_accepted() {
    let m = from_json_value(
        &json!({"control": true, "format": "error", "subformat": "x", "content": "boom"}),
    )
    .expect("valid");
    assert!(m.is_control());
    assert_eq!(m.format, Format::Error);
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (json!([1]), "message", "must be an object"),
        (
            json!({"format": "text", "subformat": "english"}),
            "content",
            "is required",
        ),
        (
            json!({"format": "video", "subformat": "x", "content": 1}),
            "format",
            "not an NLIP format",
        ),
        (
            json!({"format": "text", "subformat": 7, "content": "x"}),
            "subformat",
            "must be a string",
        ),
        (
            json!({"format": "text", "Format": "text", "subformat": "english", "content": "x"}),
            "format",
            "more than once",
        ),
        (
            json!({"format": "text", "subformat": "english", "content": "x", "submessages": {}}),
            "submessages",
            "must be an array",
        ),
        (
            json!({"format": "text", "subformat": "english", "content": "x", "submessages": [{"format": "text"}]}),
            "submessages[0].subformat",
            "is required",
        ),
        (
            json!({"format": "text", "subformat": "english", "content": "x", "submessages": [
                {"format": "token", "subformat": "conversation", "content": "c"}, "nope"]}),
            "submessages[1]",
            "must be an object",
        ),
        (
            json!({"format": "text", "subformat": "english", "content": "x", "submessages": [
                {"format": "location", "subformat": "text", "content": 3}]}),
            "submessages[0].content",
            "location/text content must be a string",
        ),
        (
            json!({"format": "text", "subformat": "english", "content": 5}),
            "content",
            "text content must be a string",
        ),
        (
            json!({"format": "text", "subformat": "english", "content": "x", "control": "yes"}),
            "control",
            "must be a boolean",
        ),
    ];
    for (input, field, problem) in cases {
        let err = from_json_value(&input).expect_err("invalid");
        assert_eq!(err.field, field, "{input}");
        assert!(err.problem.contains(problem), "{input}: {err}");
    }
}

#[test]
fn json_bytes_that_are_no_message_object_say_what_they_are() {
    let cases: [(&[u8], &str, &str); 6] = [
        (b"[1, {\"a\": 2}]", "message", "found an array"),
        (b"\"text\"", "message", "found a string"),
        (b"12.5", "message", "found a number"),
        (b"null", "message", "found null"),
        (
            br#"{"format": "text", "subformat": "english", "content": "a", "content": "b"}"#,
            "content",
            "more than once",
        ),
        (
            br#"{"format": "text", "subformat": "english", "content": "a", "submessages": [7]}"#,
            "submessages[0]",
            "found a number",
        ),
    ];
    for (bytes, field, problem) in cases {
        let text = String::from_utf8_lossy(bytes);
        match from_json_slice(bytes) {
            Err(DecodeError::Invalid(e)) => {
                assert_eq!(e.field, field, "{text}");
                assert!(e.problem.contains(problem), "{text}: {e}");
            }
            other => panic!("{text}: expected an invalid message, got {other:?}"),
        }
    }
    // A key with escapes is unescaped before it is matched.
    let escaped =
        from_json_slice(br#"{"form\u0061t": "text", "SubFormat": "english", "content": "hi"}"#)
            .expect("escaped keys decode");
    assert_eq!(escaped.format, Format::Text);
    assert!(matches!(
        from_json_slice(b"{\"format\": "),
        Err(DecodeError::Json(_))
    ));
}

#[test]
fn cbor_byte_strings_are_binary_content() {
    let m = Message::new(
        Format::Binary,
        "image/png",
        Content::Bytes(vec![0, 1, 2, 255]),
    );
    let back = from_cbor_slice(&to_cbor_vec(&m)).expect("round trip");
    assert_eq!(back, m);
    assert_eq!(to_json_value(&m)["content"], json!("AAEC/w=="));
    assert_eq!(
        to_json_vec(&m),
        serde_json::to_vec(&to_json_value(&m)).expect("json")
    );
}

#[test]
fn cbor_decoding_reports_garbage_and_trailing_bytes() {
    assert!(matches!(
        from_cbor_slice(&[0xff, 0x00]),
        Err(DecodeError::Cbor(_))
    ));
    let mut bytes = to_cbor_vec(&Message::text("english", "hi"));
    bytes.push(0);
    let err = from_cbor_slice(&bytes).expect_err("trailing");
    assert!(err.to_string().contains("trailing"));
    let not_map = {
        let mut out = Vec::new();
        ciborium::ser::into_writer(&ciborium::Value::Array(vec![]), &mut out).expect("write");
        out
    };
    assert!(
        from_cbor_slice(&not_map)
            .expect_err("array")
            .is_invalid_message()
    );
}

#[test]
fn json_bytes_and_parsed_values_decode_alike_errors_included() {
    let docs = [
        r#"{"content": "a", "CONTENT": "b"}"#,
        r#"{"Submessages": 5, "subformat": 7, "format": "text", "content": "x"}"#,
        r#"{"control": "yes", "messagetype": 5}"#,
        r#"{"MessageType": "x", "messageTYPE": "y", "format": 7}"#,
        r#"{"format": "text", "subformat": "english", "content": 5,
            "submessages": [{"format": "token"}]}"#,
        r#"{"format": "location", "subformat": "gps", "content": {"lat": 1, "lon": 2},
            "label": 7}"#,
        r#"{"messagetype": "", "format": "text", "subformat": "english", "content": "x"}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "control": true,
            "Label": "l", "unknown": {"deep": [1, 2, {"x": null}]}}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "control": 1}"#,
        r#"{"format": "Text ", "SUBFORMAT": "en-US", "content": "x"}"#,
        r#"{"form\u0061t": "text", "subformat": "english", "content": "x"}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "submessages": null}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
            {"format": "token", "subformat": "a", "Subformat": "b", "content": "c"}]}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
            1, {"format": "video"}]}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
            {"format": "video"}, 1]}"#,
        r#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
            {"format": "token", "subformat": "conversation", "content": "c",
             "control": "x", "submessages": 1, "messagetype": 2},
            {"Label": "l", "format": "structured", "subformat": "json",
             "content": {"a": [1, {"b": null}]}}]}"#,
        r#"{"format": "binary", "subformat": "image/png", "content": "not base64!"}"#,
    ];
    for doc in docs {
        let value: Value = serde_json::from_str(doc).expect("well-formed");
        match (from_json_slice(doc.as_bytes()), from_json_value(&value)) {
            (Ok(from_bytes), Ok(from_value)) => assert_eq!(from_bytes, from_value, "{doc}"),
            (Err(DecodeError::Invalid(from_bytes)), Err(from_value)) => {
                assert_eq!(from_bytes, from_value, "{doc}");
            }
            (from_bytes, from_value) => panic!("{doc}: {from_bytes:?} but {from_value:?}"),
        }
        assert_eq!(from_json_value(&value), reference::decode(&value), "{doc}");
    }
}

#[test]
fn values_that_are_not_kept_must_still_be_well_formed() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let docs = [
        // Under an unknown key: out of range, a lone surrogate, nested too deep.
        r#"{"format": "text", "subformat": "english", "content": "x", "x": 1e400}"#.to_owned(),
        r#"{"format": "text", "subformat": "english", "content": "x", "x": "\ud800"}"#.to_owned(),
        format!(r#"{{"format": "text", "subformat": "english", "content": "x", "x": {deep}}}"#),
        // In a field of the wrong type, or a submessage's unknown key.
        r#"{"format": "text", "subformat": [1e400], "content": "x"}"#.to_owned(),
        r#"{"format": "text", "subformat": "english", "content": "x",
            "submessages": [{"format": "token", "x": "\udfff"}]}"#
            .to_owned(),
        // A syntax error comes first, whatever else is wrong.
        r#"{"format": 7, "format": "text""#.to_owned(),
        r#"{"subformat": 7} x"#.to_owned(),
    ];
    for doc in docs {
        let result = from_json_slice(doc.as_bytes());
        assert!(
            matches!(result, Err(DecodeError::Json(_))),
            "{doc}: {result:?}"
        );
    }
    let invalid_utf8 =
        b"{\"format\": \"text\", \"subformat\": \"english\", \"content\": \"x\", \"x\": \"\xff\"}";
    assert!(matches!(
        from_json_slice(invalid_utf8),
        Err(DecodeError::Json(_))
    ));
}

#[test]
fn a_key_repeated_verbatim_in_a_submessage_takes_its_last_value() {
    // As in a JSON object parsed into a map; in the message itself any repeat is refused.
    let m = from_json_slice(
        br#"{"format": "text", "subformat": "english", "content": "x", "submessages": [
            {"format": "token", "subformat": "a b", "subform\u0061t": "conversation",
             "content": 1, "content": "c"}]}"#,
    )
    .expect("the last value counts");
    assert_eq!(m.submessages[0].subformat, "conversation");
    assert_eq!(m.submessages[0].content, Content::from("c"));
    let err = from_json_slice(
        br#"{"format": "text", "subformat": "english", "content": "x", "content": "x"}"#,
    )
    .expect_err("repeated");
    assert!(
        err.to_string().contains("content: appears more than once"),
        "{err}"
    );
}

#[test]
fn a_top_level_array_is_no_message_whatever_its_items_hold() {
    // Its items are skipped unchecked: malformed or not, it is not an object.
    for doc in [&b"[1e400]"[..], b"[\"\xff\"]"] {
        let err = from_json_slice(doc).expect_err("an array");
        assert!(err.to_string().contains("found an array"), "{err}");
    }
}

#[test]
fn json_bytes_are_what_serde_json_writes_of_the_canonical_value() {
    let texts = [
        "",
        "plain",
        "exactly8",
        "say \"hi\" and \\ back",
        "\"\\\"\\\"\\\"\\\"\\",
        "tab\tnewline\ncarriage\rback\u{8}feed\u{c}nul\u{0}unit\u{1f}del\u{7f}",
        "päivää, 你好, 🦀, U+2028 \u{2028} and U+2029 \u{2029}",
        "0123456789abcdef0123456789abcdef\"",
    ];
    let mut messages = vec![Message::new(
        Format::Binary,
        "image/png",
        Content::Bytes(vec![0, 1, 2, 254, 255]),
    )];
    for t in texts {
        let mut m = Message::text("english", t)
            .with_messagetype(format!("x{t}"))
            .with_submessage(Submessage::new(Format::Token, "conversation", t).with_label(t))
            .with_submessage(Submessage::new(
                Format::Generic,
                "x",
                json!({t: [t, 1, -2, 3.5, 1e300, u64::MAX, true, false, null, {}, []],
                       "n": {t: {"deeper": t}}}),
            ));
        m.label = Some(t.to_owned());
        messages.push(m);
        messages.push(Message::json(json!([t, {t: t}])).into_control());
    }
    for m in messages {
        let expected = serde_json::to_vec(&to_json_value(&m)).expect("json");
        let text = String::from_utf8_lossy(&expected);
        assert_eq!(to_json_vec(&m), expected, "{text}");
    }
}

/// The malformed-CBOR error of `bytes`, which must be one.
fn cbor_syntax_error(bytes: &[u8]) -> String {
    match from_cbor_slice(bytes) {
        Err(DecodeError::Cbor(problem)) => problem,
        other => panic!("{bytes:02x?}: expected malformed CBOR, got {other:?}"),
    }
}

/// A CBOR map of `texts` as keys and values, then `key` with `item` (bytes) as its value.
fn map_ending(texts: &[&str], key: &str, item: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut enc = ciborium_ll::Encoder::from(&mut bytes);
    enc.push(ciborium_ll::Header::Map(Some(texts.len() / 2 + 1)))
        .expect("writing into a Vec");
    for t in texts.iter().chain([&key]) {
        enc.text(t, None).expect("writing into a Vec");
    }
    bytes.extend_from_slice(item);
    bytes
}

/// A structured/json message whose content is `item` (bytes).
fn message_with(item: &[u8]) -> Vec<u8> {
    map_ending(
        &["format", "structured", "subformat", "json"],
        "content",
        item,
    )
}

#[test]
fn malformed_cbor_is_refused_saying_why() {
    let cases: [(&[u8], &str); 7] = [
        (&[], "ends inside an item"),
        (&[0x62, b'h'], "ends inside a string"),
        (&[0xff], "a break where an item belongs"),
        (&[0xf0], "unknown simple value 16"),
        (&[0x62, 0xff, 0xfe], "not UTF-8"),
        (&[0x7f, 0x41, b'a', 0xff], "an invalid chunk of a string"),
        (&[0x01, 0x02], "1 trailing bytes"),
    ];
    for (bytes, problem) in cases {
        let err = cbor_syntax_error(bytes);
        assert!(err.contains(problem), "{bytes:02x?}: {err}");
        assert_eq!(
            reference::cbor_disagreement(bytes),
            None,
            "ciborium refuses it too"
        );
    }
    let deep = [vec![0x81; MAX_DEPTH + 1], vec![0x00]].concat();
    assert!(cbor_syntax_error(&deep).contains("nested more than 256"));
    // One level less is well-formed: an array, which is no message.
    assert!(
        from_cbor_slice(&deep[1..])
            .expect_err("an array")
            .is_invalid_message()
    );
}

#[test]
fn nesting_past_either_cbor_limit_is_refused() {
    // Past the item nesting limit anywhere is a syntax error, under content or elsewhere.
    for depth in [MAX_DEPTH - 2, MAX_DEPTH + 8] {
        let nested = [vec![0x81; depth], vec![0x00]].concat();
        let under_an_unknown_key = map_ending(
            &["format", "text", "subformat", "english", "content", "x"],
            "other",
            &nested,
        );
        for bytes in [message_with(&nested), under_an_unknown_key] {
            assert_eq!(reference::cbor_disagreement(&bytes), None);
            let result = from_cbor_slice(&bytes);
            if depth > MAX_DEPTH {
                let err = result.expect_err("too deep").to_string();
                assert!(err.contains("nested more than 256"), "{err}");
            } else {
                assert!(!matches!(result, Err(DecodeError::Cbor(_))), "{result:?}");
            }
        }
    }
    let big = [0xc2, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    for levels in [
        MAX_CONTENT_DEPTH - 1,
        MAX_CONTENT_DEPTH,
        MAX_CONTENT_DEPTH + 1,
    ] {
        // Arrays or (unknown) tags down to a leaf at `levels`; a large bignum's digits are
        // one level below its tag.
        let cases = [
            ([vec![0x81; levels], vec![0x00]].concat(), levels),
            ([vec![0xc6; levels], vec![0x00]].concat(), levels),
            ([vec![0x81; levels], big.to_vec()].concat(), levels + 1),
        ];
        for (item, deepest) in cases {
            let bytes = message_with(&item);
            assert_eq!(reference::cbor_disagreement(&bytes), None, "{item:02x?}");
            let result = from_cbor_slice(&bytes);
            if deepest <= MAX_CONTENT_DEPTH {
                assert!(result.is_ok(), "{deepest} levels: {result:?}");
            } else {
                let err = result.expect_err("too deep").to_string();
                assert!(err.contains("nested more than 128 levels"), "{err}");
            }
        }
    }
}

#[test]
fn small_bignums_are_integers_and_larger_ones_their_digits() {
    use base64::Engine as _;
    // 2^64 and -2^64 - 1: no CBOR integer head holds them, nor a JSON number.
    let digits =
        json!(base64::engine::general_purpose::STANDARD.encode([1, 0, 0, 0, 0, 0, 0, 0, 0]));
    // Sixteen bytes, the most read as an integer, of which eight leading zeros.
    let sixteen = [&[0xc2, 0x50][..], &[0; 8], &[0xff; 8]].concat();
    let cases: [(&[u8], Value); 4] = [
        (
            &[0xc2, 0x48, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            json!(0xff_ffff_ffff_ffff_u64),
        ),
        (&[0xc2, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0], digits.clone()),
        (&[0xc3, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0], digits),
        (&sixteen, json!(u64::MAX)),
    ];
    for (item, expected) in cases {
        let bytes = message_with(item);
        let message = from_cbor_slice(&bytes).expect("valid");
        assert_eq!(message.content, Content::Json(expected), "{item:02x?}");
        assert_eq!(reference::cbor_disagreement(&bytes), None, "{item:02x?}");
    }
}
