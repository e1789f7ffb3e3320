//! `agent` binding: another agent performs the capability. Its input becomes a request of a
//! protocol document the operator names; the agent that serves this capability sends it to the
//! peer as a requester (through the protocol agreed with the peer, negotiating it first when
//! none is, in natural language when none can be), and the peer's answer becomes the result.
//!
//! This crate knows nothing of NLIP or negotiation: it builds the request and reads the answer,
//! and hands the exchange to an [`AgentCaller`] that the server installs at start
//! ([`crate::Capabilities::connect_agents`]). A binding with a `token` (its `${VAR}` references
//! resolved at load, like every secret of the file) hands it over as a [`PeerToken`], which the
//! caller presents to the peer as `Authorization: Bearer`.
//!
//! # The result
//! - Through the protocol: the answer, or the part of it at `result_pointer`.
//! - In natural language (no protocol could be agreed and `fallback` is on): the object
//!   `{"fallback": {"reason": …, "text": …, "data": …}}`, [`fallback_result`]: why no protocol
//!   served, the peer's answer as text, and the structured data its answer carried (absent when
//!   there was none). An output schema that admits this shape lets the fallback through; for any
//!   other the call fails with [`CapabilityError::BindingFailed`], whose message carries the
//!   peer's text.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::file::AgentBindingSpec;
use crate::http::expand_env;
use crate::load::{Ctx, Env, MAX_TIMEOUT_MS};
use crate::{CapabilityError, LoadError, schema_errors};

/// One request for a peer agent, as an `agent` binding built it.
#[derive(Debug, Clone)]
pub struct AgentRequest {
    /// The capability being performed.
    pub capability: String,
    /// The peer's NLIP URL (a URL without a path names its NLIP end-point).
    pub url: String,
    /// The protocol document the request follows.
    pub protocol: Arc<str>,
    /// The protocol request.
    pub request: Value,
    /// Whether a natural-language answer is acceptable when no protocol can be agreed.
    pub fallback: bool,
    /// The credential to present to the peer, if the binding has one.
    pub token: Option<PeerToken>,
}

/// A credential an `agent` binding presents to its peer. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerToken(String);

impl PeerToken {
    /// The token itself, to put in the request's `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PeerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerToken(…)")
    }
}

/// How the peer answered.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentAnswer {
    /// Through the protocol: its answer, checked against the protocol's response schema.
    Protocol(Value),
    /// In natural language, because no protocol could be agreed (`reason`).
    NaturalLanguage {
        reason: String,
        text: String,
        /// Structured data the answer carried, if any.
        data: Option<Value>,
    },
}

/// Why the peer could not be asked, or did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AgentCallError {
    pub message: String,
}

/// The future an [`AgentCaller`] returns.
pub type AgentFuture<'a> =
    Pin<Box<dyn Future<Output = Result<AgentAnswer, AgentCallError>> + Send + 'a>>;

/// Sends an `agent` binding's requests to their peers: the server, acting as a requester.
pub trait AgentCaller: Send + Sync + std::fmt::Debug {
    fn request(&self, request: AgentRequest) -> AgentFuture<'_>;
}

#[derive(Debug)]
pub(crate) struct AgentBinding {
    url: String,
    protocol_path: String,
    protocol: Arc<str>,
    /// A JSON object: the constant fields of every request.
    template: Value,
    input: String,
    message_id: Option<String>,
    timestamp: Option<String>,
    result_pointer: String,
    fallback: bool,
    timeout: Duration,
    token: Option<PeerToken>,
}

impl AgentBinding {
    pub(crate) fn protocol(&self) -> &str {
        &self.protocol
    }

