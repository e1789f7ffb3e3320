//! Words: how the built-in reasoner reads a message and a capability declaration.
//!
//! Both sides go through the same steps, so a word in a message meets the same word in a
//! description however either was written:
//! 1. split on anything that is not a letter or digit, and inside identifiers at case changes
//!    (`getProductInfo` → `get product info`, `order_id` → `order id`);
//! 2. lower-case, drop [`STOP_WORDS`] (function words, and verbs and nouns so general that every
//!    capability has them: `get`, `return`, `id`, ...);
//! 3. reduce to a crude stem ([`stem`]: plural, `-ed`, `-ing`, doubled final consonant, final
//!    `e`), so `shipped`, `shipping` and `ship` meet;
//! 4. for a message, add the keywords its everyday words stand for ([`SYNONYMS`]: `much` and
//!    `cost` ask for a `price`).
//!
//! Two stems [`match`](stems_match) when equal, or when the shorter has at least five letters
//! and begins the longer (`deliver` / `delivery`).

/// Words that say nothing about which capability is meant.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "been",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "e",
    "eg",
    "for",
    "from",
    "g",
    "get",
    "give",
    "has",
    "have",
    "hello",
    "hi",
    "how",
    "i",
    "id",
    "identifier",
    "ids",
    "if",
    "in",
    "info",
    "into",
    "is",
    "it",
    "its",
    "just",
    "know",
    "like",
    "look",
    "lookup",
    "me",
    "my",
    "need",
    "no",
    "not",
    "null",
    "of",
    "on",
    "or",
    "our",
    "please",
    "return",
    "returns",
    "see",
    "show",
    "so",
    "some",
    "tell",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "this",
    "to",
    "unique",
    "up",
    "us",
    "want",
    "was",
    "we",
    "were",
    "what",
    "whats",
    "when",
    "which",
    "who",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
];

/// Everyday words a person types, and the keywords of capability declarations they stand for.
/// Small and general on purpose: it bridges question words to the field names schemas use.
const SYNONYMS: &[(&str, &[&str])] = &[
    ("much", &["price", "cost"]),
    ("cost", &["price"]),
    ("costs", &["price"]),
    ("expensive", &["price"]),
    ("cheap", &["price"]),
    ("pay", &["price"]),
    ("available", &["stock"]),
    ("availability", &["stock"]),
    ("inventory", &["stock"]),
    ("left", &["stock"]),
    ("many", &["stock", "quantity"]),
    ("where", &["status", "delivery"]),
    ("track", &["status"]),
    ("tracking", &["status"]),
    ("arrive", &["delivery"]),
    ("arrives", &["delivery"]),
    ("arriving", &["delivery"]),
    ("eta", &["delivery"]),
    ("state", &["status"]),
    ("progress", &["status"]),
    ("called", &["name"]),
    ("details", &["description", "name"]),
    ("describe", &["description"]),
    ("item", &["product"]),
    ("parcel", &["order"]),
    ("package", &["order"]),
    ("shipment", &["order", "ship"]),
    ("purchase", &["order"]),
];

/// The words of `text`, lower-cased, in order, with nothing dropped: identifiers are split at
/// case changes and digits stay attached to their letters (`P12345` is one word).
pub(super) fn raw_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        split_identifier(chunk, &mut words);
    }
    words
}

/// Splits `getProductInfo` into `get`, `product`, `info` (lower-cased) onto `out`.
fn split_identifier(chunk: &str, out: &mut Vec<String>) {
    let mut current = String::new();
    let mut previous_lower = false;
    for c in chunk.chars() {
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
}

/// Whether `word` (lower-case) carries no meaning for matching.
pub(super) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok() || word.len() < 2
}

/// The meaningful stems of `text`: split, stop words and numbers dropped, stemmed.
pub(super) fn keywords(text: &str) -> Vec<String> {
    raw_words(text)
        .into_iter()
        .filter(|w| !is_stop_word(w) && w.chars().any(char::is_alphabetic))
        .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
        .map(|w| stem(&w))
        .collect()
}

