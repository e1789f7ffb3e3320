//! Argument values in a message: what the built-in reasoner takes as a capability's input.
//!
//! Every top-level property of a capability's input schema is a [`Slot`]. A slot is filled from
//! the message by the strongest [`Evidence`] found for it:
//!
//! | evidence | the value is | strength |
//! | --- | --- | --- |
//! | [`Evidence::Json`] | the property's value in a JSON object inside the message (`{"productId": "P12345"}`) | 4 |
//! | [`Evidence::Pattern`] | a word that matches the property's `pattern` as a whole | 3 |
//! | [`Evidence::Enum`] | a word equal to one of the property's `enum` values (any case) | 3 |
//! | [`Evidence::Shape`] | a word shaped like one of the property's `examples` (same leading letters, same punctuation, digits where it has digits: `O-1001` fits `O-2002`) | 2 |
//! | [`Evidence::Format`] | a word in the property's `format` (`date`, `email`, `uuid`, `uri`) | 2 |
//! | [`Evidence::Named`] | the word right after the property's name (`order 1001`, `productId=P1`), when it has a digit or the property is a number | 1 |
//!
//! A property with a `pattern` takes only words that match it (and JSON values as given): the
//! pattern is the operator's own statement of what a value looks like. A word with a digit may
//! match in another case (`p12345` for `^P[0-9]{5}$`); stop words (`the`, `has`) are never
//! values. When two different
//! values share the strongest evidence the slot is [ambiguous](Found::others), never guessed.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::words::{is_stop_word, raw_words};

/// How strongly a message says "this is the value" (see the module docs). Declared weakest
/// first: the derived order is the order of strength.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Evidence {
    Named,
    Shape,
    Format,
    Enum,
    Pattern,
    Json,
}

impl Evidence {
    /// The points the value adds to its capability's score.
    pub(super) fn strength(self) -> u32 {
        match self {
            Evidence::Named => 1,
            Evidence::Shape | Evidence::Format => 2,
            Evidence::Enum | Evidence::Pattern => 3,
            Evidence::Json => 4,
        }
    }
}

/// The JSON type a slot takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    Integer,
    Number,
    Other,
}

/// One input property, as the reasoner looks for it in a message.
#[derive(Debug)]
pub(super) struct Slot {
    pub name: String,
    pub required: bool,
    /// A value to show when asking for it (the first of `examples` or `enum`).
    pub example: Option<Value>,
    /// The name's words, lower-case (`productId` → `product`, `id`).
    name_words: Vec<String>,
    /// The name without case or separators, for JSON keys (`product_id` fits `productId`).
    key: String,
    kind: Kind,
    pattern: Option<Regex>,
    enums: Vec<String>,
    /// The shapes of the examples, each with the example's prefix as written.
    shapes: Vec<(Vec<Run>, String)>,
    format: Option<String>,
}

/// A filled slot.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Found {
    pub value: Value,
    pub evidence: Evidence,
    /// Other values with the same evidence: when not empty, the slot is ambiguous.
    pub others: Vec<Value>,
}

/// One run of an example's shape.
#[derive(Debug, Clone, PartialEq)]
enum Run {
    /// The example's first letters, kept as they are (lower-case): an id's prefix.
    Prefix(String),
    Letters,
    Digits,
    Symbol(char),
}

