//! Protocol documents: the markdown text two agents agree on, and what Parley reads out of it.
//!
//! A protocol document (seed 002's `candidateProtocols`) is markdown with these sections:
//!
//! | section | heading words recognised (any level, any case, numbering and `:` ignored) | needed |
//! | --- | --- | --- |
//! | requirements | `Requirements`, `Requirement`, `Purpose`, `Goal` | no |
//! | process | `Process`, `Process Description`, `Interaction Flow`, `Flow`, `Protocol Flow`, `Interaction` | no |
//! | data format | `Data Format`, `Data Format Description`, `Data Formats`, `Message Format(s)`, `Request Message Format`, `Response Message Format`, `Request and Response Format`, `Message Structure(s)`, `Message Examples`, `Examples` | **yes** |
//! | error handling | `Error Handling`, `Errors`, `Error Codes` | no |
//! | test cases | `Test Cases`, `Tests`, `Test Case` (without a number), `Test Scenarios`, `Testing`, `Test Plan` | no |
//!
//! The section level is the level of the first recognised section heading; deeper headings (and
//! headings that are not section names, such as `## Request Message` or `# Test Case 2`) stay
//! inside the current section.
//!
//! # Schemas
//! The data format section must hold two JSON Schemas (draft 2020-12 unless the schema's
//! `$schema` names another draft), in ```` ```json ```` fences or as bare JSON starting a line.
//! A JSON object counts as a schema when it has `$schema`, `properties`, or a `type` that is a
//! JSON Schema type name. Which one is the request and which the response is decided, in order,
//! by: the nearest text line above it (e.g. `Request JSON schema:`), the heading it is under
//! (e.g. `## Response Message`), its `title` (e.g. `ProductInfoRequest`), and finally document
//! order (first request, then response). A missing schema, two candidates for one role, or a
//! schema that does not compile is a [`ProtocolError`] naming the role.
//!
//! A document may show an example message instead of a schema (AgentConnect's generator writes
//! `{"messageId": "<16 chars>", …}`): when the section has no schema for a role but example JSON
//! objects for it (their role decided as above; several examples of one message merge), the
//! schema is derived from the examples (see `derive` for the rules: every field all examples
//! show required, placeholder strings such as `"<integer>"` or `"string"` name their type) and
//! [`ProtocolDoc::inferred`] says what was inferred; what no example settles (a field only ever
//! `null`) is also in [`ProtocolDoc::unclear`].
//!
//! # Test cases
//! The test cases section holds a JSON array (fenced or bare), or several, of objects:
//!
//! ```json
//! [
//!   {
//!     "name": "found",
//!     "description": "optional prose",
//!     "request": { "messageId": "m1", "productId": "P12345" },
//!     "expectedResponse": { "messageId": "m1", "status": { "code": 200 } },
//!     "match": "subset",
//!     "fixtures": {
//!       "getProductInfo": [ { "args": { "productId": "P12345" }, "result": { "productId": "P12345" } } ]
//!     }
//!   }
//! ]
//! ```
//!
//! - `request` and `expectedResponse` are required; `name` defaults to `case <n>` (1-based).
//! - `match` is `"subset"` (default) or `"exact"`; see [`MatchMode`].
//! - `fixtures` answers the handler's capability calls during verification, so no real
//!   capability runs: for each capability, a list of `{ "args": …, "result": … }` (a successful
//!   call; `result` defaults to `null`) or `{ "args": …, "error": "text" }` (the call throws).
//!   A call is answered by the first entry whose `args` equal the call's arguments exactly; a call
//!   with no matching entry fails (see [`Fixtures::answer`]).
//!
//! - `checks` lists conditions no expected value expresses, each `{"path": <JSON Pointer>,
//!   "is": "present" | "notNull" | "nonEmpty"}` ([`FieldCheck`]).
//!
//! Seed 002's own prose form is read too: under each `Test Case …` heading, the first JSON value
//! after a line labelled as the request (a label mentioning "request" or "input", as a line, a
//! list item or `` Request: `{…}` `` inline) is the request, and the first after a label
//! mentioning "response", "reply", "expected", "output" or "result" is the expected response
//! (with `match: subset` and no fixtures). An expected result in words ("Expected Result: status
//! code 404, productInfo is null") is read into checkable expectations (see `expect`: status
//! codes into the response's status field, fields that are null, not null, non-empty or
//! present). A numbered list item holding an inline JSON request (`` 1. Found: `{…}` returns
//! 200 and a non-empty products array ``) is a case of its own. A case missing its request or
//! its expected result, or whose words name nothing checkable, is noted in
//! [`ProtocolDoc::unclear`] rather than refused.
//!
//! Test cases a peer proposes for an agreed protocol (`testCasesNegotiation`) are checked
//! against its schemas with [`review_test_cases`].
//!
//! # Bounded work
//! A document read from a peer is parsed with [`ProtocolDoc::parse_within`] and its
//! [`DocLimits`]; every schema's regular expressions run in linear time (see [`limits`]).
//!
//! # Invariants
//! - `ProtocolDoc` keeps the exact text it was parsed from; [`ProtocolDoc::hash`] is
//!   [`ProtocolHash::of`] that text.
//! - A `ProtocolDoc` always has compiled request and response schemas.

