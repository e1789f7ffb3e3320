//! The CBOR reader (WebSocket binary frames, `application/cbor` bodies): one pass over the
//! item's heads with ciborium-ll's decoder, without a tree of the item.
//!
//! Each key of the message and of each submessage is classified as it is read
//! ([`Field::of`]), string fields are borrowed from the input, content becomes its
//! `serde_json::Value` as it comes, unknown keys are read past without keeping anything, and
//! what is found goes into a [`Found`], whose checks decide the message or the error.
//!
//! What is accepted, and what it means, is `ciborium::Value`'s: definite and indefinite
//! lengths, tags kept around their item (bignums of up to 16 bytes read as integers), `null`
//! and `undefined` as null, other simple values and a misplaced break refused, nesting
//! limited to 256 arrays, maps and tags. A malformed item is refused in words ("the input ends
//! inside a string"), wherever it is and whatever else is wrong with the message.

pub(super) mod write;

use std::borrow::Cow;

use base64::Engine as _;
use ciborium_ll::{Decoder, Header, simple, tag};
use serde_json::{Map, Value};

use super::DecodeError;
use super::fields::{Field, Found, Kinded, not_an_array, not_an_object};
use crate::message::{Content, Message, Submessage};
use crate::validate::{Part, ValidationError};

/// How deep arrays, maps and tags may nest: ciborium's own recursion limit.
const MAX_DEPTH: usize = 256;

/// How deep content may nest once it is JSON.
const MAX_CONTENT_DEPTH: usize = 128;

/// Items per entry of an array and of a map (key and value), for [`Reader::rest`].
const ARRAY_ITEM: usize = 1;
const MAP_ENTRY: usize = 2;

/// Decodes one CBOR item and the message in it: syntax errors anywhere in the item first
/// ([`DecodeError::Cbor`], trailing bytes included), then the first problem in the order of
/// [`Found::into_message`].
pub(super) fn read_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut reader = Reader::new(bytes);
    let mut found = Found::new(Part::Message);
    let top = reader
        .part(&mut found, MAX_DEPTH)
        .map_err(DecodeError::Cbor)?;
    reader.end().map_err(DecodeError::Cbor)?;
    top.map_err(|kind| not_an_object(Part::Message, kind))?;
    Ok(found.into_message()?)
}

/// Reads heads with ciborium's decoder and takes strings straight from the input: the decoder
/// starts again after each one, at `base`.
struct Reader<'a> {
    input: &'a [u8],
    base: usize,
    decoder: Decoder<&'a [u8]>,
}

/// A syntax error, in words.
type Read<T> = Result<T, String>;

/// Content converted to JSON, or why it has no JSON form.
type Converted = Result<Value, String>;

impl<'a> Reader<'a> {
    fn new(input: &'a [u8]) -> Self {
        Reader {
            input,
            base: 0,
            decoder: Decoder::from(input),
        }
    }

    /// Where in the input the next head starts.
    fn at(&mut self) -> usize {
        self.base + self.decoder.offset()
    }

    /// Bytes not read yet: no length a head announces can be longer.
    fn left(&mut self) -> usize {
        self.input.len() - self.at()
    }

    /// Nothing may follow the one item.
    fn end(&mut self) -> Read<()> {
        match self.left() {
            0 => Ok(()),
            rest => Err(format!("{rest} trailing bytes after the message")),
        }
    }

    fn head(&mut self) -> Read<Header> {
        let base = self.base;
        self.decoder.pull().map_err(|e| match e {
            ciborium_ll::Error::Io(_) => "the input ends inside an item".to_owned(),
            ciborium_ll::Error::Syntax(at) => format!("an invalid head at byte {}", base + at),
        })
    }

    /// The next head and the byte it starts at.
    fn head_at(&mut self) -> Read<(usize, Header)> {
        let at = self.at();
        Ok((at, self.head()?))
    }

