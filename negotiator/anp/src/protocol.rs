//! Protocol documents: the markdown text two agents agree on, and what Parley reads out of it.
//!
//! A protocol document (seed 002's `candidateProtocols`) is markdown with these sections:
//!
//! | section | heading words recognised (any level, any case, numbering and `:` ignored) | needed |
//! | --- | --- | --- |
//! | requirements | `Requirements`, `Requirement`, `Purpose`, `Goal` | no |
//! | process | `Process`, `Process Description`, `Interaction Flow`, `Flow`, `Interaction` | no |
//! | data format | `Data Format`, `Data Format Description`, `Data Formats`, `Message Format(s)` | **yes** |
//! | error handling | `Error Handling`, `Errors`, `Error Codes` | no |
//! | test cases | `Test Cases`, `Tests`, `Test Case` (without a number) | no |
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
//! Seed 002's own prose form is read too: under each `Test Case …` heading, the first JSON value
//! after a line mentioning "request" is the request and the first after a line mentioning
//! "response" is the expected response (with `match: subset` and no fixtures).
//!
//! # Invariants
//! - `ProtocolDoc` keeps the exact text it was parsed from; [`ProtocolDoc::hash`] is
//!   [`ProtocolHash::of`] that text.
//! - A `ProtocolDoc` always has compiled request and response schemas.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::ProtocolHash;
use crate::markdown::{Element, elements, normalise};

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Section {
    Requirements,
    Process,
    DataFormat,
    ErrorHandling,
    TestCases,
}

impl Section {
    fn title(self) -> &'static str {
        match self {
            Section::Requirements => "Requirements",
            Section::Process => "Process",
            Section::DataFormat => "Data Format",
            Section::ErrorHandling => "Error Handling",
            Section::TestCases => "Test Cases",
        }
    }

    fn classify(heading: &str) -> Option<Section> {
        let h = normalise(heading);
        let h = h.as_str();
        match h {
            "requirements" | "requirement" | "purpose" | "goal" | "goals" => {
                Some(Section::Requirements)
            }
            "process"
            | "process description"
            | "interaction flow"
            | "flow"
            | "interaction"
            | "process flow"
            | "interaction process" => Some(Section::Process),
            "data format"
            | "data format description"
            | "data formats"
            | "message format"
            | "message formats"
            | "data format definition" => Some(Section::DataFormat),
            "error handling" | "errors" | "error codes" | "error handling description" => {
                Some(Section::ErrorHandling)
            }
            "test cases" | "tests" | "test case" | "test cases description" => {
                Some(Section::TestCases)
            }
            _ => None,
        }
    }
}

/// The elements of one section plus its raw markdown.
#[derive(Default)]
struct SectionBody<'a> {
    elements: Vec<&'a Element>,
    text: String,
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
    /// Parses a protocol document. The text is kept byte for byte.
    pub fn parse(text: impl Into<String>) -> Result<Self, ProtocolError> {
        let text = text.into();
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
        let (request_schema, response_schema) = find_schemas(&data.elements)?;
        let request_validator = compile(SchemaRole::Request, &request_schema)?;
        let response_validator = compile(SchemaRole::Response, &response_schema)?;
        let test_cases = match bodies.get(&Section::TestCases) {
            Some(body) => find_test_cases(&body.elements)?,
            None => Vec::new(),
        };
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
    find_test_cases(&refs)
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

fn compile(role: SchemaRole, schema: &Value) -> Result<jsonschema::Validator, ProtocolError> {
    // Draft 2020-12 unless the schema names its own draft; remote `$ref`s cannot resolve
    // (the crate is built without resolvers), so a protocol is self-contained by construction.
    let names_draft = schema.get("$schema").is_some_and(Value::is_string);
    let result = if names_draft {
        jsonschema::validator_for(schema)
    } else {
        jsonschema::draft202012::new(schema)
    };
    result.map_err(|e| ProtocolError::InvalidSchema {
        role,
        message: e.to_string(),
    })
}

/// Splits the elements into recognised sections. A second heading with the same section name
/// continues that section.
fn split_sections<'a>(els: &'a [Element], lines: &[&str]) -> BTreeMap<Section, SectionBody<'a>> {
    let mut out: BTreeMap<Section, SectionBody<'a>> = BTreeMap::new();
    let mut section_level: Option<usize> = None;
    let mut current: Option<Section> = None;
    // Line spans of each section's body: (section, first line, line after the last), 1-based.
    let mut spans: Vec<(Section, usize, Option<usize>)> = Vec::new();
    let close = |spans: &mut Vec<(Section, usize, Option<usize>)>, line: usize| {
        if let Some(last) = spans.last_mut()
            && last.2.is_none()
        {
            last.2 = Some(line);
        }
    };
    for el in els {
        if let Element::Heading { level, text, line } = el {
            match (Section::classify(text), section_level) {
                (Some(kind), level_set) if level_set.is_none_or(|l| *level <= l) => {
                    section_level.get_or_insert(*level);
                    close(&mut spans, *line);
                    current = Some(kind);
                    spans.push((kind, line + 1, None));
                    continue;
                }
                // A non-section heading at or above the section level ends the section (e.g. a
                // closing `# Appendix`), except a numbered test case heading, which seed 002
                // itself writes at the top level.
                (None, Some(l)) if *level <= l && !normalise(text).starts_with("test case") => {
                    close(&mut spans, *line);
                    current = None;
                    continue;
                }
                _ => {}
            }
        }
        if let Some(section) = current {
            out.entry(section).or_default().elements.push(el);
        }
    }
    for (section, start, end) in spans {
        let end = end.unwrap_or(lines.len() + 1).min(lines.len() + 1);
        let text = lines
            .get(start - 1..end - 1)
            .map(|l| l.join("\n"))
            .unwrap_or_default();
        let body = out.entry(section).or_default();
        if !body.text.is_empty() {
            body.text.push('\n');
        }
        body.text.push_str(text.trim_matches('\n'));
    }
    out
}

