//! The CBOR binding (WebSocket binary frames, `application/cbor` bodies), on every such
//! request's path twice: read into a small tree of [`Item`]s with ciborium's low-level
//! decoder, and written straight into a buffer with its encoder.
//!
//! This replaced `ciborium::Value`, which built a tree of the whole reply before writing it and
//! went through serde for every item read, copying every string. Same run, structured message
//! with a token (`cargo bench -p parley-nlip --bench codec`): written in 0.45 µs instead of
//! 1.3–1.9 µs, read in 3.5 µs instead of 4.6–5.1 µs (most of what is left is ciborium's head
//! decoding and the content's `serde_json::Value`); a malformed item is refused in words ("the
//! input ends inside a string") instead of ciborium's `Debug` of its error.
//!
//! What is accepted, and what it means, is `ciborium::Value`'s: definite and indefinite
//! lengths, tags kept around their item (bignums of up to 16 bytes read as integers), `null`
//! and `undefined` as null, other simple values and a misplaced break refused, nesting
//! limited to 256 arrays, maps and tags. The unit tests check both readers against each other.
//! The bytes written are the ones ciborium writes for the same tree: shortest heads, floats
//! in the shortest form that keeps their value.

use std::borrow::Cow;

use ciborium_ll::{Decoder, Encoder, Header, simple, tag};
use serde_json::Value;

use super::DecodeError;
use crate::message::{Content, Format, Message};

/// How deep arrays, maps and tags may nest: ciborium's own recursion limit.
const MAX_DEPTH: usize = 256;

/// One CBOR data item, as the shared decoder walks it. Definite-length strings are borrowed
/// from the input; only the chunks of an indefinite-length one are copied together.
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
    pub(super) fn as_text(&self) -> Option<&str> {
        match self {
            Item::Text(s) => Some(s),
            _ => None,
        }
    }
}

/// Decodes one CBOR item and the message in it. Trailing bytes after the item are an error.
pub(super) fn read_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    let item = read_item(bytes).map_err(DecodeError::Cbor)?;
    Ok(super::decode_message(&item)?)
}

/// The one item `bytes` hold.
fn read_item(bytes: &[u8]) -> Read<Item<'_>> {
    let mut reader = Reader {
        input: bytes,
        base: 0,
        decoder: Decoder::from(bytes),
    };
    let item = reader.item(MAX_DEPTH)?;
    match reader.left() {
        0 => Ok(item),
        rest => Err(format!("{rest} trailing bytes after the message")),
    }
}

/// Reads heads with ciborium's decoder and takes strings straight from the input: the decoder
/// starts again after each one, at `base`.
struct Reader<'a> {
    input: &'a [u8],
    base: usize,
    decoder: Decoder<&'a [u8]>,
}

type Read<T> = Result<T, String>;

impl<'a> Reader<'a> {
    /// Where in the input the next head starts.
    fn at(&mut self) -> usize {
        self.base + self.decoder.offset()
    }

    /// Bytes not read yet: no length a head announces can be longer.
    fn left(&mut self) -> usize {
        self.input.len() - self.at()
    }

    fn head(&mut self) -> Read<Header> {
        let base = self.base;
        self.decoder.pull().map_err(|e| match e {
            ciborium_ll::Error::Io(_) => "the input ends inside an item".to_owned(),
            ciborium_ll::Error::Syntax(at) => format!("an invalid head at byte {}", base + at),
        })
    }

