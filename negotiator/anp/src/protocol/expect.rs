//! Expected results written in prose ("status code 404, productInfo is null", "returns 200 and a
//! non-empty products array", "the response contains messageId and code"), read into what a
//! verifier can check: values the response must hold (a test case's `expectedResponse`, matched
//! as a subset) and conditions no value expresses ([`FieldCheck`]s).
//!
//! What is read, clause by clause (clauses end at `,` `;` `.` and the word "and"):
//! - a status code: the first three-digit number from 100 to 599 that stands alone goes to the
//!   response schema's status field (`status`, `statusCode`, `code`, `resultCode`, …, in that
//!   order of preference; an object status gets it as its `code`);
//! - a top-level response field the clause names (in any case style), with what the clause says
//!   of it: "not null" / "non-null" → [`Condition::NotNull`]; "null" → the value `null`;
//!   "non-empty" / "not empty" / "at least one" → [`Condition::NonEmpty`]; "empty" → `[]` (an
//!   array) or `""` (a string); "contains", "includes", "has", "present", "returned" or nothing
//!   said (then the previous clause's condition holds, "contains A and B") →
//!   [`Condition::Present`].

use serde_json::{Map, Value, json};

use super::{Condition, FieldCheck};

/// What a prose expectation says, in checkable form.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Expectation {
    /// Values the response must hold (an object, matched as a subset).
    pub(super) expected: Map<String, Value>,
    pub(super) checks: Vec<FieldCheck>,
}

impl Expectation {
    fn is_empty(&self) -> bool {
        self.expected.is_empty() && self.checks.is_empty()
    }
}

/// What `text` says the response holds, given the protocol's response schema; `None` when it
/// names nothing checkable.
pub(super) fn read(text: &str, response_schema: &Value) -> Option<Expectation> {
    let fields: Vec<(String, &Value)> = response_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default();
    let mut out = Expectation::default();
    if let Some(code) = status_code(text)
        && let Some((field, value)) = status_value(&fields, code)
    {
        out.expected.insert(field, value);
    }
    let mut previous: Option<Said> = None;
    for clause in clauses(text) {
        let said = said(&clause).or(previous);
        previous = said;
        for word in clause
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .filter(|w| !w.is_empty())
        {
            let Some((name, schema)) = fields.iter().find(|(n, _)| key(n) == key(word)) else {
                continue;
            };
            if out.expected.contains_key(name) || out.checks.iter().any(|c| c.path[1..] == **name) {
                continue;
            }
            let path = format!("/{}", name.replace('~', "~0").replace('/', "~1"));
            match said.unwrap_or(Said::Is(Condition::Present)) {
                Said::Is(is) => out.checks.push(FieldCheck { path, is }),
                Said::Null => {
                    out.expected.insert(name.clone(), Value::Null);
                }
                Said::Empty => {
                    let types = schema.get("type");
                    let is = |t: &str| {
                        types.is_some_and(|ts| {
                            ts == t || ts.as_array().is_some_and(|a| a.iter().any(|x| x == t))
                        })
                    };
                    if is("array") {
                        out.expected.insert(name.clone(), json!([]));
                    } else if is("string") {
                        out.expected.insert(name.clone(), json!(""));
                    }
                }
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// What a clause says of the fields it names.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Said {
    Is(Condition),
    Null,
    Empty,
}

fn said(clause: &str) -> Option<Said> {
    let c = clause.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| c.contains(w));
    if has(&[
        "not null",
        "non-null",
        "non null",
        "isn't null",
        "not be null",
    ]) {
        Some(Said::Is(Condition::NotNull))
    } else if has(&["null"]) {
        Some(Said::Null)
    } else if has(&["non-empty", "non empty", "not empty", "at least one"]) {
        Some(Said::Is(Condition::NonEmpty))
    } else if has(&["empty"]) {
        Some(Said::Empty)
    } else if has(&[
        "contain", "include", "has ", "have ", "present", "returned", "holds", "with ",
    ]) {
        Some(Said::Is(Condition::Present))
    } else {
        None
    }
}

/// The clauses of a sentence: split at `,` `;` `.` (not inside a number) and the word "and".
fn clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let in_number = c == '.'
            && i > 0
            && chars[i - 1].is_ascii_digit()
            && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if matches!(c, ',' | ';' | '.') && !in_number {
            out.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    out.push(current);
    out.into_iter()
        .flat_map(|clause| clause.split(" and ").map(str::to_owned).collect::<Vec<_>>())
        .filter(|c| !c.trim().is_empty())
        .collect()
}

/// The first standalone three-digit number from 100 to 599.
fn status_code(text: &str) -> Option<u16> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() == 3 && w.chars().all(|c| c.is_ascii_digit()))
        .filter_map(|w| w.parse().ok())
        .find(|n| (100..600).contains(n))
}

