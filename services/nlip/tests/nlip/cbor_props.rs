//! The CBOR reader against the reference decoder (`reference`) over ciborium's reading of the
//! same bytes: messages and arbitrary items, written with a random mix of definite and
//! indefinite lengths and string chunks, then with a few bytes changed. Whatever the bytes,
//! [`parley_nlip::from_cbor_slice`] makes the reference's message or error of them, or finds
//! them malformed exactly when ciborium does.

use crate::reference;

use ciborium::Value;
use ciborium_ll::{Encoder, Header, simple};
use proptest::prelude::*;
use proptest::sample::Index;

fn head(enc: &mut Encoder<&mut Vec<u8>>, header: Header) {
    enc.push(header).expect("writing into a Vec");
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i128 << 64)..(1i128 << 64))
            .prop_map(|i| Value::Integer(i.try_into().expect("CBOR's integer range"))),
        any::<i8>().prop_map(|i| Value::Integer(i.into())),
        // NaN is no item to compare; every other float is.
        any::<f64>()
            .prop_filter("not NaN", |f| !f.is_nan())
            .prop_map(Value::Float),
        prop::sample::select(vec![0.5, -2.0, 65504.0, 1.0e-7, f64::INFINITY])
            .prop_map(Value::Float),
        ".{0,12}".prop_map(Value::Text),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bytes),
    ]
}

fn item() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            (
                prop::sample::select(vec![0u64, 1, 2, 3, 32, 55799, u64::MAX]),
                inner
            )
                .prop_map(|(t, i)| Value::Tag(t, Box::new(i))),
        ]
    })
}

/// A key of a message or a submessage: mostly the fields' names in some capitalization,
/// sometimes another text or no text at all.
fn key() -> impl Strategy<Value = Value> {
    let names = vec![
        "format",
        "Format",
        "subformat",
        "SUBFORMAT",
        "content",
        "Content",
        "label",
        "submessages",
        "messagetype",
        "control",
        "other",
    ];
    prop_oneof![
        8 => prop::sample::select(names).prop_map(|k| Value::Text(k.into())),
        1 => leaf(),
    ]
}

/// A field's value: often one that fits some field, else any item.
fn value() -> impl Strategy<Value = Value> {
    let words = vec![
        "text",
        "structured",
        "token",
        "binary",
        "location",
        "english",
        "json",
        "conversation",
        "control",
        "image/png",
        "",
    ];
    prop_oneof![
        2 => prop::sample::select(words).prop_map(|w| Value::Text(w.into())),
        1 => Just(Value::Bool(true)),
        2 => item(),
    ]
}

/// A map that is often a valid part: a format, a subformat and content, in any order among
/// other entries, each sometimes of the wrong kind.
fn part() -> impl Strategy<Value = Vec<(Value, Value)>> {
    let format = prop::sample::select(vec!["text", "structured", "token", "binary", "x"]);
    let subformat = prop::sample::select(vec!["english", "json", "conversation", "a b"]);
    (
        format,
        subformat,
        prop_oneof![value(), item()],
        prop::collection::vec((key(), value()), 0..3),
    )
        .prop_map(|(format, subformat, content, extra)| {
            let mut entries = vec![
                (Value::Text("format".into()), Value::Text(format.into())),
                (
                    Value::Text("subformat".into()),
                    Value::Text(subformat.into()),
                ),
                (Value::Text("content".into()), content),
            ];
            entries.extend(extra);
            entries
        })
        .prop_shuffle()
}

fn message() -> impl Strategy<Value = Value> {
    let sub = prop_oneof![4 => part().prop_map(Value::Map), 1 => leaf()];
    (
        part(),
        prop::option::of(prop::collection::vec(sub, 0..3)),
        any::<Index>(),
    )
        .prop_map(|(mut entries, subs, at)| {
            if let Some(subs) = subs {
                let at = at.index(entries.len() + 1);
                entries.insert(at, (Value::Text("submessages".into()), Value::Array(subs)));
            }
            Value::Map(entries)
        })
}

/// Writes `item` with a random mix of definite and indefinite lengths and string chunks,
/// drawn from `choices`.
fn write(enc: &mut Encoder<&mut Vec<u8>>, item: &Value, choices: &mut impl Iterator<Item = u8>) {
    let mut pick = || choices.next().unwrap_or(0);
    match item {
        Value::Null => head(
            enc,
            Header::Simple(if pick() % 2 == 0 {
                simple::NULL
            } else {
                simple::UNDEFINED
            }),
        ),
        Value::Bool(b) => head(
            enc,
            Header::Simple(if *b { simple::TRUE } else { simple::FALSE }),
        ),
        Value::Integer(i) => match u64::try_from(i128::from(*i)) {
            Ok(u) => head(enc, Header::Positive(u)),
            Err(_) => {
                let n = u64::try_from(-1 - i128::from(*i)).expect("CBOR's integer range");
                head(enc, Header::Negative(n));
            }
        },
        Value::Float(f) => head(enc, Header::Float(*f)),
        Value::Text(s) => enc
            .text(s, usize::from(pick() % 8))
            .expect("writing into a Vec"),
        Value::Bytes(b) => enc
            .bytes(b, usize::from(pick() % 8))
            .expect("writing into a Vec"),
        Value::Array(a) => {
            let definite = pick() % 2 == 0;
            head(enc, Header::Array(definite.then_some(a.len())));
            for x in a {
                write(enc, x, choices);
            }
            if !definite {
                head(enc, Header::Break);
            }
        }
        Value::Map(m) => {
            let definite = pick() % 2 == 0;
            head(enc, Header::Map(definite.then_some(m.len())));
            for (k, v) in m {
                write(enc, k, choices);
                write(enc, v, choices);
            }
            if !definite {
                head(enc, Header::Break);
            }
        }
        Value::Tag(t, inner) => {
            head(enc, Header::Tag(*t));
            write(enc, inner, choices);
        }
        other => panic!("the strategies make no {other:?}"),
    }
}

/// `item` written with `choices` (see [`write`]), then with bytes changed at `flips`: the
/// reader agrees with the reference each time.
fn agree(item: &Value, choices: Vec<u8>, flips: Vec<(Index, u8)>) -> Result<(), TestCaseError> {
    let mut bytes = Vec::new();
    write(
        &mut Encoder::from(&mut bytes),
        item,
        &mut choices.into_iter(),
    );
    prop_assert_eq!(reference::cbor_disagreement(&bytes), None);
    for (i, b) in flips {
        if !bytes.is_empty() {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
    }
    prop_assert_eq!(reference::cbor_disagreement(&bytes), None);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn items_decode_as_the_reference_decodes_them(
        item in item(),
        choices in prop::collection::vec(any::<u8>(), 0..64),
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 0..3),
    ) {
        agree(&item, choices, flips)?;
    }

    #[test]
    fn messages_decode_as_the_reference_decodes_them(
        message in message(),
        choices in prop::collection::vec(any::<u8>(), 0..64),
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 0..3),
    ) {
        agree(&message, choices, flips)?;
    }
}
