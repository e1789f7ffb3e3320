//! Publishing: source validation, top-level code limits, the artifact cache, fuel and `run_once`.

use std::sync::{Arc, OnceLock};

use parley_sandbox::{Grants, NoCapabilities, Sandbox, SandboxConfig, SandboxError, run_once};
use serde_json::json;

const ECHO: &str = "function handle(request) { return { echoed: request }; }";

fn config() -> SandboxConfig {
    SandboxConfig {
        publish_deadline_ms: 300,
        pool_instances: 4,
        ..SandboxConfig::default()
    }
}

/// Failing publishes never reach compilation, so they can share one sandbox cheaply.
fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| Sandbox::new(config()).expect("valid config"))
}

fn publish_error(source: &str) -> SandboxError {
    sandbox()
        .publish(source)
        .expect_err("this source must be rejected")
}

#[test]
fn syntax_errors_are_invalid_handler() {
    let error = publish_error("function handle(request) { return {; }");
    assert_eq!(error.code(), "invalid_handler");
    assert!(error.to_string().contains("SyntaxError"), "{error}");
}

#[test]
fn a_handle_function_is_required() {
    assert_eq!(publish_error("const x = 1;").code(), "invalid_handler");
    assert_eq!(publish_error("var handle = 42;").code(), "invalid_handler");
}

#[test]
fn top_level_code_is_bounded() {
    // The first publish in a sandbox compiles the runtime; keep that out of the measurement.
    publish_error("(");
    let started = std::time::Instant::now();
    let error = publish_error("for (;;) {} function handle(r) { return r; }");
    assert_eq!(error.code(), "invalid_handler");
    assert!(error.to_string().contains("deadline"), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    let error = publish_error(
        "const hoard = []; for (;;) hoard.push(new ArrayBuffer(1 << 20)); function handle() {}",
    );
    assert_eq!(error.code(), "invalid_handler");
    assert!(error.to_string().contains("memory"), "{error}");

    let error = publish_error("throw new Error('boom'); function handle() {}");
    assert!(error.to_string().contains("boom"), "{error}");
}

#[test]
fn top_level_code_cannot_call_capabilities() {
    let error = publish_error("host.call('anything', {}); function handle(r) { return r; }");
    assert_eq!(error.code(), "invalid_handler");
    assert!(error.to_string().contains("capabilit"), "{error}");
}

#[test]
fn oversized_source_is_rejected() {
    let sandbox = Sandbox::new(SandboxConfig {
        source_bytes: 100,
        pool_instances: 1,
        ..SandboxConfig::default()
    })
    .expect("valid config");
    let source = format!("{ECHO}\n// {}", "x".repeat(200));
    let error = sandbox.publish(&source).expect_err("too large");
    assert_eq!(error.code(), "invalid_handler");
}

#[test]
fn invalid_config_is_rejected_by_new() {
    let error = Sandbox::new(SandboxConfig {
        memory_bytes: 0,
        ..SandboxConfig::default()
    })
    .expect_err("zero memory");
    assert_eq!(error.code(), "invalid_config");
    // Larger than wasmtime accepts: refused by validation, naming the field, not by the engine.
    let error = Sandbox::new(SandboxConfig {
        wasm_stack_bytes: 4 << 20,
        ..SandboxConfig::default()
    })
    .expect_err("4 MiB wasm stack");
    assert_eq!(error.code(), "invalid_config");
    assert!(error.to_string().contains("wasm_stack_bytes"), "{error}");
    // The largest accepted value works.
    Sandbox::new(SandboxConfig {
        wasm_stack_bytes: 2 << 20,
        pool_instances: 2,
        ..SandboxConfig::default()
    })
    .expect("2 MiB wasm stack");
}

#[tokio::test]
async fn artifact_cache_survives_restarts_and_rejects_tampering() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cached = SandboxConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..config()
    };
    let input = json!({ "a": [1, 2, 3] });
    let expected = json!({ "echoed": { "a": [1, 2, 3] } });

    let first = Sandbox::new(cached.clone()).expect("valid config");
    let handler = first.publish(ECHO).expect("publishes");
    assert!(!handler.from_cache());
    assert_eq!(handler.hash().len(), 64);
    drop(first);

    // A "restart": a new sandbox over the same directory loads the artifact instead of compiling.
    let second = Sandbox::new(cached.clone()).expect("valid config");
    let started = std::time::Instant::now();
    let reloaded = second.publish(ECHO).expect("publishes from cache");
    let reload_time = started.elapsed();
    assert!(reloaded.from_cache());
    assert_eq!(reloaded.hash(), handler.hash());
    let output = second
        .call(&reloaded, &input, &Grants::none(), Arc::new(NoCapabilities))
        .await
        .expect("the cached handler runs");
    assert_eq!(output.output, expected);
    eprintln!("reload from cache took {reload_time:?}");
    drop(second);

    // Tamper with every artifact: the MAC no longer verifies, so they are discarded and recompiled.
    for entry in std::fs::read_dir(dir.path()).expect("readable") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|ext| ext == "cwasm") {
            let mut bytes = std::fs::read(&path).expect("readable");
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff;
            std::fs::write(&path, bytes).expect("writable");
        }
    }
    let third = Sandbox::new(cached).expect("valid config");
    let recompiled = third.publish(ECHO).expect("recompiles");
    assert!(!recompiled.from_cache(), "a tampered artifact was loaded");
    // A handler belongs to the sandbox (engine) that published it.
    let foreign = third
        .call(&reloaded, &input, &Grants::none(), Arc::new(NoCapabilities))
        .await
        .expect_err("a handler of another sandbox");
    assert_eq!(foreign.code(), "internal");
    let output = third
        .call(
            &recompiled,
            &input,
            &Grants::none(),
            Arc::new(NoCapabilities),
        )
        .await
        .expect("the recompiled handler runs");
    assert_eq!(output.output, expected);
}

