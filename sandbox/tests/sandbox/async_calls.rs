//! Calls run with wasmtime's async support: the guest runs on a pooled fiber stack inside the
//! caller's task, capabilities are awaited there, a busy handler yields at every epoch tick, and
//! dropping a call's future cancels it. None of this depends on the calling thread's stack.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_sandbox::{
    CallOutput, CapabilityFuture, CapabilityHost, Grants, Handler, NoCapabilities, Sandbox,
    SandboxConfig, SandboxError,
};
use serde_json::{Value, json};

/// Records the thread the capability ran on, then does real async work on the runtime.
#[derive(Debug)]
struct ThreadProbe;

impl CapabilityHost for ThreadProbe {
    fn call(&self, _capability: &str, args: Value) -> CapabilityFuture {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let args = tokio::spawn(async move { args })
                .await
                .map_err(|e| e.to_string())?;
            Ok(json!({ "thread": thread, "args": args }))
        })
    }
}

/// A capability that waits `hold` (on the runtime's timer) before answering.
#[derive(Debug)]
struct Slow {
    hold: Duration,
}

impl CapabilityHost for Slow {
    fn call(&self, _capability: &str, _args: Value) -> CapabilityFuture {
        let hold = self.hold;
        Box::pin(async move {
            tokio::time::sleep(hold).await;
            Ok(json!("done"))
        })
    }
}

/// A capability that never answers.
#[derive(Debug)]
struct Never;

impl CapabilityHost for Never {
    fn call(&self, _: &str, _: Value) -> CapabilityFuture {
        Box::pin(std::future::pending())
    }
}

const PROBE: &str = r#"
function handle(request) {
  const seen = host.call("probe", { n: request.n });
  return { n: request.n + 1, thread: seen.thread, args: seen.args };
}"#;

const WAITS: &str = r#"
function handle(request) {
  if (request.wait) { host.call("wait", {}); }
  return { done: true };
}"#;

fn sandbox(pool_instances: u32, deadline_ms: u64) -> Sandbox {
    Sandbox::new(SandboxConfig {
        deadline_ms,
        pool_instances,
        ..SandboxConfig::default()
    })
    .expect("sandbox")
}

/// A call granted nothing, on a host with no capabilities.
async fn plain(
    sandbox: &Sandbox,
    handler: &Handler,
    input: &Value,
) -> Result<CallOutput, SandboxError> {
    sandbox
        .call(handler, input, &Grants::none(), Arc::new(NoCapabilities))
        .await
}

/// A blocking call granted nothing, on a host with no capabilities.
fn plain_blocking(
    sandbox: &Sandbox,
    handler: &Handler,
    input: &Value,
) -> Result<CallOutput, SandboxError> {
    sandbox.call_blocking(handler, input, &Grants::none(), Arc::new(NoCapabilities))
}

/// Waits until the pool has a free slot (a finished async call frees its slot only once its
/// instance has been reset, by the reset thread), taking it for one blocking call.
async fn slot_freed(sandbox: &Sandbox, handler: &Handler) {
    let started = Instant::now();
    loop {
        match plain_blocking(sandbox, handler, &json!({})) {
            Err(SandboxError::Overloaded) if started.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            other => {
                other.expect("a call on the freed slot");
                return;
            }
        }
    }
}

fn wait_grant() -> Grants {
    ["wait"].into_iter().collect()
}

#[test]
fn calls_run_on_the_calling_thread_whatever_its_stack_and_await_capabilities_there() {
    // 256 KiB runtime threads could not hold the 1 MiB wasm stack: the guest has its own.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("test-runtime")
        .thread_stack_size(256 << 10)
        .enable_all()
        .build()
        .expect("runtime");
    let sandbox = sandbox(4, 2_000);
    let handler = sandbox.publish(PROBE).expect("publish");
    let out = rt
        .block_on(async move {
            tokio::spawn(async move {
                let grants: Grants = ["probe"].into_iter().collect();
                sandbox
                    .call(
                        &handler,
                        &json!({ "n": 41 }),
                        &grants,
                        Arc::new(ThreadProbe),
                    )
                    .await
            })
            .await
        })
        .expect("task")
        .expect("call");
    assert_eq!(out.output["n"], 42);
    assert_eq!(out.output["args"], json!({ "n": 41 }));
    assert_eq!(out.output["thread"], "test-runtime");
}