/// The status field of the response and the value that says `code` there.
fn status_value(fields: &[(String, &Value)], code: u16) -> Option<(String, Value)> {
    const NAMES: [&str; 6] = [
        "statuscode",
        "code",
        "status",
        "resultcode",
        "httpstatus",
        "responsecode",
    ];
    NAMES.iter().find_map(|wanted| {
        let (name, schema) = fields.iter().find(|(n, _)| key(n) == *wanted)?;
        let types = schema.get("type");
        let numeric = types.is_some_and(|t| {
            ["integer", "number"]
                .iter()
                .any(|n| t == n || t.as_array().is_some_and(|a| a.iter().any(|x| x == n)))
        });
        if numeric {
            return Some((name.clone(), json!(code)));
        }
        let inner = schema.get("properties")?.as_object()?;
        let code_field = inner
            .keys()
            .find(|k| matches!(key(k).as_str(), "code" | "statuscode" | "httpcode"))?;
        Some((name.clone(), json!({ code_field.clone(): code })))
    })
}

/// A name's case- and style-insensitive key (`product_info`, `productInfo` → `productinfo`).
fn key(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "messageId": {"type": "string"},
            "code": {"type": "integer"},
            "productInfo": {"type": ["object", "null"]},
            "products": {"type": "array"},
            "error": {"type": ["string", "null"]}
        }})
    }

    fn check(path: &str, is: Condition) -> FieldCheck {
        FieldCheck {
            path: path.into(),
            is,
        }
    }

    #[test]
    fn status_and_null() {
        let e = read("status code 404, productInfo is null", &schema()).expect("read");
        assert_eq!(
            Value::Object(e.expected),
            json!({"code": 404, "productInfo": null})
        );
        assert!(e.checks.is_empty());
    }

    #[test]
    fn non_empty_arrays_and_presence() {
        let e = read("returns 200 and a non-empty products array", &schema()).expect("read");
        assert_eq!(Value::Object(e.expected), json!({"code": 200}));
        assert_eq!(e.checks, [check("/products", Condition::NonEmpty)]);
        let e = read("the response contains messageId and code", &schema()).expect("read");
        assert_eq!(
            e.checks,
            [
                check("/messageId", Condition::Present),
                check("/code", Condition::Present)
            ]
        );
        let e = read("product_info is not null; error is null", &schema()).expect("read");
        assert_eq!(e.checks, [check("/productInfo", Condition::NotNull)]);
        assert_eq!(Value::Object(e.expected), json!({"error": null}));
    }

    #[test]
    fn an_object_status_gets_its_code() {
        let schema = json!({"properties": {"status": {"type": "object", "properties": {"code": {"type": "integer"}, "message": {}}}}});
        let e = read("Status 400 (bad request).", &schema).expect("read");
        assert_eq!(Value::Object(e.expected), json!({"status": {"code": 400}}));
    }

    #[test]
    fn nothing_checkable_is_none() {
        assert_eq!(read("the provider is happy", &schema()), None);
        // A product id is no status code.
        assert_eq!(read("the product P12345 is shown", &schema()), None);
    }
}
