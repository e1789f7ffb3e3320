//! Reading test cases: structured JSON arrays of case objects, or seed 002's prose form (see the
//! parent module's docs).

use std::collections::HashSet;

use serde_json::Value;

use super::schemas::role_of;
use super::sections::Section;
use super::{Fixtures, MatchMode, ProtocolError, SchemaRole, TestCase};
use crate::markdown::Element;

/// The test cases among `els`, named (`case <n>` when unnamed) and checked for unique names.
pub(super) fn find_test_cases(els: &[&Element]) -> Result<Vec<TestCase>, ProtocolError> {
    let mut reader = CaseReader::default();
    for el in els {
        match el {
            Element::Heading { text, .. } => {
                reader.flush()?;
                reader.prose_name = Some(text.trim().to_owned());
                reader.last_text = None;
            }
            Element::Text { text, .. } if !text.trim().is_empty() => reader.last_text = Some(text),
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
            }
            _ => {}
        }
    }
    reader.flush()?;
    name_cases(reader.cases)
}

/// What has been read so far. Seed-style state: the current case heading and what has been
/// seen under it.
#[derive(Default)]
struct CaseReader<'a> {
    cases: Vec<TestCase>,
    prose_name: Option<String>,
    prose_request: Option<Value>,
    prose_response: Option<Value>,
    /// The last non-blank text since the last heading or JSON value.
    last_text: Option<&'a str>,
    /// A structured case was seen; from then on, prose-form JSON is ignored.
    structured: bool,
}

impl CaseReader<'_> {
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
            match self.last_text.and_then(role_of) {
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

    /// Ends the current prose case: a case when both its request and response were seen.
    fn flush(&mut self) -> Result<(), ProtocolError> {
        match (self.prose_request.take(), self.prose_response.take()) {
            (Some(request), Some(expected_response)) => {
                self.cases.push(TestCase {
                    name: self.prose_name.clone().unwrap_or_default(),
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
                index: self.cases.len() + 1,
                name: self.prose_name.clone().unwrap_or_default(),
                message: if req.is_some() {
                    "it has request data but no expected response data".into()
                } else {
                    "it has expected response data but no request data".into()
                },
            }),
        }
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
