//! Benchmark (not a test): the same small handler — validate a 5-field object, reshape it, return it —
//! natively in Rust and in the sandbox with fresh isolation per call, on 1 and 2 threads.
//!
//! Run with `cargo bench -p parley-sandbox --bench handler`. Prints median and p99 latency, calls/s,
//! peak RSS and the sandbox/native ratio, then publish times (a fresh sandbox over an empty
//! artifact cache, later handlers in the same sandbox, fresh sandboxes over the warm cache) and the
//! cache's size on disk after 20 handlers. Optional knobs (for experiments, read here only):
//! `BENCH_CALLS` (per thread, default 20000), `BENCH_KEEP_RESIDENT` (bytes), `BENCH_THREADS` (only
//! this thread count), `BENCH_SKIP_ASYNC=1`, `BENCH_SKIP_PUBLISH=1`, `BENCH_TRIVIAL=1` (publish
//! `handle(r) { return 1 }` instead, to see the fixed per-call cost; the native comparison is then
//! meaningless).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_sandbox::{Grants, NoCapabilities, Sandbox, SandboxConfig};
use serde_json::{Value, json};

const HANDLER: &str = r#"
const REQUIRED = ["id", "name", "email", "age", "tags"];
function handle(req) {
  for (const field of REQUIRED) {
    if (!(field in req)) throw new Error("missing field " + field);
  }
  if (typeof req.id !== "number" || typeof req.name !== "string" ||
      typeof req.email !== "string" || !req.email.includes("@") ||
      typeof req.age !== "number" || !Array.isArray(req.tags)) {
    throw new TypeError("a field has the wrong type");
  }
  return {
    userId: req.id,
    displayName: req.name.toUpperCase(),
    contact: { email: req.email.toLowerCase() },
    adult: req.age >= 18,
    tags: req.tags.map((t) => String(t)),
    tagCount: req.tags.length,
  };
}
"#;

const TRIVIAL: &str = "function handle(request) { return 1; }";

fn input() -> Value {
    json!({
        "id": 4711,
        "name": "Ada Lovelace",
        "email": "Ada@Example.org",
        "age": 36,
        "tags": ["math", "engines", "poetry"],
    })
}

/// The same handler in Rust, from `Value` to `Value` like the sandbox.
fn native(req: &Value) -> Result<Value, String> {
    for field in ["id", "name", "email", "age", "tags"] {
        if req.get(field).is_none() {
            return Err(format!("missing field {field}"));
        }
    }
    let (Some(_), Some(name), Some(email), Some(age), Some(tags)) = (
        req["id"].as_f64(),
        req["name"].as_str(),
        req["email"].as_str(),
        req["age"].as_f64(),
        req["tags"].as_array(),
    ) else {
        return Err("a field has the wrong type".to_string());
    };
    if !email.contains('@') {
        return Err("a field has the wrong type".to_string());
    }
    let tags: Vec<Value> = tags
        .iter()
        .map(|t| match t {
            Value::String(s) => Value::String(s.clone()),
            other => Value::String(other.to_string()),
        })
        .collect();
    Ok(json!({
        "userId": req["id"].clone(),
        "displayName": name.to_uppercase(),
        "contact": { "email": email.to_lowercase() },
        "adult": age >= 18.0,
        "tagCount": tags.len(),
        "tags": tags,
    }))
}

struct Row {
    name: String,
    threads: usize,
    median: Duration,
    p99: Duration,
    calls_per_sec: f64,
    /// On-CPU time per call (from the threads' schedstat), which unlike wall time is not inflated when
    /// other processes on a shared machine take the cores.
    cpu_per_call: Duration,
    peak_rss_mib: f64,
}

/// Nanoseconds the calling thread has spent on a CPU (first field of /proc/thread-self/schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Runs `calls` calls of `f` on each of `threads` threads and measures each call.
fn measure<F>(name: &str, threads: usize, calls: usize, f: F) -> Row
where
    F: Fn() + Send + Sync + 'static,
{
    let f = Arc::new(f);
    for _ in 0..500 {
        f();
    }
    let barrier = Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let f = Arc::clone(&f);
            let barrier = Arc::clone(&barrier);
            std::thread::Builder::new()
                .stack_size(8 * 1024 * 1024)
                .spawn(move || {
                    let mut latencies = Vec::with_capacity(calls);
                    barrier.wait();
                    let cpu_before = thread_cpu_ns();
                    for _ in 0..calls {
                        let started = Instant::now();
                        f();
                        latencies.push(started.elapsed());
                    }
                    (latencies, thread_cpu_ns().saturating_sub(cpu_before))
                })
                .expect("spawn a bench thread")
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut latencies: Vec<Duration> = Vec::with_capacity(calls * threads);
    let mut cpu_ns = 0;
    for handle in handles {
        let (thread_latencies, thread_cpu) = handle.join().expect("bench thread");
        latencies.extend(thread_latencies);
        cpu_ns += thread_cpu;
    }
    let wall = started.elapsed();
    latencies.sort();
    Row {
        name: name.to_string(),
        threads,
        median: latencies[latencies.len() / 2],
        p99: latencies[latencies.len() * 99 / 100],
        calls_per_sec: latencies.len() as f64 / wall.as_secs_f64(),
        cpu_per_call: Duration::from_nanos(cpu_ns / latencies.len() as u64),
        peak_rss_mib: peak_rss_mib(),
    }
}