#[test]
fn fuel_limits_work_when_configured() {
    let output = run_once(
        SandboxConfig {
            fuel: Some(50_000_000),
            pool_instances: 2,
            ..SandboxConfig::default()
        },
        "function handle(r) { if (r.spin) { for (;;) {} } return { ok: true }; }",
        &json!({ "spin": false }),
        &Grants::none(),
        Arc::new(NoCapabilities),
    )
    .expect("a short call fits its fuel");
    assert_eq!(output.output, json!({ "ok": true }));

    let error = run_once(
        SandboxConfig {
            fuel: Some(50_000_000),
            deadline_ms: 60_000,
            pool_instances: 2,
            ..SandboxConfig::default()
        },
        "function handle(r) { if (r.spin) { for (;;) {} } return { ok: true }; }",
        &json!({ "spin": true }),
        &Grants::none(),
        Arc::new(NoCapabilities),
    )
    .expect_err("an endless loop runs out of fuel");
    assert_eq!(error.code(), "fuel_exhausted");
}

#[test]
fn run_once_runs_a_handler_with_grants_and_logs() {
    let host = |capability: &str, args: serde_json::Value| -> Result<serde_json::Value, String> {
        assert_eq!(capability, "math.double");
        Ok(json!(args["n"].as_i64().unwrap_or_default() * 2))
    };
    let output = run_once(
        config(),
        r#"function handle(r) {
             console.log("doubling", r.n);
             console.warn({ careful: true });
             return { doubled: host.call("math.double", { n: r.n }) };
           }"#,
        &json!({ "n": 21 }),
        &["math.double"].into_iter().collect(),
        Arc::new(host),
    )
    .expect("runs");
    assert_eq!(output.output, json!({ "doubled": 42 }));
    assert_eq!(output.logs.len(), 2);
    assert_eq!(output.logs[0].text, "doubling 21");
    assert_eq!(output.logs[1].text, r#"{"careful":true}"#);
}

#[test]
fn failed_calls_keep_their_logs_in_the_report() {
    let report = parley_sandbox::run_once_report(
        config(),
        r#"function handle(r) { console.error("about to fail on", r.id); throw new Error("nope"); }"#,
        &json!({ "id": 7 }),
        &Grants::none(),
        Arc::new(NoCapabilities),
    );
    let error = report.result.expect_err("the handler throws");
    assert_eq!(error.code(), "handler_threw");
    assert!(
        error.to_string().contains("handler.js"),
        "stack names the source: {error}"
    );
    assert_eq!(report.logs.len(), 1);
    assert_eq!(report.logs[0].text, "about to fail on 7");
    assert_eq!(report.logs[0].level, parley_sandbox::LogLevel::Error);
}

#[test]
fn a_full_pool_is_overloaded_not_stuck() {
    let sandbox = Sandbox::new(SandboxConfig {
        pool_instances: 1,
        deadline_ms: 10_000,
        ..SandboxConfig::default()
    })
    .expect("valid config");
    let handler = sandbox
        .publish("function handle(r) { if (r.hold) host.call('wait', {}); return { done: true }; }")
        .expect("publishes");
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let host = move |_: &str, _: serde_json::Value| -> Result<serde_json::Value, String> {
        let _ = entered_tx.send(());
        let _ = release_rx.lock().map(|rx| rx.recv());
        Ok(json!(null))
    };
    let holder = {
        let (sandbox, handler) = (sandbox.clone(), handler.clone());
        std::thread::spawn(move || {
            sandbox.call_blocking(
                &handler,
                &json!({ "hold": true }),
                &["wait"].into_iter().collect(),
                Arc::new(host),
            )
        })
    };
    entered_rx
        .recv()
        .expect("the first call holds the only slot");
    let error = sandbox
        .call_blocking(
            &handler,
            &json!({}),
            &Grants::none(),
            Arc::new(NoCapabilities),
        )
        .expect_err("no free slot");
    assert_eq!(error.code(), "overloaded");
    release_tx.send(()).expect("holder waits");
    let held = holder
        .join()
        .expect("holder thread")
        .expect("the held call finishes");
    assert_eq!(held.output, json!({ "done": true }));
    // The slot is free again.
    let output = sandbox
        .call_blocking(
            &handler,
            &json!({}),
            &Grants::none(),
            Arc::new(NoCapabilities),
        )
        .expect("the slot came back");
    assert_eq!(output.output, json!({ "done": true }));
}

#[test]
fn warm_up_prepares_the_runtime_and_later_handlers_still_publish_and_run() {
    let sandbox = Sandbox::new(config()).expect("valid config");
    sandbox.warm_up().expect("the trivial handler publishes");
    let handler = sandbox
        .publish(ECHO)
        .expect("a real handler publishes after warm-up");
    let out = sandbox
        .call_blocking(
            &handler,
            &json!({"a": 1}),
            &Grants::none(),
            Arc::new(NoCapabilities),
        )
        .expect("call");
    assert_eq!(out.output, json!({"echoed": {"a": 1}}));
}
