//! The requester's guard rails for a provider's `fixErrorNegotiation`: when may the requester
//! agree that its own test expectation was wrong?
//!
//! A provider whose verified handler answers a test case validly, but not as the case expects,
//! reports it with the failure description of [`crate::verify`] (each failing case by name,
//! with the handler's answer). Some expectations are guesses the requester could not do better
//! than (the provider's real product name, a price, a date), and a provider that knows the real
//! value is right to correct them; others are what the requester needs (a status code, which
//! fields are there, a value it asked for). [`review_fix`] tells them apart without trusting
//! the provider's account: it re-reads each reported answer and compares it with the case
//! itself.
//!
//! A fix is acceptable only when every reported case names one of the protocol's test cases,
//! comes with the provider's answer, that answer is valid against the agreed response schema,
//! and each difference from the expectation is a **data value** the requester could not know:
//! a string or number replaced by another string or number where
//! - the field is not a status (no path segment is `status`, `statusCode`, `error`, …, and it
//!   is not a top-level `code` or `type`),
//! - the expected value is not one the case's request carries (an echo such as `messageId` or
//!   `productId` is the requester's own),
//! - the provider's value is not one the case's fixtures carry (then the requester knew it,
//!   and expecting something else is deliberate),
//! - the expected string is not stated in the protocol's prose (requirements, process, error
//!   handling), which would make it an explicit constraint.
//!
//! Everything structural is refused: a field dropped (or, under exact matching, added), a
//! value turned null or non-null, a type changed, an array of another length, a flag flipped.
//! A language model may review an acceptable fix too, but only after these rails, so it can
//! narrow what they allow and never widen it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{MatchMode, ProtocolDoc, TestCase};
use crate::session::FixVerdict;

/// One expectation the provider's answer corrects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// The test case's name.
    pub case: String,
    /// JSON pointer of the value in the response.
    pub path: String,
    pub expected: Value,
    pub actual: Value,
}

/// The guard rails' judgement of an error report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "camelCase")]
pub enum FixReview {
    /// Every difference is a data value the requester could not know.
    Acceptable { corrections: Vec<Correction> },
    /// Why the report cannot be accepted.
    Refused { reason: String },
}

impl FixReview {
    /// The session verdict: accepting means the requester's expectation was the error.
    pub fn verdict(&self) -> FixVerdict {
        match self {
            FixReview::Acceptable { .. } => FixVerdict::Fix,
            FixReview::Refused { reason } => FixVerdict::Decline {
                reason: reason.clone(),
            },
        }
    }
}

/// One failing case of a failure description: its name and the answer the handler gave.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedCase {
    pub name: String,
    pub response: Option<Value>,
}

/// The failing cases of a [`crate::VerificationReport::failure_description`], as its text
/// carries them: `## Test case `name` failed` headings, each followed by its failure lines
/// and `- the handler returned: `<JSON>``. Text in any other shape yields no cases.
pub fn reported_cases(description: &str) -> Vec<ReportedCase> {
    let mut cases: Vec<ReportedCase> = Vec::new();
    for line in description.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("## Test case ") {
            if let Some(name) = between_backticks(rest.trim_end_matches(" failed")) {
                cases.push(ReportedCase {
                    name: name.to_owned(),
                    response: None,
                });
            }
        } else if let Some(rest) = line.strip_prefix("- the handler returned:")
            && let Some(case) = cases.last_mut()
        {
            case.response = between_backticks(rest).and_then(|j| serde_json::from_str(j).ok());
        }
    }
    cases
}

/// The text between the first and the last backtick of `s`.
fn between_backticks(s: &str) -> Option<&str> {
    let start = s.find('`')? + 1;
    let end = s.rfind('`')?;
    (end > start).then(|| &s[start..end])
}

/// Judges the provider's error report `description` against the agreed protocol `doc` (its
/// test cases, schemas and prose). See the module docs for the rules.
pub fn review_fix(doc: &ProtocolDoc, description: &str) -> FixReview {
    let refuse = |reason: String| FixReview::Refused { reason };
    let reported = reported_cases(description);
    if reported.is_empty() {
        return refuse(
            "the report names no failing test case with the provider's answer, so there is \
             nothing the requester can check"
                .into(),
        );
    }
    let mut corrections = Vec::new();
    for ReportedCase { name, response } in reported {
        let Some(case) = doc.test_cases().iter().find(|c| c.name == name) else {
            return refuse(format!(
                "the report names test case `{name}`, which the protocol does not have"
            ));
        };
        let Some(response) = response else {
            return refuse(format!(
                "the report gives no answer of the provider for test case `{name}`"
            ));
        };
        if let Err(violation) = doc.validate_response(&response) {
            return refuse(format!(
                "the provider's answer to test case `{name}` does not follow the agreed \
                 response schema: {}",
                violation.errors.join("; ")
            ));
        }
        let known = Known::of(doc, case);
        let mut walk = Walk {
            case: &name,
            mode: case.match_mode,
            known: &known,
            corrections: &mut corrections,
        };
        if let Err(reason) = walk.diff(&case.expected_response, &response, &mut String::new()) {
            return refuse(format!("test case `{name}`: {reason}"));
        }
    }
    if corrections.is_empty() {
        return refuse(
            "the provider's answers meet every expectation; there is nothing to fix".into(),
        );
    }
    FixReview::Acceptable { corrections }
}

