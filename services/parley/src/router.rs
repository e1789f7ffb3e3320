//! The NLIP router: which path one inbound NLIP message takes through the agent.
//!
//! [`route`] decides, in this order, and the first match wins:
//!
//! 1. **Control** (`messagetype: control`): a run-time `fixErrorNegotiation` naming an active
//!    protocol with a `protocol` token ([`Route::Fix`]), other meta-protocol messages
//!    ([`Route::Meta`]) when it carries any, else NLIP's own control exchange
//!    ([`Route::Control`], §6.3).
//! 2. **Application message of a negotiated protocol**: a data message with a `protocol` token
//!    ([`Route::Application`]), served by the protocol's handler, whatever its payload looks
//!    like — a protocol whose requests happen to have a `name` and `arguments` stays a protocol.
//! 3. **Tool call**: a data message whose first part is `structured/json` holding exactly
//!    `{"tool": NAME, "arguments": {…}}` or the MCP-style `{"name": NAME, "arguments": {…}}`
//!    (`arguments` may be left out: `{}`), answered by capability NAME through
//!    `Capabilities::invoke`, the path a handler's `host.call` and the reasoners take
//!    ([`Route::ToolCall`]). An object of that shape whose fields have the wrong types is a tool
//!    call that fails (`invalid_arguments`), not natural language.
//! 4. **Natural language**: everything else, answered by the reasoner, which may call the same
//!    capabilities ([`Route::NaturalLanguage`]).
//!
//! Routing looks at the message only: it touches no database and no capability, so it costs
//! the same for every message. The conversation a message belongs to is decided before, and
//! independently of, its route (see `agent`).

use parley_anp::ProtocolHash;
use parley_nlip::{Content, Format, Message};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::negotiation::fix_report::FixReport;
use crate::negotiation::nlip::{self, Inbound};

/// Where one inbound message goes.
#[derive(Debug)]
pub enum Route<'a> {
    /// Meta-protocol messages (a control message), in order.
    Meta(Vec<Value>),
    /// A run-time `fixErrorNegotiation` about an active protocol (see
    /// `negotiation::fix_report`), or why it is not a usable one.
    Fix(Result<FixReport, ApiError>),
    /// Any other control message: NLIP's own (§6.3).
    Control,
    /// An application message: its protocol and its payload, or why it is not a usable one.
    Application(Result<(ProtocolHash, &'a Value), ApiError>),
    /// A call of one capability, or why the call is malformed.
    ToolCall(Result<ToolCall<'a>, ApiError>),
    /// Natural language, or any other data message.
    NaturalLanguage,
}

/// A tool call: the capability's name and its arguments (`{}` when the call gave none).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall<'a> {
    pub name: &'a str,
    pub arguments: Value,
}

/// Decides the route of `message` (see the module docs for the order).
pub fn route(message: &Message) -> Route<'_> {
    match nlip::classify(message) {
        Inbound::Meta(values) => Route::Meta(values),
        Inbound::Fix(report) => Route::Fix(report),
        Inbound::Control => Route::Control,
        Inbound::Application(application) => Route::Application(application),
        Inbound::Other => match tool_call(message) {
            Some(call) => Route::ToolCall(call),
            None => Route::NaturalLanguage,
        },
    }
}

/// The tool call a data message's first part holds, if it has a tool call's shape: a
/// `structured/json` object whose keys are exactly `tool` or `name`, and optionally
/// `arguments`.
fn tool_call(message: &Message) -> Option<Result<ToolCall<'_>, ApiError>> {
    if message.format != Format::Structured || !message.subformat.eq_ignore_ascii_case("json") {
        return None;
    }
    let Content::Json(Value::Object(fields)) = &message.content else {
        return None;
    };
    let key = shape(fields)?;
    Some(parse(key, fields))
}

/// The key naming the tool (`tool` or `name`) when `fields` are a tool call's and nothing else.
fn shape(fields: &Map<String, Value>) -> Option<&'static str> {
    let has_arguments = fields.contains_key("arguments");
    if fields.len() != 1 + usize::from(has_arguments) {
        return None;
    }
    ["tool", "name"]
        .into_iter()
        .find(|key| fields.contains_key(*key))
}

