//! The built-in reasoner's core: mapping a protocol onto one capability.
//!
//! Given a [`ProtocolDoc`] and the operator's [`DeclaredCapability`]s, [`plan`] finds, for each
//! capability, where every capability input comes from in the protocol request and where every
//! protocol response field comes from (the capability's output, the request, a constant, or the
//! outcome of the call), then picks the capability that serves the protocol best. The result is
//! a [`Mapping`] plus the list of [`Gap`]s that stop it from serving the protocol as written.
//! Everything here is deterministic: same inputs, same mapping, same order.
//!
//! # Names
//! Field names match across case styles: `productId`, `product_id`, `product-id`, `ProductId`
//! and `PRODUCT_ID` are one name (their lowercase words joined). A request field `id` also
//! matches a capability input `<entity>Id`, where the entity is the capability name without its
//! verb and generic suffix (`getProductInfo` → `product`).
//!
//! # Types
//! A request field feeds an input when every JSON type the protocol allows is accepted by the
//! input (`integer` fits `number`); an output field feeds a response field when every type it
//! can produce (except `null` for whole results, which means "not found") is accepted by the
//! response field. A schema without `type` accepts anything.
//!
//! # Response sources, in order of preference
//! 1. an output field with the same name ([`Source::OutputField`]);
//! 2. an object field whose properties match the output's properties
//!    ([`Source::OutputObject`]), or an array/any-typed field taking the whole output
//!    ([`Source::Output`]) when the names match;
//! 3. a status field (`status`, `statusCode`, `code`, …) filled from the outcome
//!    ([`Source::Status`]), with codes from the protocol's Error Handling section;
//! 4. a constant: `const`, a one-value `enum`, or a `type` field documented as
//!    "REQUEST or RESPONSE" ([`Source::Constant`]);
//! 5. a request field with the same name, echoed ([`Source::Echo`], e.g. `messageId`);
//! 6. an error text field (`error`, `errorMessage`, …) set when the call fails
//!    ([`Source::ErrorMessage`]).

use std::collections::BTreeSet;

use parley_anp::protocol::ProtocolDoc;
use parley_mapping::{
    Argument, Mapping, RequestCheck, ResponseField, Source, StatusCodes, StatusShape,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the built-in reasoner knows about one capability: the declaration, no binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredCapability {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Value,
    #[serde(default)]
    pub read_only: bool,
}

impl From<&parley_capabilities::Capability> for DeclaredCapability {
    fn from(c: &parley_capabilities::Capability) -> Self {
        Self {
            name: c.name().to_owned(),
            description: c.description().to_owned(),
            input_schema: c.input_schema().clone(),
            output_schema: c.output_schema().clone(),
            read_only: c.read_only(),
        }
    }
}

impl DeclaredCapability {
    /// Every declared capability, in name order.
    pub fn all(capabilities: &parley_capabilities::Capabilities) -> Vec<Self> {
        capabilities.iter().map(Self::from).collect()
    }
}

/// Why a mapping cannot serve the protocol as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Gap {
    /// A required capability input has no request field.
    MissingInput { input: String },
    /// A required capability input comes from a request field the protocol makes optional.
    OptionalInput { input: String, request: String },
    /// A required response field has no source.
    UnservedResponse { field: String },
    /// An optional response field has no source (only reported alongside other gaps).
    UnservedOptional { field: String },
    /// No response field carries capability data.
    NoData,
}

impl Gap {
    pub fn describe(&self) -> String {
        match self {
            Gap::MissingInput { input } => {
                format!("the request has no field for the required input `{input}`")
            }
            Gap::OptionalInput { input, request } => format!(
                "the request field `{request}` feeds the required input `{input}` but is optional"
            ),
            Gap::UnservedResponse { field } => {
                format!("nothing can fill the required response field `{field}`")
            }
            Gap::UnservedOptional { field } => {
                format!("nothing can fill the optional response field `{field}`")
            }
            Gap::NoData => "no response field carries the capability's result".into(),
        }
    }

    /// Gaps that block acceptance (optional unserved fields alone do not).
    pub fn blocking(&self) -> bool {
        !matches!(self, Gap::UnservedOptional { .. })
    }
}

/// The best mapping found, with its gaps and a score used to rank capabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub mapping: Mapping,
    pub gaps: Vec<Gap>,
    /// Matched inputs + data-carrying response fields (nested fields counted).
    pub score: usize,
}

