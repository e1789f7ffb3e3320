//! Prometheus metrics: one process-wide recorder, rendered at `GET /metrics`.
//!
//! Counters (all `_total`): `parley_negotiations_total{outcome}`,
//! `parley_negotiation_messages_total{direction}`, `parley_reasoner_calls_total{backend,kind}`,
//! `parley_handler_calls_total{outcome}`, `parley_protocol_cache_total{result}`, and what the
//! language model cost: `parley_model_calls_total{purpose}` (requests sent, failed ones
//! included), `parley_model_tokens_total{purpose,kind}` (`kind` = `prompt` or `completion`, as the
//! model's responses reported them) and `parley_model_unmetered_calls_total{purpose}` (calls whose
//! response reported no usage, or that got no response: their tokens are not in
//! `parley_model_tokens_total`, which is then a lower bound). `purpose` is the `model.call` span's:
//! `answer`, `evaluate`, `generate_handler`, `fix_handler`, `draft`, `evaluate_test_cases`.
//! MCP tool calls on `/mcp`: `parley_mcp_tool_calls_total{kind,outcome}` (`kind` =
//! `capability` or `protocol`, `outcome` = `ok` or `error`).
//! What the limits turned away: `parley_refused_total{reason}`, `reason` one of
//! `connections_per_address` (a connection closed on accept),
//! `too_many_in_flight`, `send_timeout` (a peer that did not read its answers).
//! What the throttles refused (`throttle`): `parley_throttled_total{kind,scope}`, `kind` one of
//! `messages`, `negotiations`, `model_calls`, `uploads`, `scope` = `address` or `peer`.
//! NLIP tool calls (`router`): `parley_tool_calls_total{outcome}`, `outcome` = `ok` or the
//! failure's code. Idle conversations the sweep removed: `parley_conversations_expired_total`.
//! The audit log (`audit`): `parley_audit_dropped_total` (capability calls not recorded, the
//! buffer full) and `parley_audit_write_failures_total{kind}` (`decision` or `batch`: writes the
//! database did not take).

use std::cell::RefCell;
use std::sync::OnceLock;

use metrics::{Counter, Label};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the recorder once per process (several servers in one test process share it).
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed by an embedding program; ours still
        // renders what it records through the handle.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// The Prometheus text exposition of every metric.
pub fn render() -> String {
    install().render()
}

type Labels = [(&'static str, &'static str); 2];

/// Runs `f` on the counter for `name` and `labels`. `metrics::counter!` looks the series up
/// in the recorder's registry (hashing name and labels) on every use, and the text and
/// handler paths count on every request; each thread keeps the handles it has used instead,
/// so the hot path takes no lock and touches no shared cache line but the counter itself.
fn with_counter(name: &'static str, labels: Labels, f: impl FnOnce(&Counter)) {
    thread_local! {
        static HANDLES: RefCell<Vec<(&'static str, Labels, Counter)>> =
            const { RefCell::new(Vec::new()) };
    }
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        if let Some((_, _, c)) = handles.iter().find(|(n, l, _)| {
            same(n, name)
                && l.iter()
                    .zip(&labels)
                    .all(|(a, b)| same(a.0, b.0) && same(a.1, b.1))
        }) {
            return f(c);
        }
        // Our recorder must be the one registering, so a kept handle is never a no-op.
        install();
        let list: Vec<Label> = labels
            .iter()
            .filter(|(k, _)| !k.is_empty())
            .map(|&(k, v)| Label::from_static_parts(k, v))
            .collect();
        let c = metrics::counter!(name, list);
        f(&c);
        handles.push((name, labels, c));
    });
}

/// String equality that first compares addresses: the names and labels are literals, so the
/// same one nearly always comes from the same place, and comparing bytes is the fallback.
fn same(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// One label; the second slot stays empty.
fn one(k: &'static str, v: &'static str) -> Labels {
    [(k, v), ("", "")]
}

fn count(name: &'static str, labels: Labels, n: u64) {
    with_counter(name, labels, |c| c.increment(n));
}

pub fn negotiation_outcome(outcome: &'static str) {
    count("parley_negotiations_total", one("outcome", outcome), 1);
}

pub fn negotiation_messages(direction: &'static str, n: usize) {
    count(
        "parley_negotiation_messages_total",
        one("direction", direction),
        n as u64,
    );
}

pub fn reasoner_call(backend: &'static str, kind: &'static str) {
    let labels = [("backend", backend), ("kind", kind)];
    count("parley_reasoner_calls_total", labels, 1);
}

pub fn handler_call(outcome: &'static str) {
    count("parley_handler_calls_total", one("outcome", outcome), 1);
}

/// A tool call on `/mcp` (see the module docs).
pub fn mcp_tool_call(kind: &'static str, outcome: &'static str) {
    let labels = [("kind", kind), ("outcome", outcome)];
    count("parley_mcp_tool_calls_total", labels, 1);
}

/// Something a limit turned away (see the module docs for the reasons).
pub fn refused(reason: &'static str) {
    count("parley_refused_total", one("reason", reason), 1);
}

/// Work a throttle refused (see the module docs).
pub fn throttled(kind: &'static str, scope: &'static str) {
    count(
        "parley_throttled_total",
        [("kind", kind), ("scope", scope)],
        1,
    );
}

/// One NLIP tool call answered: `ok`, or its failure's code.
pub fn tool_call(outcome: &'static str) {
    count("parley_tool_calls_total", one("outcome", outcome), 1);
}

/// Capability calls the audit log could not record: its buffer was full.
pub fn audit_dropped(n: u64) {
    count("parley_audit_dropped_total", [("", ""), ("", "")], n);
}

/// An audit write the database did not take (`decision` or `batch`).
pub fn audit_write_failed(kind: &'static str) {
    count("parley_audit_write_failures_total", one("kind", kind), 1);
}

/// Conversations the idle sweep removed.
pub fn conversations_expired(n: u64) {
    count(
        "parley_conversations_expired_total",
        [("", ""), ("", "")],
        n,
    );
}

pub fn protocol_cache(result: &'static str) {
    count("parley_protocol_cache_total", one("result", result), 1);
}

/// Model calls and tokens spent for `purpose` (see the module docs).
pub fn model_usage(purpose: parley_reasoner::ModelPurpose, tally: &parley_reasoner::UsageTally) {
    let purpose = purpose.as_str();
    if tally.calls > 0 {
        count(
            "parley_model_calls_total",
            one("purpose", purpose),
            tally.calls,
        );
    }
    if tally.unmetered_calls > 0 {
        let labels = one("purpose", purpose);
        count(
            "parley_model_unmetered_calls_total",
            labels,
            tally.unmetered_calls,
        );
    }
    for (kind, tokens) in [
        ("prompt", tally.prompt_tokens),
        ("completion", tally.completion_tokens),
    ] {
        if tokens > 0 {
            let labels = [("purpose", purpose), ("kind", kind)];
            count("parley_model_tokens_total", labels, tokens);
        }
    }
}
