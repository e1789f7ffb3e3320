//! The built-in reasoner: deterministic, no network, no model.
//!
//! What it understands, tried in this order:
//! 1. an explicit invocation `<capabilityName> <JSON object>`: the capability is called and its
//!    result (or typed failure) returned. `<capabilityName>` alone describes the capability;
//!    followed by plain words (`getProductInfo P12345`) the words are read for its input as in 4.
//! 2. a question about what the agent can do (`help`, `what can you do`, …), or a greeting.
//! 3. a first word that is almost a capability's name (`getProdutInfo`): "did you mean …";
//!    with JSON arguments that is a failed call ([`CapabilityError::UnknownCapability`]), never
//!    a guess.
//! 4. a simple request that names what a capability does and carries its input ("How much is
//!    product P12345?", "status of order O-1001"): matched against the capabilities' names,
//!    descriptions, schema property names, `pattern`s, `enum`s and `examples`, scored as the
//!    `understand` module documents. The capability is called and the answer says which one.
//! 5. anything else: the help text when the message holds a help phrase of several words
//!    ("Hello! What can you do for me?"); otherwise it says plainly that it cannot tell, and
//!    lists briefly what it can do (once per conversation: a conversation that already saw the
//!    list is pointed to `help`).
//!
//! Results go back in [`NlAnswer::capability_calls`] (the server sends them as structured
//! data) with a short text; a call that failed is an answer with [`NlAnswer::failure`] set.

mod render;
mod understand;
mod values;
mod words;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use parley_capabilities::{Capabilities, Capability, CapabilityError};
use serde_json::{Map, Value};

use self::understand::{Profile, Understood, understand};
use super::{CapabilityCall, DialogueTurn, NlAnswer, NlRequest, Reasoner, Speaker};
use crate::ReasonerError;

/// Phrases that ask what this agent can do. Matched on the trimmed message, without case.
const HELP_PHRASES: &[&str] = &[
    "help",
    "what can you do",
    "what do you do",
    "capabilities",
    "what are your capabilities",
    "list capabilities",
    "who are you",
    "usage",
];

/// Greetings, answered with a short greeting that names the capabilities (not the whole help
/// text: a peer saying hello has not asked for a manual). Matched like the help phrases.
const GREETINGS: &[&str] = &[
    "hello",
    "hi",
    "hey",
    "hello there",
    "good morning",
    "good afternoon",
    "good evening",
    "greetings",
];

/// How close a word must be to a capability's name to be taken as a typo of it
/// (normalized Damerau-Levenshtein similarity, 1.0 = equal).
const TYPO_SIMILARITY: f64 = 0.8;

/// Opens the brief list of capabilities; an agent turn holding it means the conversation has
/// seen the list.
const CAN_DO: &str = "I can: ";

#[derive(Debug)]
pub struct BuiltinReasoner {
    capabilities: Arc<Capabilities>,
    /// What is derived from the capabilities, built once per set of capabilities (an MCP
    /// server listing other tools makes a new set): "what can you do" is the most common
    /// message a built-in agent answers.
    view: Mutex<Arc<View>>,
}

/// The texts and matcher input derived from one set of capabilities.
#[derive(Debug)]
struct View {
    /// [`Capabilities::generation`] it was derived from.
    generation: u64,
    /// Each capability as the request matcher reads it.
    profiles: Vec<Profile>,
}

impl BuiltinReasoner {
    pub fn new(capabilities: Arc<Capabilities>) -> Self {
        let view = Mutex::new(Arc::new(Self::derive(&capabilities)));
        Self { capabilities, view }
    }

    fn derive(capabilities: &Capabilities) -> View {
        let generation = capabilities.generation();
        let profiles: Vec<Profile> = capabilities.iter().map(|c| Profile::new(&c)).collect();
        View {
            generation,
            profiles,
        }
    }

    /// The help text for the peer being answered: the capabilities it may have called
    /// (`Capabilities::summary` filters by `permits`), and how to call them. Built per answer,
    /// since it depends on the caller.
    fn help(&self) -> String {
        let mut help = self.capabilities.summary();
        help.push_str(&self.how_to_invoke_text());
        help
    }

    /// The brief list of the capabilities the peer being answered may have called; `None`
    /// when there are none.
    fn permitted_list(&self) -> Option<String> {
        let view = self.view();
        let permitted: Vec<&Profile> = view
            .profiles
            .iter()
            .filter(|p| self.capabilities.permits(&p.name))
            .collect();
        (!permitted.is_empty()).then(|| brief_list(&permitted))
    }

    /// The view of the capabilities as they are now.
    fn view(&self) -> Arc<View> {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if view.generation != self.capabilities.generation() {
            *view = Arc::new(Self::derive(&self.capabilities));
        }
        Arc::clone(&view)
    }

    fn greeting(&self) -> String {
        let name = &self.capabilities.agent().name;
        let Some(list) = self.permitted_list() else {
            return format!(
                "Hello, this is {name}. No capabilities are declared here, or none you may use, so there is nothing I can look up or do for you yet."
            );
        };
        format!("Hello, this is {name}. {list} Send \"help\" for how to call them.")
    }