impl Plan {
    pub fn accepts(&self) -> bool {
        !self.gaps.iter().any(Gap::blocking)
    }
}

/// Maps the protocol onto each capability and returns the best plan, or `None` when no
/// capability relates to the protocol at all (no input and no output field matches).
pub fn plan(doc: &ProtocolDoc, capabilities: &[DeclaredCapability]) -> Option<Plan> {
    let codes = status_codes(doc.sections().error_handling.as_deref().unwrap_or(""));
    let mut best: Option<Plan> = None;
    for cap in capabilities {
        let plan = plan_one(doc, cap, codes);
        if plan.score == 0 {
            continue;
        }
        let better = match &best {
            None => true,
            // Prefer plans that serve the protocol, then fewer blocking gaps, then more matches;
            // ties keep the first (capabilities are in name order).
            Some(b) => {
                let key = |p: &Plan| {
                    (
                        p.accepts(),
                        std::cmp::Reverse(p.gaps.iter().filter(|g| g.blocking()).count()),
                        p.score,
                    )
                };
                key(&plan) > key(b)
            }
        };
        if better {
            best = Some(plan);
        }
    }
    best
}

fn plan_one(doc: &ProtocolDoc, cap: &DeclaredCapability, codes: StatusCodes) -> Plan {
    let req = doc.request_schema();
    let resp = doc.response_schema();
    let entity_words = entity_words(&cap.name);
    let mut gaps = Vec::new();
    let mut score = 0;

    // Request side: every capability input from a request field.
    let req_props = properties(req);
    let req_required = required(req);
    let mut arguments = Vec::new();
    for (input, input_schema) in properties(&cap.input_schema) {
        let input_required = required(&cap.input_schema).contains(input.as_str());
        let found = req_props.iter().find(|(name, schema)| {
            names_match(name, &input, &entity_words) && types_fit(schema, input_schema)
        });
        match found {
            Some((name, _)) => {
                score += 1;
                if input_required && !req_required.contains(name.as_str()) {
                    gaps.push(Gap::OptionalInput {
                        input: input.clone(),
                        request: name.clone(),
                    });
                }
                arguments.push(Argument {
                    input: input.clone(),
                    request: name.clone(),
                });
            }
            None if input_required => gaps.push(Gap::MissingInput {
                input: input.clone(),
            }),
            None => {}
        }
    }
    let checks = req_props
        .iter()
        .map(|(name, schema)| RequestCheck {
            field: name.clone(),
            types: json_types(schema)
                .map(|t| t.into_iter().collect())
                .unwrap_or_default(),
            required: req_required.contains(name.as_str()),
            allowed: allowed_values(schema),
        })
        .collect();

    // Response side.
    let output = &cap.output_schema;
    let output_props = properties(output);
    let output_nullable = json_types(output).is_some_and(|t| t.contains("null"));
    let resp_required = required(resp);
    let mut response = Vec::new();
    for (field, schema) in properties(resp) {
        let is_required = resp_required.contains(field.as_str());
        let nullable = json_types(schema).is_none_or(|t| t.contains("null"));
        let source = source_for(
            &field,
            schema,
            &req_props,
            output,
            &output_props,
            &mut score,
        );
        match source {
            Some(source) => response.push(ResponseField {
                field,
                source,
                required: is_required,
                nullable,
            }),
            None if is_required => gaps.push(Gap::UnservedResponse { field }),
            None => gaps.push(Gap::UnservedOptional { field }),
        }
    }
    if !response.iter().any(|r| r.source.carries_data()) {
        gaps.push(Gap::NoData);
    }

    let entity = {
        let words = if entity_words.is_empty() {
            vec!["item".to_owned()]
        } else {
            entity_words
        };
        let joined = words.join(" ");
        let mut chars = joined.chars();
        match chars.next() {
            Some(c) => c.to_uppercase().collect::<String>() + chars.as_str(),
            None => joined,
        }
    };
    Plan {
        mapping: Mapping {
            capability: cap.name.clone(),
            checks,
            arguments,
            response,
            codes,
            entity,
            output_nullable,
        },
        gaps,
        score,
    }
}