    fn item(&mut self, depth: usize) -> Read<Item<'a>> {
        let at = self.at();
        match self.head()? {
            Header::Positive(n) => Ok(Item::Integer(i128::from(n))),
            Header::Negative(n) => Ok(Item::Integer(i128::from(n) ^ !0)),
            Header::Float(f) => Ok(Item::Float(f)),
            Header::Simple(simple::FALSE) => Ok(Item::Bool(false)),
            Header::Simple(simple::TRUE) => Ok(Item::Bool(true)),
            Header::Simple(simple::NULL | simple::UNDEFINED) => Ok(Item::Null),
            Header::Simple(other) => Err(format!("unknown simple value {other} at byte {at}")),
            Header::Break => Err(format!("a break where an item belongs, at byte {at}")),
            Header::Bytes(len) => self.bytes(len).map(Item::Bytes),
            Header::Text(len) => self.text(len).map(Item::Text),
            Header::Array(len) => {
                let depth = deeper(depth)?;
                let mut items = Vec::with_capacity(len.unwrap_or(0).min(self.left()));
                while self.more(len, items.len())? {
                    items.push(self.item(depth)?);
                }
                Ok(Item::Array(items))
            }
            Header::Map(len) => {
                let depth = deeper(depth)?;
                let mut entries = Vec::with_capacity(len.unwrap_or(0).min(self.left() / 2));
                while self.more(len, entries.len())? {
                    let key = self.item(depth)?;
                    entries.push((key, self.item(depth)?));
                }
                Ok(Item::Map(entries))
            }
            Header::Tag(t) => {
                let depth = deeper(depth)?;
                if t == tag::BIGPOS || t == tag::BIGNEG {
                    let head = self.head()?;
                    if let Header::Bytes(Some(len)) = head
                        && len <= 16
                    {
                        return bignum(t, self.take(len)?);
                    }
                    self.decoder.push(head);
                }
                Ok(Item::Tag(t, Box::new(self.item(depth)?)))
            }
        }
    }

    /// Whether an array or map of `len` entries (`None`: until a break) has another after `done`.
    fn more(&mut self, len: Option<usize>, done: usize) -> Read<bool> {
        match len {
            Some(len) => Ok(done < len),
            None => match self.head()? {
                Header::Break => Ok(false),
                head => {
                    self.decoder.push(head);
                    Ok(true)
                }
            },
        }
    }

    fn bytes(&mut self, len: Option<usize>) -> Read<Cow<'a, [u8]>> {
        match len {
            Some(len) => self.take(len).map(Cow::Borrowed),
            None => {
                let mut out = Vec::new();
                self.chunks(Major::Bytes, |chunk| {
                    out.extend_from_slice(chunk);
                    Ok(())
                })?;
                Ok(Cow::Owned(out))
            }
        }
    }

    fn text(&mut self, len: Option<usize>) -> Read<Cow<'a, str>> {
        fn utf8(bytes: &[u8]) -> Read<&str> {
            std::str::from_utf8(bytes).map_err(|_| "a text string is not UTF-8".to_owned())
        }
        match len {
            Some(len) => utf8(self.take(len)?).map(Cow::Borrowed),
            None => {
                let mut out = String::new();
                // Each chunk of an indefinite-length text string is UTF-8 on its own.
                self.chunks(Major::Text, |chunk| {
                    out.push_str(utf8(chunk)?);
                    Ok(())
                })?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// The `len` bytes of a definite-length string, whose head was the last one read.
    fn take(&mut self, len: usize) -> Read<&'a [u8]> {
        let start = self.at();
        let end = start
            .checked_add(len)
            .filter(|&end| end <= self.input.len())
            .ok_or("the input ends inside a string")?;
        self.base = end;
        self.decoder = Decoder::from(&self.input[end..]);
        Ok(&self.input[start..end])
    }

    /// The chunks of an indefinite-length string, up to its break: each a definite-length
    /// string of the same major type.
    fn chunks(&mut self, major: Major, mut each: impl FnMut(&'a [u8]) -> Read<()>) -> Read<()> {
        loop {
            let at = self.at();
            let len = match (self.head()?, major) {
                (Header::Break, _) => return Ok(()),
                (Header::Bytes(Some(len)), Major::Bytes)
                | (Header::Text(Some(len)), Major::Text) => len,
                _ => return Err(format!("an invalid chunk of a string at byte {at}")),
            };
            each(self.take(len)?)?;
        }
    }
}

#[derive(Clone, Copy)]
enum Major {
    Bytes,
    Text,
}

fn deeper(depth: usize) -> Read<usize> {
    depth
        .checked_sub(1)
        .ok_or_else(|| format!("items are nested more than {MAX_DEPTH} levels deep"))
}

/// A bignum of at most 16 bytes, as ciborium reads it: an integer where CBOR's integer heads
/// could have held it, else the tag around its bytes without leading zeros.
fn bignum(t: u64, digits: &[u8]) -> Read<Item<'_>> {
    let digits = &digits[digits.iter().take_while(|&&b| b == 0).count()..];
    let mut be = [0u8; 16];
    be[16 - digits.len()..].copy_from_slice(digits);
    let raw = u128::from_be_bytes(be);
    let value = if t == tag::BIGPOS {
        i128::try_from(raw).ok()
    } else {
        Some(i128::try_from(raw).map_err(|_| "a negative bignum is too large".to_owned())? ^ !0)
    };
    let heads = -(1i128 << 64)..(1i128 << 64);
    Ok(match value {
        Some(v) if heads.contains(&v) => Item::Integer(v),
        _ => Item::Tag(t, Box::new(Item::Bytes(Cow::Borrowed(digits)))),
    })
}