/// Values the requester stated itself for one case.
struct Known {
    /// Leaf values of the case's request.
    request: Vec<Value>,
    /// Leaf values of the case's fixtures (arguments and results).
    fixtures: Vec<Value>,
    /// The protocol's prose: requirements, process and error handling.
    prose: String,
}

impl Known {
    fn of(doc: &ProtocolDoc, case: &TestCase) -> Known {
        let mut request = Vec::new();
        leaves(&case.request, &mut request);
        let mut fixtures = Vec::new();
        for fixture in case.fixtures.0.values().flatten() {
            leaves(&fixture.args, &mut fixtures);
            leaves(&fixture.result, &mut fixtures);
        }
        let sections = doc.sections();
        let prose = [
            &sections.requirements,
            &sections.process,
            &sections.error_handling,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n");
        Known {
            request,
            fixtures,
            prose,
        }
    }
}

/// Strings and numbers anywhere in `value`.
fn leaves(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::String(_) | Value::Number(_) => out.push(value.clone()),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
        Value::Null | Value::Bool(_) => {}
    }
}

/// Whether `prose` contains `word` as a whole word (not inside a longer one).
fn mentions(prose: &str, word: &str) -> bool {
    let word = word.trim();
    if word.is_empty() {
        return false;
    }
    let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    prose.match_indices(word).any(|(at, _)| {
        boundary(prose[..at].chars().next_back())
            && boundary(prose[at + word.len()..].chars().next())
    })
}

/// Numbers by value (`200` = `200.0`), everything else by JSON equality.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || matches!((x.as_f64(), y.as_f64()), (Some(p), Some(q)) if p == q)
        }
        _ => a == b,
    }
}

/// Path segments that make a field a status, wherever they appear.
const STATUS_SEGMENTS: &[&str] = &[
    "status",
    "statuscode",
    "status_code",
    "httpstatus",
    "http_status",
    "error",
    "errors",
    "errorcode",
    "error_code",
];

/// Whether the field at JSON pointer `path` is a status or the message's own type.
fn is_status(path: &str) -> bool {
    let segments: Vec<String> = path
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~").to_ascii_lowercase())
        .collect();
    let top_level = matches!(segments.as_slice(), [only] if only == "code" || only == "type");
    top_level
        || segments
            .iter()
            .any(|s| STATUS_SEGMENTS.contains(&s.as_str()))
}

/// A recursive comparison of one case's expectation with the provider's answer that collects
/// the acceptable differences and stops at the first one that is not.
struct Walk<'a> {
    case: &'a str,
    mode: MatchMode,
    known: &'a Known,
    corrections: &'a mut Vec<Correction>,
}