fn source_for(
    field: &str,
    schema: &Value,
    req_props: &[(String, &Value)],
    output: &Value,
    output_props: &[(String, &Value)],
    score: &mut usize,
) -> Option<Source> {
    // 1. A same-named output field.
    if let Some((name, out_schema)) = output_props
        .iter()
        .find(|(name, _)| key(name) == key(field))
        && types_fit(out_schema, schema)
    {
        *score += 1;
        return Some(Source::OutputField {
            field: name.clone(),
        });
    }
    // 2. The whole output, reshaped into an object field, or as is.
    let types = json_types(schema);
    let sub_props = properties(schema);
    if !output_props.is_empty()
        && !sub_props.is_empty()
        && types.as_ref().is_none_or(|t| t.contains("object"))
    {
        let sub_required = required(schema);
        let mut fields = Vec::new();
        let mut complete = true;
        for (sub, sub_schema) in &sub_props {
            match output_props
                .iter()
                .find(|(o, o_schema)| key(o) == key(sub) && types_fit(o_schema, sub_schema))
            {
                Some((o, _)) => fields.push((sub.clone(), o.clone())),
                None if sub_required.contains(sub.as_str()) => complete = false,
                None => {}
            }
        }
        if complete && !fields.is_empty() {
            *score += fields.len();
            return Some(Source::OutputObject { fields });
        }
    }
    let output_types = json_types(output);
    let same_kind = |t: &str| {
        types.as_ref().is_some_and(|ts| ts.contains(t))
            && output_types.as_ref().is_some_and(|ts| ts.contains(t))
    };
    if output_props.is_empty() && same_kind("array") {
        *score += 1;
        return Some(Source::Output);
    }
    // 3. A status field.
    if let Some(shape) = status_shape(field, schema) {
        return Some(Source::Status { shape });
    }
    // 4. A constant.
    if let Some(value) = constant(field, schema) {
        return Some(Source::Constant { value });
    }
    // 5. An echoed request field.
    if let Some((name, req_schema)) = req_props.iter().find(|(name, _)| key(name) == key(field))
        && types_fit(req_schema, schema)
    {
        return Some(Source::Echo {
            field: name.clone(),
        });
    }
    // 6. An error text.
    let k = key(field);
    if matches!(
        k.as_str(),
        "error" | "errormessage" | "errordescription" | "errordetail" | "errortext"
    ) && types.as_ref().is_none_or(|t| t.contains("string"))
    {
        return Some(Source::ErrorMessage);
    }
    None
}

fn status_shape(field: &str, schema: &Value) -> Option<StatusShape> {
    let k = key(field);
    if !matches!(
        k.as_str(),
        "status" | "statuscode" | "code" | "resultcode" | "httpstatus" | "responsecode"
    ) {
        return None;
    }
    let types = json_types(schema);
    let props = properties(schema);
    if !props.is_empty() || types.as_ref().is_some_and(|t| t.contains("object")) {
        let code_field = props
            .iter()
            .find(|(n, s)| {
                matches!(
                    key(n).as_str(),
                    "code" | "statuscode" | "httpcode" | "status"
                ) && json_types(s).is_none_or(|t| t.contains("integer") || t.contains("number"))
            })
            .map(|(n, _)| n.clone());
        let message_field = props
            .iter()
            .find(|(n, s)| {
                matches!(
                    key(n).as_str(),
                    "message" | "msg" | "description" | "text" | "reason"
                ) && json_types(s).is_none_or(|t| t.contains("string"))
            })
            .map(|(n, _)| n.clone());
        // Any other required sub-field would be left empty: not a status we can fill.
        let known: BTreeSet<&str> = code_field
            .iter()
            .chain(message_field.iter())
            .map(String::as_str)
            .collect();
        if required(schema).iter().any(|r| !known.contains(r)) || known.is_empty() {
            return None;
        }
        return Some(StatusShape::Object {
            code_field,
            message_field,
        });
    }
    if types
        .as_ref()
        .is_some_and(|t| t.contains("integer") || t.contains("number"))
    {
        return Some(StatusShape::Integer);
    }
    if types.as_ref().is_some_and(|t| t.contains("string")) {
        let words: Vec<String> = allowed_values(schema)
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let pick = |patterns: &[&str], default: &str| {
            words
                .iter()
                .find(|w| {
                    let k = key(w);
                    patterns.iter().any(|p| k.contains(p))
                })
                .cloned()
                .unwrap_or_else(|| default.to_owned())
        };
        if words.is_empty() {
            return Some(StatusShape::Text {
                ok: "success".into(),
                bad_request: "bad_request".into(),
                not_found: "not_found".into(),
                internal: "error".into(),
            });
        }
        let error = pick(&["error", "fail"], &words[words.len() - 1]);
        return Some(StatusShape::Text {
            ok: pick(&["success", "ok", "found"], &words[0]),
            bad_request: pick(&["invalid", "bad", "error", "fail"], &error),
            not_found: pick(&["notfound", "missing", "unknown"], &error),
            internal: error.clone(),
        });
    }
    None
}