    fn how_to_invoke_text(&self) -> String {
        let capabilities = &self.capabilities;
        match capabilities.iter().find(|c| capabilities.permits(c.name())) {
            Some(first) => format!(
                "\nAsk in plain words with the input (for example an id), or send a capability's name followed by JSON arguments, for example:\n{} {}\n",
                first.name(),
                example_arguments(first.input_schema())
            ),
            None => String::new(),
        }
    }

    fn describe(capability: &Capability) -> String {
        format!(
            "{}: {}\nInput schema: {}\nExample: {} {}\n",
            capability.name(),
            capability.description(),
            capability.input_schema(),
            capability.name(),
            example_arguments(capability.input_schema())
        )
    }

    /// Calls `capability` and reports the outcome (`focus`: the result fields asked for).
    async fn invoke(&self, capability: &str, arguments: Value, focus: &[String]) -> NlAnswer {
        let result = self
            .capabilities
            .invoke(capability, arguments.clone())
            .await;
        let (text, failure) = match &result {
            Ok(value) => (
                render::result_text(capability, &arguments, value, focus),
                None,
            ),
            Err(e) => (
                render::failure_text(capability, &arguments, e),
                Some(e.clone()),
            ),
        };
        NlAnswer {
            text,
            capability_calls: vec![CapabilityCall {
                capability: capability.to_owned(),
                arguments,
                result,
            }],
            model_calls: 0,
            failure,
        }
    }

    /// Step 1 of the module docs: `capability` named first, then `rest`.
    async fn explicit(&self, capability: &Capability, rest: &str) -> NlAnswer {
        if rest.is_empty() {
            return NlAnswer::text(Self::describe(capability));
        }
        if let Ok(arguments @ Value::Object(_)) = serde_json::from_str::<Value>(rest) {
            return self.invoke(capability.name(), arguments, &[]).await;
        }
        let view = self.view();
        let profile = view.profiles.iter().find(|p| p.name == capability.name());
        if !rest.starts_with('{')
            && let Some(Understood::Call {
                capability,
                arguments,
                focus,
            }) = profile.map(|p| understand(std::slice::from_ref(p), rest))
        {
            return self.invoke(&capability, arguments, &focus).await;
        }
        NlAnswer::text(format!(
            "To call {} give its input as one JSON object, or in words with the values it needs.\n{}",
            capability.name(),
            Self::describe(capability)
        ))
    }

    /// Step 3 of the module docs: `word` is not a capability but is close to `meant`.
    fn typo(&self, word: &str, meant: &Capability, rest: &str) -> Option<NlAnswer> {
        let hint = format!(
            "There is no capability {word}. Did you mean {}?",
            meant.name()
        );
        if rest.is_empty() {
            return Some(NlAnswer::text(format!("{hint}\n{}", Self::describe(meant))));
        }
        let Ok(Value::Object(_)) = serde_json::from_str::<Value>(rest) else {
            return None;
        };
        Some(NlAnswer {
            failure: Some(CapabilityError::UnknownCapability {
                name: word.to_owned(),
            }),
            ..NlAnswer::text(hint)
        })
    }

    /// Step 4 and 5 of the module docs. An answer that calls nothing starts with "did you
    /// mean" when a word of the message is a typo of a capability's name.
    async fn free_text(&self, text: &str, history: &[DialogueTurn]) -> NlAnswer {
        let view = self.view();
        let said = match understand(&view.profiles, text) {
            Understood::Call {
                capability,
                arguments,
                focus,
            } => return self.invoke(&capability, arguments, &focus).await,
            Understood::NeedsInput {
                capability,
                missing,
            } => self.needs_input(&capability, &missing),
            Understood::SeveralValues {
                capability,
                input,
                values,
            } => {
                let values: Vec<String> = values.iter().map(plain_value).collect();
                format!(
                    "That sounds like {capability}, but your message has several {input} values ({}); ask about one at a time.",
                    values.join(", ")
                )
            }
            Understood::Tie(names) => format!(
                "Your message fits {} equally well; say which one you mean.",
                names.join(" and ")
            ),
            Understood::ReadOnly { capability, verb } => format!(
                "I cannot {verb} anything: {capability} only looks things up, and no capability of mine does that. {}",
                self.what_i_can_do(history)
            ),
            // "Hello! What can you do for me?" asks for the help text in more words.
            Understood::Nothing if asks_for_help(text) => return NlAnswer::text(self.help()),
            Understood::Nothing => format!(
                "I cannot tell what you are asking for. {}",
                self.what_i_can_do(history)
            ),
        };
        match text_typo(&self.capabilities, text_words(text)) {
            Some((word, meant)) => NlAnswer::text(format!(
                "There is no capability {word}; did you mean {meant}? {said}"
            )),
            None => NlAnswer::text(said),
        }
    }