mod derive;
mod expect;
pub mod limits;
mod review;
mod schemas;
mod sections;
mod test_cases;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::limits::DocLimits;
use self::limits::compile;
pub use self::review::review_test_cases;
use self::schemas::find_schemas;
use self::sections::{Section, split_sections};
use self::test_cases::find_test_cases;
use crate::hash::ProtocolHash;
use crate::markdown::{Element, elements};

/// The two messages a protocol defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemaRole {
    Request,
    Response,
}

impl fmt::Display for SchemaRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SchemaRole::Request => "request",
            SchemaRole::Response => "response",
        })
    }
}

/// Why a protocol text is not a usable protocol document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    #[error("the protocol document is empty")]
    Empty,
    #[error("the protocol document has no `{section}` section")]
    MissingSection { section: &'static str },
    #[error("the Data Format section has no JSON Schema for the {role} message")]
    MissingSchema { role: SchemaRole },
    #[error(
        "the Data Format section has {count} JSON Schemas that look like the {role} schema (lines {lines:?}); label each one"
    )]
    AmbiguousSchema {
        role: SchemaRole,
        count: usize,
        lines: Vec<usize>,
    },
    #[error("invalid JSON in the {section} section at line {line}: {message}")]
    InvalidJson {
        section: &'static str,
        line: usize,
        message: String,
    },
    #[error("the {role} schema is not a valid JSON Schema: {message}")]
    InvalidSchema { role: SchemaRole, message: String },
    #[error("test case {index} ({name}) is invalid: {message}")]
    InvalidTestCase {
        /// 1-based position in the document.
        index: usize,
        name: String,
        message: String,
    },
    /// The document asks for more work than the reader's [`DocLimits`] allow.
    #[error("the protocol document has {count} {what}; at most {limit} are accepted")]
    TooComplex {
        what: &'static str,
        count: usize,
        limit: usize,
    },
}

impl ProtocolError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ProtocolError::Empty => "empty_protocol",
            ProtocolError::MissingSection { .. } => "missing_section",
            ProtocolError::MissingSchema { .. } => "missing_schema",
            ProtocolError::AmbiguousSchema { .. } => "ambiguous_schema",
            ProtocolError::InvalidJson { .. } => "invalid_json",
            ProtocolError::InvalidSchema { .. } => "invalid_schema",
            ProtocolError::InvalidTestCase { .. } => "invalid_test_case",
            ProtocolError::TooComplex { .. } => "protocol_too_complex",
        }
    }
}

/// A message that does not match one of the protocol's schemas.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {role} does not match the protocol's {role} schema: {}", .errors.join("; "))]
pub struct SchemaViolation {
    pub role: SchemaRole,
    /// One entry per violation, `at <JSON pointer>: <problem>` (`/` is the whole message).
    /// At most [`SchemaViolation::MAX_ERRORS`] entries; a final `…` entry marks truncation.
    pub errors: Vec<String>,
}

impl SchemaViolation {
    pub const MAX_ERRORS: usize = 8;
}

/// How a handler's response is compared with a test case's `expectedResponse`.
///
/// In both modes the response must also be valid against the protocol's response schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchMode {
    /// Every field the expectation lists must be present with an equal value, recursively
    /// through objects; arrays must have the same length and match element-wise; fields the
    /// expectation does not list may be present. Numbers compare by value (`200` = `200.0`).
    /// This lets a test pin what matters (status code, ids) without freezing optional extras.
    #[default]
    Subset,
    /// The response must equal the expectation exactly (numbers still compare by value).
    Exact,
}

/// One scripted capability call for verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// The arguments the handler is expected to pass, compared with exact JSON equality.
    pub args: Value,
    /// What `host.call` returns. Defaults to `null` (e.g. a lookup that found nothing).
    #[serde(default)]
    pub result: Value,
    /// When present, `host.call` throws with this text instead of returning `result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Scripted answers to capability calls, by capability name. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fixtures(pub BTreeMap<String, Vec<Fixture>>);

impl Fixtures {
    /// The scripted outcome for this call, or `None` when no fixture matches.
    pub fn lookup(&self, capability: &str, args: &Value) -> Option<Result<Value, String>> {
        let fixture = self.0.get(capability)?.iter().find(|f| &f.args == args)?;
        Some(match &fixture.error {
            Some(e) => Err(e.clone()),
            None => Ok(fixture.result.clone()),
        })
    }

