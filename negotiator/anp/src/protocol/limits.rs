//! How much work a protocol document may ask of the side that reads it.
//!
//! A proposal comes from a peer, and reading it means compiling its schemas; every later
//! application message is checked against them. Two bounds keep that work proportional to
//! what a peer sends:
//!
//! - **Size and complexity, checked before anything is compiled** ([`DocLimits`], applied by
//!   [`ProtocolDoc::parse_within`](super::ProtocolDoc::parse_within)): the text's length, the
//!   number of JSON values in the two schemas, the number of regular expressions in them, and
//!   the number of test cases. A document over a limit is a
//!   [`ProtocolError::TooComplex`](super::ProtocolError::TooComplex) naming it.
//! - **Linear-time regular expressions, always**: `pattern` and `patternProperties` compile
//!   with the `regex` crate's engine (no backtracking: matching is linear in the input), each
//!   within [`REGEX_SIZE_LIMIT`] compiled and [`REGEX_DFA_SIZE_LIMIT`] of lazy-DFA cache. ECMA-262
//!   look-around and back-references have no linear-time implementation; a schema that uses them
//!   does not compile (`invalid_schema`), so a protocol cannot ask for them.

use serde_json::Value;

use super::{ProtocolError, SchemaRole};

/// Largest compiled form of one `pattern`, in bytes (the `regex` crate's `size_limit`).
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Largest lazy-DFA cache of one `pattern`, in bytes (the `regex` crate's `dfa_size_limit`).
pub const REGEX_DFA_SIZE_LIMIT: usize = 256 * 1024;

/// Bounds on one protocol document read from a peer (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocLimits {
    /// Longest protocol text, in bytes.
    pub max_bytes: usize,
    /// Most JSON values (objects, arrays, strings, numbers, booleans, nulls) in the request and
    /// response schemas together.
    pub max_schema_nodes: usize,
    /// Most regular expressions (`pattern` values, `patternProperties` keys) in the two schemas
    /// together.
    pub max_schema_patterns: usize,
    /// Most test cases.
    pub max_test_cases: usize,
}

impl Default for DocLimits {
    fn default() -> Self {
        DocLimits {
            max_bytes: 256 * 1024,
            max_schema_nodes: 4_000,
            max_schema_patterns: 64,
            max_test_cases: 100,
        }
    }
}

/// What a schema costs: its JSON values and its regular expressions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct SchemaCost {
    pub nodes: usize,
    pub patterns: usize,
}

impl SchemaCost {
    /// Adds the cost of `schema` (serde_json's recursion limit bounds the depth).
    pub(super) fn add(&mut self, schema: &Value) {
        self.nodes += 1;
        match schema {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("pattern", Value::String(_)) => self.patterns += 1,
                        ("patternProperties", Value::Object(patterns)) => {
                            self.patterns += patterns.len();
                        }
                        _ => {}
                    }
                    self.add(value);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.add(item)),
            _ => {}
        }
    }
}

impl DocLimits {
    pub(super) fn check_bytes(&self, text: &str) -> Result<(), ProtocolError> {
        over("bytes of text", text.len(), self.max_bytes)
    }

    pub(super) fn check_schemas(
        &self,
        request: &Value,
        response: &Value,
    ) -> Result<(), ProtocolError> {
        let mut cost = SchemaCost::default();
        cost.add(request);
        cost.add(response);
        over(
            "regular expressions in the schemas",
            cost.patterns,
            self.max_schema_patterns,
        )?;
        over(
            "JSON values in the schemas",
            cost.nodes,
            self.max_schema_nodes,
        )
    }

    pub(super) fn check_test_cases(&self, count: usize) -> Result<(), ProtocolError> {
        over("test cases", count, self.max_test_cases)
    }
}

fn over(what: &'static str, count: usize, limit: usize) -> Result<(), ProtocolError> {
    if count > limit {
        return Err(ProtocolError::TooComplex { what, count, limit });
    }
    Ok(())
}

/// The validator of a schema: draft 2020-12 unless the schema names its own draft, regular
/// expressions in linear time within their size limits (see the module docs). Remote `$ref`s
/// cannot resolve (the crate is built without resolvers), so a protocol is self-contained by
/// construction.
pub(super) fn compile(
    role: SchemaRole,
    schema: &Value,
) -> Result<jsonschema::Validator, ProtocolError> {
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT);
    let mut options = jsonschema::options().with_pattern_options(patterns);
    let names_draft = schema.get("$schema").is_some_and(Value::is_string);
    if !names_draft {
        options = options.with_draft(jsonschema::Draft::Draft202012);
    }
    options
        .build(schema)
        .map_err(|e| ProtocolError::InvalidSchema {
            role,
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schema_costs_its_values_and_its_patterns() {
        let mut cost = SchemaCost::default();
        cost.add(&json!({
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^P[0-9]{5}$"}},
            "patternProperties": {"^x-": {}, "^y-": {}}
        }));
        assert_eq!(cost.patterns, 3);
        // The root, "type", "properties", "id", its "type" and "pattern", "patternProperties"
        // and its two schemas.
        assert_eq!(cost.nodes, 9);
    }

    #[test]
    fn a_property_named_pattern_is_not_a_pattern() {
        let mut cost = SchemaCost::default();
        cost.add(&json!({"properties": {"pattern": {"type": "string"}}}));
        assert_eq!(cost.patterns, 0);
    }

    #[test]
    fn look_around_does_not_compile() {
        let schema = json!({"type": "string", "pattern": "^(?=a)a$"});
        let err = compile(SchemaRole::Request, &schema).expect_err("no look-ahead");
        assert_eq!(err.code(), "invalid_schema");
        let plain = json!({"type": "string", "pattern": "^P\\d{5}$"});
        let validator = compile(SchemaRole::Request, &plain).expect("a linear pattern");
        assert!(validator.is_valid(&json!("P12345")));
        assert!(!validator.is_valid(&json!("P1234")));
    }
}
