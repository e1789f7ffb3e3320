//! `http` binding: call an existing HTTP API with values taken from the capability's input.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde_json::{Map, Value};

use crate::error::error_chain;
use crate::file::HttpSpec;
use crate::load::{Ctx, Env, MAX_TIMEOUT_MS, Schemas, not_found_policy};
use crate::{CapabilityError, LoadError, NotFoundPolicy};

/// Largest response body read from an API. Capability results go to reasoners and peers; an API
/// that suddenly streams megabytes is a fault, not data.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// One piece of a URL template. Environment references (`${VAR}`) are resolved at load time
/// into literals, so at call time only input placeholders remain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Literal(String),
    Field(String),
    Env(String),
}

/// Splits `https://h/{id}/x?k=${KEY}` into literals, `{field}` placeholders and `${VAR}`
/// references. `{{`/`}}` are not supported: braces have no business in a URL template otherwise.
pub(crate) fn parse_template(template: &str) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '$' if matches!(chars.peek(), Some((_, '{'))) => {
                chars.next();
                let name = take_until_close(&mut chars)
                    .ok_or_else(|| format!("unclosed `${{` at byte {i}"))?;
                if !is_env_name(&name) {
                    return Err(format!("invalid environment variable name `{name}`"));
                }
                flush(&mut literal, &mut segments);
                segments.push(Segment::Env(name));
            }
            '{' => {
                let name = take_until_close(&mut chars)
                    .ok_or_else(|| format!("unclosed `{{` at byte {i}"))?;
                if name.is_empty() {
                    return Err("empty placeholder `{}`".to_owned());
                }
                flush(&mut literal, &mut segments);
                segments.push(Segment::Field(name));
            }
            '}' => return Err(format!("unmatched `}}` at byte {i}")),
            other => literal.push(other),
        }
    }
    flush(&mut literal, &mut segments);
    Ok(segments)
}

fn take_until_close(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) -> Option<String> {
    let mut name = String::new();
    for (_, c) in chars.by_ref() {
        match c {
            '}' => return Some(name),
            '{' => return None,
            c => name.push(c),
        }
    }
    None
}