    /// Like [`Fixtures::lookup`], but a call with no fixture is an error describing the call —
    /// what a verification host should make `host.call` throw.
    pub fn answer(&self, capability: &str, args: &Value) -> Result<Value, String> {
        self.lookup(capability, args).unwrap_or_else(|| {
            Err(format!(
                "no fixture for {capability}({args}) in this test case"
            ))
        })
    }

    /// Capability names the fixtures mention.
    pub fn capabilities(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(Vec::is_empty)
    }
}

/// One negotiated test case. See the module docs for the JSON form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestCase {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub request: Value,
    pub expected_response: Value,
    #[serde(default, rename = "match")]
    pub match_mode: MatchMode,
    #[serde(default, skip_serializing_if = "Fixtures::is_empty")]
    pub fixtures: Fixtures,
    /// Conditions on response fields that no expected value can express (a field that must not
    /// be null, an array that must not be empty), checked besides `expectedResponse`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<FieldCheck>,
}

/// A condition on one field of a response (see [`TestCase::checks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldCheck {
    /// The field, as a JSON Pointer into the response (`/products`).
    pub path: String,
    pub is: Condition,
}

/// What a [`FieldCheck`] asks of its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Condition {
    /// The field is there (any value, `null` included).
    Present,
    /// The field is there and not `null`.
    NotNull,
    /// The field is a non-empty array, object or string.
    NonEmpty,
}

impl FieldCheck {
    /// Why `response` fails this check, or `None` when it passes.
    pub fn failure(&self, response: &Value) -> Option<String> {
        let value = response.pointer(&self.path);
        let ok = match (self.is, value) {
            (_, None) => false,
            (Condition::Present, Some(_)) => true,
            (Condition::NotNull, Some(v)) => !v.is_null(),
            (Condition::NonEmpty, Some(v)) => match v {
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::String(s) => !s.is_empty(),
                _ => false,
            },
        };
        if ok {
            return None;
        }
        let wanted = match self.is {
            Condition::Present => "present",
            Condition::NotNull => "not null",
            Condition::NonEmpty => "non-empty",
        };
        Some(match value {
            None => format!("at {}: missing, expected it {wanted}", self.path),
            Some(v) => format!("at {}: expected it {wanted}, got {v}", self.path),
        })
    }
}

/// The recognised sections of a document, as raw markdown (heading excluded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sections {
    pub requirements: Option<String>,
    pub process: Option<String>,
    pub data_format: Option<String>,
    pub error_handling: Option<String>,
    pub test_cases: Option<String>,
}

/// A parsed protocol document: the exact text, its hash, compiled schemas and test cases.
#[derive(Clone)]
pub struct ProtocolDoc {
    text: String,
    hash: ProtocolHash,
    sections: Sections,
    request_schema: Value,
    response_schema: Value,
    request_validator: jsonschema::Validator,
    response_validator: jsonschema::Validator,
    test_cases: Vec<TestCase>,
    inferred: Vec<String>,
    unclear: Vec<String>,
}

impl std::fmt::Debug for ProtocolDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The text and compiled validators are large; the hash names the document.
        f.debug_struct("ProtocolDoc")
            .field("hash", &self.hash)
            .field("bytes", &self.text.len())
            .field("test_cases", &self.test_cases.len())
            .finish_non_exhaustive()
    }
}

impl ProtocolDoc {
    /// Parses a protocol document. The text is kept byte for byte. For a text already agreed
    /// or written here; one from a peer is read with [`ProtocolDoc::parse_within`].
    pub fn parse(text: impl Into<String>) -> Result<Self, ProtocolError> {
        Self::parse_bounded(text.into(), None)
    }

    /// Parses a protocol document from a peer: one over `limits` is refused before its schemas
    /// are compiled ([`ProtocolError::TooComplex`]).
    pub fn parse_within(
        text: impl Into<String>,
        limits: &DocLimits,
    ) -> Result<Self, ProtocolError> {
        Self::parse_bounded(text.into(), Some(limits))
    }

