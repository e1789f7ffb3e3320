//! Which capability a free-text message asks for, and with which arguments: the built-in
//! reasoner's deterministic reading of requests such as "How much is product P12345?" or
//! "status of order O-1001".
//!
//! # Scoring
//! Each capability is scored against the message twice, and the two scores add up.
//!
//! **Topic**: every distinct keyword of the message (see [`super::words`]: stop words dropped,
//! stemmed, everyday words expanded) earns the best weight it meets in the capability's
//! declaration:
//!
//! | where the word appears | weight |
//! | --- | --- |
//! | the capability's name (`getOrderStatus` → `order`, `status`) | 3 ([`NAME`]) |
//! | an input property's name (`productId` → `product`) | 3 ([`INPUT`]) |
//! | an output property's name, or a string `enum` value of one (`price`, `shipped`) | 2 ([`OUTPUT`]) |
//! | the capability's description, or a property's description | 1 ([`DESCRIPTION`]) |
//!
//! **Values**: every input property found in the message adds its evidence's strength (JSON
//! field 4, `pattern` or `enum` 3, an `examples` shape or a `format` 2, right after the
//! property's name 1; see [`super::values`]).
//!
//! # Deciding
//! 1. A capability *fits* when every required input property has exactly one value (two
//!    different values with the same evidence make it ambiguous, never a guess). It is
//!    *confident* when its topic is at least [`MIN_TOPIC`] or one of its values came from
//!    evidence of strength 2 or more (the operator's own pattern, enum, example or format); a
//!    capability without required inputs needs a topic of [`MIN_TOPIC_NO_INPUT`].
//! 2. The confident fitting capability with the highest score is called. Two capabilities with
//!    the same best score are a tie: the reasoner says which ones and asks.
//! 3. A message that asks for a change (a verb such as `cancel`, `buy` or `delete` in
//!    imperative position, see [`super::words::change_verb`]) is never answered by a read-only
//!    capability whose name does not hold that verb: looking something up is not doing it.
//! 4. Otherwise, a capability whose topic alone is at least [`MIN_TOPIC_ABOUT`], or that
//!    found several values of strength 2 or more for one input, is what the message is
//!    *about* (when its topic is strictly above every other such capability's): the reasoner
//!    names it and asks for the missing input, or for one value at a time.
//! 5. Anything else is not understood, and the reasoner says so.

use parley_capabilities::Capability;
use serde_json::{Map, Value};

use super::values::{Evidence, Found, Message, Slot};
use super::words::{change_verb, keywords, message_keywords, raw_words, stems_match};

/// Weight of a keyword in the capability's name.
pub(super) const NAME: u32 = 3;
/// Weight of a keyword in an input property's name.
pub(super) const INPUT: u32 = 3;
/// Weight of a keyword in an output property's name or string enum values.
pub(super) const OUTPUT: u32 = 2;
/// Weight of a keyword in a description.
pub(super) const DESCRIPTION: u32 = 1;
/// The topic score that makes a fitting capability confident without strong evidence.
pub(super) const MIN_TOPIC: u32 = 2;
/// The topic score a capability without required input needs.
pub(super) const MIN_TOPIC_NO_INPUT: u32 = 3;
/// The topic score that makes a message about a capability whose input is missing.
pub(super) const MIN_TOPIC_ABOUT: u32 = 3;

/// One capability as the matcher reads it, built once when the reasoner starts.
#[derive(Debug)]
pub(super) struct Profile {
    pub name: String,
    /// What it does, in a few words (the description up to its first `(`, `.` or `,`).
    pub purpose: String,
    read_only: bool,
    /// `(stem, weight)`, the highest weight of each stem.
    keywords: Vec<(String, u32)>,
    /// The words of the name, for a change verb the name holds (`cancelOrder` may cancel).
    name_words: Vec<String>,
    pub slots: Vec<Slot>,
    /// The stems of the input properties' names.
    input_stems: Vec<String>,
    /// Top-level output properties, and the stems of their names and string enum values.
    outputs: Vec<(String, Vec<String>)>,
}