    /// The message or one submessage: its fields go into `found`. Anything but a map with text
    /// keys only is read to its end, and what it is returned instead.
    fn part(&mut self, found: &mut Found<'a>, depth: usize) -> Read<Kinded<()>> {
        let (at, head) = self.head_at()?;
        let Header::Map(len) = head else {
            return self.skip_from(at, head, depth).map(Err);
        };
        let depth = deeper(depth)?;
        let mut done = 0;
        while self.more(len, done)? {
            done += 1;
            let (at, key) = self.head_at()?;
            let Header::Text(key_len) = key else {
                // One key that is not a text string makes the whole map no part.
                self.skip_from(at, key, depth)?;
                self.skip(depth)?;
                self.rest(len, done, MAP_ENTRY, depth)?;
                return Ok(Err("a map"));
            };
            match Field::of(&self.text(key_len)?, found.part) {
                Some(field) => self.field(found, field, depth)?,
                None => {
                    self.skip(depth)?;
                }
            }
        }
        Ok(Ok(()))
    }

    /// The value of one field of a part; a value of the wrong type is recorded as its kind.
    fn field(&mut self, found: &mut Found<'a>, field: Field, depth: usize) -> Read<()> {
        let part = found.part;
        match field {
            Field::MessageType => found.messagetype.put(self.text_value(depth)?),
            Field::Control => found.control.put(self.bool_value(depth)?),
            Field::Format => found.format.put(self.text_value(depth)?),
            Field::Subformat => found.subformat.put(self.text_value(depth)?),
            Field::Label => found.label.put(self.text_value(depth)?),
            Field::Content => found.content.put(self.content(part, depth)?),
            Field::Submessages => found.submessages.put(self.submessages(part, depth)?),
        }
        Ok(())
    }