    fn parse_bounded(text: String, limits: Option<&DocLimits>) -> Result<Self, ProtocolError> {
        if let Some(limits) = limits {
            limits.check_bytes(&text)?;
        }
        if text.trim().is_empty() {
            return Err(ProtocolError::Empty);
        }
        let els = elements(&text);
        let lines: Vec<&str> = text.lines().collect();
        let bodies = split_sections(&els, &lines);

        let sections = Sections {
            requirements: bodies.get(&Section::Requirements).map(|b| b.text.clone()),
            process: bodies.get(&Section::Process).map(|b| b.text.clone()),
            data_format: bodies.get(&Section::DataFormat).map(|b| b.text.clone()),
            error_handling: bodies.get(&Section::ErrorHandling).map(|b| b.text.clone()),
            test_cases: bodies.get(&Section::TestCases).map(|b| b.text.clone()),
        };

        let data = bodies
            .get(&Section::DataFormat)
            .ok_or(ProtocolError::MissingSection {
                section: Section::DataFormat.title(),
            })?;
        let schemas = find_schemas(&data.elements)?;
        if let Some(limits) = limits {
            limits.check_schemas(&schemas.request, &schemas.response)?;
        }
        let (request_schema, response_schema) = (schemas.request, schemas.response);
        let request_validator = compile(SchemaRole::Request, &request_schema)?;
        let response_validator = compile(SchemaRole::Response, &response_schema)?;
        let (test_cases, unread) = match bodies.get(&Section::TestCases) {
            Some(body) => find_test_cases(&body.elements, &response_schema)?,
            None => Default::default(),
        };
        let mut unclear = schemas.unclear;
        unclear.extend(unread);
        if let Some(limits) = limits {
            limits.check_test_cases(test_cases.len())?;
        }
        let hash = ProtocolHash::of(&text);
        Ok(Self {
            text,
            hash,
            sections,
            request_schema,
            response_schema,
            request_validator,
            response_validator,
            test_cases,
            inferred: schemas.inferred,
            unclear,
        })
    }

    /// The exact text this document was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// SHA-256 of [`ProtocolDoc::text`].
    pub fn hash(&self) -> ProtocolHash {
        self.hash
    }

    pub fn sections(&self) -> &Sections {
        &self.sections
    }

    pub fn request_schema(&self) -> &Value {
        &self.request_schema
    }

    pub fn response_schema(&self) -> &Value {
        &self.response_schema
    }

    pub fn schema(&self, role: SchemaRole) -> &Value {
        match role {
            SchemaRole::Request => &self.request_schema,
            SchemaRole::Response => &self.response_schema,
        }
    }

    /// What the reader inferred because the document left it open (a schema derived from an
    /// example message, see below), in words; empty for a document that specifies everything.
    pub fn inferred(&self) -> &[String] {
        &self.inferred
    }

    /// What the reader could not settle, in words: a field only ever shown as `null`, an array
    /// only ever shown empty, a test case without a request or whose expected result names
    /// nothing checkable. Empty for a document that leaves nothing open. A provider
    /// counter-proposes such a document in its normalised form rather than agree to a guess.
    pub fn unclear(&self) -> &[String] {
        &self.unclear
    }

    /// The negotiated test cases, in document order (possibly none).
    pub fn test_cases(&self) -> &[TestCase] {
        &self.test_cases
    }

    /// Checks a request against the request schema.
    pub fn validate_request(&self, request: &Value) -> Result<(), SchemaViolation> {
        violations(SchemaRole::Request, &self.request_validator, request)
    }

    /// Checks a response against the response schema.
    pub fn validate_response(&self, response: &Value) -> Result<(), SchemaViolation> {
        violations(SchemaRole::Response, &self.response_validator, response)
    }
}

/// Parses test cases on their own (the body of a `testCasesNegotiation` message), in the format
/// of a protocol's test cases section (see the module docs).
pub fn parse_test_cases(text: &str) -> Result<Vec<TestCase>, ProtocolError> {
    let els = elements(text);
    let refs: Vec<&Element> = els.iter().collect();
    find_test_cases(&refs, &Value::Null).map(|(cases, _)| cases)
}

/// [`parse_test_cases`] for test cases from a peer, within `limits` (their text's length and
/// their number).
pub fn parse_test_cases_within(
    text: &str,
    limits: &DocLimits,
) -> Result<Vec<TestCase>, ProtocolError> {
    limits.check_bytes(text)?;
    let cases = parse_test_cases(text)?;
    limits.check_test_cases(cases.len())?;
    Ok(cases)
}

fn violations(
    role: SchemaRole,
    validator: &jsonschema::Validator,
    instance: &Value,
) -> Result<(), SchemaViolation> {
    // Every application message is checked twice; the yes/no check stops at the first
    // failure and allocates nothing, and the errors are only collected for a refusal.
    if validator.is_valid(instance) {
        return Ok(());
    }
    let mut errors: Vec<String> = validator
        .iter_errors(instance)
        .take(SchemaViolation::MAX_ERRORS + 1)
        .map(|e| {
            let path = e.instance_path().to_string();
            let at = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            format!("at {at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    if errors.len() > SchemaViolation::MAX_ERRORS {
        errors.truncate(SchemaViolation::MAX_ERRORS);
        errors.push("…".to_owned());
    }
    Err(SchemaViolation { role, errors })
}
