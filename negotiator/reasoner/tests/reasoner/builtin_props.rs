//! Property tests of the built-in protocol reasoner over random protocols: it never panics, it
//! only counter-proposes texts it accepts itself, and whatever it accepts it can generate.

use parley_anp::ProtocolDoc;
use parley_reasoner::{BuiltinProtocolReasoner, DeclaredCapability, Evaluation};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn capabilities() -> Vec<DeclaredCapability> {
    vec![
        DeclaredCapability {
            name: "getProductInfo".into(),
            description: "Product by id.".into(),
            input_schema: json!({"type": "object", "properties": {"productId": {"type": "string"}}, "required": ["productId"]}),
            output_schema: json!({"type": ["object", "null"], "properties": {
                "productId": {"type": "string"}, "productName": {"type": "string"},
                "price": {"type": "number"}, "currency": {"type": "string"}, "stock": {"type": "integer"}
            }, "required": ["productId", "productName", "price", "currency"]}),
            read_only: true,
        },
        DeclaredCapability {
            name: "getOrderStatus".into(),
            description: "Order by id.".into(),
            input_schema: json!({"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]}),
            output_schema: json!({"type": "object", "properties": {
                "orderId": {"type": "string"}, "status": {"type": "string"}, "items": {"type": "array"}
            }, "required": ["orderId", "status", "items"]}),
            read_only: true,
        },
    ]
}

const NAMES: [&str; 14] = [
    "messageId",
    "message_id",
    "productId",
    "product-id",
    "id",
    "orderId",
    "price",
    "Currency",
    "status",
    "code",
    "warranty",
    "city",
    "type",
    "error",
];
const TYPES: [&str; 6] = ["string", "integer", "number", "boolean", "object", "array"];

fn arb_schema() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        (0..NAMES.len(), 0..TYPES.len(), any::<bool>(), any::<bool>()),
        0..7,
    )
    .prop_map(|fields| {
        let mut props = Map::new();
        let mut required = Vec::new();
        for (n, t, req, nested) in fields {
            let name = NAMES[n];
            let schema = if TYPES[t] == "object" && nested {
                json!({"type": ["object", "null"], "properties": {
                    "productId": {"type": "string"}, "price": {"type": "number"}
                }})
            } else {
                json!({"type": TYPES[t]})
            };
            props.insert(name.to_owned(), schema);
            if req && !required.contains(&name) {
                required.push(name);
            }
        }
        json!({"type": "object", "properties": props, "required": required})
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn evaluation_is_total_and_self_consistent(request in arb_schema(), response in arb_schema()) {
        let text = format!(
            "# Data Format\n## Request\n```json\n{request}\n```\n## Response\n```json\n{response}\n```\n"
        );
        let doc = ProtocolDoc::parse(text).expect("generated documents parse");
        let caps = capabilities();
        match BuiltinProtocolReasoner.evaluate_sync(&doc, &caps) {
            Evaluation::Accept { mapping } => {
                let handler = BuiltinProtocolReasoner
                    .generate_sync(&doc, &caps, Some(&mapping))
                    .expect("accepted protocols generate");
                prop_assert!(handler.source.contains("function handle(request)"));
                prop_assert_eq!(handler.grants, vec![mapping.capability]);
            }
            Evaluation::Counter { text, summary } => {
                prop_assert!(!summary.trim().is_empty());
                let counter = ProtocolDoc::parse(text).expect("counter-proposals parse");
                let again = BuiltinProtocolReasoner.evaluate_sync(&counter, &caps);
                prop_assert!(matches!(again, Evaluation::Accept { .. }), "{:?}", again);
            }
            Evaluation::Reject { reason } => prop_assert!(!reason.is_empty()),
        }
    }
}