/// `HANDLER` made distinct (a new hash, its own artifact or image) by a leading constant.
fn variant(n: usize) -> String {
    format!("const VARIANT = {n};\n{HANDLER}")
}

/// Bytes and artifact files in the cache directory (the key file included in the bytes).
fn cache_usage(dir: &std::path::Path) -> (u64, usize) {
    let mut bytes = 0;
    let mut artifacts = 0;
    for entry in std::fs::read_dir(dir).expect("cache dir").flatten() {
        bytes += entry.metadata().map_or(0, |m| m.len());
        if entry.path().extension().is_some_and(|ext| ext == "cwasm") {
            artifacts += 1;
        }
    }
    (bytes, artifacts)
}

/// Publish times and the artifact cache's size on disk. Every publish here is of a handler the
/// sandbox has not seen, unless said otherwise.
fn publish_section(base: &SandboxConfig) {
    const HANDLERS: usize = 20;
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = SandboxConfig {
        cache_dir: Some(dir.path().join("cache")),
        pool_instances: 4,
        ..base.clone()
    };
    let timed = |sandbox: &Sandbox, source: &str| {
        let started = Instant::now();
        sandbox.publish(source).expect("publishes");
        started.elapsed()
    };
    let sandbox = Sandbox::new(config.clone()).expect("valid config");
    let first = timed(&sandbox, HANDLER);
    let second = timed(&sandbox, &variant(1));
    let mut later: Vec<Duration> = (2..HANDLERS)
        .map(|n| timed(&sandbox, &variant(n)))
        .collect();
    later.sort();
    let (bytes, artifacts) = cache_usage(&dir.path().join("cache"));
    drop(sandbox);

    let fresh = Sandbox::new(config.clone()).expect("valid config");
    let warm_same = timed(&fresh, HANDLER);
    drop(fresh);
    let fresh = Sandbox::new(config).expect("valid config");
    let warm_new = timed(&fresh, &variant(HANDLERS));
    drop(fresh);

    println!();
    println!("publish (the bench handler and variants of it, each a new hash)");
    let row = |what: &str, time: Duration| println!("  {what:<62} {time:>10.2?}");
    row("fresh sandbox, empty cache: first publish", first);
    row("same sandbox: second publish (a different handler)", second);
    row(
        &format!("same sandbox: publishes 3..{HANDLERS}, median"),
        later[later.len() / 2],
    );
    row(
        "fresh sandbox, warm cache: a handler published before",
        warm_same,
    );
    row("fresh sandbox, warm cache: a new handler", warm_new);
    println!(
        "  artifact cache after {HANDLERS} handlers: {:.1} MiB in {artifacts} artifacts",
        bytes as f64 / (1024.0 * 1024.0)
    );
    println!(
        "  peak RSS after the publish section: {:.1} MiB",
        peak_rss_mib()
    );
}

fn main() {
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut config = SandboxConfig::default();
    if let Some(bytes) = std::env::var("BENCH_KEEP_RESIDENT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.pool_keep_resident_bytes = bytes;
    }
    let trivial = std::env::var("BENCH_TRIVIAL").is_ok_and(|v| v == "1");
    let sandbox = Sandbox::new(config.clone()).expect("default config is valid");
    let started = Instant::now();
    let handler = sandbox
        .publish(if trivial { TRIVIAL } else { HANDLER })
        .expect("the bench handler publishes");
    let publish_time = started.elapsed();

    let input = input();
    let expected = native(&input).expect("valid input");
    let got = sandbox
        .call_blocking(&handler, &input, &Grants::none(), Arc::new(NoCapabilities))
        .expect("the sandbox runs the handler")
        .output;
    if !trivial {
        assert_eq!(got, expected, "sandbox and native disagree");
    }

    let skip_async = std::env::var("BENCH_SKIP_ASYNC").is_ok_and(|v| v == "1");
    let rows = call_rows(&sandbox, &handler, &input, calls, skip_async);
    print_rows(&rows, calls, publish_time);
    if !skip_async {
        machinery_section(&config, &input, calls / 2);
    }
    if !std::env::var("BENCH_SKIP_PUBLISH").is_ok_and(|v| v == "1") {
        publish_section(&config);
    }
}

