//! The reader the one-pass reader replaced, kept as the reference the tests hold it to: the
//! whole item read into a tree of [`Item`]s, then decoded through the generic decoder's
//! [`Node`] trait, content converted from the tree. It shares the one-pass reader's head-level
//! reading (its strings, chunks, bignums and limits), which the tests here hold to ciborium's.

use std::borrow::Cow;

use ciborium_ll::Header;
use serde_json::{Map, Value};

use super::super::{DecodeError, Node, decode_message};
use super::{
    Big, MAX_CONTENT_DEPTH, MAX_DEPTH, Read, Reader, base64, deeper, integer, misplaced_break,
    simple, unknown_simple,
};
use crate::message::{Content, Message};
use crate::validate::ValidationError;

/// One CBOR data item. Definite-length strings are borrowed from the input; only the chunks
/// of an indefinite-length one are copied together.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item<'a> {
    Null,
    Bool(bool),
    /// Within `[-2^64, 2^64)`, as CBOR's integer heads (and small bignums) give them.
    Integer(i128),
    Float(f64),
    Text(Cow<'a, str>),
    Bytes(Cow<'a, [u8]>),
    Array(Vec<Item<'a>>),
    Map(Vec<(Item<'a>, Item<'a>)>),
    Tag(u64, Box<Item<'a>>),
}

impl Item<'_> {
    fn as_text(&self) -> Option<&str> {
        match self {
            Item::Text(s) => Some(s),
            _ => None,
        }
    }
}

/// The message in `bytes`, through the tree.
pub(super) fn read_message_by_tree(bytes: &[u8]) -> Result<Message, DecodeError> {
    let item = read_item(bytes).map_err(DecodeError::Cbor)?;
    Ok(decode_message(&item)?)
}

/// The one item `bytes` hold.
fn read_item(bytes: &[u8]) -> Read<Item<'_>> {
    let mut reader = Reader::new(bytes);
    let item = reader.item(MAX_DEPTH)?;
    reader.end()?;
    Ok(item)
}

impl<'a> Reader<'a> {
    fn item(&mut self, depth: usize) -> Read<Item<'a>> {
        let (at, head) = self.head_at()?;
        match head {
            Header::Positive(n) => Ok(Item::Integer(i128::from(n))),
            Header::Negative(n) => Ok(Item::Integer(i128::from(n) ^ !0)),
            Header::Float(f) => Ok(Item::Float(f)),
            Header::Simple(simple::FALSE) => Ok(Item::Bool(false)),
            Header::Simple(simple::TRUE) => Ok(Item::Bool(true)),
            Header::Simple(simple::NULL | simple::UNDEFINED) => Ok(Item::Null),
            Header::Simple(other) => Err(unknown_simple(other, at)),
            Header::Break => Err(misplaced_break(at)),
            Header::Bytes(len) => self.bytes(len).map(Item::Bytes),
            Header::Text(len) => self.text(len).map(Item::Text),
            Header::Array(len) => {
                let depth = deeper(depth)?;
                let mut items = Vec::new();
                while self.more(len, items.len())? {
                    items.push(self.item(depth)?);
                }
                Ok(Item::Array(items))
            }
            Header::Map(len) => {
                let depth = deeper(depth)?;
                let mut entries = Vec::new();
                while self.more(len, entries.len())? {
                    let key = self.item(depth)?;
                    entries.push((key, self.item(depth)?));
                }
                Ok(Item::Map(entries))
            }
            Header::Tag(t) => {
                let depth = deeper(depth)?;
                Ok(match self.small_bignum(t)? {
                    Some(Big::Integer(v)) => Item::Integer(v),
                    Some(Big::Digits(d)) => Item::Tag(t, Box::new(Item::Bytes(Cow::Borrowed(d)))),
                    None => Item::Tag(t, Box::new(self.item(depth)?)),
                })
            }
        }
    }
}

