//! Publishing: source validation, top-level code limits, handler images and their isolation, the
//! runtime code's compile-once and artifact cache, fuel and `run_once`.

use std::sync::{Arc, OnceLock};

use parley_sandbox::{Grants, NoCapabilities, Sandbox, SandboxConfig, SandboxError, run_once};
use serde_json::json;

const ECHO: &str = "function handle(request) { return { echoed: request }; }";

fn config() -> SandboxConfig {
    SandboxConfig {
        // Long enough for a publish on a loaded two-core machine, short for the endless loop below.
        publish_deadline_ms: 1_000,
        pool_instances: 4,
        ..SandboxConfig::default()
    }
}

/// The runtime's code is compiled once per sandbox; these tests share one.
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
    assert!(
        !handler.from_cache(),
        "the first publish compiles the runtime"
    );
    assert_eq!(handler.hash().len(), 64);
    // Handlers are memory images, not code: the only artifact on disk is the runtime's code.
    let other = first
        .publish("function handle(request) { return 2; }")
        .expect("publishes");
    assert!(other.from_cache());
    let artifacts = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .expect("readable")
            .filter(|entry| {
                entry
                    .as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|ext| ext == "cwasm"))
            })
            .count()
    };
    assert_eq!(artifacts(dir.path()), 1);
    drop(first);

    // A "restart": a new sandbox over the same directory loads the runtime's compiled code instead of
    // compiling it.
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

    // Tamper with the artifact: the MAC no longer verifies, so it is discarded and the runtime
    // recompiled.
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
    assert_eq!(artifacts(dir.path()), 1, "the recompiled code replaced it");
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
    sandbox.warm_up().expect("the runtime compiles");
    sandbox
        .warm_up()
        .expect("and a second warm-up does nothing");
    let handler = sandbox
        .publish(ECHO)
        .expect("a real handler publishes after warm-up");
    assert!(handler.from_cache(), "warm-up compiled the runtime already");
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

fn plain_call(
    sandbox: &Sandbox,
    handler: &parley_sandbox::Handler,
    input: serde_json::Value,
) -> serde_json::Value {
    sandbox
        .call_blocking(handler, &input, &Grants::none(), Arc::new(NoCapabilities))
        .expect("the call succeeds")
        .output
}

/// A handler with its own top-level state: a counter, a constant and a global.
fn stateful(name: &str, start: u32) -> String {
    format!(
        r#"let counter = {start};
        const NAME = "{name}";
        globalThis.owner = NAME;
        function handle(request) {{
          counter += 1;
          if (request.set) globalThis.owner = request.set;
          return {{ name: NAME, counter, owner: globalThis.owner }};
        }}"#
    )
}

#[test]
fn handlers_of_one_sandbox_keep_their_own_state_call_after_call() {
    let sandbox = Sandbox::new(config()).expect("valid config");
    let a = sandbox.publish(&stateful("a", 10)).expect("a publishes");
    let b = sandbox.publish(&stateful("b", 100)).expect("b publishes");
    assert_ne!(a.hash(), b.hash());
    for _ in 0..3 {
        // Every call starts from its own handler's top-level state, and what it changes is gone
        // for the next call, of either handler.
        assert_eq!(
            plain_call(&sandbox, &a, json!({ "set": "mallory" })),
            json!({ "name": "a", "counter": 11, "owner": "mallory" })
        );
        assert_eq!(
            plain_call(&sandbox, &b, json!({})),
            json!({ "name": "b", "counter": 101, "owner": "b" })
        );
        assert_eq!(
            plain_call(&sandbox, &a, json!({})),
            json!({ "name": "a", "counter": 11, "owner": "a" })
        );
        assert_eq!(
            plain_call(&sandbox, &b, json!({ "set": "eve" })),
            json!({ "name": "b", "counter": 101, "owner": "eve" })
        );
    }
    // Side by side, on two threads at once.
    std::thread::scope(|scope| {
        for (handler, name, counter) in [(&a, "a", 11), (&b, "b", 101)] {
            let sandbox = &sandbox;
            scope.spawn(move || {
                for _ in 0..50 {
                    assert_eq!(
                        plain_call(sandbox, handler, json!({})),
                        json!({ "name": name, "counter": counter, "owner": name })
                    );
                }
            });
        }
    });
}

#[test]
fn only_one_publish_per_sandbox_compiles_even_when_they_race() {
    // Three racers share the two publish slots, and the third waits for one up to the publish
    // deadline: on a two-core machine busy with this binary's other tests, the first two can
    // hold them for longer than `config()`'s second (a CI run failed once with `overloaded`).
    let sandbox = Sandbox::new(SandboxConfig {
        publish_deadline_ms: 30_000,
        ..config()
    })
    .expect("valid config");
    let handlers: Vec<_> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..3)
            .map(|n| {
                let sandbox = &sandbox;
                scope.spawn(move || sandbox.publish(&stateful(&format!("racer{n}"), n)))
            })
            .collect();
        racers
            .into_iter()
            .map(|racer| racer.join().expect("thread").expect("publishes"))
            .collect()
    });
    assert_eq!(
        handlers.iter().filter(|h| !h.from_cache()).count(),
        1,
        "exactly one of the racing publishes compiled the runtime"
    );
    let later = sandbox.publish(ECHO).expect("publishes");
    assert!(later.from_cache(), "a later handler compiles nothing");
    for (n, handler) in handlers.iter().enumerate() {
        assert_eq!(plain_call(&sandbox, handler, json!({}))["counter"], n + 1);
    }
}

#[test]
fn top_level_code_may_grow_the_memory() {
    let sandbox = Sandbox::new(SandboxConfig {
        publish_deadline_ms: 5_000,
        ..config()
    })
    .expect("valid config");
    // 8 MiB of dense data kept in a global, plus a big array: the image's memory is far larger
    // than the runtime's own.
    let dense = sandbox
        .publish(
            r#"const BIG = new Uint8Array(8 << 20).fill(1);
               for (let i = 0; i < BIG.length; i += 4099) BIG[i] = i % 251;
               const LIST = Array.from({ length: 100000 }, (_, i) => i * 2);
               function handle(request) {
                 const seen = { length: BIG.length, at: BIG[request.at], list: LIST.length,
                   last: LIST[LIST.length - 1] };
                 BIG.fill(0);
                 LIST.length = 0;
                 return seen;
               }"#,
        )
        .expect("a handler with a big top-level state publishes");
    // Sparse: 24 MiB, one byte in every 64 KiB.
    let sparse = sandbox
        .publish(
            r#"const SPARSE = new Uint8Array(24 << 20);
               for (let i = 0; i < SPARSE.length; i += 65536) SPARSE[i] = 1 + (i >> 16) % 200;
               function handle(request) {
                 let sum = 0;
                 for (let i = 0; i < SPARSE.length; i += 65536) sum += SPARSE[i];
                 SPARSE.fill(9);
                 return { sum };
               }"#,
        )
        .expect("a handler with a sparse top-level state publishes");
    let expected_sum: u64 = (0..384u64).map(|page| 1 + page % 200).sum();
    for _ in 0..3 {
        assert_eq!(
            plain_call(&sandbox, &dense, json!({ "at": 4099 * 7 })),
            json!({ "length": 8 << 20, "at": (4099 * 7) % 251, "list": 100000, "last": 199998 })
        );
        assert_eq!(
            plain_call(&sandbox, &sparse, json!({})),
            json!({ "sum": expected_sum })
        );
    }
}