/// What the matcher made of a message.
#[derive(Debug, PartialEq)]
pub(super) enum Understood {
    /// Call `capability` with `arguments`; `focus` are the output fields the message asked for.
    Call {
        capability: String,
        arguments: Value,
        focus: Vec<String>,
    },
    /// The message is about `capability` but lacks required input.
    NeedsInput {
        capability: String,
        missing: Vec<String>,
    },
    /// The message holds several values for one input.
    SeveralValues {
        capability: String,
        input: String,
        values: Vec<Value>,
    },
    /// The message fits these capabilities equally well.
    Tie(Vec<String>),
    /// The message asks for a change (`verb`) and the capability only looks things up.
    ReadOnly { capability: String, verb: String },
    /// No capability fits.
    Nothing,
}

impl Profile {
    pub(super) fn new(capability: &Capability) -> Profile {
        let mut keywords: Vec<(String, u32)> = Vec::new();
        let mut add = |text: &str, weight: u32| {
            for k in self::keywords(text) {
                match keywords.iter_mut().find(|(s, _)| *s == k) {
                    Some((_, w)) => *w = (*w).max(weight),
                    None => keywords.push((k, weight)),
                }
            }
        };
        add(capability.name(), NAME);
        add(capability.description(), DESCRIPTION);
        let input = properties(capability.input_schema());
        for (name, prop) in &input {
            add(name, INPUT);
            add(description(prop), DESCRIPTION);
        }
        let output = properties(capability.output_schema());
        for (name, prop) in &output {
            add(name, OUTPUT);
            add(description(prop), DESCRIPTION);
            for e in prop
                .get("enum")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                add(e.as_str().unwrap_or_default(), OUTPUT);
            }
            // The fields of an array's items, one level down (an order's product ids).
            for (inner, _) in properties(prop.get("items").unwrap_or(&Value::Null)) {
                add(&inner, DESCRIPTION);
            }
        }
        Profile {
            name: capability.name().to_owned(),
            purpose: purpose(capability.description()),
            read_only: capability.read_only(),
            keywords,
            name_words: raw_words(capability.name()),
            slots: Slot::all(capability.input_schema()),
            input_stems: input
                .iter()
                .flat_map(|(name, _)| self::keywords(name))
                .collect(),
            outputs: output
                .iter()
                .map(|(name, prop)| (name.clone(), output_stems(name, prop)))
                .collect(),
        }
    }

    /// The topic score of a message's keywords (see the module docs).
    fn topic(&self, message_keywords: &[String]) -> u32 {
        message_keywords
            .iter()
            .map(|k| {
                self.keywords
                    .iter()
                    .filter(|(s, _)| stems_match(k, s))
                    .map(|(_, w)| *w)
                    .max()
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The output fields the message asks for: those whose name (or enum value) it mentions,
    /// leaving out the words that only name the entity looked up (`product` in "price of
    /// product P1" asks for no `productName`).
    fn focus(&self, message_keywords: &[String]) -> Vec<String> {
        let asked: Vec<&String> = message_keywords
            .iter()
            .filter(|k| !self.input_stems.iter().any(|s| stems_match(k, s)))
            .collect();
        self.outputs
            .iter()
            .filter(|(_, stems)| {
                stems
                    .iter()
                    .any(|s| asked.iter().any(|k| stems_match(k, s)))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether a message asking to `verb` cannot mean this capability.
    fn refuses(&self, verb: &str) -> bool {
        self.read_only && !self.name_words.iter().any(|w| w == verb)
    }
}

/// How one capability scored against one message.
struct Scored<'p> {
    profile: &'p Profile,
    topic: u32,
    found: Vec<(&'p Slot, Found)>,
    missing: Vec<String>,
}

impl Scored<'_> {
    fn ambiguous(&self) -> Option<(&Slot, &Found)> {
        self.found
            .iter()
            .find(|(slot, f)| slot.required && !f.others.is_empty())
            .map(|(s, f)| (*s, f))
    }

    fn fits(&self) -> bool {
        self.missing.is_empty() && self.ambiguous().is_none()
    }

    fn confident(&self) -> bool {
        let has_required = self.profile.slots.iter().any(|s| s.required);
        if !has_required {
            return self.topic >= MIN_TOPIC_NO_INPUT;
        }
        self.topic >= MIN_TOPIC
            || self
                .found
                .iter()
                .any(|(s, f)| s.required && f.evidence.strength() >= 2)
    }

    fn score(&self) -> u32 {
        self.topic
            + self
                .found
                .iter()
                .map(|(_, f)| f.evidence.strength())
                .sum::<u32>()
    }

    /// The arguments: every required value, and optional ones found with more than a name.
    fn arguments(&self) -> Value {
        let mut args = Map::new();
        for (slot, found) in &self.found {
            if slot.required || found.evidence > Evidence::Named {
                args.insert(slot.name.clone(), found.value.clone());
            }
        }
        Value::Object(args)
    }
}

fn score<'p>(profile: &'p Profile, message: &Message, keywords: &[String]) -> Scored<'p> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for slot in &profile.slots {
        match slot.find(message) {
            Some(f) => found.push((slot, f)),
            None if slot.required => missing.push(slot.name.clone()),
            None => {}
        }
    }
    Scored {
        profile,
        topic: profile.topic(keywords),
        found,
        missing,
    }
}

/// What `text` asks of `profiles` (see the module docs for the rules).
pub(super) fn understand(profiles: &[Profile], text: &str) -> Understood {
    let message = Message::new(text);
    let keywords = message_keywords(text);
    let verb = change_verb(text);
    let scored: Vec<Scored> = profiles
        .iter()
        .map(|p| score(p, &message, &keywords))
        .collect();

    let mut fitting: Vec<&Scored> = scored
        .iter()
        .filter(|s| s.fits() && s.confident())
        .collect();
    fitting.sort_by_key(|s| std::cmp::Reverse(s.score()));
    if let Some(best) = fitting.first() {
        let tied: Vec<String> = fitting
            .iter()
            .take_while(|s| s.score() == best.score())
            .map(|s| s.profile.name.clone())
            .collect();
        if tied.len() > 1 {
            return Understood::Tie(tied);
        }
        if let Some(verb) = verb.filter(|v| best.profile.refuses(v)) {
            return Understood::ReadOnly {
                capability: best.profile.name.clone(),
                verb,
            };
        }
        return Understood::Call {
            capability: best.profile.name.clone(),
            arguments: best.arguments(),
            focus: best.profile.focus(&keywords),
        };
    }

    let mut about: Vec<&Scored> = scored
        .iter()
        .filter(|s| {
            s.topic >= MIN_TOPIC_ABOUT
                || s.ambiguous()
                    .is_some_and(|(_, f)| f.evidence.strength() >= 2)
        })
        .collect();
    about.sort_by_key(|s| std::cmp::Reverse(s.topic));
    match about.as_slice() {
        [only] => about_one(only, verb),
        [first, second, ..] if first.topic > second.topic => about_one(first, verb),
        _ => Understood::Nothing,
    }
}

/// The message is about `s`, which it cannot call as it stands.
fn about_one(s: &Scored, verb: Option<String>) -> Understood {
    let capability = s.profile.name.clone();
    if let Some(verb) = verb.filter(|v| s.profile.refuses(v)) {
        return Understood::ReadOnly { capability, verb };
    }
    if let Some((slot, found)) = s.ambiguous() {
        let mut values = vec![found.value.clone()];
        values.extend(found.others.iter().cloned());
        return Understood::SeveralValues {
            capability,
            input: slot.name.clone(),
            values,
        };
    }
    Understood::NeedsInput {
        capability,
        missing: s.missing.clone(),
    }
}

/// The stems that ask for output property `name`: its name's and its string enum values' (a
/// question whether something `shipped` asks for the `status`).
fn output_stems(name: &str, prop: &Value) -> Vec<String> {
    let mut stems = keywords(name);
    for e in prop
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        stems.extend(keywords(e));
    }
    stems
}

/// A schema's top-level properties, in order.
fn properties(schema: &Value) -> Vec<(String, Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn description(prop: &Value) -> &str {
    prop.get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The description up to its first `(`, `.`, `,` or `;`, lower-cased at the start, at most
/// some sixty characters: "look up a product by its id".
fn purpose(description: &str) -> String {
    let cut = description
        .find(['(', '.', ',', ';'])
        .unwrap_or(description.len());
    let mut text = description[..cut].trim().to_owned();
    if text.chars().count() > 60 {
        text = text.chars().take(57).collect::<String>() + "…";
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}
