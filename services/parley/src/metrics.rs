//! Prometheus metrics: one process-wide recorder, rendered at `GET /metrics`.
//!
//! Counters (all `_total`): `parley_negotiations_total{outcome}`,
//! `parley_negotiation_messages_total{direction}`, `parley_reasoner_calls_total{backend,kind}`,
//! `parley_handler_calls_total{outcome}`, `parley_protocol_cache_total{result}` and
//! `parley_model_calls_total{purpose}` (requests to the language model).

use std::sync::OnceLock;

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

pub fn negotiation_outcome(outcome: &str) {
    metrics::counter!("parley_negotiations_total", "outcome" => outcome.to_owned()).increment(1);
}

pub fn negotiation_message(direction: &'static str) {
    metrics::counter!("parley_negotiation_messages_total", "direction" => direction).increment(1);
}

pub fn reasoner_call(backend: &'static str, kind: &'static str) {
    metrics::counter!("parley_reasoner_calls_total", "backend" => backend, "kind" => kind)
        .increment(1);
}

pub fn handler_call(outcome: &str) {
    metrics::counter!("parley_handler_calls_total", "outcome" => outcome.to_owned()).increment(1);
}

pub fn protocol_cache(result: &'static str) {
    metrics::counter!("parley_protocol_cache_total", "result" => result).increment(1);
}

/// Chat-completion requests made for natural-language answers.
pub fn model_calls(n: u32) {
    if n > 0 {
        metrics::counter!("parley_model_calls_total", "purpose" => "answer")
            .increment(u64::from(n));
    }
}

/// Chat-completion requests the protocol reasoner has made so far (it keeps the count).
pub fn protocol_model_calls(total: u64) {
    metrics::counter!("parley_model_calls_total", "purpose" => "negotiation").absolute(total);
}