impl Slot {
    /// The slots of an input schema, required ones first, each group in schema order.
    pub(super) fn all(schema: &Value) -> Vec<Slot> {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return Vec::new();
        };
        let mut slots: Vec<Slot> = props
            .iter()
            .map(|(name, prop)| Slot::new(name, prop, required.contains(&name.as_str())))
            .collect();
        slots.sort_by_key(|s| !s.required);
        slots
    }

    fn new(name: &str, prop: &Value, required: bool) -> Slot {
        let kind = match prop.get("type").and_then(Value::as_str) {
            Some("string") => Kind::String,
            Some("integer") => Kind::Integer,
            Some("number") => Kind::Number,
            // An untyped or multi-typed property takes text.
            None => Kind::String,
            Some(_) => Kind::Other,
        };
        let strings = |key: &str| -> Vec<String> {
            prop.get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        // Matched against whole words. A pattern this regex engine cannot compile (ECMA-262
        // look-arounds, back-references) restricts nothing; the schema still checks the call.
        let pattern = prop
            .get("pattern")
            .and_then(Value::as_str)
            .and_then(|p| Regex::new(&format!("^(?:{p})$")).ok());
        let example = prop
            .get("examples")
            .and_then(|e| e.get(0))
            .or_else(|| prop.get("enum").and_then(|e| e.get(0)))
            .cloned();
        Slot {
            name: name.to_owned(),
            required,
            example,
            name_words: raw_words(name),
            key: normalize_key(name),
            kind,
            pattern,
            enums: strings("enum"),
            shapes: strings("examples")
                .iter()
                .filter_map(|e| {
                    Some((
                        shape(e)?,
                        e.chars().take_while(|c| c.is_alphabetic()).collect(),
                    ))
                })
                .collect(),
            format: prop
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }

    /// The strongest value `message` holds for this slot, if any.
    pub(super) fn find(&self, message: &Message) -> Option<Found> {
        let mut best: Option<Found> = None;
        let mut offer = |value: Value, evidence: Evidence| match &mut best {
            Some(b) if b.evidence > evidence => {}
            Some(b) if b.evidence == evidence => {
                if b.value != value && !b.others.contains(&value) {
                    b.others.push(value);
                }
            }
            _ => {
                best = Some(Found {
                    value,
                    evidence,
                    others: Vec::new(),
                })
            }
        };
        for (key, value) in &message.json_fields {
            if *key == self.key {
                offer(value.clone(), Evidence::Json);
            }
        }
        for (i, token) in message.tokens.iter().enumerate() {
            if let Some((value, evidence)) = self.judge(token, message.named_before(i, self)) {
                offer(value, evidence);
            }
        }
        best
    }

    /// What `token` is worth as this slot's value (`named`: it follows the slot's name).
    fn judge(&self, token: &str, named: bool) -> Option<(Value, Evidence)> {
        if is_stop_word(&token.to_lowercase()) {
            return None;
        }
        if let Some(pattern) = &self.pattern {
            // Ids are typed in any case: `p12345` is meant as `P12345` when only that matches.
            // Only ids with a digit: `has` is not meant as the airport `HAS`.
            let mut candidates = vec![token.to_owned()];
            if token.chars().any(|c| c.is_ascii_digit()) {
                candidates.extend([token.to_uppercase(), token.to_lowercase()]);
            }
            return candidates
                .into_iter()
                .find(|t| self.kind == Kind::String && pattern.is_match(t))
                .map(|t| (Value::String(t), Evidence::Pattern));
        }
        match self.kind {
            Kind::Integer => {
                let n: i64 = token.parse().ok()?;
                named.then(|| (Value::from(n), Evidence::Named))
            }
            Kind::Number => {
                let n: f64 = token.parse().ok()?;
                let n = serde_json::Number::from_f64(n)?;
                named.then(|| (Value::Number(n), Evidence::Named))
            }
            Kind::Other => None,
            Kind::String => {
                if let Some(e) = self.enums.iter().find(|e| e.eq_ignore_ascii_case(token)) {
                    return Some((Value::String(e.clone()), Evidence::Enum));
                }
                if !self.enums.is_empty() {
                    return None;
                }
                let text = || Value::String(token.to_owned());
                let token_shape = shape(token);
                let like = self
                    .shapes
                    .iter()
                    .find(|(s, _)| Some(s) == token_shape.as_ref());
                if let Some((_, prefix)) = like {
                    // The prefix as the example writes it: `o-1002` is meant as `O-1002`.
                    let tail: String = token.chars().skip(prefix.chars().count()).collect();
                    return Some((Value::String(format!("{prefix}{tail}")), Evidence::Shape));
                }
                if self.format.as_deref().is_some_and(|f| in_format(f, token)) {
                    return Some((text(), Evidence::Format));
                }
                (named && token.chars().any(|c| c.is_ascii_digit()))
                    .then(|| (text(), Evidence::Named))
            }
        }
    }
}

/// A message cut up for value extraction: its words as typed (split at spaces and punctuation
/// that never occurs inside an id), and the fields of any JSON objects in it.
#[derive(Debug, Default)]
pub(super) struct Message {
    tokens: Vec<String>,
    /// Each token's words (lower-case), for "follows the slot's name".
    token_words: Vec<Vec<String>>,
    /// `(normalized key, value)` of every field of every JSON object in the message, nested
    /// objects included.
    json_fields: Vec<(String, Value)>,
}

impl Message {
    pub(super) fn new(text: &str) -> Message {
        let tokens: Vec<String> = text
            .split(|c: char| c.is_whitespace() || ",;!?()[]{}<>\"'`=:*".contains(c))
            .map(|t| t.trim_end_matches('.'))
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        let token_words = tokens.iter().map(|t| raw_words(t)).collect();
        let mut json_fields = Vec::new();
        for object in json_objects(text) {
            collect_fields(&object, 0, &mut json_fields);
        }
        Message {
            tokens,
            token_words,
            json_fields,
        }
    }

    /// Whether token `i` follows `slot`'s name: one of the name's words ends the token before
    /// it, or the one before that when only `id`, `number` or `no` stands between.
    fn named_before(&self, i: usize, slot: &Slot) -> bool {
        let last = |j: usize| self.token_words.get(j).and_then(|w| w.last());
        let names = |w: &String| slot.name_words.contains(w);
        match i.checked_sub(1).and_then(last) {
            Some(w) if names(w) => true,
            Some(w) if ["id", "number", "no", "nr"].contains(&w.as_str()) => {
                i.checked_sub(2).and_then(last).is_some_and(names)
            }
            _ => false,
        }
    }
}

/// Every JSON object that starts at a `{` of `text` and parses.
fn json_objects(text: &str) -> Vec<Map<String, Value>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find('{') {
        let start = from + at;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(Value::Object(object))) => {
                out.push(object);
                from = start + stream.byte_offset();
            }
            _ => from = start + 1,
        }
    }
    out
}

