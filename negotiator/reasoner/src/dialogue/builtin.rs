//! The built-in reasoner: deterministic, no network, no model.
//!
//! It understands exactly three kinds of message, and says so for everything else rather than
//! guessing:
//! 1. an explicit invocation `<capabilityName> <JSON object>` — the capability is really called
//!    and its result (or typed error) returned;
//! 2. a question about what the agent can do (`help`, `what can you do`, `capabilities`, ...) —
//!    answered from the capability declarations;
//! 3. a message naming a capability — that capability is described with an invocation example.

use std::sync::Arc;

use async_trait::async_trait;
use parley_capabilities::{Capabilities, Capability};
use serde_json::{Map, Value};

use super::{CapabilityCall, NlAnswer, NlRequest, Reasoner};
use crate::ReasonerError;

/// Phrases that ask what this agent can do. Matched on the lower-cased, trimmed message.
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

#[derive(Debug)]
pub struct BuiltinReasoner {
    capabilities: Arc<Capabilities>,
    /// The help text, built once: capabilities do not change while the server runs, and
    /// "what can you do" is the most common message a built-in agent answers.
    help: String,
    /// The answer to a greeting, built once like the help text.
    greeting: String,
}

impl BuiltinReasoner {
    pub fn new(capabilities: Arc<Capabilities>) -> Self {
        let mut help = capabilities.summary();
        help.push_str(&Self::how_to_invoke_text(&capabilities));
        let greeting = Self::greeting_text(&capabilities);
        Self {
            capabilities,
            help,
            greeting,
        }
    }

    fn greeting_text(capabilities: &Capabilities) -> String {
        let names: Vec<&str> = capabilities.iter().map(Capability::name).collect();
        let can = if names.is_empty() {
            "I have no capabilities declared yet.".to_owned()
        } else {
            format!("I can: {}.", names.join(", "))
        };
        format!(
            "Hello, this is {}. {can} Send \"help\" to see how to call them.",
            capabilities.agent().name
        )
    }

    fn help(&self) -> String {
        self.help.clone()
    }

    fn how_to_invoke_text(capabilities: &Capabilities) -> String {
        match capabilities.iter().next() {
            Some(first) => format!(
                "\nTo call a capability, send its name followed by JSON arguments, for example:\n{} {}\n",
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

    fn cannot(&self) -> String {
        let mut text = String::from(
            "I am running without a language model, so I cannot understand free-form requests. \
             I can list what I can do (send \"help\"), describe a capability (send its name), \
             or call a capability when you send its name followed by JSON arguments. \
             For structured, repeated exchanges, negotiate a protocol with me.\n\n",
        );
        text.push_str(&self.help());
        text
    }

    async fn invoke(&self, capability: &Capability, arguments: Value) -> NlAnswer {
        let name = capability.name().to_owned();
        let result = self.capabilities.invoke(&name, arguments.clone()).await;
        let text = match &result {
            Ok(value) => format!(
                "{name} returned:\n{}",
                serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
            ),
            Err(e) => format!("{name} failed ({}): {e}", e.code()),
        };
        NlAnswer {
            text,
            capability_calls: vec![CapabilityCall {
                capability: name,
                arguments,
                result,
            }],
            model_calls: 0,
        }
    }
}

#[async_trait]
impl Reasoner for BuiltinReasoner {
    fn backend(&self) -> &'static str {
        "builtin"
    }

    async fn answer(&self, req: NlRequest) -> Result<NlAnswer, ReasonerError> {
        let text = req.text.trim();
        let plain = |text: String| NlAnswer {
            text,
            capability_calls: Vec::new(),
            model_calls: 0,
        };

        // 1. `<name> <JSON>`: the first word must be a capability name (exact, or differing only
        //    in case) and the rest must be a JSON object.
        let (first, rest) = text
            .split_once(char::is_whitespace)
            .map_or((text, ""), |(f, r)| (f, r.trim()));
        if let Some(capability) = self.find(first) {
            if rest.is_empty() {
                return Ok(plain(Self::describe(capability)));
            }
            return Ok(match serde_json::from_str::<Value>(rest) {
                Ok(arguments @ Value::Object(_)) => self.invoke(capability, arguments).await,
                _ => plain(format!(
                    "To call {} the arguments must be one JSON object.\n{}",
                    capability.name(),
                    Self::describe(capability)
                )),
            });
        }

        // 2. Help, and greetings. (The phrases are ASCII, so comparing without case needs no
        //    lower-cased copy; most messages a built-in agent gets end here.)
        let bare = text.trim_end_matches(['?', '!', '.']).trim();
        let is = |phrase: &&str| bare.eq_ignore_ascii_case(phrase);
        if bare.is_empty() || HELP_PHRASES.iter().any(is) {
            return Ok(plain(self.help()));
        }
        if GREETINGS.iter().any(is) {
            return Ok(plain(self.greeting.clone()));
        }

        // 3. A capability named anywhere in the message.
        let lowered = bare.to_lowercase();
        let named: Vec<&Capability> = self
            .capabilities
            .iter()
            .filter(|c| lowered.contains(&c.name().to_lowercase()))
            .collect();
        if !named.is_empty() {
            let mut text = String::new();
            for c in named {
                text.push_str(&Self::describe(c));
            }
            text.push_str(
                "\nI cannot interpret free-form requests without a language model; \
                 send the capability name followed by JSON arguments to call it.\n",
            );
            return Ok(plain(text));
        }

        // Anything else: say what we cannot do, never pretend.
        Ok(plain(self.cannot()))
    }
}

impl BuiltinReasoner {
    fn find(&self, word: &str) -> Option<&Capability> {
        self.capabilities.get(word).or_else(|| {
            self.capabilities
                .iter()
                .find(|c| c.name().eq_ignore_ascii_case(word))
        })
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