/// The keywords of a message: [`keywords`] plus what its everyday words stand for
/// ([`SYNONYMS`]), without duplicates, in first-seen order.
pub(super) fn message_keywords(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |k: String| {
        if !out.contains(&k) {
            out.push(k);
        }
    };
    for word in raw_words(text) {
        if let Some((_, means)) = SYNONYMS.iter().find(|(w, _)| *w == word) {
            for m in *means {
                push(stem(m));
            }
        }
        if !is_stop_word(&word)
            && word.chars().any(char::is_alphabetic)
            && !word.chars().any(|c| c.is_ascii_digit())
        {
            push(stem(&word));
        }
    }
    out
}

/// A crude English stem (see the module docs). Words of three letters or fewer are kept.
pub(super) fn stem(word: &str) -> String {
    let mut w = word.to_lowercase();
    if w.chars().count() <= 3 || !w.is_ascii() {
        return w;
    }
    if let Some(base) = w.strip_suffix("ies") {
        w = format!("{base}y");
    } else if ["sses", "xes", "ches", "shes", "uses", "zes"]
        .iter()
        .any(|s| w.ends_with(s))
    {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !["ss", "us", "is"].iter().any(|s| w.ends_with(s)) {
        w.truncate(w.len() - 1);
    }
    for suffix in ["ing", "ed"] {
        if w.len() >= suffix.len() + 3 && w.ends_with(suffix) {
            w.truncate(w.len() - suffix.len());
            break;
        }
    }
    let b = w.as_bytes();
    let n = b.len();
    // `shipp` → `ship`, `cancell` → `cancel`; `class`, `free` and `book` keep theirs.
    if n >= 5 && b[n - 1] == b[n - 2] && !b"aeious".contains(&b[n - 1]) {
        w.truncate(n - 1);
    }
    if w.len() > 3 && w.ends_with('e') {
        w.truncate(w.len() - 1);
    }
    w
}

/// Whether two stems name the same thing (see the module docs).
pub(super) fn stems_match(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() >= 5 && long.starts_with(short)
}

/// The message's first word in imperative position of a verb of change, when it has one: the
/// first word, or the word after `please`, `you`, `to` or `and` ("cancel order O-1", "can you
/// delete …", "I want to buy …"). Inflected forms (`cancelled`, `shipped`) describe a state and
/// never count.
pub(super) fn change_verb(text: &str) -> Option<String> {
    const VERBS: &[&str] = &[
        "add", "book", "buy", "cancel", "change", "create", "delete", "edit", "modify", "order",
        "pay", "place", "purchase", "refund", "remove", "reserve", "return", "send", "set", "ship",
        "submit", "update",
    ];
    const BEFORE: &[&str] = &["please", "you", "to", "and"];
    let words = raw_words(text);
    words.iter().enumerate().find_map(|(i, w)| {
        let imperative = i == 0 || BEFORE.contains(&words[i - 1].as_str());
        (imperative && VERBS.contains(&w.as_str())).then(|| w.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn identifiers_split_at_case_changes() {
        assert_eq!(raw_words("getProductInfo"), ["get", "product", "info"]);
        assert_eq!(raw_words("order_id: O-1001"), ["order", "id", "o", "1001"]);
        assert_eq!(raw_words("P12345?"), ["p12345"]);
        assert_eq!(keywords("getOrderStatus"), ["order", "status"]);
    }

    #[test]
    fn inflections_meet() {
        for (a, b) in [
            ("shipped", "ship"),
            ("shipping", "ship"),
            ("cancelled", "cancel"),
            ("orders", "order"),
            ("priced", "price"),
            ("products", "product"),
            ("status", "statuses"),
        ] {
            assert!(stems_match(&stem(a), &stem(b)), "{a} / {b}");
        }
        assert!(stems_match(&stem("delivered"), &stem("delivery")));
        assert!(!stems_match(&stem("price"), &stem("product")));
    }

    #[test]
    fn synonyms_expand_message_words_only() {
        assert!(message_keywords("How much is it?").contains(&stem("price")));
        assert!(!keywords("How much is it?").contains(&stem("price")));
    }

    #[test]
    fn change_verbs_count_only_as_imperatives() {
        assert_eq!(change_verb("Cancel order O-1001"), Some("cancel".into()));
        assert_eq!(
            change_verb("could you please delete it"),
            Some("delete".into())
        );
        assert_eq!(change_verb("Was order O-1001 cancelled?"), None);
        assert_eq!(change_verb("When will it ship?"), None);
    }
}