impl Node for Item<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Item::Null => "null",
            Item::Bool(_) => "a boolean",
            Item::Integer(_) | Item::Float(_) => "a number",
            Item::Text(_) => "a text string",
            Item::Bytes(_) => "a byte string",
            Item::Array(_) => "an array",
            Item::Map(_) => "a map",
            Item::Tag(..) => "a tagged item",
        }
    }
    fn entries(&self) -> Option<Vec<(&str, &Self)>> {
        let Item::Map(map) = self else { return None };
        // A map with a non-text key cannot be an NLIP message; report it as "not a map".
        map.iter()
            .map(|(k, v)| k.as_text().map(|k| (k, v)))
            .collect()
    }
    fn text(&self) -> Option<&str> {
        self.as_text()
    }
    fn boolean(&self) -> Option<bool> {
        match self {
            Item::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn items(&self) -> Option<&[Self]> {
        match self {
            Item::Array(items) => Some(items),
            _ => None,
        }
    }
    fn content(&self, field: impl FnOnce() -> String) -> Result<Content, ValidationError> {
        match self {
            Item::Bytes(b) => Ok(Content::Bytes(b.to_vec())),
            other => cbor_to_json(other, 0)
                .map(Content::Json)
                .map_err(|problem| ValidationError::new(field(), problem)),
        }
    }
}

/// JSON has no byte strings, non-text keys, NaN or 128-bit integers; those are refused
/// (nested byte strings become base64, as the text binding carries them).
fn cbor_to_json(v: &Item<'_>, depth: usize) -> Result<Value, String> {
    if depth > MAX_CONTENT_DEPTH {
        return Err(format!(
            "content is nested more than {MAX_CONTENT_DEPTH} levels deep"
        ));
    }
    Ok(match v {
        Item::Null => Value::Null,
        Item::Bool(b) => Value::Bool(*b),
        &Item::Integer(i) => integer(i)?,
        Item::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("number {f} has no JSON form"))?,
        Item::Text(s) => Value::String(s.as_ref().to_owned()),
        Item::Bytes(b) => Value::String(base64(b)),
        Item::Array(a) => Value::Array(
            a.iter()
                .map(|x| cbor_to_json(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Item::Map(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let k = k
                    .as_text()
                    .ok_or("content has a map key that is not a text string")?;
                out.insert(k.to_owned(), cbor_to_json(v, depth + 1)?);
            }
            Value::Object(out)
        }
        Item::Tag(_, inner) => cbor_to_json(inner, depth + 1)?,
    })
}

#[cfg(test)]
mod tests {
    use ciborium::Value as Reference;
    use proptest::prelude::*;

    use ciborium_ll::{Encoder, Header, simple, tag};

    use super::super::{head, read_message};
    use super::*;

    /// ciborium's reading of `bytes`, as an item: the reader this one replaced.
    fn reference(bytes: &[u8]) -> Option<Item<'static>> {
        let mut rest = bytes;
        let value: Reference = ciborium::from_reader(&mut rest).ok()?;
        rest.is_empty().then(|| item_of(&value))
    }

    fn item_of(value: &Reference) -> Item<'static> {
        match value {
            Reference::Null => Item::Null,
            Reference::Bool(b) => Item::Bool(*b),
            Reference::Integer(i) => Item::Integer(i128::from(*i)),
            Reference::Float(f) => Item::Float(*f),
            Reference::Text(s) => Item::Text(s.clone().into()),
            Reference::Bytes(b) => Item::Bytes(b.clone().into()),
            Reference::Array(a) => Item::Array(a.iter().map(item_of).collect()),
            Reference::Map(m) => {
                Item::Map(m.iter().map(|(k, v)| (item_of(k), item_of(v))).collect())
            }
            Reference::Tag(t, inner) => Item::Tag(*t, Box::new(item_of(inner))),
            other => panic!("ciborium read an item it has no value for: {other:?}"),
        }
    }

    fn leaf() -> impl Strategy<Value = Item<'static>> {
        prop_oneof![
            Just(Item::Null),
            any::<bool>().prop_map(Item::Bool),
            (-(1i128 << 64)..(1i128 << 64)).prop_map(Item::Integer),
            any::<i8>().prop_map(|i| Item::Integer(i.into())),
            // NaN is no item to compare; every other float is.
            any::<f64>()
                .prop_filter("not NaN", |f| !f.is_nan())
                .prop_map(Item::Float),
            prop::sample::select(vec![0.5, -2.0, 65504.0, 1.0e-7, f64::INFINITY])
                .prop_map(Item::Float),
            ".{0,12}".prop_map(|s| Item::Text(s.into())),
            prop::collection::vec(any::<u8>(), 0..12).prop_map(|b| Item::Bytes(b.into())),
        ]
    }

    fn item() -> impl Strategy<Value = Item<'static>> {
        leaf().prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Item::Array),
                prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Item::Map),
                (
                    prop::sample::select(vec![0u64, 1, 2, 3, 32, 55799, u64::MAX]),
                    inner
                )
                    .prop_map(|(t, i)| Item::Tag(t, Box::new(i))),
            ]
        })
    }

    /// Writes `item` with a random mix of definite and indefinite lengths and string chunks,
    /// drawn from `choices`.
    fn write(enc: &mut Encoder<&mut Vec<u8>>, item: &Item, choices: &mut impl Iterator<Item = u8>) {
        let mut pick = || choices.next().unwrap_or(0);
        match item {
            Item::Null => head(
                enc,
                Header::Simple(if pick() % 2 == 0 {
                    simple::NULL
                } else {
                    simple::UNDEFINED
                }),
            ),
            Item::Bool(b) => head(
                enc,
                Header::Simple(if *b { simple::TRUE } else { simple::FALSE }),
            ),
            Item::Integer(i) if *i >= 0 => {
                if let Ok(u) = u64::try_from(*i) {
                    head(enc, Header::Positive(u));
                }
            }
            Item::Integer(i) => {
                if let Ok(n) = u64::try_from(-1 - *i) {
                    head(enc, Header::Negative(n));
                }
            }
            Item::Float(f) => head(enc, Header::Float(*f)),
            Item::Text(s) => {
                let _ = enc.text(s, usize::from(pick() % 8));
            }
            Item::Bytes(b) => {
                let _ = enc.bytes(b, usize::from(pick() % 8));
            }
            Item::Array(a) => {
                let definite = pick() % 2 == 0;
                head(enc, Header::Array(definite.then_some(a.len())));
                for x in a {
                    write(enc, x, choices);
                }
                if !definite {
                    head(enc, Header::Break);
                }
            }
            Item::Map(m) => {
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
            Item::Tag(t, inner) => {
                head(enc, Header::Tag(*t));
                write(enc, inner, choices);
            }
        }
    }

    /// A key of a message or a submessage: mostly the fields' names in some capitalization,
    /// sometimes another text or no text at all.
    fn key() -> impl Strategy<Value = Item<'static>> {
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
            8 => prop::sample::select(names).prop_map(|k| Item::Text(k.into())),
            1 => leaf(),
        ]
    }

    /// A field's value: often one that fits some field, else any item.
    fn value() -> impl Strategy<Value = Item<'static>> {
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
            2 => prop::sample::select(words).prop_map(|w| Item::Text(w.into())),
            1 => Just(Item::Bool(true)),
            2 => item(),
        ]
    }

    /// A map that is often a valid part: a format, a subformat and content, in any order among
    /// other entries, each sometimes of the wrong kind.
    fn part() -> impl Strategy<Value = Vec<(Item<'static>, Item<'static>)>> {
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
                    (Item::Text("format".into()), Item::Text(format.into())),
                    (Item::Text("subformat".into()), Item::Text(subformat.into())),
                    (Item::Text("content".into()), content),
                ];
                entries.extend(extra);
                entries
            })
            .prop_shuffle()
    }

    fn message() -> impl Strategy<Value = Item<'static>> {
        let sub = prop_oneof![4 => part().prop_map(Item::Map), 1 => leaf()];
        (
            part(),
            prop::option::of(prop::collection::vec(sub, 0..3)),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(mut entries, subs, at)| {
                if let Some(subs) = subs {
                    let at = at.index(entries.len() + 1);
                    entries.insert(at, (Item::Text("submessages".into()), Item::Array(subs)));
                }
                Item::Map(entries)
            })
    }

    /// The message both readers make of `bytes`, or their errors, as text.
    fn decoded_by_both(bytes: &[u8]) -> (String, String) {
        (
            format!("{:?}", read_message(bytes)),
            format!("{:?}", read_message_by_tree(bytes)),
        )
    }

    /// Both readings of `bytes`, as text: NaN, which a flipped byte can make, equals itself there.
    fn both(bytes: &[u8]) -> (String, String) {
        (
            format!("{:?}", read_item(bytes).ok()),
            format!("{:?}", reference(bytes)),
        )
    }

    /// `item` written with `choices` (see [`write`]), then with bytes changed at `flips`: both
    /// readings that `readings` gives of the bytes agree each time.
    fn agree(
        item: &Item,
        choices: Vec<u8>,
        flips: Vec<(prop::sample::Index, u8)>,
        readings: fn(&[u8]) -> (String, String),
    ) -> Result<(), TestCaseError> {
        let mut bytes = Vec::new();
        write(
            &mut Encoder::from(&mut bytes),
            item,
            &mut choices.into_iter(),
        );
        let (one, other) = readings(&bytes);
        prop_assert_eq!(one, other);
        for (i, b) in flips {
            if !bytes.is_empty() {
                let at = i.index(bytes.len());
                bytes[at] = b;
            }
        }
        let (one, other) = readings(&bytes);
        prop_assert_eq!(one, other);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn items_are_read_as_ciborium_reads_them(
            item in item(),
            choices in prop::collection::vec(any::<u8>(), 0..64),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ) {
            agree(&item, choices, flips, both)?;
        }

        #[test]
        fn messages_are_decoded_in_one_pass_as_through_the_tree(
            message in message(),
            choices in prop::collection::vec(any::<u8>(), 0..64),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ) {
            agree(&message, choices, flips, decoded_by_both)?;
        }

        #[test]
        fn random_bytes_are_read_as_ciborium_reads_them(bytes in prop::collection::vec(any::<u8>(), 0..48)) {
            let (ours, theirs) = both(&bytes);
            prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn what_is_refused_says_why() {
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
            let err = read_item(bytes).expect_err("refused");
            assert!(err.contains(problem), "{bytes:02x?}: {err}");
            assert!(
                reference(bytes).is_none(),
                "ciborium refuses {bytes:02x?} too"
            );
        }
        let deep = [vec![0x81; MAX_DEPTH + 1], vec![0x00]].concat();
        assert!(
            read_item(&deep)
                .expect_err("too deep")
                .contains("nested more than 256")
        );
        assert!(read_item(&deep[1..]).is_ok());
    }

    #[test]
    fn nesting_past_either_limit_is_refused_alike_by_both() {
        // A map of `texts` as keys and values, then `key` with `item` as its value.
        fn map_ending(texts: &[&str], key: &str, item: &[u8]) -> Vec<u8> {
            let mut bytes = Vec::new();
            let mut enc = Encoder::from(&mut bytes);
            head(&mut enc, Header::Map(Some(texts.len() / 2 + 1)));
            for t in texts.iter().chain([&key]) {
                let _ = enc.text(t, None);
            }
            bytes.extend_from_slice(item);
            bytes
        }
        // A structured/json message whose content is `item`.
        let message_with = |item: &[u8]| {
            map_ending(
                &["format", "structured", "subformat", "json"],
                "content",
                item,
            )
        };
        // Past the item nesting limit anywhere is a syntax error, under content or elsewhere.
        for depth in [MAX_DEPTH - 2, MAX_DEPTH + 8] {
            let nested = [vec![0x81; depth], vec![0x00]].concat();
            let under_an_unknown_key = map_ending(
                &["format", "text", "subformat", "english", "content", "x"],
                "other",
                &nested,
            );
            for bytes in [message_with(&nested), under_an_unknown_key] {
                let (one_pass, tree) = decoded_by_both(&bytes);
                assert_eq!(one_pass, tree);
                let result = read_message(&bytes);
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
                let (one_pass, tree) = decoded_by_both(&bytes);
                assert_eq!(one_pass, tree, "{item:02x?}");
                let result = read_message(&bytes);
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
    fn small_bignums_are_integers_and_larger_ones_stay_tagged() {
        // 2^64 - 1 as a bignum, 2^64 (no CBOR integer head holds it), -2^64 - 1.
        let cases: [(&[u8], Item); 3] = [
            (
                &[0xc2, 0x48, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                Item::Integer(0xff_ffff_ffff_ffff),
            ),
            (
                &[0xc2, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                Item::Tag(
                    tag::BIGPOS,
                    Box::new(Item::Bytes(vec![1, 0, 0, 0, 0, 0, 0, 0, 0].into())),
                ),
            ),
            (
                &[0xc3, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                Item::Tag(
                    tag::BIGNEG,
                    Box::new(Item::Bytes(vec![1, 0, 0, 0, 0, 0, 0, 0, 0].into())),
                ),
            ),
        ];
        // Sixteen bytes, the most ciborium reads as an integer, of which eight leading zeros.
        let sixteen = [&[0xc2, 0x50][..], &[0; 8], &[0xff; 8]].concat();
        let cases = cases
            .into_iter()
            .chain([(sixteen.as_slice(), Item::Integer(u64::MAX.into()))]);
        for (bytes, expected) in cases {
            assert_eq!(read_item(bytes).as_ref(), Ok(&expected), "{bytes:02x?}");
            assert_eq!(reference(bytes), Some(expected), "{bytes:02x?}");
        }
    }
}
