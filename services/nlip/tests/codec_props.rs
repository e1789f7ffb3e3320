//! Property tests for the codecs: valid messages survive JSON → model → CBOR → model →
//! JSON unchanged, key capitalization does not matter, and no input panics a decoder.

use parley_nlip::{
    Content, Format, Message, Submessage, from_cbor_slice, from_json_slice, from_json_value,
    to_cbor_vec, to_json_value, to_json_vec,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1.0e12f64..1.0e12).prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_]{1,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A (format, subformat, content) triple that obeys ECMA-430 §5.3.
fn part() -> impl Strategy<Value = (Format, String, Value)> {
    prop_oneof![
        ("[a-zA-Z]{2,10}", ".{0,40}").prop_map(|(l, t)| (Format::Text, l, Value::String(t))),
        (
            "(conversation|authentication|authorization|group)(_[a-z0-9.]{1,8})?",
            ".{1,20}"
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
        prop::option::of(prop_oneof![Just("control".to_owned()), "[a-z]{1,8}"]),
        part(),
        prop::collection::vec((prop::option::of("[a-z0-9 ]{1,8}"), part()), 0..5),
    )
        .prop_map(
            |(messagetype, (format, subformat, content), subs)| Message {
                messagetype,
                format,
                subformat,
                content: Content::Json(content),
                label: None,
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
