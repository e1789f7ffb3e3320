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
//! # Fields inside objects
//! When the top-level fields do not serve the protocol and its schemas hold objects (a message
//! envelope such as seed 003's `header` + `body`), the planner plans again with the fields
//! inside those objects, named by JSON Pointer (`/body/stationId`; see [`segments`]), matching
//! on their own names. A response object that no source fills as a whole (or that would only
//! echo the request's) is filled field by field. In an object holding a reply link (`reply_to`,
//! `in_reply_to`) the link takes the request's message id from the same place, `sender` and
//! `receiver` swap, and the reply's own `id` and `timestamp` are never echoed. A `type` field
//! listing message types one of which is an error (`RESPONSE`, `ERROR`) is filled per outcome
//! like a text status. The mapping runtime reads top-level fields only, so such a mapping
//! serves through its JavaScript handler.
//!
//! # Types
//! A request field feeds an input when every JSON type the protocol allows is accepted by the
//! input (`integer` fits `number`); an output field feeds a response field when every type it
//! can produce (except `null` for whole results, which means "not found") is accepted by the
//! response field. A schema without `type` accepts anything.
//!
//! # Response sources, in order of preference
//! 1. an output field with the same name ([`Source::OutputField`](parley_mapping::Source::OutputField));
//! 2. an object field whose properties match the output's properties
//!    ([`Source::OutputObject`](parley_mapping::Source::OutputObject)), or an array/any-typed field taking the whole output
//!    ([`Source::Output`](parley_mapping::Source::Output)) when the names match;
//! 3. a status field (`status`, `statusCode`, `code`, …) filled from the outcome
//!    ([`Source::Status`](parley_mapping::Source::Status)), with codes from the protocol's Error Handling section;
//! 4. a constant: `const`, a one-value `enum`, or a `type` field documented as
//!    "REQUEST or RESPONSE" ([`Source::Constant`](parley_mapping::Source::Constant));
//! 5. a request field with the same name, echoed ([`Source::Echo`](parley_mapping::Source::Echo), e.g. `messageId`);
//! 6. an error text field (`error`, `errorMessage`, …) set when the call fails
//!    ([`Source::ErrorMessage`](parley_mapping::Source::ErrorMessage)).

mod names;
mod paths;
mod sources;

use parley_anp::protocol::ProtocolDoc;
use parley_mapping::{Argument, Mapping, RequestCheck, ResponseField, Source, StatusCodes};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use names::entity_words;
pub use names::{CaseStyle, key, words};
pub use paths::segments;

use self::names::names_match;
use self::paths::RequestField;
use self::sources::{reply_source, source_for};
use crate::schema::{allowed_values, json_types, properties, required, types_fit};

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
        capabilities.iter().map(|c| Self::from(&*c)).collect()
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
///
/// Each capability is planned over the request's and response's top-level fields first; when
/// that does not serve the protocol and the schemas hold objects, again with the fields inside
/// those objects (see the module docs), and the better of the two counts.
pub fn plan(doc: &ProtocolDoc, capabilities: &[DeclaredCapability]) -> Option<Plan> {
    let codes = status_codes(doc.sections().error_handling.as_deref().unwrap_or(""));
    let nestable = paths::nestable(doc.request_schema()) || paths::nestable(doc.response_schema());
    let mut best: Option<Plan> = None;
    for cap in capabilities {
        let flat = plan_one(doc, cap, codes, false);
        let plan = if flat.accepts() || !nestable {
            flat
        } else {
            let nested = plan_one(doc, cap, codes, true);
            if rank(&nested) > rank(&flat) {
                nested
            } else {
                flat
            }
        };
        if plan.score == 0 {
            continue;
        }
        // Ties keep the first (capabilities are in name order).
        if best.as_ref().is_none_or(|b| rank(&plan) > rank(b)) {
            best = Some(plan);
        }
    }
    best
}

/// Plans that serve the protocol first, then fewer blocking gaps, then more matches.
fn rank(p: &Plan) -> (bool, std::cmp::Reverse<usize>, usize) {
    (
        p.accepts(),
        std::cmp::Reverse(p.gaps.iter().filter(|g| g.blocking()).count()),
        p.score,
    )
}

/// A plan's gaps and score while it is being built.
#[derive(Default)]
struct Tally {
    gaps: Vec<Gap>,
    score: usize,
}