fn constant(field: &str, schema: &Value) -> Option<Value> {
    if let Some(c) = schema.get("const") {
        return Some(c.clone());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && values.len() == 1
    {
        return Some(values[0].clone());
    }
    // Seed 002's `type`: "Indicates whether the message is a REQUEST or RESPONSE".
    let described = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    if key(field) == "type" && described.contains("RESPONSE") {
        return Some(Value::String("RESPONSE".into()));
    }
    None
}

/// Reads status codes from prose such as "404 when no product has the given id".
pub fn status_codes(error_handling: &str) -> StatusCodes {
    let mut codes = StatusCodes::default();
    for line in error_handling.lines() {
        let lower = line.to_lowercase();
        let numbers: Vec<u16> = lower
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| w.len() == 3)
            .filter_map(|w| w.parse().ok())
            .filter(|n| (100..600).contains(n))
            .collect();
        // Only lines naming exactly one code say which code means what.
        let [code] = numbers[..] else { continue };
        let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
        if has(&["not found", "not exist", "no such", "unknown", "not_found"]) {
            codes.not_found = code;
        } else if has(&[
            "malformed",
            "invalid",
            "missing",
            "bad request",
            "wrong type",
        ]) {
            codes.bad_request = code;
        } else if has(&[
            "internal",
            "could not",
            "unavailable",
            "server error",
            "failed",
        ]) {
            codes.internal = code;
        } else if has(&["success", "found", " ok", "succeed"]) && (200..300).contains(&code) {
            codes.ok = code;
        }
    }
    codes
}

// --- schema helpers ---------------------------------------------------------------------------

/// `(name, schema)` of an object schema's properties, in document order.
pub(crate) fn properties(schema: &Value) -> Vec<(String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default()
}

pub(crate) fn required(schema: &Value) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The JSON types a schema allows, `None` for "anything". Inferred from `const`/`enum` when
/// `type` is absent.
pub(crate) fn json_types(schema: &Value) -> Option<BTreeSet<String>> {
    match schema.get("type") {
        Some(Value::String(t)) => Some([t.clone()].into()),
        Some(Value::Array(ts)) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => {
            let values: Vec<&Value> = match (schema.get("const"), schema.get("enum")) {
                (Some(c), _) => vec![c],
                (None, Some(Value::Array(e))) => e.iter().collect(),
                _ => return None,
            };
            Some(values.into_iter().map(|v| type_of(v).to_owned()).collect())
        }
    }
}

pub(crate) fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn allowed_values(schema: &Value) -> Option<Vec<Value>> {
    if let Some(c) = schema.get("const") {
        return Some(vec![c.clone()]);
    }
    schema.get("enum").and_then(Value::as_array).cloned()
}

/// True when every value `from` may hold is accepted by `to`.
fn types_fit(from: &Value, to: &Value) -> bool {
    let (Some(from), Some(to)) = (json_types(from), json_types(to)) else {
        return true;
    };
    from.iter().all(|t| {
        to.contains(t)
            || (t == "integer" && to.contains("number"))
            || (t == "null" && from.len() > 1)
    })
}

// --- names ------------------------------------------------------------------------------------

/// Lowercase words of an identifier in any case style: `productID` → `["product", "id"]`.
pub fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
        let next = chars.get(i + 1).copied();
        let boundary = match prev {
            Some(p) if c.is_uppercase() => {
                p.is_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            }
            Some(p) if c.is_ascii_digit() => p.is_alphabetic(),
            _ => false,
        };
        if boundary && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The case-insensitive, style-insensitive key of a name.
pub fn key(name: &str) -> String {
    words(name).concat()
}

fn names_match(request: &str, input: &str, entity: &[String]) -> bool {
    let (r, i) = (key(request), key(input));
    r == i || (!entity.is_empty() && format!("{}{r}", entity.concat()) == i)
}

