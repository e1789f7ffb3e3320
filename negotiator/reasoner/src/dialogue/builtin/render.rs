//! The built-in reasoner's short text about a capability's result. The result itself travels
//! as structured data beside it; the text names the capability, the input it was called with,
//! and the fields the question asked for first.

use parley_capabilities::CapabilityError;
use serde_json::Value;

/// At most this many characters of fields after the ones asked for.
const MAX_REST: usize = 240;

/// `getProductInfo (productId P12345): price 1299.99; currency USD; …`, the fields named in
/// `focus` first. A `null` result is "found nothing".
pub(super) fn result_text(
    capability: &str,
    arguments: &Value,
    result: &Value,
    focus: &[String],
) -> String {
    let called = format!("{capability} ({})", inline_fields(arguments));
    match result {
        Value::Null => format!("{called} found nothing."),
        Value::Object(fields) => {
            let asked: Vec<String> = focus
                .iter()
                .filter_map(|f| fields.get(f).map(|v| format!("{f} {}", scalar(v))))
                .collect();
            let rest: Vec<String> = fields
                .iter()
                .filter(|(k, _)| !focus.contains(k))
                .map(|(k, v)| format!("{k} {}", scalar(v)))
                .collect();
            let rest = cut(&rest.join("; "), MAX_REST);
            match (asked.is_empty(), rest.is_empty()) {
                (true, _) => format!("{called}: {rest}."),
                (false, true) => format!("{called}: {}.", asked.join("; ")),
                (false, false) => format!("{called}: {}. Also: {rest}.", asked.join("; ")),
            }
        }
        Value::Array(items) => format!(
            "{called}: {} result{}: {}.",
            items.len(),
            if items.len() == 1 { "" } else { "s" },
            cut(
                &items.iter().map(scalar).collect::<Vec<_>>().join("; "),
                MAX_REST
            )
        ),
        other => format!("{called}: {}.", scalar(other)),
    }
}

/// `getOrderStatus (orderId O-9) failed (not_found): no record with orderId = "O-9"`.
pub(super) fn failure_text(capability: &str, arguments: &Value, error: &CapabilityError) -> String {
    let why = match error {
        CapabilityError::UnknownCapability { .. } => "no such capability".to_owned(),
        CapabilityError::InvalidArguments { message, .. }
        | CapabilityError::BindingFailed { message, .. }
        | CapabilityError::InvalidResult { message, .. }
        | CapabilityError::NotFound { message, .. }
        | CapabilityError::Unavailable { message, .. }
        | CapabilityError::ToolError { message, .. }
        | CapabilityError::Forbidden { message, .. } => message.clone(),
        CapabilityError::Timeout { after, .. } => {
            format!("no answer within {} ms", after.as_millis())
        }
    };
    format!(
        "{capability} ({}) failed ({}): {why}",
        inline_fields(arguments),
        error.code()
    )
}

/// `productId P12345, quantity 2` for an object, the compact JSON of anything else.
fn inline_fields(value: &Value) -> String {
    match value {
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k} {}", scalar(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => scalar(other),
    }
}

/// A value as a person reads it: strings without quotes, arrays and objects compact.
fn scalar(value: &Value) -> String {
    match value {
        // A sentence's full stop would run into the separator after it.
        Value::String(s) => s.trim_end_matches('.').to_owned(),
        Value::Null => "none".to_owned(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| match i {
                    Value::Object(_) => inline_fields(i),
                    other => scalar(other),
                })
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Value::Object(_) => format!("{{{}}}", inline_fields(value)),
        other => other.to_string(),
    }
}

/// `text`, cut to `max` characters with an ellipsis.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    text.chars().take(max - 1).collect::<String>() + "…"
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_fields_asked_for_come_first() {
        let text = result_text(
            "getProductInfo",
            &json!({"productId": "P1"}),
            &json!({"productId": "P1", "productName": "Mouse", "price": 39.5}),
            &["price".to_owned()],
        );
        assert_eq!(
            text,
            "getProductInfo (productId P1): price 39.5. Also: productId P1; productName Mouse."
        );
    }

    #[test]
    fn nothing_found_and_nested_values() {
        assert_eq!(
            result_text("x", &json!({"id": "a"}), &Value::Null, &[]),
            "x (id a) found nothing."
        );
        let text = result_text(
            "getOrderStatus",
            &json!({"orderId": "O-1"}),
            &json!({"status": "shipped", "items": [{"productId": "P1", "quantity": 2}], "expectedDelivery": null}),
            &["status".to_owned()],
        );
        assert_eq!(
            text,
            "getOrderStatus (orderId O-1): status shipped. Also: items [productId P1, quantity 2]; expectedDelivery none."
        );
    }
}