/// Which role the words of `text` point at, if exactly one.
fn role_of(text: &str) -> Option<SchemaRole> {
    let t = text.to_lowercase();
    let req = t.contains("request");
    let resp = t.contains("response") || t.contains("reply");
    match (req, resp) {
        (true, false) => Some(SchemaRole::Request),
        (false, true) => Some(SchemaRole::Response),
        _ => None,
    }
}

fn is_schema(value: &Value) -> bool {
    const TYPES: [&str; 7] = [
        "object", "array", "string", "number", "integer", "boolean", "null",
    ];
    let Some(obj) = value.as_object() else {
        return false;
    };
    let type_ok = |t: &Value| t.as_str().is_some_and(|s| TYPES.contains(&s));
    obj.contains_key("$schema")
        || obj.get("properties").is_some_and(Value::is_object)
        || obj.get("type").is_some_and(|t| {
            type_ok(t)
                || t.as_array()
                    .is_some_and(|a| !a.is_empty() && a.iter().all(type_ok))
        })
}

fn find_schemas(els: &[&Element]) -> Result<(Value, Value), ProtocolError> {
    struct Candidate {
        value: Value,
        line: usize,
        role: Option<SchemaRole>,
    }
    let mut candidates = Vec::new();
    let mut heading: Option<&str> = None;
    let mut last_text: Option<&str> = None;
    for el in els {
        match el {
            Element::Heading { text, .. } => {
                heading = Some(text);
                last_text = None;
            }
            Element::Text { text, .. } if !text.trim().is_empty() => last_text = Some(text),
            Element::Json { value, line, .. } => {
                let value = value
                    .as_ref()
                    .map_err(|message| ProtocolError::InvalidJson {
                        section: Section::DataFormat.title(),
                        line: *line,
                        message: message.clone(),
                    })?;
                let context_says_example = last_text
                    .is_some_and(|t| t.to_lowercase().contains("example"))
                    || heading.is_some_and(|h| h.to_lowercase().contains("example"));
                if is_schema(value) && !context_says_example {
                    let role = last_text
                        .and_then(role_of)
                        .or_else(|| heading.and_then(role_of))
                        .or_else(|| value.get("title").and_then(Value::as_str).and_then(role_of));
                    candidates.push(Candidate {
                        value: value.clone(),
                        line: *line,
                        role,
                    });
                }
                last_text = None;
            }
            _ => {}
        }
    }
    // Unlabelled schemas take the roles still free, in document order.
    let mut request = Vec::new();
    let mut response = Vec::new();
    let mut unlabelled = Vec::new();
    for c in candidates {
        match c.role {
            Some(SchemaRole::Request) => request.push(c),
            Some(SchemaRole::Response) => response.push(c),
            None => unlabelled.push(c),
        }
    }
    for c in unlabelled {
        if request.is_empty() {
            request.push(c);
        } else if response.is_empty() {
            response.push(c);
        }
        // Further unlabelled schemas (nested definitions shown separately) are ignored.
    }
    let pick = |mut v: Vec<Candidate>, role| match v.len() {
        0 => Err(ProtocolError::MissingSchema { role }),
        1 => Ok(v.remove(0).value),
        count => Err(ProtocolError::AmbiguousSchema {
            role,
            count,
            lines: v.iter().map(|c| c.line).collect(),
        }),
    };
    Ok((
        pick(request, SchemaRole::Request)?,
        pick(response, SchemaRole::Response)?,
    ))
}

