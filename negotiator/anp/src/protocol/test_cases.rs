//! Reading test cases: structured JSON arrays of case objects, seed 002's prose form, numbered
//! lists with inline JSON, and expected results in words (see the parent module's docs).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::expect;
use super::schemas::role_of;
use super::sections::Section;
use super::{FieldCheck, Fixtures, MatchMode, ProtocolError, SchemaRole, TestCase};
use crate::markdown::Element;

/// The test cases among `els`, named (`case <n>` when unnamed) and checked for unique names, and
/// what could not be read of them (a prose case without a request, an expected result naming
/// nothing checkable). `response_schema` places prose expectations (which field holds the
/// status code); `Value::Null` when there is none.
pub(super) fn find_test_cases(
    els: &[&Element],
    response_schema: &Value,
) -> Result<(Vec<TestCase>, Vec<String>), ProtocolError> {
    let mut reader = CaseReader::new(response_schema);
    for el in els {
        match el {
            // `#### Request` / `#### Expected Response` under a case's heading label its parts;
            // any other heading (`### Test Case 2: invalid request`) starts a case.
            Element::Heading { text, .. } => match label_role(text) {
                Some(role) => {
                    reader.awaiting = Some(role);
                    reader.last_text = None;
                }
                None => {
                    reader.flush();
                    reader.prose_name = Some(text.trim().to_owned());
                    reader.last_text = None;
                    reader.awaiting = None;
                }
            },
            Element::Text { text, .. } if !text.trim().is_empty() => reader.text(text),
            Element::Json { value, line, .. } => {
                let value = value
                    .as_ref()
                    .map_err(|message| ProtocolError::InvalidJson {
                        section: Section::TestCases.title(),
                        line: *line,
                        message: message.clone(),
                    })?;
                reader.json(value)?;
                reader.last_text = None;
                reader.awaiting = None;
            }
            _ => {}
        }
    }
    reader.flush();
    let cases = name_cases(reader.cases)?;
    Ok((cases, reader.unclear))
}

/// What has been read so far. Seed-style state: the current case heading and what has been
/// seen under it.
struct CaseReader<'a> {
    cases: Vec<TestCase>,
    unclear: Vec<String>,
    response_schema: &'a Value,
    prose_name: Option<String>,
    prose_request: Option<Value>,
    prose_response: Option<Value>,
    /// An expected result in words.
    prose_expectation: Option<String>,
    /// The last non-blank text since the last heading or JSON value.
    last_text: Option<String>,
    /// A label line with nothing after it (`Expected Result:`): what the next lines are.
    awaiting: Option<SchemaRole>,
    /// A structured case was seen; from then on, prose-form JSON is ignored.
    structured: bool,
}

/// The part of a case a short label names (`Request`, `Expected Output`), if it names one;
/// never a case's own title.
fn label_role(label: &str) -> Option<SchemaRole> {
    let lower = label.to_lowercase();
    if lower.contains("case") || label.split_whitespace().count() > 4 {
        return None;
    }
    role_of(label)
}

/// `line` without a list marker (`- `, `* `, `1. `, `2)`) and bold markers, and whether it
/// was a numbered item.
fn unlist(line: &str) -> (String, bool) {
    let t = line.trim();
    let mut numbered = false;
    let rest = if let Some(r) = t.strip_prefix("- ").or_else(|| t.strip_prefix("* ")) {
        r
    } else {
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        match t[digits..]
            .strip_prefix(". ")
            .or_else(|| t[digits..].strip_prefix(") "))
        {
            Some(r) if digits > 0 => {
                numbered = true;
                r
            }
            _ => t,
        }
    };
    (rest.replace("**", "").trim().to_owned(), numbered)
}

/// The JSON values in `` `…` `` spans of a line, with the text after each.
fn inline_json(line: &str) -> Vec<(Value, String)> {
    let mut out = Vec::new();
    let parts: Vec<&str> = line.split('`').collect();
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1
            && part.trim_start().starts_with(['{', '['])
            && let Ok(value) = serde_json::from_str::<Value>(part)
        {
            let after = parts.get(i + 1..).map(|p| p.join("`")).unwrap_or_default();
            out.push((value, after));
        }
    }
    out
}

impl<'a> CaseReader<'a> {
    fn new(response_schema: &'a Value) -> Self {
        Self {
            cases: Vec::new(),
            unclear: Vec::new(),
            response_schema,
            prose_name: None,
            prose_request: None,
            prose_response: None,
            prose_expectation: None,
            last_text: None,
            awaiting: None,
            structured: false,
        }
    }