impl Walk<'_> {
    fn diff(&mut self, expected: &Value, actual: &Value, path: &mut String) -> Result<(), String> {
        let at = |path: &str| {
            if path.is_empty() {
                "/".to_owned()
            } else {
                path.to_owned()
            }
        };
        match (expected, actual) {
            (Value::Object(e), Value::Object(a)) => {
                for (key, ev) in e {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    match a.get(key) {
                        Some(av) => self.diff(ev, av, path)?,
                        None => return Err(format!("the provider's answer drops {path}")),
                    }
                    path.truncate(len);
                }
                if self.mode == MatchMode::Exact
                    && let Some(extra) = a.keys().find(|k| !e.contains_key(*k))
                {
                    return Err(format!("the provider's answer adds {path}/{extra}"));
                }
                Ok(())
            }
            (Value::Array(e), Value::Array(a)) if e.len() != a.len() => Err(format!(
                "the provider's answer has {} items at {} where {} are expected",
                a.len(),
                at(path),
                e.len()
            )),
            (Value::Array(e), Value::Array(a)) => {
                for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    self.diff(ev, av, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            (e, a) if same(e, a) => Ok(()),
            (Value::Null, _) | (_, Value::Null) => Err(format!(
                "the provider's answer changes whether {} is null (expected {e}, got {a}, \
                 which is a change of structure)",
                at(path),
                e = expected,
                a = actual
            )),
            (e, a) => self.value(e, a, &at(path)),
        }
    }

    /// Two different non-null values at `path`: a correction, or why it is not one.
    fn value(&mut self, expected: &Value, actual: &Value, path: &str) -> Result<(), String> {
        let data = |v: &Value| matches!(v, Value::String(_) | Value::Number(_));
        let kind_of = |v: &Value| std::mem::discriminant(v);
        if !data(expected) || kind_of(expected) != kind_of(actual) {
            return Err(format!(
                "the provider's answer changes {path} from {expected} to {actual}, which is a \
                 change of type or structure"
            ));
        }
        if is_status(path) {
            return Err(format!(
                "the provider's answer changes the status {path} from {expected} to {actual}"
            ));
        }
        if self.known.request.iter().any(|v| same(v, expected)) {
            return Err(format!(
                "{path} must repeat {expected} from the request, the provider answers {actual}"
            ));
        }
        if self.known.fixtures.iter().any(|v| same(v, actual)) {
            return Err(format!(
                "the case's own fixtures give {actual}, so expecting {expected} at {path} is \
                 the requester's deliberate constraint"
            ));
        }
        if let Value::String(s) = expected
            && mentions(&self.known.prose, s)
        {
            return Err(format!(
                "the protocol's text states {expected}, which the provider's {actual} at \
                 {path} contradicts"
            ));
        }
        self.corrections.push(Correction {
            case: self.case.to_owned(),
            path: path.to_owned(),
            expected: expected.clone(),
            actual: actual.clone(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{CaseReport, VerificationReport};
    use serde_json::json;

    /// The example catalogue protocol with one test case: `expected` for `request`, with
    /// `fixtures` (JSON object) when given.
    fn doc(request: Value, expected: Value, fixtures: Option<Value>, prose: &str) -> ProtocolDoc {
        let mut case =
            json!({"name": "known product", "request": request, "expectedResponse": expected});
        if let Some(f) = fixtures {
            case["fixtures"] = f;
        }
        let text = format!(
            "# Requirements\n\nLook up a product by id. {prose}\n\n# Data Format\n\n\
             Request JSON Schema:\n\n```json\n{}\n```\n\nResponse JSON Schema:\n\n```json\n{}\n```\n\n\
             # Test Cases\n\n```json\n{}\n```\n",
            json!({"type": "object", "properties": {"messageId": {"type": "string"}, "productId": {"type": "string"}},
                   "required": ["messageId", "productId"]}),
            json!({"type": "object",
                   "properties": {
                       "messageId": {"type": "string"},
                       "status": {"type": "object", "properties": {"code": {"type": "integer"}}, "required": ["code"]},
                       "productInfo": {"type": ["object", "null"],
                                       "properties": {"productId": {"type": "string"}, "productName": {"type": "string"},
                                                      "price": {"type": "number"}, "currency": {"type": "string"},
                                                      "inStock": {"type": "boolean"}, "tags": {"type": "array"}},
                                       "required": ["productId", "productName", "price"]}},
                   "required": ["messageId", "status"]}),
            json!([case])
        );
        ProtocolDoc::parse(text).expect("a protocol document")
    }

    fn request() -> Value {
        json!({"messageId": "m1", "productId": "P12345"})
    }

    fn expected() -> Value {
        json!({"messageId": "m1", "status": {"code": 200},
               "productInfo": {"productId": "P12345", "productName": "Laptop", "price": 999}})
    }

    /// The provider's report: `actual` as the answer to the case.
    fn report(actual: Value) -> String {
        VerificationReport {
            cases: vec![CaseReport {
                name: "known product".into(),
                passed: false,
                failures: vec!["at /productInfo/productName: expected \"Laptop\"".into()],
                response: Some(actual),
            }],
        }
        .failure_description()
    }

    fn actual() -> Value {
        json!({"messageId": "m1", "status": {"code": 200, "message": "OK"},
               "productInfo": {"productId": "P12345", "productName": "High-performance Laptop",
                               "price": 1299.99, "currency": "USD"}})
    }

    fn refused(review: FixReview) -> String {
        match review {
            FixReview::Refused { reason } => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_failure_description_reads_back() {
        let description = report(actual());
        assert_eq!(
            reported_cases(&description),
            [ReportedCase {
                name: "known product".into(),
                response: Some(actual()),
            }]
        );
        assert!(reported_cases("the price is wrong").is_empty());
    }

    #[test]
    fn real_names_and_prices_correct_guessed_ones() {
        let d = doc(request(), expected(), None, "");
        let FixReview::Acceptable { corrections } = review_fix(&d, &report(actual())) else {
            panic!("acceptable");
        };
        let paths: Vec<&str> = corrections.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["/productInfo/productName", "/productInfo/price"]);
        assert_eq!(corrections[1].actual, json!(1299.99));
        assert_eq!(review_fix(&d, &report(actual())).verdict(), FixVerdict::Fix);
    }

    #[test]
    fn a_status_code_change_is_refused() {
        let mut e = expected();
        e["status"]["code"] = json!(404);
        e["productInfo"]["productName"] = json!("High-performance Laptop");
        e["productInfo"]["price"] = json!(1299.99);
        let why = refused(review_fix(&doc(request(), e, None, ""), &report(actual())));
        assert!(why.contains("status /status/code from 404 to 200"), "{why}");
    }

    #[test]
    fn structure_is_refused() {
        let d = doc(request(), expected(), None, "");
        // A value turned null.
        let mut a = actual();
        a["productInfo"] = Value::Null;
        assert!(refused(review_fix(&d, &report(a))).contains("null"));
        // An expected field dropped (the schema allows it, the expectation does not).
        let mut e = expected();
        e["productInfo"]["currency"] = json!("USD");
        let mut a = actual();
        a["productInfo"]
            .as_object_mut()
            .expect("object")
            .remove("currency");
        let why = refused(review_fix(&doc(request(), e, None, ""), &report(a)));
        assert!(why.contains("drops /productInfo/currency"), "{why}");
        // A type change, a flipped flag, an array of another length.
        let mut e = expected();
        e["productInfo"]["inStock"] = json!(true);
        e["productInfo"]["tags"] = json!(["a"]);
        let mut a = actual();
        a["productInfo"]["inStock"] = json!(false);
        a["productInfo"]["tags"] = json!(["a"]);
        let d = doc(request(), e.clone(), None, "");
        assert!(refused(review_fix(&d, &report(a.clone()))).contains("inStock"));
        a["productInfo"]["inStock"] = json!(true);
        a["productInfo"]["tags"] = json!(["a", "b"]);
        assert!(refused(review_fix(&d, &report(a))).contains("2 items"));
    }

    #[test]
    fn an_answer_outside_the_schema_is_refused() {
        let mut a = actual();
        a["productInfo"]["price"] = json!("1299.99");
        let why = refused(review_fix(
            &doc(request(), expected(), None, ""),
            &report(a),
        ));
        assert!(why.contains("response schema"), "{why}");
    }

    #[test]
    fn the_requesters_own_values_are_constraints() {
        // An echo of the request.
        let mut a = actual();
        a["productInfo"]["productId"] = json!("P54321");
        let d = doc(request(), expected(), None, "");
        assert!(refused(review_fix(&d, &report(a))).contains("from the request"));
        // A value the case's own fixtures give.
        let fixtures = json!({"getProductInfo": [{"args": {"productId": "P12345"},
                              "result": {"productName": "High-performance Laptop", "price": 1299.99}}]});
        let d = doc(request(), expected(), Some(fixtures), "");
        assert!(refused(review_fix(&d, &report(actual()))).contains("fixtures"));
        // A value the protocol's prose states.
        let d = doc(
            request(),
            expected(),
            None,
            "Products are always called Laptop.",
        );
        assert!(refused(review_fix(&d, &report(actual()))).contains("protocol's text"));
    }

    #[test]
    fn reports_without_answers_or_for_other_cases_are_refused() {
        let d = doc(request(), expected(), None, "");
        assert!(refused(review_fix(&d, "your expectation is wrong")).contains("nothing"));
        let other = report(actual()).replace("known product", "another case");
        assert!(refused(review_fix(&d, &other)).contains("does not have"));
        let no_answer = VerificationReport {
            cases: vec![CaseReport {
                name: "known product".into(),
                passed: false,
                failures: vec!["the handler failed: boom".into()],
                response: None,
            }],
        }
        .failure_description();
        assert!(refused(review_fix(&d, &no_answer)).contains("no answer"));
        // Answers that meet the expectations leave nothing to fix.
        let mut e = actual();
        e["status"] = json!({"code": 200});
        let d = doc(request(), e, None, "");
        assert!(refused(review_fix(&d, &report(actual()))).contains("nothing to fix"));
    }

    #[test]
    fn prose_mentions_whole_words_only() {
        assert!(mentions("Prices are in EUR.", "EUR"));
        assert!(!mentions("Prices are in EURO.", "EUR"));
        assert!(!mentions("A laptop", "lap"));
        assert!(!mentions("anything", " "));
    }

    #[test]
    fn status_fields_are_recognised_by_name() {
        for status in [
            "/status/code",
            "/status",
            "/code",
            "/type",
            "/error/message",
            "/result/statusCode",
        ] {
            assert!(is_status(status), "{status}");
        }
        for data in [
            "/productInfo/name",
            "/productInfo/code",
            "/price",
            "/items/0/type",
        ] {
            assert!(!is_status(data), "{data}");
        }
    }
}