/// The native handler and blocking sandbox calls on 1 and 2 threads (`BENCH_THREADS`: one of
/// them), and async calls from the main thread (inside `block_on`; the guest runs on its fiber
/// within that future) unless `skip_async`.
fn call_rows(
    sandbox: &Sandbox,
    handler: &parley_sandbox::Handler,
    input: &Value,
    calls: usize,
    skip_async: bool,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let only_threads: Option<usize> = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok());
    for threads in [1, 2]
        .into_iter()
        .filter(|t| only_threads.is_none_or(|o| o == *t))
    {
        let native_input = input.clone();
        rows.push(measure("native", threads, calls, move || {
            std::hint::black_box(native(std::hint::black_box(&native_input)).ok());
        }));
        let (sandbox, handler, input) = (sandbox.clone(), handler.clone(), input.clone());
        let host: Arc<dyn parley_sandbox::CapabilityHost> = Arc::new(NoCapabilities);
        let grants = Grants::none();
        rows.push(measure("sandbox", threads, calls, move || {
            let output = sandbox
                .call_blocking(&handler, &input, &grants, Arc::clone(&host))
                .expect("call succeeds");
            std::hint::black_box(output);
        }));
    }
    if !skip_async {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let (sandbox, handler, input) = (sandbox.clone(), handler.clone(), input.clone());
        rows.push(measure("sandbox async", 1, calls / 2, move || {
            let output = runtime.block_on(sandbox.call(
                &handler,
                &input,
                &Grants::none(),
                Arc::new(NoCapabilities),
            ));
            std::hint::black_box(output.expect("call succeeds"));
        }));
    }
    rows
}

fn print_rows(rows: &[Row], calls: usize, publish_time: Duration) {
    println!();
    println!(
        "handler: validate 5 fields, reshape, return; {calls} calls per thread; publish took {publish_time:.2?}"
    );
    println!(
        "{:<15} {:>7} {:>12} {:>12} {:>12} {:>12} {:>14} {:>10}",
        "mode", "threads", "median", "p99", "calls/s", "CPU/call", "peak RSS MiB", "ratio"
    );
    for row in rows {
        let native_median = rows
            .iter()
            .find(|r| r.name == "native" && r.threads == row.threads)
            .map_or(row.median, |r| r.median);
        println!(
            "{:<15} {:>7} {:>12.2?} {:>12.2?} {:>12.0} {:>12} {:>14.1} {:>9.0}x",
            row.name,
            row.threads,
            row.median,
            row.p99,
            row.calls_per_sec,
            // The async row's work happens on a sandbox worker, not the measured thread.
            if row.name.contains("async") {
                "-".to_string()
            } else {
                format!("{:.2?}", row.cpu_per_call)
            },
            row.peak_rss_mib,
            row.median.as_secs_f64() / native_median.as_secs_f64().max(1e-9),
        );
    }
}

/// Calls as a server makes them: from a tokio task that waits between two calls (here it
/// yields), with the latency machinery (`sandbox/src/fast/`) on and off: every instance reset
/// before its call returns (`deferred_reset = false`); reset by the reset thread after the answer
/// but instantiated on the call's way (`ready_instances = 0`); and the default, the call taking an
/// instance made ready after the previous call. In alternating blocks of 500, so that load from
/// elsewhere falls on all alike.
fn machinery_section(base: &SandboxConfig, input: &Value, calls: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let variants = [
        (
            "reset before returning".to_string(),
            SandboxConfig {
                deferred_reset: false,
                ..base.clone()
            },
        ),
        (
            "reset after, instantiated on the way".to_string(),
            SandboxConfig {
                ready_instances: 0,
                ..base.clone()
            },
        ),
        (
            format!("reset after, made ready ({})", base.ready_instances),
            base.clone(),
        ),
    ]
    .map(|(label, config)| {
        let sandbox = Sandbox::new(config).expect("sandbox");
        let handler = sandbox.publish(HANDLER).expect("publish");
        (label, sandbox, handler)
    });
    let labels: Vec<String> = variants.iter().map(|(label, ..)| label.clone()).collect();
    let input = input.clone();
    let mut latencies = runtime.block_on(async move {
        tokio::spawn(async move {
            let mut latencies = vec![Vec::new(); variants.len()];
            let host: Arc<dyn parley_sandbox::CapabilityHost> = Arc::new(NoCapabilities);
            for block in 0..(calls / 500).max(variants.len()) {
                let which = block % variants.len();
                let (_, sandbox, handler) = &variants[which];
                for _ in 0..500 {
                    let started = Instant::now();
                    let output = sandbox
                        .call(handler, &input, &Grants::none(), Arc::clone(&host))
                        .await;
                    latencies[which].push(started.elapsed());
                    std::hint::black_box(output.expect("call succeeds"));
                    tokio::task::yield_now().await;
                }
            }
            latencies
        })
        .await
        .expect("bench task")
    });
    println!();
    println!("async calls from a task that yields between calls (as a server's connection task)");
    println!(
        "{:<40} {:>8} {:>12} {:>12}",
        "instance", "calls", "median", "p99"
    );
    for (latencies, label) in latencies.iter_mut().zip(labels) {
        latencies.sort();
        println!(
            "{:<40} {:>8} {:>12.2?} {:>12.2?}",
            label,
            latencies.len(),
            latencies[latencies.len() / 2],
            latencies[latencies.len() * 99 / 100],
        );
    }
}
