//! Verification: run a protocol's test cases through a handler and say precisely what differs.
//!
//! The runner is abstract ([`HandlerRunner`]): the server implements it with the wasmtime
//! sandbox, answering the handler's `host.call`s from the test case's [`Fixtures`] so
//! verification never touches a real capability. This module only compares.
//!
//! A case passes when the handler returns a response, that response is valid against the
//! protocol's response schema, and it matches `expectedResponse` under the case's
//! [`MatchMode`] (subset by default: every field the expectation lists, recursively; see
//! [`MatchMode`]), and its [`FieldCheck`](crate::protocol::FieldCheck)s hold (a field not null,
//! an array not empty). Numbers compare by value, so `200` equals `200.0`.

use std::fmt::Write as _;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use crate::protocol::{Fixtures, MatchMode, ProtocolDoc, TestCase};

/// Runs a handler on one request. `handler` is whatever the implementation uses to find the
/// handler (its source, or an id of a published handler).
#[async_trait]
pub trait HandlerRunner: Send + Sync {
    /// The handler's response, or a description of why it produced none (it threw, timed out,
    /// returned non-JSON, a capability call had no fixture and was not caught, ...).
    async fn run(&self, handler: &str, request: Value, fixtures: Fixtures)
    -> Result<Value, String>;
}

/// The outcome of one test case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseReport {
    pub name: String,
    pub passed: bool,
    /// What went wrong, one precise line each (`at /status/code: expected 404, got 200`).
    pub failures: Vec<String>,
    /// The handler's response, when it produced one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
}

/// The outcome of a verification run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerificationReport {
    pub cases: Vec<CaseReport>,
}

impl VerificationReport {
    /// True when every case passed. A protocol without test cases verifies vacuously; callers
    /// that require tests check [`VerificationReport::cases`] themselves.
    pub fn passed(&self) -> bool {
        self.cases.iter().all(|c| c.passed)
    }

    pub fn failed(&self) -> impl Iterator<Item = &CaseReport> {
        self.cases.iter().filter(|c| !c.passed)
    }

    /// `"3/4 test cases passed"`.
    pub fn summary(&self) -> String {
        let passed = self.cases.iter().filter(|c| c.passed).count();
        format!("{passed}/{} test cases passed", self.cases.len())
    }

    /// Markdown describing every failure, fit for `fix_handler` and for a
    /// `fixErrorNegotiation` `errorDescription`. Empty when everything passed.
    pub fn failure_description(&self) -> String {
        let mut out = String::new();
        for case in self.failed() {
            let _ = writeln!(out, "## Test case `{}` failed", case.name);
            for f in &case.failures {
                let _ = writeln!(out, "- {f}");
            }
            if let Some(r) = &case.response {
                let _ = writeln!(out, "- the handler returned: `{r}`");
            }
            out.push('\n');
        }
        if !out.is_empty() {
            out.insert_str(0, "# Error Description\n\n");
        }
        out
    }
}

/// Runs every test case of `doc` through `handler`.
pub async fn verify(
    doc: &ProtocolDoc,
    runner: &dyn HandlerRunner,
    handler: &str,
) -> VerificationReport {
    verify_cases(doc, doc.test_cases(), runner, handler).await
}

/// Runs the given cases (e.g. ones agreed through `testCasesNegotiation`) against `doc`'s
/// response schema.
pub async fn verify_cases(
    doc: &ProtocolDoc,
    cases: &[TestCase],
    runner: &dyn HandlerRunner,
    handler: &str,
) -> VerificationReport {
    let mut reports = Vec::with_capacity(cases.len());
    for case in cases {
        let span = tracing::debug_span!("verify.case", case = %case.name);
        let outcome = runner
            .run(handler, case.request.clone(), case.fixtures.clone())
            .instrument(span)
            .await;
        reports.push(check_case(doc, case, outcome));
    }
    VerificationReport { cases: reports }
}

/// Judges one case given the handler's outcome.
pub fn check_case(
    doc: &ProtocolDoc,
    case: &TestCase,
    outcome: Result<Value, String>,
) -> CaseReport {
    let response = match outcome {
        Ok(r) => r,
        Err(e) => {
            return CaseReport {
                name: case.name.clone(),
                passed: false,
                failures: vec![format!("the handler failed: {e}")],
                response: None,
            };
        }
    };
    let mut failures = Vec::new();
    if let Err(v) = doc.validate_response(&response) {
        for e in v.errors {
            failures.push(format!("response schema violation {e}"));
        }
    }
    failures.extend(compare(&case.expected_response, &response, case.match_mode));
    failures.extend(case.checks.iter().filter_map(|c| c.failure(&response)));
    CaseReport {
        name: case.name.clone(),
        passed: failures.is_empty(),
        failures,
        response: Some(response),
    }
}