    fn text_value(&mut self, depth: usize) -> Read<Kinded<Cow<'a, str>>> {
        match self.head_at()? {
            (_, Header::Text(len)) => self.text(len).map(Ok),
            (at, head) => self.skip_from(at, head, depth).map(Err),
        }
    }

    fn bool_value(&mut self, depth: usize) -> Read<Kinded<bool>> {
        match self.head_at()? {
            (_, Header::Simple(simple::FALSE)) => Ok(Ok(false)),
            (_, Header::Simple(simple::TRUE)) => Ok(Ok(true)),
            (at, head) => self.skip_from(at, head, depth).map(Err),
        }
    }

    /// A byte string is binary content; anything else is JSON content.
    fn content(&mut self, part: Part, depth: usize) -> Read<Result<Content, ValidationError>> {
        let (at, head) = self.head_at()?;
        if let Header::Bytes(len) = head {
            return Ok(Ok(Content::Bytes(self.bytes(len)?.into_owned())));
        }
        Ok(self
            .json_from(at, head, depth, 0)?
            .map(Content::Json)
            .map_err(|problem| ValidationError::new(part.field("content"), problem)))
    }

    /// The submessages, each decoded as it comes; after the first that fails, the rest are
    /// only read.
    fn submessages(
        &mut self,
        part: Part,
        depth: usize,
    ) -> Read<Result<Vec<Submessage>, ValidationError>> {
        let (at, head) = self.head_at()?;
        let Header::Array(len) = head else {
            let kind = self.skip_from(at, head, depth)?;
            return Ok(Err(not_an_array(part, Field::Submessages, kind)));
        };
        let depth = deeper(depth)?;
        let mut subs = Vec::with_capacity(len.unwrap_or(1).min(4));
        let mut done = 0;
        while self.more(len, done)? {
            let part = Part::Sub(done);
            done += 1;
            let mut found = Found::new(part);
            let sub = match self.part(&mut found, depth)? {
                Ok(()) => found.into_submessage(),
                Err(kind) => Err(not_an_object(part, kind)),
            };
            match sub {
                Ok(sub) => subs.push(sub),
                Err(e) => return self.rest(len, done, ARRAY_ITEM, depth).map(|()| Err(e)),
            }
        }
        Ok(Ok(subs))
    }

    /// One item of content as JSON, at `level` below the content itself. JSON has no byte
    /// strings, non-text keys, NaN or 128-bit integers: those are refused (nested byte strings
    /// become base64, as the text binding carries them). Tags are dropped. The first problem,
    /// in the order of the bytes, is the one reported; whatever follows it is only read.
    fn json(&mut self, depth: usize, level: usize) -> Read<Converted> {
        let (at, head) = self.head_at()?;
        self.json_from(at, head, depth, level)
    }

    fn json_from(
        &mut self,
        at: usize,
        head: Header,
        depth: usize,
        level: usize,
    ) -> Read<Converted> {
        if level > MAX_CONTENT_DEPTH {
            self.skip_from(at, head, depth)?;
            return Ok(too_deep());
        }
        Ok(match head {
            Header::Positive(n) => Ok(Value::from(n)),
            Header::Negative(n) => integer(i128::from(n) ^ !0),
            Header::Float(f) => serde_json::Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| format!("number {f} has no JSON form")),
            Header::Simple(simple::FALSE) => Ok(Value::Bool(false)),
            Header::Simple(simple::TRUE) => Ok(Value::Bool(true)),
            Header::Simple(simple::NULL | simple::UNDEFINED) => Ok(Value::Null),
            Header::Simple(other) => return Err(unknown_simple(other, at)),
            Header::Break => return Err(misplaced_break(at)),
            Header::Bytes(len) => Ok(Value::String(base64(&self.bytes(len)?))),
            Header::Text(len) => Ok(Value::String(self.text(len)?.into_owned())),
            Header::Array(len) => return self.json_array(len, deeper(depth)?, level),
            Header::Map(len) => return self.json_map(len, deeper(depth)?, level),
            Header::Tag(t) => {
                let depth = deeper(depth)?;
                match self.small_bignum(t)? {
                    Some(Big::Integer(i)) => integer(i),
                    // The tag around the digits, then the digits, one level down.
                    Some(Big::Digits(digits)) if level < MAX_CONTENT_DEPTH => {
                        Ok(Value::String(base64(digits)))
                    }
                    Some(Big::Digits(_)) => too_deep(),
                    None => return self.json(depth, level + 1),
                }
            }
        })
    }

    /// The items of an array of content, whose head was the last one read; they nest `depth`
    /// deep and sit one level below the array.
    fn json_array(&mut self, len: Option<usize>, depth: usize, level: usize) -> Read<Converted> {
        let mut items = Vec::with_capacity(len.unwrap_or(0).min(self.left()));
        let mut done = 0;
        while self.more(len, done)? {
            done += 1;
            match self.json(depth, level + 1)? {
                Ok(v) => items.push(v),
                Err(problem) => {
                    return self
                        .rest(len, done, ARRAY_ITEM, depth)
                        .map(|()| Err(problem));
                }
            }
        }
        Ok(Ok(Value::Array(items)))
    }

    /// The entries of a map of content, as [`Reader::json_array`] reads an array's items.
    fn json_map(&mut self, len: Option<usize>, depth: usize, level: usize) -> Read<Converted> {
        let mut map = Map::new();
        let mut done = 0;
        while self.more(len, done)? {
            done += 1;
            let (at, key) = self.head_at()?;
            let problem = match key {
                Header::Text(key_len) => {
                    let key = self.text(key_len)?;
                    match self.json(depth, level + 1)? {
                        Ok(v) => {
                            map.insert(key.into_owned(), v);
                            continue;
                        }
                        Err(problem) => problem,
                    }
                }
                key => {
                    self.skip_from(at, key, depth)?;
                    self.skip(depth)?;
                    "content has a map key that is not a text string".to_owned()
                }
            };
            return self
                .rest(len, done, MAP_ENTRY, depth)
                .map(|()| Err(problem));
        }
        Ok(Ok(Value::Object(map)))
    }

    /// Reads the next item to its end, keeping nothing; what it is.
    fn skip(&mut self, depth: usize) -> Read<&'static str> {
        let (at, head) = self.head_at()?;
        self.skip_from(at, head, depth)
    }

    /// Reads the rest of the item whose head was `head`, at byte `at`, with every check
    /// that reading it would make; what it is, in words for an error message.
    fn skip_from(&mut self, at: usize, head: Header, depth: usize) -> Read<&'static str> {
        Ok(match head {
            Header::Positive(_) | Header::Negative(_) | Header::Float(_) => "a number",
            Header::Simple(simple::FALSE | simple::TRUE) => "a boolean",
            Header::Simple(simple::NULL | simple::UNDEFINED) => "null",
            Header::Simple(other) => return Err(unknown_simple(other, at)),
            Header::Break => return Err(misplaced_break(at)),
            Header::Bytes(len) => {
                self.bytes(len)?;
                "a byte string"
            }
            Header::Text(len) => {
                self.text(len)?;
                "a text string"
            }
            Header::Array(len) => {
                self.rest(len, 0, ARRAY_ITEM, deeper(depth)?)?;
                "an array"
            }
            Header::Map(len) => {
                self.rest(len, 0, MAP_ENTRY, deeper(depth)?)?;
                "a map"
            }
            Header::Tag(t) => {
                let depth = deeper(depth)?;
                match self.small_bignum(t)? {
                    Some(Big::Integer(_)) => "a number",
                    Some(Big::Digits(_)) => "a tagged item",
                    None => {
                        self.skip(depth)?;
                        "a tagged item"
                    }
                }
            }
        })
    }

    /// Reads the entries of an array or map of `len` entries (`None`: until a break) that follow
    /// the first `done`, each `items` items long, keeping nothing. Nested items are `depth` deep.
    fn rest(
        &mut self,
        len: Option<usize>,
        mut done: usize,
        items: usize,
        depth: usize,
    ) -> Read<()> {
        while self.more(len, done)? {
            done += 1;
            for _ in 0..items {
                self.skip(depth)?;
            }
        }
        Ok(())
    }

    /// After the head of tag `t`: a bignum of at most 16 bytes, read whole, as ciborium reads
    /// it; `None` when the tagged item is still to be read.
    fn small_bignum(&mut self, t: u64) -> Read<Option<Big<'a>>> {
        if t == tag::BIGPOS || t == tag::BIGNEG {
            let head = self.head()?;
            if let Header::Bytes(Some(len)) = head
                && len <= 16
            {
                return bignum(t, self.take(len)?).map(Some);
            }
            self.decoder.push(head);
        }
        Ok(None)
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