fn parse<'a>(key: &'static str, fields: &'a Map<String, Value>) -> Result<ToolCall<'a>, ApiError> {
    let invalid = |message: String| ApiError::Capability {
        code: "invalid_arguments".to_owned(),
        message,
    };
    let name = match fields.get(key) {
        Some(Value::String(name)) if !name.trim().is_empty() => name.as_str(),
        _ => {
            return Err(invalid(format!(
                "a tool call's `{key}` is the capability's name, a non-empty string"
            )));
        }
    };
    let arguments = match fields.get("arguments") {
        None => Value::Object(Map::new()),
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        Some(_) => {
            return Err(invalid(format!(
                "the arguments of a call of `{name}` are a JSON object"
            )));
        }
    };
    Ok(ToolCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use parley_nlip::Submessage;
    use serde_json::json;

    use super::*;

    fn routed(message: &Message) -> &'static str {
        match route(message) {
            Route::Meta(_) => "meta",
            Route::Fix(_) => "fix",
            Route::Control => "control",
            Route::Application(_) => "application",
            Route::ToolCall(Ok(_)) => "tool",
            Route::ToolCall(Err(_)) => "bad tool call",
            Route::NaturalLanguage => "natural language",
        }
    }

    fn call(message: &Message) -> ToolCall<'_> {
        match route(message) {
            Route::ToolCall(Ok(call)) => call,
            other => panic!("not a tool call: {other:?}"),
        }
    }

    #[test]
    fn both_shapes_are_tool_calls_and_arguments_may_be_left_out() {
        let args = json!({"productId": "P12345"});
        let tool = Message::json(json!({"tool": "getProductInfo", "arguments": args}));
        let mcp = Message::json(json!({"name": "getProductInfo", "arguments": args}));
        for m in [&tool, &mcp] {
            assert_eq!(
                call(m),
                ToolCall {
                    name: "getProductInfo",
                    arguments: args.clone()
                }
            );
        }
        let bare = Message::json(json!({"tool": "ping"}));
        assert_eq!(call(&bare).arguments, json!({}));
    }

    #[test]
    fn other_shapes_are_natural_language() {
        for value in [
            json!({"tool": "a", "arguments": {}, "extra": 1}),
            json!({"tool": "a", "name": "b"}),
            json!({"arguments": {}}),
            json!(["tool", "a"]),
            json!("call getProductInfo"),
        ] {
            assert_eq!(
                routed(&Message::json(value.clone())),
                "natural language",
                "{value}"
            );
        }
        assert_eq!(
            routed(&Message::text("english", "hello")),
            "natural language"
        );
        // Only a structured/json first part is read.
        let mut text_json = Message::json(json!({"tool": "a"}));
        text_json.format = Format::Text;
        assert_eq!(routed(&text_json), "natural language");
    }

    #[test]
    fn a_tool_call_with_mistyped_fields_is_refused() {
        for value in [
            json!({"tool": "a", "arguments": [1]}),
            json!({"name": "a", "arguments": "x"}),
            json!({"tool": 5}),
            json!({"name": " "}),
        ] {
            match route(&Message::json(value.clone())) {
                Route::ToolCall(Err(e)) => assert_eq!(e.code(), "invalid_arguments", "{value}"),
                other => panic!("{value}: {other:?}"),
            }
        }
    }

    #[test]
    fn control_and_negotiated_protocols_come_before_tool_calls() {
        let shaped = json!({"tool": "getProductInfo", "arguments": {}});
        let control = Message::json(shaped.clone()).into_control();
        assert_eq!(routed(&control), "control");
        let application = Message::json(shaped).with_submessage(Submessage::new(
            Format::Token,
            "protocol",
            "a".repeat(64),
        ));
        assert_eq!(routed(&application), "application");
    }

    #[test]
    fn a_fix_report_is_one_only_when_it_names_a_protocol() {
        let fix = parley_anp::MetaMessage::fix_error_negotiation(
            "wrong",
            parley_anp::MetaStatus::Negotiating,
        );
        let in_negotiation = nlip::wrap("fix", &[fix]);
        assert_eq!(routed(&in_negotiation), "meta");
        let report = crate::negotiation::fix_report::FixReport::new(
            ProtocolHash::of("a protocol"),
            json!({"productId": "P1"}),
            None,
            "wrong",
        );
        assert_eq!(routed(&report.to_message()), "fix");
    }
}