    pub(crate) fn protocol_path(&self) -> &str {
        &self.protocol_path
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The protocol request for `args`: the template, the input's fields at `input`, a fresh
    /// message id and the time where the binding asks for them.
    pub(crate) fn request_for(&self, args: &Value) -> Value {
        let mut request = self.template.clone();
        if let (Some(Value::Object(target)), Value::Object(fields)) =
            (slot(&mut request, &self.input), args)
        {
            for (name, value) in fields {
                target.insert(name.clone(), value.clone());
            }
        }
        if let Some(at) = &self.message_id
            && let Some(place) = slot(&mut request, at)
        {
            *place = Value::String(uuid::Uuid::new_v4().to_string());
        }
        if let Some(at) = &self.timestamp
            && let Some(place) = slot(&mut request, at)
        {
            *place = Value::String(
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            );
        }
        request
    }

    /// Asks the peer through `caller` and turns its answer into the capability's result.
    pub(crate) async fn call(
        &self,
        caller: Option<&Arc<dyn AgentCaller>>,
        capability: &str,
        args: &Value,
        output: &jsonschema::Validator,
    ) -> Result<Value, CapabilityError> {
        let failed = |message: String| CapabilityError::BindingFailed {
            capability: capability.to_owned(),
            message,
        };
        let caller = caller.ok_or_else(|| {
            failed(
                "no requester serves agent bindings here (a Parley server installs one at start)"
                    .into(),
            )
        })?;
        let request = AgentRequest {
            capability: capability.to_owned(),
            url: self.url.clone(),
            protocol: self.protocol.clone(),
            request: self.request_for(args),
            fallback: self.fallback,
            token: self.token.clone(),
        };
        let answer = tokio::time::timeout(self.timeout, caller.request(request))
            .await
            .map_err(|_| CapabilityError::Timeout {
                capability: capability.to_owned(),
                after: self.timeout,
            })?
            .map_err(|e| failed(format!("asking {}: {e}", self.url)))?;
        match answer {
            AgentAnswer::Protocol(answer) if self.result_pointer.is_empty() => Ok(answer),
            AgentAnswer::Protocol(answer) => answer
                .pointer(&self.result_pointer)
                .cloned()
                .ok_or_else(|| {
                    failed(format!(
                        "the peer's answer has nothing at `{}`",
                        self.result_pointer
                    ))
                }),
            AgentAnswer::NaturalLanguage { reason, text, data } => {
                let result = fallback_result(&reason, &text, data);
                match schema_errors(output, &result) {
                    None => Ok(result),
                    Some(_) => Err(failed(format!(
                        "no protocol could be agreed with {} ({reason}); its answer in natural \
                         language, which output_schema does not admit: {text}",
                        self.url
                    ))),
                }
            }
        }
    }
}

/// The result of an `agent` binding answered in natural language (see the module docs).
pub fn fallback_result(reason: &str, text: &str, data: Option<Value>) -> Value {
    let mut fallback = Map::new();
    fallback.insert("reason".into(), Value::from(reason));
    fallback.insert("text".into(), Value::from(text));
    if let Some(data) = data {
        fallback.insert("data".into(), data);
    }
    json!({ "fallback": fallback })
}

/// The value at JSON pointer `pointer` in `root`, made on the way: missing fields become empty
/// objects (the last one `null`). `None` when the path crosses something that is not an object.
fn slot<'a>(root: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let tokens: Vec<String> = pointer
        .strip_prefix('/')?
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut here = root;
    for (i, token) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        let Value::Object(fields) = here else {
            return None;
        };
        here = fields.entry(token.clone()).or_insert_with(|| {
            if last {
                Value::Null
            } else {
                Value::Object(Map::new())
            }
        });
    }
    Some(here)
}