    /// One line of text: a label (`Request:`, `Expected Result: status 404`), a numbered case
    /// (`1. Found: \`{…}\` returns 200 and a non-empty products array`), or the words of an
    /// expected result under its label.
    fn text(&mut self, raw: &str) {
        self.last_text = Some(raw.to_owned());
        if self.structured {
            return;
        }
        let (line, numbered) = unlist(raw);
        let inline = inline_json(&line);
        if numbered && let Some((request, after)) = inline.first() {
            self.flush();
            let before = line.split('`').next().unwrap_or("");
            let name = before
                .split(':')
                .next()
                .filter(|_| before.contains(':'))
                .map(str::trim)
                .filter(|n| !n.is_empty() && role_of(n).is_none())
                .map(str::to_owned);
            self.prose_name = name;
            self.prose_request = Some(request.clone());
            match inline.get(1) {
                Some((response, _)) => self.prose_response = Some(response.clone()),
                None => self.prose_expectation = Some(after.trim().to_owned()),
            }
            self.flush();
            return;
        }
        let (label, rest) = match line.split_once(':') {
            Some((label, rest)) => (label.trim(), rest.trim()),
            None => (line.as_str(), ""),
        };
        let role = label_role(label);
        match role {
            Some(SchemaRole::Request) => {
                self.awaiting = Some(SchemaRole::Request);
                if let Some((value, _)) = inline.first()
                    && self.prose_request.is_none()
                {
                    self.prose_request = Some(value.clone());
                    self.awaiting = None;
                }
            }
            Some(SchemaRole::Response) => {
                self.awaiting = Some(SchemaRole::Response);
                if let Some((value, _)) = inline.first()
                    && self.prose_response.is_none()
                {
                    self.prose_response = Some(value.clone());
                    self.awaiting = None;
                } else if !rest.is_empty() {
                    self.expect_words(rest);
                }
            }
            None if self.awaiting == Some(SchemaRole::Response) => self.expect_words(&line),
            None => {}
        }
    }

    fn expect_words(&mut self, words: &str) {
        let text = self.prose_expectation.get_or_insert_with(String::new);
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(words);
    }

    /// One JSON value: structured cases, or the request or response of a prose case.
    fn json(&mut self, value: &Value) -> Result<(), ProtocolError> {
        let structured_shape = match value {
            Value::Array(items) => items.iter().all(|i| i.get("request").is_some()),
            Value::Object(o) => o.contains_key("request"),
            _ => false,
        };
        if structured_shape {
            self.structured = true;
            let items = match value {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            for item in items {
                self.structured_case(item)?;
            }
        } else if !self.structured {
            let role = self
                .awaiting
                .or_else(|| self.last_text.as_deref().and_then(role_of));
            match role {
                Some(SchemaRole::Request) if self.prose_request.is_none() => {
                    self.prose_request = Some(value.clone())
                }
                Some(SchemaRole::Response) if self.prose_response.is_none() => {
                    self.prose_response = Some(value.clone())
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn structured_case(&mut self, item: Value) -> Result<(), ProtocolError> {
        let index = self.cases.len() + 1;
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let case: TestCase =
            serde_json::from_value(item).map_err(|e| ProtocolError::InvalidTestCase {
                index,
                name: name.clone(),
                message: e.to_string(),
            })?;
        self.cases.push(case);
        Ok(())
    }

    /// Ends the current prose case: a case when its request and an expected result (a JSON
    /// value, words, or both) were seen; what stays unclear is noted, never an error.
    fn flush(&mut self) {
        let request = self.prose_request.take();
        let response = self.prose_response.take();
        let words = self.prose_expectation.take();
        let name = self
            .prose_name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| format!("case {}", self.cases.len() + 1));
        let Some(request) = request else {
            if response.is_some() || words.is_some() {
                self.unclear.push(format!(
                    "test case `{name}` has an expected result but no request: left out"
                ));
            }
            return;
        };
        let mut expected = match response {
            Some(Value::Object(map)) => map,
            Some(other) => {
                self.push(name, request, other, Vec::new());
                return;
            }
            None => Map::new(),
        };
        let mut checks = Vec::new();
        match words.as_deref().map(str::trim).filter(|w| !w.is_empty()) {
            Some(words) => match expect::read(words, self.response_schema) {
                Some(read) => {
                    for (field, value) in read.expected {
                        expected.entry(field).or_insert(value);
                    }
                    checks = read.checks;
                }
                None if expected.is_empty() => self.unclear.push(format!(
                    "test case `{name}`: nothing checkable in its expected result {words:?} (a status code, or a response field that is null, not null, non-empty or present); only the response schema is checked"
                )),
                None => {}
            },
            None if expected.is_empty() => {
                self.unclear.push(format!(
                    "test case `{name}` has a request but no expected result: left out"
                ));
                return;
            }
            None => {}
        }
        self.push(name, request, Value::Object(expected), checks);
    }

    fn push(&mut self, name: String, request: Value, expected: Value, checks: Vec<FieldCheck>) {
        self.cases.push(TestCase {
            name,
            description: None,
            request,
            expected_response: expected,
            match_mode: MatchMode::Subset,
            fixtures: Fixtures::default(),
            checks,
        });
    }
}

/// Names unnamed cases `case <n>` (1-based) and refuses two cases with one name.
fn name_cases(mut cases: Vec<TestCase>) -> Result<Vec<TestCase>, ProtocolError> {
    let mut seen = HashSet::new();
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