fn find_test_cases(els: &[&Element]) -> Result<Vec<TestCase>, ProtocolError> {
    let mut cases = Vec::new();
    // Seed-style state: the current case heading and what has been seen under it.
    let mut prose_name: Option<String> = None;
    let mut prose_request: Option<Value> = None;
    let mut prose_response: Option<Value> = None;
    let mut last_text: Option<&str> = None;
    let mut structured = false;

    let flush = |cases: &mut Vec<TestCase>,
                 name: &Option<String>,
                 request: &mut Option<Value>,
                 response: &mut Option<Value>|
     -> Result<(), ProtocolError> {
        match (request.take(), response.take()) {
            (Some(request), Some(expected_response)) => {
                cases.push(TestCase {
                    name: name.clone().unwrap_or_default(),
                    description: None,
                    request,
                    expected_response,
                    match_mode: MatchMode::Subset,
                    fixtures: Fixtures::default(),
                });
                Ok(())
            }
            (None, None) => Ok(()),
            (req, _) => Err(ProtocolError::InvalidTestCase {
                index: cases.len() + 1,
                name: name.clone().unwrap_or_default(),
                message: if req.is_some() {
                    "it has request data but no expected response data".into()
                } else {
                    "it has expected response data but no request data".into()
                },
            }),
        }
    };

    for el in els {
        match el {
            Element::Heading { text, .. } => {
                flush(
                    &mut cases,
                    &prose_name,
                    &mut prose_request,
                    &mut prose_response,
                )?;
                prose_name = Some(text.trim().to_owned());
                last_text = None;
            }
            Element::Text { text, .. } if !text.trim().is_empty() => last_text = Some(text),
            Element::Json { value, line, .. } => {
                let value = value
                    .as_ref()
                    .map_err(|message| ProtocolError::InvalidJson {
                        section: Section::TestCases.title(),
                        line: *line,
                        message: message.clone(),
                    })?;
                let structured_shape = match value {
                    Value::Array(items) => items.iter().all(|i| i.get("request").is_some()),
                    Value::Object(o) => o.contains_key("request"),
                    _ => false,
                };
                if structured_shape {
                    structured = true;
                    let items = match value {
                        Value::Array(items) => items.clone(),
                        other => vec![other.clone()],
                    };
                    for item in items {
                        let index = cases.len() + 1;
                        let name = item
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        let case: TestCase = serde_json::from_value(item).map_err(|e| {
                            ProtocolError::InvalidTestCase {
                                index,
                                name: name.clone(),
                                message: e.to_string(),
                            }
                        })?;
                        cases.push(case);
                    }
                } else if !structured {
                    match last_text.and_then(role_of) {
                        Some(SchemaRole::Request) if prose_request.is_none() => {
                            prose_request = Some(value.clone())
                        }
                        Some(SchemaRole::Response) if prose_response.is_none() => {
                            prose_response = Some(value.clone())
                        }
                        _ => {}
                    }
                }
                last_text = None;
            }
            _ => {}
        }
    }
    flush(
        &mut cases,
        &prose_name,
        &mut prose_request,
        &mut prose_response,
    )?;

    let mut seen = std::collections::HashSet::new();
    for (i, case) in cases.iter_mut().enumerate() {
        if case.name.trim().is_empty() {
            case.name = format!("case {}", i + 1);
        }
        if !seen.insert(case.name.clone()) {
            return Err(ProtocolError::InvalidTestCase {
                index: i + 1,
                name: case.name.clone(),
                message: "another test case has the same name".into(),
            });
        }
    }
    Ok(cases)
}