fn flush(literal: &mut String, segments: &mut Vec<Segment>) {
    if !literal.is_empty() {
        segments.push(Segment::Literal(std::mem::take(literal)));
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Replaces `${VAR}` references in a header value or URL; used at load time only.
pub(crate) fn resolve_env(
    segments: Vec<Segment>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Segment>, String> {
    segments
        .into_iter()
        .map(|s| match s {
            Segment::Env(var) => env(&var)
                .map(Segment::Literal)
                .ok_or_else(|| format!("environment variable `{var}` is not set")),
            other => Ok(other),
        })
        .collect()
}

/// Expands `${VAR}` in a header value, leaving any other brace alone (header values such as JSON
/// snippets may contain `{`).
pub(crate) fn expand_env(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "unclosed `${` in the value".to_owned())?;
        let var = &after[..end];
        if !is_env_name(var) {
            return Err(format!("invalid environment variable name `{var}`"));
        }
        let value = env(var).ok_or_else(|| format!("environment variable `{var}` is not set"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Percent-encodes everything except RFC 3986 unreserved characters, so a value can never add
/// path segments (`/`), a query (`?`) or a fragment (`#`) to the URL.
pub(crate) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A scalar input value as it appears in a URL.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[derive(Debug)]
pub(crate) struct HttpBinding {
    pub(crate) method: Method,
    /// Literals and `{field}` placeholders only (environment already resolved).
    pub(crate) url: Vec<Segment>,
    pub(crate) query: Vec<String>,
    pub(crate) body: Vec<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) timeout: Duration,
    pub(crate) result_pointer: String,
    pub(crate) not_found: NotFoundPolicy,
}

/// Header names and values checked at load time. Values are marked sensitive: they often
/// carry credentials (`${API_KEY}`), so `Debug` prints `Sensitive` instead, and HTTP/2's header
/// compression never indexes them.
pub(crate) fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a valid header name"))?;
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| format!("the value of header `{name}` is not a valid header value"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

impl HttpBinding {
    /// Builds the URL for `args`. Fails with `InvalidArguments` when a placeholder's value is not
    /// a scalar (the loader already required placeholders to be required input properties).
    pub(crate) fn url_for(&self, capability: &str, args: &Value) -> Result<Url, CapabilityError> {
        let mut text = String::new();
        let mut in_path = true;
        for segment in &self.url {
            match segment {
                Segment::Literal(l) => {
                    in_path &= !l.contains(['?', '#']);
                    text.push_str(l);
                }
                Segment::Field(f) => {
                    let invalid = |message: String| CapabilityError::InvalidArguments {
                        capability: capability.to_owned(),
                        message,
                    };
                    let value = args.get(f).and_then(scalar_text).ok_or_else(|| {
                        invalid(format!("`{f}` must be a string, number or boolean"))
                    })?;
                    // A URL parser resolves `.` and `..` segments (even percent-encoded ones)
                    // and an empty value joins two segments: any of them would send the call
                    // to another path than the template's.
                    if in_path && matches!(value.as_str(), "" | "." | "..") {
                        return Err(invalid(format!(
                            "`{f}` must not be {value:?}: it would change the URL's path"
                        )));
                    }
                    text.push_str(&percent_encode(&value));
                }
                // Unreachable after load-time resolution; treated as a literal-free gap.
                Segment::Env(_) => {}
            }
        }
        let mut url = Url::parse(&text).map_err(|e| CapabilityError::BindingFailed {
            capability: capability.to_owned(),
            message: format!("built URL is invalid: {e}"),
        })?;
        {
            let mut pairs = url.query_pairs_mut();
            for field in &self.query {
                match args.get(field) {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => {
                        for item in items {
                            if let Some(t) = scalar_text(item) {
                                pairs.append_pair(field, &t);
                            }
                        }
                    }
                    Some(Value::Object(_)) => {
                        pairs.append_pair(field, &args[field].to_string());
                    }
                    Some(scalar) => {
                        if let Some(t) = scalar_text(scalar) {
                            pairs.append_pair(field, &t);
                        }
                    }
                }
            }
        }
        // `query_pairs_mut` leaves a dangling `?` when nothing was appended.
        if url.query() == Some("") {
            url.set_query(None);
        }
        Ok(url)
    }

    pub(crate) async fn call(
        &self,
        client: &reqwest::Client,
        capability: &str,
        args: &Value,
    ) -> Result<Value, CapabilityError> {
        let url = self.url_for(capability, args)?;
        let failed = |message: String| CapabilityError::BindingFailed {
            capability: capability.to_owned(),
            message,
        };
        let mut request = client
            .request(self.method.clone(), url)
            .headers(self.headers.clone());
        if !self.body.is_empty() {
            let body: Map<String, Value> = self
                .body
                .iter()
                .filter_map(|f| args.get(f).map(|v| (f.clone(), v.clone())))
                .collect();
            request = request.json(&Value::Object(body));
        }
        // One deadline over connect, headers and body: reqwest's own timeout would do, but a
        // tokio timeout also bounds our chunked read loop and makes the error type unambiguous.
        let exchange = async {
            let mut response = request
                .send()
                .await
                .map_err(|e| failed(format!("request failed: {}", error_chain(&e))))?;
            let status = response.status();
            let mut bytes = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| failed(format!("reading the response failed: {e}")))?
            {
                if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(failed(format!(
                        "response body larger than {MAX_RESPONSE_BYTES} bytes"
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| CapabilityError::Timeout {
                capability: capability.to_owned(),
                after: self.timeout,
            })??;

        if status == StatusCode::NOT_FOUND {
            return match &self.not_found {
                NotFoundPolicy::Result(value) => Ok(value.clone()),
                NotFoundPolicy::Error => Err(CapabilityError::NotFound {
                    capability: capability.to_owned(),
                    message: "the API answered 404 Not Found".to_owned(),
                }),
            };
        }
        if !status.is_success() {
            return Err(failed(format!("the API answered HTTP {status}")));
        }
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .map_err(|e| failed(format!("the API response is not JSON: {e}")))?
        };
        if self.result_pointer.is_empty() {
            return Ok(body);
        }
        body.pointer(&self.result_pointer).cloned().ok_or_else(|| {
            failed(format!(
                "the API response has nothing at `{}`",
                self.result_pointer
            ))
        })
    }
}

/// Builds the binding from its file section: method, URL template (every placeholder a required
/// input property, environment references resolved), query and body fields, headers, timeout.
pub(crate) fn load(
    ctx: &Ctx<'_>,
    spec: HttpSpec,
    schemas: &Schemas<'_>,
    env: Env<'_>,
) -> Result<HttpBinding, LoadError> {
    let method = method(ctx, &spec.method)?;
    let url = url_template(ctx, &spec.url, schemas, env)?;
    for (field, names) in [("binding.query", &spec.query), ("binding.body", &spec.body)] {
        for name in names {
            if !schemas.input_property(name) {
                return Err(ctx.err(field, format!("`{name}` is not a property of input_schema")));
            }
        }
    }
    if !spec.body.is_empty() && method == Method::GET {
        return Err(ctx.err("binding.body", "a GET request cannot carry a body"));
    }
    let mut headers = HeaderMap::new();
    for (name, value) in &spec.headers {
        let field = format!("binding.headers.{name}");
        let value = expand_env(value, env).map_err(|m| ctx.err(&field, m))?;
        let (name, value) = header(name, &value).map_err(|m| ctx.err(&field, m))?;
        headers.insert(name, value);
    }
    if spec.timeout_ms == 0 || spec.timeout_ms > MAX_TIMEOUT_MS {
        return Err(ctx.err(
            "binding.timeout_ms",
            format!("{} is out of range (1..={MAX_TIMEOUT_MS})", spec.timeout_ms),
        ));
    }
    if !spec.result_pointer.is_empty() && !spec.result_pointer.starts_with('/') {
        return Err(ctx.err(
            "binding.result_pointer",
            format!(
                "`{}` is not a JSON pointer (it must be empty or start with `/`)",
                spec.result_pointer
            ),
        ));
    }
    let not_found = not_found_policy(ctx, spec.not_found, schemas)?;
    Ok(HttpBinding {
        method,
        url,
        query: spec.query,
        body: spec.body,
        headers,
        timeout: Duration::from_millis(spec.timeout_ms),
        result_pointer: spec.result_pointer,
        not_found,
    })
}

fn method(ctx: &Ctx<'_>, name: &str) -> Result<Method, LoadError> {
    Ok(match name.to_ascii_uppercase().as_str() {
        "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "PATCH" => Method::PATCH,
        "DELETE" => Method::DELETE,
        other => {
            return Err(ctx.err(
                "binding.method",
                format!("unsupported method `{other}` (expected GET, POST, PUT, PATCH or DELETE)"),
            ));
        }
    })
}

/// Parses the URL template: every placeholder a required input property, environment
/// references resolved, and the result (placeholders filled in) an http(s) URL with a host.
fn url_template(
    ctx: &Ctx<'_>,
    template: &str,
    schemas: &Schemas<'_>,
    env: Env<'_>,
) -> Result<Vec<Segment>, LoadError> {
    let url = parse_template(template).map_err(|m| ctx.err("binding.url", m))?;
    let url = resolve_env(url, env).map_err(|m| ctx.err("binding.url", m))?;
    let mut probe = String::new();
    for segment in &url {
        match segment {
            Segment::Field(f) => {
                if !schemas.input_property(f) {
                    return Err(ctx.err(
                        "binding.url",
                        format!("placeholder `{{{f}}}` is not a property of input_schema"),
                    ));
                }
                if !schemas.input_required(f) {
                    return Err(ctx.err(
                        "binding.url",
                        format!("placeholder `{{{f}}}` must be listed in input_schema.required"),
                    ));
                }
                probe.push('x');
            }
            Segment::Literal(l) => probe.push_str(l),
            Segment::Env(_) => {}
        }
    }
    match reqwest::Url::parse(&probe) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(url),
        Ok(u) => Err(ctx.err(
            "binding.url",
            format!(
                "must be an http:// or https:// URL with a host, not `{}:`",
                u.scheme()
            ),
        )),
        Err(e) => Err(ctx.err("binding.url", format!("not a valid URL: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_never_print() {
        let (_, value) = header("Authorization", "Bearer s3cret").expect("valid header");
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("s3cret"));
    }

    #[test]
    fn template_splits_fields_env_and_literals() {
        let parsed = parse_template("https://h/p/{id}?k=${KEY}").expect("valid template");
        assert_eq!(
            parsed,
            vec![
                Segment::Literal("https://h/p/".into()),
                Segment::Field("id".into()),
                Segment::Literal("?k=".into()),
                Segment::Env("KEY".into()),
            ]
        );
    }

    #[test]
    fn template_errors_are_precise() {
        assert!(
            parse_template("https://h/{id")
                .expect_err("must be refused")
                .contains("unclosed")
        );
        assert!(
            parse_template("https://h/{}")
                .expect_err("must be refused")
                .contains("empty")
        );
        assert!(
            parse_template("https://h/}")
                .expect_err("must be refused")
                .contains("unmatched")
        );
        assert!(
            parse_template("https://h/${A-B}")
                .expect_err("must be refused")
                .contains("A-B")
        );
    }

    #[test]
    fn percent_encoding_keeps_values_inside_one_segment() {
        assert_eq!(percent_encode("a b/c?d#é"), "a%20b%2Fc%3Fd%23%C3%A9");
        assert_eq!(percent_encode("P-1_2.3~"), "P-1_2.3~");
    }
}