/// Where a handler's compiled form answered differently from the handler itself on the same
/// cases (the two reports of [`verify_cases`] over the same cases): `None` when every case has
/// the same outcome and, for answers, the same JSON exactly (numbers by value), else the first
/// difference, one line.
pub fn compiled_differs(
    reference: &VerificationReport,
    compiled: &VerificationReport,
) -> Option<String> {
    if reference.cases.len() != compiled.cases.len() {
        return Some(format!(
            "{} cases against {}",
            compiled.cases.len(),
            reference.cases.len()
        ));
    }
    reference
        .cases
        .iter()
        .zip(&compiled.cases)
        .find_map(|(r, c)| match (&r.response, &c.response) {
            (Some(expected), Some(actual)) => compare(expected, actual, MatchMode::Exact)
                .first()
                .map(|d| format!("test case `{}`: {d}", r.name)),
            (None, None) if r.passed == c.passed => None,
            (Some(_), None) => Some(format!(
                "test case `{}`: no answer: {}",
                r.name,
                c.failures.join("; ")
            )),
            _ => Some(format!(
                "test case `{}`: an answer where there was none",
                r.name
            )),
        })
}

/// Differences between an expectation and an actual value, as `at <pointer>: ...` lines (at
/// most 20). Empty when they match under `mode`.
pub fn compare(expected: &Value, actual: &Value, mode: MatchMode) -> Vec<String> {
    let mut out = Vec::new();
    diff(expected, actual, mode, &mut String::new(), &mut out);
    if out.len() > 20 {
        out.truncate(20);
        out.push("… (more differences)".into());
    }
    out
}

fn at(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

fn diff(
    expected: &Value,
    actual: &Value,
    mode: MatchMode,
    path: &mut String,
    out: &mut Vec<String>,
) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                match a.get(k) {
                    Some(av) => diff(ev, av, mode, path, out),
                    None => out.push(format!("at {path}: missing, expected {}", short(ev))),
                }
                path.truncate(len);
            }
            if mode == MatchMode::Exact {
                for k in a.keys().filter(|k| !e.contains_key(*k)) {
                    out.push(format!("at {}/{k}: unexpected field", path));
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "at {}: expected {} items, got {}",
                    at(path),
                    e.len(),
                    a.len()
                ));
                return;
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                let len = path.len();
                let _ = write!(path, "/{i}");
                diff(ev, av, mode, path, out);
                path.truncate(len);
            }
        }
        (Value::Number(e), Value::Number(a)) => {
            let same = e == a || matches!((e.as_f64(), a.as_f64()), (Some(x), Some(y)) if x == y);
            if !same {
                out.push(format!("at {}: expected {e}, got {a}", at(path)));
            }
        }
        (e, a) if e == a => {}
        (e, a) => out.push(format!(
            "at {}: expected {}, got {}",
            at(path),
            short(e),
            short(a)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_and_exact() {
        let e = json!({"status": {"code": 200}, "items": [1, 2]});
        let a = json!({"status": {"code": 200.0, "message": "ok"}, "items": [1, 2], "x": 1});
        assert!(compare(&e, &a, MatchMode::Subset).is_empty());
        let d = compare(&e, &a, MatchMode::Exact);
        assert_eq!(
            d,
            [
                "at /status/message: unexpected field",
                "at /x: unexpected field"
            ]
        );
        let d = compare(
            &json!({"a/b": {"c": null}}),
            &json!({"a/b": {"c": 5}}),
            MatchMode::Subset,
        );
        assert_eq!(d, ["at /a~1b/c: expected null, got 5"]);
        let d = compare(&json!([1]), &json!([1, 2]), MatchMode::Subset);
        assert_eq!(d, ["at /: expected 1 items, got 2"]);
        let d = compare(&json!({"k": 1}), &json!({}), MatchMode::Subset);
        assert_eq!(d, ["at /k: missing, expected 1"]);
    }

    #[test]
    fn a_compiled_form_must_answer_exactly_as_the_handler() {
        let report = |responses: &[Option<Value>]| VerificationReport {
            cases: responses
                .iter()
                .enumerate()
                .map(|(i, r)| CaseReport {
                    name: format!("case {i}"),
                    passed: r.is_some(),
                    failures: if r.is_some() {
                        vec![]
                    } else {
                        vec!["threw".into()]
                    },
                    response: r.clone(),
                })
                .collect(),
        };
        let reference = report(&[
            Some(json!({"code": 200, "x": [1]})),
            Some(json!({"code": 404})),
        ]);
        let same = report(&[
            Some(json!({"x": [1.0], "code": 200})),
            Some(json!({"code": 404})),
        ]);
        assert_eq!(compiled_differs(&reference, &same), None);
        // A field the expectation would not look at still counts: exact, not subset.
        let extra = report(&[
            Some(json!({"code": 200, "x": [1]})),
            Some(json!({"code": 404, "e": ""})),
        ]);
        assert_eq!(
            compiled_differs(&reference, &extra).as_deref(),
            Some("test case `case 1`: at /e: unexpected field")
        );
        let failed = report(&[Some(json!({"code": 200, "x": [1]})), None]);
        assert_eq!(
            compiled_differs(&reference, &failed).as_deref(),
            Some("test case `case 1`: no answer: threw")
        );
        assert!(compiled_differs(&reference, &report(&[None])).is_some());
    }
}
