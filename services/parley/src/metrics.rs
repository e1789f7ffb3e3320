//! Prometheus metrics: one process-wide recorder, rendered at `GET /metrics`.
//!
//! Counters (all `_total`): `parley_negotiations_total{outcome}`,
//! `parley_negotiation_messages_total{direction}`, `parley_reasoner_calls_total{backend,kind}`,
//! `parley_handler_calls_total{outcome}`, `parley_protocol_cache_total{result}` and
//! `parley_model_calls_total{purpose}` (requests to the language model).

use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock, RwLock};

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

/// A counter handle, registered once per name and label values. `metrics::counter!` looks
/// the series up in the recorder's registry (hashing name and labels) on every use; the
/// handler and text paths count on every request, so they keep the handles instead.
fn counter(name: &'static str, labels: [(&'static str, &'static str); 2]) -> Counter {
    type Key = (&'static str, [(&'static str, &'static str); 2]);
    static HANDLES: LazyLock<RwLock<HashMap<Key, Counter>>> = LazyLock::new(Default::default);
    let key = (name, labels);
    if let Some(c) = HANDLES.read().ok().and_then(|m| m.get(&key).cloned()) {
        return c;
    }
    // Make sure our recorder is the one registering, so a cached handle is never a no-op.
    install();
    let labels: Vec<Label> = labels
        .iter()
        .filter(|(k, _)| !k.is_empty())
        .map(|&(k, v)| Label::from_static_parts(k, v))
        .collect();
    let c = metrics::counter!(name, labels);
    if let Ok(mut m) = HANDLES.write() {
        m.insert(key, c.clone());
    }
    c
}

/// One label; the second slot of the key stays empty.
fn one(k: &'static str, v: &'static str) -> [(&'static str, &'static str); 2] {
    [(k, v), ("", "")]
}

pub fn negotiation_outcome(outcome: &'static str) {
    counter("parley_negotiations_total", one("outcome", outcome)).increment(1);
}

pub fn negotiation_message(direction: &'static str) {
    counter(
        "parley_negotiation_messages_total",
        one("direction", direction),
    )
    .increment(1);
}

pub fn reasoner_call(backend: &'static str, kind: &'static str) {
    counter(
        "parley_reasoner_calls_total",
        [("backend", backend), ("kind", kind)],
    )
    .increment(1);
}

pub fn handler_call(outcome: &'static str) {
    counter("parley_handler_calls_total", one("outcome", outcome)).increment(1);
}

pub fn protocol_cache(result: &'static str) {
    counter("parley_protocol_cache_total", one("result", result)).increment(1);
}

/// Chat-completion requests made for natural-language answers.
pub fn model_calls(n: u32) {
    if n > 0 {
        counter("parley_model_calls_total", one("purpose", "answer")).increment(u64::from(n));
    }
}

/// Chat-completion requests the protocol reasoner has made so far (it keeps the count).
pub fn protocol_model_calls(total: u64) {
    counter("parley_model_calls_total", one("purpose", "negotiation")).absolute(total);
}