fn plan_one(doc: &ProtocolDoc, cap: &DeclaredCapability, codes: StatusCodes, nested: bool) -> Plan {
    let req_fields = paths::request_fields(doc.request_schema(), nested);
    let entity_words = entity_words(&cap.name);
    let mut tally = Tally::default();
    let arguments = map_arguments(&req_fields, cap, &entity_words, &mut tally);
    let checks = request_checks(&req_fields);
    let mut response = Vec::new();
    map_response(
        doc.response_schema(),
        None,
        nested,
        &req_fields,
        cap,
        &mut tally,
        &mut response,
    );
    if !response.iter().any(|r| r.source.carries_data()) {
        tally.gaps.push(Gap::NoData);
    }
    Plan {
        mapping: Mapping {
            capability: cap.name.clone(),
            checks,
            arguments,
            response,
            codes,
            entity: entity_name(entity_words),
            output_nullable: json_types(&cap.output_schema).is_some_and(|t| t.contains("null")),
        },
        gaps: tally.gaps,
        score: tally.score,
    }
}

/// Request side: every capability input from a request field, preferring a field with the
/// input's own name over one matched through the entity (`id` for `productId`).
fn map_arguments(
    req_fields: &[RequestField<'_>],
    cap: &DeclaredCapability,
    entity_words: &[String],
    tally: &mut Tally,
) -> Vec<Argument> {
    let mut arguments = Vec::new();
    for (input, input_schema) in properties(&cap.input_schema) {
        let input_required = required(&cap.input_schema).contains(input.as_str());
        let fits = |f: &&RequestField<'_>| types_fit(f.schema, input_schema);
        let found = req_fields
            .iter()
            .filter(fits)
            .find(|f| key(&paths::leaf(&f.name)) == key(&input))
            .or_else(|| {
                req_fields
                    .iter()
                    .filter(fits)
                    .find(|f| names_match(&paths::leaf(&f.name), &input, entity_words))
            });
        match found {
            Some(f) => {
                tally.score += 1;
                if input_required && !f.always {
                    tally.gaps.push(Gap::OptionalInput {
                        input: input.clone(),
                        request: f.name.clone(),
                    });
                }
                arguments.push(Argument {
                    input: input.clone(),
                    request: f.name.clone(),
                });
            }
            None if input_required => tally.gaps.push(Gap::MissingInput {
                input: input.clone(),
            }),
            None => {}
        }
    }
    arguments
}

/// The checks of every request field: presence, JSON types, allowed values. A nested field's
/// presence is checked within its parent object, which is checked before it.
fn request_checks(req_fields: &[RequestField<'_>]) -> Vec<RequestCheck> {
    req_fields
        .iter()
        .map(|f| RequestCheck {
            field: f.name.clone(),
            types: json_types(f.schema)
                .map(|t| t.into_iter().collect())
                .unwrap_or_default(),
            required: f.required,
            allowed: allowed_values(f.schema),
        })
        .collect()
}

/// Response side: a source for every field of `resp` (the response, or with `prefix` an object
/// inside it), or a gap. With `nested`, an object field that no source fills as a whole, or
/// that would only echo the request's object, is filled field by field.
fn map_response(
    resp: &Value,
    prefix: Option<&str>,
    nested: bool,
    req_fields: &[RequestField<'_>],
    cap: &DeclaredCapability,
    tally: &mut Tally,
    response: &mut Vec<ResponseField>,
) {
    let output = &cap.output_schema;
    let output_props = properties(output);
    let resp_required = required(resp);
    let siblings: Vec<String> = properties(resp).into_iter().map(|(n, _)| n).collect();
    for (name, schema) in properties(resp) {
        let field = match prefix {
            Some(p) => paths::child(p, &name),
            None => name.clone(),
        };
        let is_required = resp_required.contains(name.as_str());
        let nullable = json_types(schema).is_none_or(|t| t.contains("null"));
        let mut score = 0;
        let source = match prefix.and_then(|_| reply_source(&field, &siblings, req_fields)) {
            Some(reply) => reply,
            None => source_for(
                &field,
                schema,
                req_fields,
                output,
                &output_props,
                &mut score,
            ),
        };
        let whole = matches!(source, Some(ref s) if !matches!(s, Source::Echo { .. }));
        if nested && !whole && paths::opens(schema) {
            map_response(
                schema,
                Some(&field),
                nested,
                req_fields,
                cap,
                tally,
                response,
            );
            continue;
        }
        tally.score += score;
        match source {
            Some(source) => response.push(ResponseField {
                field,
                source,
                required: is_required,
                nullable,
            }),
            None if is_required => tally.gaps.push(Gap::UnservedResponse { field }),
            None => tally.gaps.push(Gap::UnservedOptional { field }),
        }
    }
}

/// The entity's name for messages such as "Product not found": its words, capitalised.
fn entity_name(entity_words: Vec<String>) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
