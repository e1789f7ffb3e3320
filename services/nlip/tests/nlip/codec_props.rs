//! Property tests for the codecs: valid messages survive JSON → model → CBOR → model →
//! JSON unchanged, the JSON writer and reader agree with serde_json's `Value`s and the reader
//! with the reference decoder (`reference`), key capitalization does not matter, no input
//! panics a decoder, and the CBOR reader and writer agree with ciborium's (`ciborium::Value`).
//! `cbor_props` holds the CBOR reader to the reference decoder.

use crate::reference;

use parley_nlip::{
    Content, DecodeError, Format, Message, Submessage, from_cbor_slice, from_json_slice,
    from_json_value, to_cbor_vec, to_json_value, to_json_vec,
};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value, json};

fn ciborium_bytes(value: &ciborium::Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("writing into a Vec");
    out
}

/// `bytes` decode as ciborium's reading of them does: when ciborium reads one item and
/// nothing after it, Parley reads the same message (or refuses it for the same reason) from
/// the bytes as from ciborium's rewriting of that item (definite lengths, bignums that fit as
/// integers, `undefined` as null); when ciborium finds no well-formed item, neither does
/// Parley.
fn same_as_ciborium(bytes: &[u8]) -> Result<(), TestCaseError> {
    let mut rest = bytes;
    let ours = from_cbor_slice(bytes);
    match ciborium::from_reader::<ciborium::Value, _>(&mut rest) {
        Ok(value) if rest.is_empty() => {
            let theirs = from_cbor_slice(&ciborium_bytes(&value));
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(DecodeError::Invalid(a)), Err(DecodeError::Invalid(b))) => {
                    prop_assert_eq!(a, b)
                }
                _ => prop_assert!(
                    false,
                    "{bytes:02x?}: {ours:?}, but {theirs:?} from ciborium's reading"
                ),
            }
        }
        // Trailing bytes, or no well-formed item at all.
        _ => prop_assert!(
            matches!(ours, Err(DecodeError::Cbor(_))),
            "{bytes:02x?}: ciborium finds no single item, Parley {ours:?}"
        ),
    }
    Ok(())
}