/// Canonical CBOR bytes of `message`: the layout of [`super::to_json_value`], binary content as
/// a byte string (ECMA-432 §9).
pub(super) fn write_message(out: &mut Vec<u8>, message: &Message) {
    let mut enc = Encoder::from(out);
    let fields = 3
        + usize::from(message.messagetype.is_some())
        + usize::from(message.label.is_some())
        + usize::from(!message.submessages.is_empty());
    head(&mut enc, Header::Map(Some(fields)));
    if let Some(t) = &message.messagetype {
        text(&mut enc, "messagetype");
        text(&mut enc, t);
    }
    body(
        &mut enc,
        message.format,
        &message.subformat,
        &message.content,
    );
    if let Some(label) = &message.label {
        text(&mut enc, "label");
        text(&mut enc, label);
    }
    if !message.submessages.is_empty() {
        text(&mut enc, "submessages");
        head(&mut enc, Header::Array(Some(message.submessages.len())));
        for sub in &message.submessages {
            head(
                &mut enc,
                Header::Map(Some(3 + usize::from(sub.label.is_some()))),
            );
            if let Some(label) = &sub.label {
                text(&mut enc, "label");
                text(&mut enc, label);
            }
            body(&mut enc, sub.format, &sub.subformat, &sub.content);
        }
    }
}

type Out<'a> = Encoder<&'a mut Vec<u8>>;

/// The three entries every message and submessage has.
fn body(enc: &mut Out<'_>, format: Format, subformat: &str, value: &Content) {
    text(enc, "format");
    text(enc, format.as_str());
    text(enc, "subformat");
    text(enc, subformat);
    text(enc, "content");
    content(enc, value);
}

// Writing into a `Vec` cannot fail.
fn head(enc: &mut Out<'_>, header: Header) {
    let _ = enc.push(header);
}

fn text(enc: &mut Out<'_>, s: &str) {
    let _ = enc.text(s, None);
}

fn content(enc: &mut Out<'_>, content: &Content) {
    match content {
        Content::Bytes(b) => {
            let _ = enc.bytes(b, None);
        }
        Content::Json(v) => json(enc, v),
    }
}

fn json(enc: &mut Out<'_>, v: &Value) {
    match v {
        Value::Null => head(enc, Header::Simple(simple::NULL)),
        Value::Bool(b) => head(
            enc,
            Header::Simple(if *b { simple::TRUE } else { simple::FALSE }),
        ),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                head(enc, Header::Positive(u));
            } else if let Some(i) = n.as_i64() {
                // Negative: CBOR carries -1 - n.
                head(enc, Header::Negative(!(i as u64)));
            } else {
                head(
                    enc,
                    Header::Float(n.as_f64().expect("a JSON number is i64, u64 or f64")),
                );
            }
        }
        Value::String(s) => text(enc, s),
        Value::Array(a) => {
            head(enc, Header::Array(Some(a.len())));
            for x in a {
                json(enc, x);
            }
        }
        Value::Object(o) => {
            head(enc, Header::Map(Some(o.len())));
            for (k, x) in o {
                text(enc, k);
                json(enc, x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ciborium::Value as Reference;
    use proptest::prelude::*;

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

    /// Both readings of `bytes`, as text: NaN, which a flipped byte can make, equals itself there.
    fn both(bytes: &[u8]) -> (String, String) {
        (
            format!("{:?}", read_item(bytes).ok()),
            format!("{:?}", reference(bytes)),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn items_are_read_as_ciborium_reads_them(
            item in item(),
            choices in prop::collection::vec(any::<u8>(), 0..64),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ) {
            let mut bytes = Vec::new();
            write(&mut Encoder::from(&mut bytes), &item, &mut choices.into_iter());
            let (ours, theirs) = both(&bytes);
            prop_assert_eq!(ours, theirs);
            for (i, b) in flips {
                if !bytes.is_empty() {
                    let at = i.index(bytes.len());
                    bytes[at] = b;
                }
            }
            let (ours, theirs) = both(&bytes);
            prop_assert_eq!(ours, theirs);
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