fn unknown_simple(value: u8, at: usize) -> String {
    format!("unknown simple value {value} at byte {at}")
}

fn misplaced_break(at: usize) -> String {
    format!("a break where an item belongs, at byte {at}")
}

fn too_deep() -> Converted {
    Err(format!(
        "content is nested more than {MAX_CONTENT_DEPTH} levels deep"
    ))
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An integer of content: JSON numbers here are 64-bit.
fn integer(i: i128) -> Converted {
    if let Ok(i) = i64::try_from(i) {
        Ok(Value::from(i))
    } else if let Ok(u) = u64::try_from(i) {
        Ok(Value::from(u))
    } else {
        Err(format!("integer {i} does not fit in 64 bits"))
    }
}

/// What a bignum tag around at most 16 bytes reads as.
enum Big<'a> {
    /// Within `[-2^64, 2^64)`, where CBOR's integer heads could have held it.
    Integer(i128),
    /// Larger: the tag stays around these digits, without leading zeros.
    Digits(&'a [u8]),
}

/// A bignum of at most 16 bytes, as ciborium reads it.
fn bignum(t: u64, digits: &[u8]) -> Read<Big<'_>> {
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
        Some(v) if heads.contains(&v) => Big::Integer(v),
        _ => Big::Digits(digits),
    })
}