#[test]
fn endless_handlers_end_at_their_deadline_while_a_single_thread_runtime_keeps_serving() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let sandbox = sandbox(8, 200);
    let endless = sandbox
        .publish("function handle(r) { for (;;) {} }")
        .expect("publish");
    let echo = sandbox
        .publish("function handle(r) { return r; }")
        .expect("publish");
    rt.block_on(async move {
        // Shares the one thread with four endless handlers: it only runs if they yield.
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        let started = Instant::now();
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let (sandbox, endless) = (sandbox.clone(), endless.clone());
                tokio::spawn(async move { plain(&sandbox, &endless, &json!({})).await })
            })
            .collect();
        for call in calls {
            let error = call.await.expect("task").expect_err("must time out");
            assert_eq!(error.code(), "timeout", "{error}");
        }
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        assert!(
            ticks.load(std::sync::atomic::Ordering::Relaxed) >= 10,
            "the runtime's only thread stalled while handlers looped"
        );
        ticker.abort();
        let out = plain(&sandbox, &echo, &json!({ "ok": true }))
            .await
            .expect("call after timeouts");
        assert_eq!(out.output, json!({ "ok": true }));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_call_waits_for_a_free_slot_up_to_its_deadline() {
    let sandbox = sandbox(1, 400);
    let handler = sandbox.publish(WAITS).expect("publish");

    // The only slot is busy for 100 ms: the second call waits and then runs.
    let holder = {
        let (sandbox, handler) = (sandbox.clone(), handler.clone());
        let host = Arc::new(Slow {
            hold: Duration::from_millis(100),
        });
        tokio::spawn(async move {
            sandbox
                .call(&handler, &json!({ "wait": true }), &wait_grant(), host)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = plain(&sandbox, &handler, &json!({}))
        .await
        .expect("the second call waited for the slot");
    assert_eq!(second.output, json!({ "done": true }));
    let held = holder.await.expect("task").expect("the holder finished");
    assert_eq!(held.output, json!({ "done": true }));
    // Both finished calls reset their instance in a task of their own; the blocking holder
    // below needs the slot free when it starts.
    slot_freed(&sandbox, &handler).await;

    // Busy for longer than a deadline: the waiting call gives up with `overloaded`. The holder
    // is a blocking call whose capability blocks its thread for a second (nothing can cut a
    // blocking capability short); back from it, past its deadline, it ends in `timeout`.
    let holder = {
        let (sandbox, handler) = (sandbox.clone(), handler.clone());
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
        let entered = std::sync::Mutex::new(Some(entered_tx));
        let host = move |_: &str, _: Value| -> Result<Value, String> {
            if let Some(tx) = entered.lock().ok().and_then(|mut e| e.take()) {
                let _ = tx.send(());
            }
            std::thread::sleep(Duration::from_millis(1_000));
            Ok(json!("done"))
        };
        let thread = std::thread::spawn(move || {
            sandbox.call_blocking(
                &handler,
                &json!({ "wait": true }),
                &wait_grant(),
                Arc::new(host),
            )
        });
        entered_rx.await.expect("the holder reached its capability");
        thread
    };
    let started = Instant::now();
    let error = plain(&sandbox, &handler, &json!({}))
        .await
        .expect_err("no slot within the deadline");
    assert_eq!(error.code(), "overloaded", "{error}");
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "{:?}",
        started.elapsed()
    );
    let error = holder
        .join()
        .expect("holder thread")
        .expect_err("past its deadline");
    assert_eq!(error.code(), "timeout", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_that_outlives_the_deadline_is_cancelled_at_the_deadline() {
    let sandbox = sandbox(2, 200);
    let handler = sandbox.publish(WAITS).expect("publish");
    let started = Instant::now();
    let host = Arc::new(Slow {
        hold: Duration::from_secs(5),
    });
    let error = sandbox
        .call(&handler, &json!({ "wait": true }), &wait_grant(), host)
        .await
        .expect_err("the capability takes longer than the deadline");
    assert_eq!(error.code(), "timeout", "{error}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(190) && elapsed < Duration::from_secs(2),
        "ended after {elapsed:?}, not at the 200 ms deadline"
    );
    // A capability that answers in time is unaffected.
    let quick = Arc::new(Slow {
        hold: Duration::from_millis(20),
    });
    let out = sandbox
        .call(&handler, &json!({ "wait": true }), &wait_grant(), quick)
        .await
        .expect("in time");
    assert_eq!(out.output, json!({ "done": true }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_cancels_it_and_frees_its_instance() {
    let sandbox = sandbox(1, 10_000);
    let handler = sandbox.publish(WAITS).expect("publish");
    let (input, grants) = (json!({ "wait": true }), wait_grant());
    let call = sandbox.call(&handler, &input, &grants, Arc::new(Never));
    let outcome = tokio::time::timeout(Duration::from_millis(50), call).await;
    assert!(outcome.is_err(), "the capability never answers");
    // The guest was suspended inside the capability; dropping the future unwound it and gave its
    // instance back, so the only slot is free at once.
    let out = plain_blocking(&sandbox, &handler, &json!({})).expect("the slot came back");
    assert_eq!(out.output, json!({ "done": true }));
}

#[test]
fn blocking_calls_work_from_a_thread_with_a_small_stack() {
    let sandbox = sandbox(2, 2_000);
    let handler = sandbox
        .publish("function handle(r) { const f = (n) => n ? 1 + f(n - 1) : 0; return { depth: f(r.n) }; }")
        .expect("publish");
    let out = std::thread::Builder::new()
        .stack_size(128 << 10)
        .spawn(move || {
            sandbox.call_blocking(
                &handler,
                &json!({ "n": 500 }),
                &Grants::none(),
                Arc::new(NoCapabilities),
            )
        })
        .expect("thread")
        .join()
        .expect("no stack overflow on the calling thread")
        .expect("call");
    assert_eq!(out.output, json!({ "depth": 500 }));
}

#[tokio::test(flavor = "current_thread")]
async fn the_next_call_takes_over_a_reset_still_pending() {
    // Calls from a task (the test body itself is no task: it blocks on the runtime).
    tokio::spawn(next_call_takes_over()).await.expect("task");
}

async fn next_call_takes_over() {
    // One slot, one thread. A finished async call leaves its instance's reset to a task of its
    // own, which cannot have run while this task has not yielded; the next call, async or
    // blocking, does the reset itself and gets the slot instead of waiting or failing.
    let sandbox = sandbox(1, 2_000);
    let handler = sandbox.publish(WAITS).expect("publish");
    let out = plain(&sandbox, &handler, &json!({})).await.expect("call");
    assert_eq!(out.output, json!({ "done": true }));
    let out = plain_blocking(&sandbox, &handler, &json!({}))
        .expect("the blocking call resets the pending instance and takes the slot");
    assert_eq!(out.output, json!({ "done": true }));
    for _ in 0..20 {
        let out = plain(&sandbox, &handler, &json!({})).await.expect("call");
        assert_eq!(out.output, json!({ "done": true }));
    }
    // And when the task yields in between, the spawned reset has freed the slot already.
    for _ in 0..20 {
        tokio::task::yield_now().await;
        let out = plain(&sandbox, &handler, &json!({})).await.expect("call");
        assert_eq!(out.output, json!({ "done": true }));
    }
}

#[test]
fn a_blocking_call_inside_a_tokio_task_survives_its_epoch_yields() {
    // A handler that computes for a while meets several epoch ticks, and yields at each. Called
    // with `call_blocking` from inside a tokio task, those yields must wake the blocking
    // executor themselves: tokio's own yield would wait for a scheduler the blocked thread
    // never gets back to, and the call would hang. (The generous limit covers compiling the
    // runtime on a loaded machine; a hang never returns.)
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let out = runtime.block_on(async {
            tokio::spawn(async {
                let sandbox = sandbox(1, 5_000);
                let handler = sandbox
                    .publish(
                        "function handle(r) { const end = Date.now() + r.ms; let n = 0; \
                         while (Date.now() < end) n++; return { spun: n > 0 }; }",
                    )
                    .expect("publish");
                plain_blocking(&sandbox, &handler, &json!({ "ms": 30 }))
            })
            .await
            .expect("task")
        });
        let _ = done_tx.send(out);
    });
    let out = done_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the blocking call returns instead of hanging")
        .expect("call");
    assert_eq!(out.output, json!({ "spun": true }));
}

/// Waits until the sandbox has `n` ready instances (made by the reset thread after a call's answer).
async fn ready(sandbox: &Sandbox, n: usize) {
    let started = Instant::now();
    while sandbox.ready_instances() != n {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{} ready instances, expected {n}",
            sandbox.ready_instances()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

const COUNTS: &str = r#"
let calls = 0;
function handle(request) {
  calls += 1;
  let probed = null;
  if (request.probe) {
    try { probed = host.call("probe", {}).thread !== undefined; } catch (e) { probed = String(e.message); }
  }
  return { calls, probed };
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_instance_starts_its_call_as_fresh_as_a_new_one_with_that_call_s_grants() {
    let sandbox = sandbox(4, 1_000);
    let handler = sandbox.publish(COUNTS).expect("publish");
    let granted: Grants = ["probe"].into_iter().collect();
    // From a task, as a server calls: the instance is reset, and another made ready, after.
    let call = |grants: Grants| {
        spawn_call(
            &sandbox,
            &handler,
            json!({ "probe": true }),
            grants,
            Arc::new(ThreadProbe),
        )
    };
    assert_eq!(sandbox.ready_instances(), 0);
    let first = call(granted.clone()).await.expect("task").expect("call");
    assert_eq!(first.output, json!({ "calls": 1, "probed": true }));
    ready(&sandbox, 1).await;
    for round in 0..4 {
        // Taken by this call, made again after it.
        let grants = if round % 2 == 0 {
            Grants::none()
        } else {
            granted.clone()
        };
        let out = call(grants.clone()).await.expect("task");
        if grants.allows("probe") {
            let out = out.expect("call");
            assert_eq!(
                out.output,
                json!({ "calls": 1, "probed": true }),
                "round {round}"
            );
        } else {
            // The previous call's grant is not this one's.
            let error = out.expect_err("not granted");
            assert_eq!(error.code(), "capability_refused", "round {round}: {error}");
        }
        ready(&sandbox, 1).await;
    }

    // Turned off: nothing is kept.
    let off = Sandbox::new(SandboxConfig {
        ready_instances: 0,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let handler = off.publish(COUNTS).expect("publish");
    call_from_a_task(&off, &handler).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(off.ready_instances(), 0);
}

/// With `deferred_reset = false` an async call from a task resets its instance before it returns:
/// its one slot is free at once for a blocking call (which fails with `overloaded` rather than
/// wait), every call starts fresh, and no instance is made ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_deferred_resets_a_call_frees_its_slot_before_it_returns() {
    let sandbox = Sandbox::new(SandboxConfig {
        pool_instances: 1,
        deferred_reset: false,
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let handler = sandbox.publish(COUNTS).expect("publish");
    for round in 0..3 {
        let out = call_from_a_task(&sandbox, &handler).await;
        assert_eq!(out.output["calls"], 1, "round {round}: a fresh instance");
        let out = plain_blocking(&sandbox, &handler, &json!({}))
            .expect("the slot is free as soon as the async call has returned");
        assert_eq!(out.output["calls"], 1, "round {round}");
        assert_eq!(sandbox.ready_instances(), 0, "round {round}");
    }
}

/// A finished call's instance is reset, and its handler made ready again, by the sandbox's own
/// reset thread, not by the caller's runtime: here the runtime's only thread blocks right after
/// the call, and the instance is made ready all the same.
#[test]
fn instances_are_reset_and_made_ready_off_the_caller_s_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let sandbox = sandbox(4, 1_000);
        let handler = sandbox.publish(COUNTS).expect("publish");
        for round in 1..=3 {
            let out = call_from_a_task(&sandbox, &handler).await;
            assert_eq!(out.output["calls"], 1, "round {round}: a fresh instance");
            // Blocks the runtime's only thread: no task of it runs until this loop ends.
            let started = Instant::now();
            while sandbox.ready_instances() != 1 {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "round {round}: no instance was made ready"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
}

/// The reset thread runs in the idle scheduling class (`SCHED_IDLE`, policy 5), so that any
/// other thread waking on its core takes the core at once.
#[cfg(target_os = "linux")]
#[test]
fn the_reset_thread_runs_in_the_idle_scheduling_class() {
    let sandbox = sandbox(2, 1_000);
    // The scheduling policy of each reset thread of this process (other tests' sandboxes have
    // theirs), by thread id: the 41st field of its stat line (`comm` has no spaces here).
    let policy = |task: &std::path::Path| -> Option<u32> {
        let name = std::fs::read_to_string(task.join("comm")).ok()?;
        if name.trim_end() != "sandbox-reset" {
            return None;
        }
        let stat = std::fs::read_to_string(task.join("stat")).ok()?;
        stat.split_whitespace().nth(40)?.parse().ok()
    };
    let reset_threads = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/proc/self/task")
            .expect("the process's threads")
            .filter_map(|task| task.ok().map(|t| t.path()))
            .filter(|task| policy(task).is_some())
            .collect()
    };
    // A new thread takes its name as it starts.
    let started = Instant::now();
    let mut tasks = reset_threads();
    while tasks.is_empty() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
        tasks = reset_threads();
    }
    assert!(!tasks.is_empty(), "no sandbox-reset thread");
    for task in tasks {
        // A thread sets its class first thing; one that has just started gets a moment.
        let started = Instant::now();
        while let Some(seen) = policy(&task) {
            if seen == 5 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{}: scheduling policy {seen}",
                task.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    drop(sandbox);
}

/// Calls `handler` on `{}` from a task of its own, with no grants, and expects an answer.
async fn call_from_a_task(sandbox: &Sandbox, handler: &Handler) -> CallOutput {
    spawn_call(
        sandbox,
        handler,
        json!({}),
        Grants::none(),
        Arc::new(NoCapabilities),
    )
    .await
    .expect("task")
    .expect("call")
}

/// Calls `handler` on `input` from a task of its own.
fn spawn_call(
    sandbox: &Sandbox,
    handler: &Handler,
    input: Value,
    grants: Grants,
    host: Arc<dyn CapabilityHost>,
) -> tokio::task::JoinHandle<Result<CallOutput, SandboxError>> {
    let (sandbox, handler) = (sandbox.clone(), handler.clone());
    tokio::spawn(async move { sandbox.call(&handler, &input, &grants, host).await })
}

/// Calls `handler` from a task on `{"wait": true}`, its capability holding the call for `hold`.
fn hold_a_slot(
    sandbox: &Sandbox,
    handler: &Handler,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<CallOutput, SandboxError>> {
    spawn_call(
        sandbox,
        handler,
        json!({ "wait": true }),
        wait_grant(),
        Arc::new(Slow { hold }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_instance_of_another_handler_gives_up_its_slot() {
    let sandbox = sandbox(2, 1_000);
    let counts = sandbox.publish(COUNTS).expect("publish");
    let waits = sandbox.publish(WAITS).expect("publish");
    for blocking in [false, true] {
        let none = Arc::new(NoCapabilities);
        spawn_call(&sandbox, &counts, json!({}), Grants::none(), none)
            .await
            .expect("task")
            .expect("call");
        // One slot holds the first handler's ready instance; a long call takes the other.
        ready(&sandbox, 1).await;
        let holder = hold_a_slot(&sandbox, &waits, Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let out = if blocking {
            let (s, h) = (sandbox.clone(), waits.clone());
            tokio::task::spawn_blocking(move || plain_blocking(&s, &h, &json!({})))
                .await
                .expect("blocking task")
        } else {
            plain(&sandbox, &waits, &json!({})).await
        };
        let out = out.expect("the call takes the ready instance's slot");
        assert_eq!(out.output, json!({ "done": true }), "blocking: {blocking}");
        assert!(
            !holder.is_finished(),
            "blocking: {blocking}: the call waited for the holder"
        );
        assert_eq!(sandbox.ready_instances(), 0);
        holder.await.expect("task").expect("the holder finishes");
        // Both slots free again (the holder's is made ready, or freed, in its own task).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Hands a capability's arguments back as its result.
#[derive(Debug)]
struct Echo;

impl CapabilityHost for Echo {
    fn call(&self, _: &str, args: Value) -> CapabilityFuture {
        Box::pin(std::future::ready(Ok(args)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_takes_its_whole_input_and_then_each_capability_reply() {
    // The input waits for the guest's `host_take` as a capability's reply does (sandbox/ABI.md):
    // whatever its size and characters, the handler sees every byte, and the reply that follows
    // is the capability's, not what was left of the input.
    const ECHOES: &str = r#"
function handle(request) {
  const back = host.call("echo", { text: request.text });
  return { length: request.text.length, text: request.text, back: back.text };
}"#;
    let sandbox = sandbox(4, 5_000);
    let handler = sandbox.publish(ECHOES).expect("publish");
    let grants: Grants = ["echo"].into_iter().collect();
    for text in [
        String::new(),
        "\"\\\n\u{1}".to_owned(),
        "é漢字😀 \u{2028}".repeat(8_000),
        "x".repeat(200_000),
    ] {
        let out = sandbox
            .call(&handler, &json!({ "text": text }), &grants, Arc::new(Echo))
            .await
            .expect("call");
        // JavaScript counts UTF-16 code units.
        let length = text.encode_utf16().count();
        assert_eq!(
            out.output,
            json!({ "length": length, "text": text, "back": text }),
            "input of {} bytes",
            text.len()
        );
    }
}

/// Collects the fields of every `sandbox.call` span, as `name=value`.
#[derive(Clone, Default)]
struct CallSpans(Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::field::Visit for CallSpans {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if let Ok(mut fields) = self.0.lock() {
            fields.push(format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if let Ok(mut fields) = self.0.lock() {
            fields.push(format!("{}={value}", field.name()));
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for CallSpans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "sandbox.call" {
            attrs.record(&mut self.clone());
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if ctx
            .span(id)
            .is_some_and(|span| span.name() == "sandbox.call")
        {
            values.record(&mut self.clone());
        }
    }
}

/// A call's span, `sandbox.call`, names the handler by a prefix of its hash and records the
/// outcome, `ok` or the error's code; it never carries the input or the answer.
#[test]
fn a_call_s_span_names_the_handler_and_its_outcome_but_not_the_data() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let spans = CallSpans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let sandbox = sandbox(2, 1_000);
    let echo = sandbox
        .publish(
            "function handle(request) { if (request.fail) throw new Error('no'); return request; }",
        )
        .expect("publish");
    tracing::subscriber::with_default(subscriber, || {
        plain_blocking(&sandbox, &echo, &json!({ "secret": "s3cr3t" })).expect("answers");
        plain_blocking(
            &sandbox,
            &echo,
            &json!({ "fail": true, "secret": "s3cr3t" }),
        )
        .expect_err("throws");
    });
    let fields = spans.0.lock().expect("fields").clone();
    let prefix = format!("handler={}", &echo.hash()[..12]);
    assert_eq!(
        fields,
        vec![
            prefix.clone(),
            "outcome=ok".to_string(),
            prefix,
            "outcome=handler_threw".to_string()
        ]
    );
}