/// The capability's object noun: its name without a leading verb and a generic trailing word.
fn entity_words(capability: &str) -> Vec<String> {
    const VERBS: [&str; 10] = [
        "get", "find", "lookup", "look", "fetch", "search", "list", "read", "query", "retrieve",
    ];
    const GENERIC: [&str; 8] = [
        "info",
        "information",
        "details",
        "detail",
        "status",
        "data",
        "record",
        "by",
    ];
    let mut w = words(capability);
    while w
        .first()
        .is_some_and(|f| VERBS.contains(&f.as_str()) || f == "up")
    {
        w.remove(0);
    }
    if let Some(pos) = w.iter().position(|x| x == "by") {
        w.truncate(pos);
    }
    while w.len() > 1 && w.last().is_some_and(|l| GENERIC.contains(&l.as_str())) {
        w.pop();
    }
    w
}

/// Naming style of a set of field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseStyle {
    Camel,
    Pascal,
    Snake,
    Kebab,
}

impl CaseStyle {
    /// The style most of `names` use (camelCase when undecided).
    pub fn detect<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut counts = [0usize; 4];
        for n in names {
            let style = if n.contains('_') {
                CaseStyle::Snake
            } else if n.contains('-') {
                CaseStyle::Kebab
            } else if n.chars().next().is_some_and(char::is_uppercase) {
                CaseStyle::Pascal
            } else if n.chars().any(char::is_uppercase) {
                CaseStyle::Camel
            } else {
                continue; // one lowercase word says nothing
            };
            counts[style as usize] += 1;
        }
        let styles = [
            CaseStyle::Camel,
            CaseStyle::Pascal,
            CaseStyle::Snake,
            CaseStyle::Kebab,
        ];
        let mut best = CaseStyle::Camel;
        for s in styles {
            if counts[s as usize] > counts[best as usize] {
                best = s;
            }
        }
        best
    }

    /// `name` rewritten in this style.
    pub fn apply(self, name: &str) -> String {
        let w = words(name);
        let cap = |s: &str| {
            let mut c = s.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        };
        match self {
            CaseStyle::Snake => w.join("_"),
            CaseStyle::Kebab => w.join("-"),
            CaseStyle::Pascal => w.iter().map(|x| cap(x)).collect(),
            CaseStyle::Camel => w
                .iter()
                .enumerate()
                .map(|(i, x)| if i == 0 { x.clone() } else { cap(x) })
                .collect(),
        }
    }
}

/// A JSON object from pairs, in order.
pub(crate) fn object(pairs: impl IntoIterator<Item = (String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect::<Map<String, Value>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_across_styles() {
        for name in [
            "productId",
            "product_id",
            "product-id",
            "ProductId",
            "PRODUCT_ID",
            "productID",
        ] {
            assert_eq!(words(name), ["product", "id"], "{name}");
        }
        assert_eq!(words("HTTPStatusCode"), ["http", "status", "code"]);
        assert_eq!(words("sku2Name"), ["sku", "2", "name"]);
    }

    #[test]
    fn styles_apply() {
        assert_eq!(CaseStyle::Snake.apply("productId"), "product_id");
        assert_eq!(CaseStyle::Kebab.apply("productId"), "product-id");
        assert_eq!(CaseStyle::Pascal.apply("product_id"), "ProductId");
        assert_eq!(CaseStyle::Camel.apply("product-id"), "productId");
        assert_eq!(
            CaseStyle::detect(["message_id", "product_id", "type"]),
            CaseStyle::Snake
        );
    }

    #[test]
    fn entity_from_capability_name() {
        assert_eq!(entity_words("getProductInfo"), ["product"]);
        assert_eq!(entity_words("getOrderStatus"), ["order"]);
        assert_eq!(entity_words("lookup_user_by_email"), ["user"]);
        assert!(names_match(
            "id",
            "productId",
            &entity_words("getProductInfo")
        ));
    }

    #[test]
    fn types_fit_rules() {
        assert!(types_fit(
            &json!({"type": "integer"}),
            &json!({"type": "number"})
        ));
        assert!(!types_fit(
            &json!({"type": "number"}),
            &json!({"type": "integer"})
        ));
        assert!(types_fit(&json!({}), &json!({"type": "string"})));
        assert!(types_fit(
            &json!({"type": ["string", "null"]}),
            &json!({"type": "string"})
        ));
    }

    #[test]
    fn codes_from_prose() {
        let codes = status_codes(
            "- 200 on success\n- 422 when the request is invalid\n- 410 if the product does not exist\n- 503 when the catalogue is unavailable\n- 200, 404: see above",
        );
        assert_eq!(
            codes,
            StatusCodes {
                ok: 200,
                bad_request: 422,
                not_found: 410,
                internal: 503
            }
        );
    }
}