fn collect_fields(object: &Map<String, Value>, depth: u32, out: &mut Vec<(String, Value)>) {
    for (key, value) in object {
        match value {
            Value::Object(inner) if depth < 3 => collect_fields(inner, depth + 1, out),
            _ => out.push((normalize_key(key), value.clone())),
        }
    }
}

/// A key without case or separators.
fn normalize_key(key: &str) -> String {
    key.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The shape of an id-like word: `None` unless it has a digit (a word of letters alone has no
/// shape worth matching).
fn shape(word: &str) -> Option<Vec<Run>> {
    if !word.chars().any(|c| c.is_ascii_digit()) || word.chars().count() > 64 {
        return None;
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut prefix = String::new();
    for c in word.chars() {
        let run = if c.is_ascii_digit() {
            Run::Digits
        } else if c.is_alphabetic() {
            if runs.is_empty() || matches!(runs.last(), Some(Run::Prefix(_))) {
                prefix.extend(c.to_lowercase());
                runs.pop();
                runs.push(Run::Prefix(prefix.clone()));
                continue;
            }
            Run::Letters
        } else {
            Run::Symbol(c)
        };
        if runs.last() != Some(&run) || matches!(run, Run::Symbol(_)) {
            runs.push(run);
        }
    }
    Some(runs)
}

/// Whether `token` is in JSON Schema `format` `format` (the few formats ids and keys use).
fn in_format(format: &str, token: &str) -> bool {
    static DATE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}$").expect("a valid regex"));
    static EMAIL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[^@\s]+@[^@\s]+\.[^@\s]+$").expect("a valid regex"));
    static UUID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
            .expect("a valid regex")
    });
    match format {
        "date" => DATE.is_match(token),
        "email" => EMAIL.is_match(token),
        "uuid" => UUID.is_match(token),
        "uri" | "url" => token.starts_with("http://") || token.starts_with("https://"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn slot(prop: Value) -> Slot {
        Slot::new("orderId", &prop, true)
    }

    fn find(slot: &Slot, text: &str) -> Option<(Value, Evidence)> {
        slot.find(&Message::new(text))
            .map(|f| (f.value, f.evidence))
    }

    #[test]
    fn shapes_keep_the_prefix_and_generalise_digits() {
        assert_eq!(shape("O-1001"), shape("o-29"));
        assert_ne!(shape("O-1001"), shape("P-1001"));
        assert_ne!(shape("O-1001"), shape("O1001"));
        assert_eq!(shape("order"), None);
    }

    #[test]
    fn the_strongest_evidence_wins() {
        let s = slot(json!({"type": "string", "examples": ["O-1001"]}));
        assert_eq!(
            find(&s, "status of O-2002?"),
            Some((json!("O-2002"), Evidence::Shape))
        );
        assert_eq!(
            find(&s, r#"order 77, or rather {"order_id": "O-9"}"#),
            Some((json!("O-9"), Evidence::Json))
        );
        assert_eq!(
            find(&s, "order number 77"),
            Some((json!("77"), Evidence::Named))
        );
        assert_eq!(find(&s, "my order please"), None);
        assert_eq!(
            find(&s, "track o-1002"),
            Some((json!("O-1002"), Evidence::Shape))
        );
    }

    #[test]
    fn a_pattern_is_the_only_way_in() {
        let s = slot(json!({"type": "string", "pattern": "^P[0-9]{5}$", "examples": ["P12345"]}));
        assert_eq!(
            find(&s, "How much is P23456."),
            Some((json!("P23456"), Evidence::Pattern))
        );
        assert_eq!(find(&s, "order P1234"), None);
        assert_eq!(
            find(&s, "p12345?"),
            Some((json!("P12345"), Evidence::Pattern))
        );
    }

    #[test]
    fn two_values_make_a_slot_ambiguous() {
        let s = slot(json!({"type": "string", "examples": ["O-1001"]}));
        let found = s.find(&Message::new("O-1001 or O-1002")).expect("found");
        assert_eq!(found.others, [json!("O-1002")]);
    }

    #[test]
    fn enums_and_numbers() {
        let s = Slot::new("status", &json!({"enum": ["pending", "shipped"]}), true);
        assert_eq!(
            find(&s, "orders SHIPPED today"),
            Some((json!("shipped"), Evidence::Enum))
        );
        let n = Slot::new("quantity", &json!({"type": "integer"}), true);
        assert_eq!(find(&n, "12 of them"), None);
        assert_eq!(find(&n, "quantity 12"), Some((json!(12), Evidence::Named)));
    }
}