/// Builds the binding from its file section: the URL (environment references resolved), the
/// protocol document (read now), the request template and its pointers, the timeout.
pub(crate) fn load(
    ctx: &Ctx<'_>,
    spec: AgentBindingSpec,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<AgentBinding, LoadError> {
    let url = peer_url(ctx, &spec.url, env)?;
    let path = base_dir.join(&spec.protocol);
    let protocol = std::fs::read_to_string(&path).map_err(|e| {
        ctx.err(
            "binding.protocol",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    if protocol.trim().is_empty() {
        return Err(ctx.err("binding.protocol", format!("{} is empty", path.display())));
    }
    let template = template(ctx, &spec)?;
    if !spec.result_pointer.is_empty() && !spec.result_pointer.starts_with('/') {
        return Err(pointer_error(
            ctx,
            "binding.result_pointer",
            &spec.result_pointer,
            "a part of the answer",
        ));
    }
    if spec.timeout_ms == 0 || spec.timeout_ms > MAX_TIMEOUT_MS {
        return Err(ctx.err(
            "binding.timeout_ms",
            format!("{} is out of range (1..={MAX_TIMEOUT_MS})", spec.timeout_ms),
        ));
    }
    Ok(AgentBinding {
        url,
        protocol_path: path.display().to_string(),
        protocol: protocol.into(),
        template,
        input: spec.input,
        message_id: spec.message_id,
        timestamp: spec.timestamp,
        result_pointer: spec.result_pointer,
        fallback: spec.fallback,
        timeout: Duration::from_millis(spec.timeout_ms),
        token: spec
            .token
            .as_deref()
            .map(|t| token(ctx, t, env))
            .transpose()?,
    })
}

/// The binding's token with `${VAR}` resolved: one word, so that it fits a header line (the
/// caller checks its form further).
fn token(ctx: &Ctx<'_>, template: &str, env: Env<'_>) -> Result<PeerToken, LoadError> {
    let token = expand_env(template, env).map_err(|m| ctx.err("binding.token", m))?;
    let token = token.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ctx.err(
            "binding.token",
            "must be one word: no spaces or control characters (the value is not shown)",
        ));
    }
    Ok(PeerToken(token.to_owned()))
}

/// The request every call starts from: the `request` table with the object the input goes into
/// (made here, once), checked to have a place for the message id and the time.
fn template(ctx: &Ctx<'_>, spec: &AgentBindingSpec) -> Result<Value, LoadError> {
    let mut template = match &spec.request {
        None => Value::Object(Map::new()),
        Some(object @ Value::Object(_)) => object.clone(),
        Some(other) => {
            return Err(ctx.err(
                "binding.request",
                format!("must be a table (a JSON object), not {other}"),
            ));
        }
    };
    match slot(&mut template, &spec.input) {
        Some(Value::Object(_)) => {}
        Some(place @ Value::Null) => *place = Value::Object(Map::new()),
        _ => {
            return Err(pointer_error(
                ctx,
                "binding.input",
                &spec.input,
                "an object",
            ));
        }
    }
    let mut probe = template.clone();
    for (field, pointer) in [
        ("binding.message_id", &spec.message_id),
        ("binding.timestamp", &spec.timestamp),
    ] {
        if let Some(pointer) = pointer
            && (pointer.is_empty() || slot(&mut probe, pointer).is_none())
        {
            return Err(pointer_error(ctx, field, pointer, "a field"));
        }
    }
    Ok(template)
}

fn pointer_error(ctx: &Ctx<'_>, field: &str, pointer: &str, what: &str) -> LoadError {
    ctx.err(
        field,
        format!(
            "`{pointer}` is not a JSON pointer to {what} in the request (it must start with `/` \
             and cross only objects of `binding.request`)"
        ),
    )
}

/// The peer's URL with `${VAR}` resolved; without a scheme it is `http://`. Must be an http(s)
/// or ws(s) URL with a host.
fn peer_url(ctx: &Ctx<'_>, template: &str, env: Env<'_>) -> Result<String, LoadError> {
    let url = expand_env(template, env).map_err(|m| ctx.err("binding.url", m))?;
    let url = if url.contains("://") {
        url
    } else {
        format!("http://{url}")
    };
    match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "http" | "https" | "ws" | "wss") && u.host().is_some() => {
            Ok(url)
        }
        Ok(u) => Err(ctx.err(
            "binding.url",
            format!(
                "must be an http(s):// or ws(s):// URL with a host, not `{}:`",
                u.scheme()
            ),
        )),
        Err(e) => Err(ctx.err("binding.url", format!("`{url}` is not a valid URL: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_made_through_objects_only() {
        let mut request = json!({"header": {"type": "QUERY"}, "flat": 1});
        *slot(&mut request, "/header/id").expect("inside an object") = json!("m-1");
        *slot(&mut request, "/body/stationId").expect("made on the way") = json!("WS-101");
        assert_eq!(
            request,
            json!({"header": {"type": "QUERY", "id": "m-1"}, "flat": 1, "body": {"stationId": "WS-101"}})
        );
        assert!(slot(&mut request, "/flat/x").is_none());
        assert!(slot(&mut request, "no-slash").is_none());
        let mut escaped = json!({});
        *slot(&mut escaped, "/a~1b/c~0d").expect("escaped tokens") = json!(true);
        assert_eq!(escaped, json!({"a/b": {"c~d": true}}));
    }

    #[test]
    fn the_fallback_result_carries_data_only_when_there_is_some() {
        assert_eq!(
            fallback_result("declined", "shipped", None),
            json!({"fallback": {"reason": "declined", "text": "shipped"}})
        );
        assert_eq!(
            fallback_result("declined", "shipped", Some(json!({"status": "shipped"})))["fallback"]
                ["data"],
            json!({"status": "shipped"})
        );
    }
}