    fn needs_input(&self, capability: &str, missing: &[String]) -> String {
        let view = self.view();
        let profile = view.profiles.iter().find(|p| p.name == capability);
        let examples: Vec<String> = missing
            .iter()
            .map(|m| {
                let example = profile
                    .and_then(|p| p.slots.iter().find(|s| s.name == *m))
                    .and_then(|s| s.example.as_ref());
                match example {
                    Some(e) => format!("{m} (for example {})", plain_value(e)),
                    None => m.clone(),
                }
            })
            .collect();
        let purpose = profile.map(|p| p.purpose.as_str()).unwrap_or_default();
        format!(
            "That sounds like {capability} ({purpose}), but I need its {} to call it; ask again with it.",
            examples.join(" and ")
        )
    }

    /// The brief list of capabilities, or a pointer to `help` when this conversation has seen
    /// it already.
    fn what_i_can_do(&self, history: &[DialogueTurn]) -> String {
        let Some(list) = self.permitted_list() else {
            return "This agent has no capabilities you may use.".to_owned();
        };
        let seen = history
            .iter()
            .any(|t| t.speaker == Speaker::Agent && t.text.contains(CAN_DO));
        if seen {
            "Send \"help\" to see what I can do again.".to_owned()
        } else {
            list
        }
    }

    fn find(&self, word: &str) -> Option<Arc<Capability>> {
        self.capabilities.get(word).or_else(|| {
            self.capabilities
                .iter()
                .find(|c| c.name().eq_ignore_ascii_case(word))
        })
    }
}

#[async_trait]
impl Reasoner for BuiltinReasoner {
    fn backend(&self) -> &'static str {
        "builtin"
    }

    async fn answer(&self, req: NlRequest) -> Result<NlAnswer, ReasonerError> {
        let text = req.text.trim();
        let (first, rest) = text
            .split_once(char::is_whitespace)
            .map_or((text, ""), |(f, r)| (f, r.trim()));
        if let Some(capability) = self.find(first) {
            return Ok(self.explicit(&capability, rest).await);
        }
        // The phrases are ASCII, so comparing without case needs no lower-cased copy; most
        // messages a built-in agent gets end here.
        let bare = text.trim_end_matches(['?', '!', '.']).trim();
        let is = |phrase: &&str| bare.eq_ignore_ascii_case(phrase);
        if bare.is_empty() || HELP_PHRASES.iter().any(is) {
            return Ok(NlAnswer::text(self.help()));
        }
        if GREETINGS.iter().any(is) {
            return Ok(NlAnswer::text(self.greeting()));
        }
        if let Some(meant) = near_name(&self.capabilities, first)
            && let Some(answer) = self.typo(first, &meant, rest)
        {
            return Ok(answer);
        }
        Ok(self.free_text(text, &req.history).await)
    }
}

/// Whether `text` holds one of the [`HELP_PHRASES`] of several words.
fn asks_for_help(text: &str) -> bool {
    let lowered = text.to_lowercase();
    HELP_PHRASES
        .iter()
        .filter(|p| p.contains(' '))
        .any(|p| lowered.contains(p))
}

/// `I can: getOrderStatus (look up a customer order by its id); getProductInfo (…).`
fn brief_list(profiles: &[&Profile]) -> String {
    let items: Vec<String> = profiles
        .iter()
        .map(|p| format!("{} ({})", p.name, p.purpose))
        .collect();
    format!("{CAN_DO}{}.", items.join("; "))
}

/// The capability whose name `word` is a typo of, if any (see [`TYPO_SIMILARITY`]). Only
/// identifier-like words of four characters or more are considered.
fn near_name(capabilities: &Capabilities, word: &str) -> Option<Arc<Capability>> {
    let identifier = word.len() >= 4 && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return None;
    }
    let word = word.to_ascii_lowercase();
    capabilities
        .iter()
        .map(|c| {
            let name = c.name().to_ascii_lowercase();
            (c, strsim::normalized_damerau_levenshtein(&word, &name))
        })
        .filter(|(_, similarity)| *similarity >= TYPO_SIMILARITY && *similarity < 1.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

/// The first word of a free-text message that is a typo of a capability name, and that name.
fn text_typo<'a>(
    capabilities: &Capabilities,
    words: impl Iterator<Item = &'a str>,
) -> Option<(&'a str, String)> {
    words
        .filter_map(|w| near_name(capabilities, w).map(|c| (w, c.name().to_owned())))
        .next()
}

fn text_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// A value as typed: strings without quotes.
fn plain_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A JSON object showing the required arguments, using each property's first `examples` or
/// `enum` value when the schema has one, a typed placeholder otherwise.
fn example_arguments(schema: &Value) -> Value {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Map::new();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Value::Object(out);
    };
    for name in required {
        let prop = props.get(name).unwrap_or(&Value::Null);
        let example = prop
            .get("examples")
            .and_then(|e| e.get(0))
            .or_else(|| prop.get("enum").and_then(|e| e.get(0)))
            .cloned()
            .unwrap_or_else(|| match prop.get("type").and_then(Value::as_str) {
                Some("integer") | Some("number") => Value::from(1),
                Some("boolean") => Value::Bool(true),
                Some("array") => Value::Array(Vec::new()),
                Some("object") => Value::Object(Map::new()),
                _ => Value::String("...".to_owned()),
            });
        out.insert(name.to_owned(), example);
    }
    Value::Object(out)
}