/// Any text, or text dense with what JSON escapes: quotes, backslashes, control characters,
/// and non-ASCII characters that it does not escape (U+2028 among them).
fn text(max: usize) -> impl Strategy<Value = String> {
    let regex = |r: String| proptest::string::string_regex(&r).expect("a valid regex");
    prop_oneof![
        regex(format!(".{{0,{max}}}")),
        regex(format!(r#"[a-zé🦀 "\\\x00-\x1f\x7f\u{{2028}}]{{0,{max}}}"#)),
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1.0e12f64..1.0e12).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text(12).prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        let key = prop_oneof!["[a-zA-Z_]{1,8}", text(8)];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A (format, subformat, content) triple that obeys ECMA-430 §5.3.
fn part() -> impl Strategy<Value = (Format, String, Value)> {
    prop_oneof![
        ("[a-zA-Z]{2,10}", text(40)).prop_map(|(l, t)| (Format::Text, l, Value::String(t))),
        (
            "(conversation|authentication|authorization|group)(_[a-z0-9.]{1,8})?",
            text(20)
        )
            .prop_map(|(s, t)| (Format::Token, s, Value::String(t))),
        json_value().prop_map(|v| (Format::Structured, "json".to_owned(), v)),
        "[a-z]{1,10}".prop_map(|u| (
            Format::Structured,
            "uri".to_owned(),
            json!(format!("urn:{u}"))
        )),
        (
            "(audio|image|video|sensor|generic)/\\.?[a-z0-9]{1,5}",
            prop::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(s, b)| {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD.encode(b);
                (Format::Binary, s, Value::String(b64))
            }),
        ((-90.0f64..90.0), (-180.0f64..180.0)).prop_map(|(lat, lon)| (
            Format::Location,
            "gps".to_owned(),
            json!({"latitude": lat, "longitude": lon})
        )),
        ("[a-z]{1,8}", json_value()).prop_map(|(s, v)| (Format::Generic, s, v)),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (
        prop::option::of(prop_oneof![
            Just("control".to_owned()),
            "[a-z]{1,8}",
            text(8).prop_map(|t| format!("x{t}")),
        ]),
        part(),
        prop::option::of(text(8)),
        prop::collection::vec((prop::option::of(text(8)), part()), 0..5),
    )
        .prop_map(
            |(messagetype, (format, subformat, content), label, subs)| Message {
                messagetype,
                format,
                subformat,
                content: Content::Json(content),
                label,
                submessages: subs
                    .into_iter()
                    .map(|(label, (format, subformat, content))| Submessage {
                        label,
                        format,
                        subformat,
                        content: Content::Json(content),
                    })
                    .collect(),
            },
        )
}

/// Recapitalizes every NLIP key of a message's JSON form, leaving content untouched.
fn shuffle_key_case(v: &Value, upper: &[bool]) -> Value {
    let recase = |k: &str, i: usize| {
        if upper.get(i % upper.len().max(1)).copied().unwrap_or(false) {
            k.to_uppercase()
        } else {
            let mut c = k.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        }
    };
    let mut out = Map::new();
    let obj = v.as_object().expect("messages are objects");
    for (i, (k, val)) in obj.iter().enumerate() {
        let val = if k == "submessages" {
            Value::Array(
                val.as_array()
                    .expect("submessages is an array")
                    .iter()
                    .map(|s| shuffle_key_case(s, &upper[1.min(upper.len())..]))
                    .collect(),
            )
        } else {
            val.clone()
        };
        out.insert(recase(k, i), val);
    }
    Value::Object(out)
}

/// One change to an object of a message's JSON form, so that decoders see invalid
/// documents as well: a field dropped, given another value, repeated in another
/// capitalization, or an unknown key or a legacy control flag added.
#[derive(Debug, Clone)]
enum Change {
    Drop(Index),
    Replace(Index, Value),
    Repeat(Index),
    Add(String, Value),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any::<Index>().prop_map(Change::Drop),
        (any::<Index>(), json_leaf()).prop_map(|(i, v)| Change::Replace(i, v)),
        any::<Index>().prop_map(Change::Repeat),
        (
            "(control|x|Control|messagetype|label|submessages)",
            json_leaf()
        )
            .prop_map(|(k, v)| Change::Add(k, v)),
    ]
}

fn apply(object: &mut Map<String, Value>, change: &Change) {
    let key = |i: &Index| object.keys().nth(i.index(object.len().max(1))).cloned();
    match change {
        Change::Drop(i) => {
            if let Some(k) = key(i) {
                object.remove(&k);
            }
        }
        Change::Replace(i, v) => {
            if let Some(k) = key(i) {
                object.insert(k, v.clone());
            }
        }
        Change::Repeat(i) => {
            if let Some(k) = key(i) {
                let v = object[&k].clone();
                object.insert(k.to_uppercase(), v);
            }
        }
        Change::Add(k, v) => {
            object.insert(k.clone(), v.clone());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn json_cbor_json_round_trip(msg in message()) {
        let json1 = to_json_vec(&msg);
        let model1 = from_json_slice(&json1).expect("a valid message decodes");
        let cbor = to_cbor_vec(&model1);
        let model2 = from_cbor_slice(&cbor).expect("its CBOR decodes");
        prop_assert_eq!(&model1, &model2);
        prop_assert_eq!(to_json_value(&model2), serde_json::from_slice::<Value>(&json1).expect("json"));
    }

    #[test]
    fn direct_json_bytes_equal_the_canonical_value(msg in message()) {
        let direct = to_json_vec(&msg);
        let via_value = serde_json::to_vec(&to_json_value(&msg)).expect("json");
        prop_assert_eq!(direct, via_value);
    }

    #[test]
    fn json_bytes_decode_as_their_parsed_value_does(
        msg in message(),
        top in prop::collection::vec(change(), 0..3),
        sub in prop::collection::vec(change(), 0..2),
    ) {
        let mut value = to_json_value(&msg);
        let object = value.as_object_mut().expect("messages are objects");
        for c in &top {
            apply(object, c);
        }
        if let Some(Value::Object(first)) = object
            .get_mut("submessages")
            .and_then(Value::as_array_mut)
            .and_then(|subs| subs.first_mut())
        {
            for c in &sub {
                apply(first, c);
            }
        }
        let bytes = serde_json::to_vec(&value).expect("json");
        // Both from the bytes: serde_json does not read back every float exactly as written.
        let parsed: Value = serde_json::from_slice(&bytes).expect("json");
        match (from_json_slice(&bytes), from_json_value(&parsed)) {
            (Ok(from_bytes), Ok(from_value)) => prop_assert_eq!(from_bytes, from_value),
            (Err(DecodeError::Invalid(from_bytes)), Err(from_value)) => prop_assert_eq!(from_bytes, from_value),
            (from_bytes, from_value) => prop_assert!(false, "{value}: {from_bytes:?} but {from_value:?}"),
        }
        prop_assert_eq!(from_json_value(&parsed), reference::decode(&parsed), "{}", value);
    }

    #[test]
    fn key_capitalization_does_not_matter(msg in message(), upper in prop::collection::vec(any::<bool>(), 1..8)) {
        let canonical = to_json_value(&msg);
        let shuffled = shuffle_key_case(&canonical, &upper);
        let decoded = from_json_value(&shuffled).expect("recased keys decode");
        prop_assert_eq!(to_json_value(&decoded), canonical);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = from_json_slice(&bytes);
        let _ = from_cbor_slice(&bytes);
    }

    #[test]
    fn cbor_bytes_are_what_ciborium_writes_for_them(msg in message()) {
        // ciborium writes every head and float in its shortest form: bytes it reads and
        // writes back unchanged are written as it would have written them.
        let cbor = to_cbor_vec(&msg);
        let value: ciborium::Value = ciborium::from_reader(cbor.as_slice()).expect("ciborium reads them");
        prop_assert_eq!(ciborium_bytes(&value), cbor);
    }

    #[test]
    fn cbor_is_read_as_ciborium_reads_it(
        msg in message(),
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 0..4),
    ) {
        let mut cbor = to_cbor_vec(&msg);
        for (i, b) in flips {
            let at = i.index(cbor.len());
            cbor[at] = b;
        }
        same_as_ciborium(&cbor)?;
        prop_assert_eq!(reference::cbor_disagreement(&cbor), None);
    }

    #[test]
    fn random_bytes_are_read_as_ciborium_reads_them(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        same_as_ciborium(&bytes)?;
        prop_assert_eq!(reference::cbor_disagreement(&bytes), None);
    }

    #[test]
    fn mutated_cbor_never_panics(msg in message(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut cbor = to_cbor_vec(&msg);
        for (i, b) in flips {
            let at = i.index(cbor.len());
            cbor[at] = b;
        }
        let _ = from_cbor_slice(&cbor);
        let _ = from_json_slice(&cbor);
    }
}
