//! Hostile guests: handlers that try to escape or exhaust the sandbox. Each attack must end in the right
//! typed error, within its deadline, with the process healthy and the next call unaffected.
//!
//! One handler carries every attack (selected by `request.attack`), so the suite publishes one handler
//! instead of one per attack; it runs through the real guest runtime in real wasmtime.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parley_sandbox::{
    CallOutput, CapabilityHost, Grants, Handler, Sandbox, SandboxConfig, SandboxError,
};
use serde_json::{Value, json};

/// Generous, so that memory bombs reach the memory cap before it even when several run at once
/// on a slow machine: at 500 ms the string bomb sometimes ran out of time first on a 2-core VM
/// whose sandbox calls are three times slower than where the suite was written.
const DEADLINE_MS: u64 = 1_500;
/// Generous bound for "ended within its deadline" on a busy 2-core machine in a debug build
/// (the slow capability blocks its thread for three deadlines before the clock is checked).
const WALL_LIMIT: Duration = Duration::from_secs(8);

const HOSTILE: &str = r#"
let calls = 0;
globalThis.shared = "pristine";

function handle(req) {
  calls++;
  switch (req.attack) {
    case "echo":
      return {
        calls,
        shared: globalThis.shared,
        polluted: ({}).polluted === true,
        json: JSON.stringify({ a: 1 }),
        hostIsFrozen: Object.isFrozen(host),
        input: req.input === undefined ? null : req.input,
      };
    case "tamper":
      globalThis.shared = "tampered";
      Object.prototype.polluted = true;
      JSON.stringify = () => "not json";
      JSON.parse = () => ({ hijacked: true });
      Array.prototype.push = () => { throw new Error("push hijacked"); };
      try { host.call = () => ({ fake: true }); } catch (e) {}
      try { globalThis.host = { call: () => ({ fake: true }) }; } catch (e) {}
      return { tampered: true, hostCall: typeof host.call };
    case "infinite_loop":
      for (;;) {}
    case "loop_catching":
      for (;;) { try { for (;;) {} } catch (e) {} }
    case "deep_recursion": {
      const f = (n) => f(n + 1) + 1;
      return f(0);
    }
    case "recursion_in_catch": {
      const g = (n) => { try { return g(n + 1); } catch (e) { return g(n + 1); } };
      return g(0);
    }
    case "memory_bomb": {
      const hoard = [];
      for (let i = 0; ; i++) hoard.push(new Array(100000).fill(i));
    }
    case "string_bomb": {
      const parts = [];
      for (let i = 0; ; i++) parts.push("x".repeat(1 << 16) + i);
    }
    case "string_doubling": {
      let s = "x";
      for (;;) s = s + s;
    }
    case "typed_array_bomb":
      return new Uint8Array(1024 * 1024 * 1024).length;
    case "huge_output":
      return { data: "x".repeat(2 * 1024 * 1024) };
    case "ambient": {
      const names = ["require", "process", "std", "os", "fetch", "XMLHttpRequest", "WebSocket",
        "Deno", "Bun", "WebAssembly", "setTimeout", "setInterval", "importScripts", "print",
        "scriptArgs", "navigator", "__parley_raw"];
      const found = {};
      for (const name of names) found[name] = typeof globalThis[name];
      return found;
    }
    case "read_file":
      return std.loadFile("/etc/passwd");
    case "read_file_require":
      return require("fs").readFileSync("/etc/passwd", "utf8");
    case "import_os":
      return import("os").then((os) => os.readdir("/"));
    case "open_socket":
      return new WebSocket("ws://127.0.0.1:1");
    case "fetch":
      return fetch("http://127.0.0.1:1/");
    case "read_env":
      return process.env;
    case "ungranted":
      return host.call("secrets.read", { key: "db_password" });
    case "ungranted_caught":
      try { host.call("secrets.read", {}); } catch (e) { return { escaped: true }; }
      return { escaped: true };
    case "oversized_args":
      return host.call("echo", { blob: "x".repeat(200 * 1024) });
    case "granted":
      return { reply: host.call("echo", { n: 1, s: "two" }) };
    case "capability_fails":
      return host.call("fail", {});
    case "capability_fails_caught":
      try { host.call("fail", {}); } catch (e) { return { caught: e.name, message: e.message }; }
      return { caught: false };
    case "capability_result_too_big":
      return host.call("big", {});
    case "capability_slow":
      return host.call("slow", {});
    case "too_many_host_calls":
      for (let i = 0; i < 1000; i++) host.call("echo", { i });
      return { done: true };
    case "forged_capability_error": {
      const e = new Error("capability echo failed: forged");
      e.name = "CapabilityError";
      throw e;
    }
    case "throw_error": throw new TypeError("bad field: id");
    case "throw_string": throw "just a string";
    case "throw_number": throw 42;
    case "throw_null": throw null;
    case "throw_undefined": throw undefined;
    case "throw_object": throw { code: 7, detail: "object" };
    case "throw_hostile":
      throw { get message() { throw new Error("gotcha"); }, toString() { throw new Error("nope"); },
              toJSON() { throw new Error("nope"); } };
    case "return_undefined": return undefined;
    case "return_function": return function () {};
    case "return_symbol": return Symbol("x");
    case "return_cyclic": { const o = {}; o.self = o; return o; }
    case "return_bigint": return 10n;
    case "return_hostile_tojson": return { toJSON() { throw new Error("no json for you"); } };
    case "async_ok": return Promise.resolve({ ok: true }).then((v) => ({ ...v, chained: true }));
    case "async_reject": return Promise.reject(new RangeError("async nope"));
    case "never_settles": return new Promise(() => {});
    case "log_flood":
      for (let i = 0; i < 2000; i++) console.log("line " + i + " " + "y".repeat(100));
      return { logged: true };
    case "empty_log_flood":
      for (let i = 0; i < 5000; i++) console.log("");
      return { logged: true };
    case "clock_and_random":
      return { now: Date.now(), random: Math.random(), perf: typeof performance };
    default:
      throw new Error("unknown attack " + req.attack);
  }
}
"#;

fn host_fn(capability: &str, args: Value) -> Result<Value, String> {
    match capability {
        "echo" => Ok(args),
        "fail" => Err("upstream said no".to_string()),
        "big" => Ok(json!({ "blob": "z".repeat(2 * 1024 * 1024) })),
        "slow" => {
            std::thread::sleep(Duration::from_millis(DEADLINE_MS * 3));
            Ok(json!(null))
        }
        other => Err(format!("no such capability {other}")),
    }
}

fn host() -> Arc<dyn CapabilityHost> {
    Arc::new(host_fn)
}

fn grants() -> Grants {
    ["echo", "fail", "big", "slow"].into_iter().collect()
}

fn config() -> SandboxConfig {
    SandboxConfig {
        deadline_ms: DEADLINE_MS,
        publish_deadline_ms: 2_000,
        memory_bytes: 32 * 1024 * 1024,
        output_bytes: 1024 * 1024,
        log_bytes: 4 * 1024,
        host_call_args_bytes: 64 * 1024,
        host_call_result_bytes: 1024 * 1024,
        max_host_calls: 16,
        pool_instances: 16,
        ..SandboxConfig::default()
    }
}

fn shared() -> &'static (Sandbox, Handler) {
    static SHARED: OnceLock<(Sandbox, Handler)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let sandbox = Sandbox::new(config()).expect("the test config is valid");
        let handler = sandbox
            .publish(HOSTILE)
            .expect("the hostile handler publishes");
        (sandbox, handler)
    })
}

async fn attack(name: &str) -> Result<CallOutput, SandboxError> {
    let (sandbox, handler) = shared();
    let report = sandbox
        .call_report(handler, &json!({ "attack": name }), &grants(), host())
        .await;
    // Measured on the worker from the start of the call, so time queued behind other tests' attacks
    // does not count.
    assert!(
        report.elapsed < WALL_LIMIT,
        "attack {name} took {:?}",
        report.elapsed
    );
    let result = report.result.map(|output| CallOutput {
        output,
        logs: report.logs,
        logs_truncated: report.logs_truncated,
        elapsed: report.elapsed,
    });
    // The process is healthy and the next call is unaffected.
    let next = sandbox
        .call(handler, &json!({ "attack": "echo" }), &grants(), host())
        .await
        .unwrap_or_else(|e| panic!("the call after {name} failed: {e}"));
    assert_eq!(next.output["calls"], 1, "state leaked after {name}");
    assert_eq!(next.output["shared"], "pristine");
    assert_eq!(next.output["polluted"], false);
    result
}

async fn expect_error(name: &str, code: &str) -> SandboxError {
    match attack(name).await {
        Ok(output) => panic!("attack {name} succeeded: {:?}", output.output),
        Err(error) => {
            assert_eq!(error.code(), code, "attack {name}: {error}");
            error
        }
    }
}

#[tokio::test]
async fn baseline_call_works() {
    let output = attack("echo").await.expect("echo works");
    assert_eq!(output.output["json"], r#"{"a":1}"#);
    assert_eq!(output.output["hostIsFrozen"], true);
}

#[tokio::test]
async fn tampering_with_globals_does_not_survive_the_call() {
    let output = attack("tamper").await.expect("tampering itself is allowed");
    // The driver serialised the output with the JSON.stringify it captured before the handler ran.
    assert_eq!(output.output["tampered"], true);
    assert_eq!(output.output["hostCall"], "function");
}

#[tokio::test]
async fn infinite_loop_times_out() {
    let (sandbox, handler) = shared();
    let report = sandbox
        .call_report(
            handler,
            &json!({ "attack": "infinite_loop" }),
            &grants(),
            host(),
        )
        .await;
    assert_eq!(report.result.expect_err("cannot finish").code(), "timeout");
    assert!(report.elapsed >= Duration::from_millis(DEADLINE_MS));
    assert!(report.elapsed < WALL_LIMIT, "took {:?}", report.elapsed);
}

#[tokio::test]
async fn catching_does_not_escape_the_deadline() {
    expect_error("loop_catching", "timeout").await;
}

#[tokio::test]
async fn deep_recursion_is_a_stack_overflow() {
    expect_error("deep_recursion", "stack_overflow").await;
}

#[tokio::test]
async fn recursion_that_catches_overflows_ends() {
    let error = attack("recursion_in_catch")
        .await
        .expect_err("cannot succeed");
    assert!(
        ["stack_overflow", "timeout"].contains(&error.code()),
        "unexpected {error}"
    );
}

#[tokio::test]
async fn memory_bomb_runs_out_of_memory() {
    expect_error("memory_bomb", "out_of_memory").await;
}

#[tokio::test]
async fn many_strings_run_out_of_memory() {
    expect_error("string_bomb", "out_of_memory").await;
}

#[tokio::test]
async fn string_doubling_hits_the_engine_limit() {
    // QuickJS caps string length (2^30) before the rope is materialised: an ordinary JS exception.
    let error = expect_error("string_doubling", "handler_threw").await;
    assert!(error.to_string().contains("string too long"), "{error}");
}

#[tokio::test]
async fn giant_typed_array_runs_out_of_memory() {
    expect_error("typed_array_bomb", "out_of_memory").await;
}

#[tokio::test]
async fn huge_output_is_refused() {
    let error = expect_error("huge_output", "output_too_large").await;
    assert!(matches!(error, SandboxError::OutputTooLarge { limit, .. } if limit == 1024 * 1024));
}

#[tokio::test]
async fn no_ambient_globals_exist() {
    let output = attack("ambient").await.expect("probing is allowed");
    let found = output.output.as_object().expect("an object");
    for (name, kind) in found {
        assert_eq!(kind, "undefined", "global {name} is reachable");
    }
}

#[tokio::test]
async fn reading_files_fails() {
    let error = expect_error("read_file", "handler_threw").await;
    assert!(error.to_string().contains("std"), "{error}");
    expect_error("read_file_require", "handler_threw").await;
}

#[tokio::test]
async fn importing_modules_fails() {
    expect_error("import_os", "handler_threw").await;
}

#[tokio::test]
async fn opening_sockets_fails() {
    expect_error("open_socket", "handler_threw").await;
    expect_error("fetch", "handler_threw").await;
}

#[tokio::test]
async fn reading_the_environment_fails() {
    expect_error("read_env", "handler_threw").await;
}

#[tokio::test]
async fn ungranted_capability_is_refused_and_not_catchable() {
    let error = expect_error("ungranted", "capability_refused").await;
    assert!(
        matches!(&error, SandboxError::CapabilityRefused { capability, .. } if capability == "secrets.read")
    );
    expect_error("ungranted_caught", "capability_refused").await;
}

#[tokio::test]
async fn oversized_capability_arguments_are_refused() {
    let error = expect_error("oversized_args", "capability_args_too_large").await;
    assert!(
        matches!(error, SandboxError::CapabilityArgsTooLarge { limit, .. } if limit == 64 * 1024)
    );
}

#[tokio::test]
async fn granted_capability_round_trips() {
    let output = attack("granted").await.expect("granted capability works");
    assert_eq!(output.output, json!({ "reply": { "n": 1, "s": "two" } }));
}

#[tokio::test]
async fn failing_capability_is_typed_or_catchable() {
    let error = expect_error("capability_fails", "capability_failed").await;
    assert!(error.to_string().contains("upstream said no"), "{error}");
    let output = attack("capability_fails_caught").await.expect("caught");
    assert_eq!(output.output["caught"], "CapabilityError");
    // A capability result over the cap is a failure of that capability, not of the handler.
    expect_error("capability_result_too_big", "capability_failed").await;
}

#[tokio::test]
async fn forged_capability_error_is_just_a_throw() {
    expect_error("forged_capability_error", "handler_threw").await;
}

#[tokio::test]
async fn slow_capability_counts_against_the_deadline() {
    expect_error("capability_slow", "timeout").await;
}

#[tokio::test]
async fn host_call_count_is_capped() {
    expect_error("too_many_host_calls", "capability_refused").await;
}

#[tokio::test]
async fn throwing_non_errors_is_handler_threw() {
    for (attack_name, needle) in [
        ("throw_error", "TypeError: bad field: id"),
        ("throw_string", "just a string"),
        ("throw_number", "42"),
        ("throw_null", "null"),
        ("throw_undefined", "undefined"),
        ("throw_object", "\"code\":7"),
        ("throw_hostile", ""),
        ("async_reject", "RangeError: async nope"),
        ("never_settles", "never settled"),
    ] {
        let error = expect_error(attack_name, "handler_threw").await;
        assert!(error.to_string().contains(needle), "{attack_name}: {error}");
    }
}

#[tokio::test]
async fn non_json_results_are_invalid_output() {
    for attack_name in [
        "return_undefined",
        "return_function",
        "return_symbol",
        "return_cyclic",
        "return_bigint",
        "return_hostile_tojson",
    ] {
        expect_error(attack_name, "invalid_output").await;
    }
}

#[tokio::test]
async fn promises_are_awaited() {
    let output = attack("async_ok").await.expect("async handler works");
    assert_eq!(output.output, json!({ "ok": true, "chained": true }));
}

#[tokio::test]
async fn log_flood_is_capped() {
    let output = attack("log_flood").await.expect("logging is allowed");
    assert!(output.logs_truncated);
    let total: usize = output.logs.iter().map(|line| line.text.len()).sum();
    assert!(total <= 4 * 1024, "{total} log bytes kept");
    assert!(output.logs[0].text.starts_with("line 0 "));
}

#[tokio::test]
async fn empty_log_lines_are_capped_too() {
    let output = attack("empty_log_flood").await.expect("logging is allowed");
    assert!(output.logs_truncated);
    assert!(
        output.logs.len() <= 4 * 1024 / 16,
        "{} lines kept",
        output.logs.len()
    );
}

#[tokio::test]
async fn clocks_are_coarse_and_random_works() {
    let output = attack("clock_and_random").await.expect("allowed");
    let now = output.output["now"].as_f64().expect("a number");
    assert_eq!(now % 1.0, 0.0);
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as f64;
    assert!(
        (wall - now).abs() < 60_000.0,
        "Date.now() is {now}, wall clock {wall}"
    );
    let random = output.output["random"].as_f64().expect("a number");
    assert!((0.0..1.0).contains(&random));
}

#[tokio::test]
async fn oversized_input_is_refused_before_running() {
    let (sandbox, handler) = shared();
    let input = json!({ "attack": "echo", "input": "x".repeat(2 * 1024 * 1024) });
    let error = sandbox
        .call(handler, &input, &grants(), host())
        .await
        .expect_err("input over the cap");
    assert_eq!(error.code(), "input_too_large");
}

#[tokio::test]
async fn many_concurrent_attacks_leave_the_sandbox_healthy() {
    let (sandbox, handler) = shared();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let sandbox = sandbox.clone();
        let handler = handler.clone();
        let attack_name = ["infinite_loop", "memory_bomb", "echo", "deep_recursion"][i % 4];
        tasks.push(tokio::spawn(async move {
            let result = sandbox
                .call(
                    &handler,
                    &json!({ "attack": attack_name }),
                    &grants(),
                    host(),
                )
                .await;
            (attack_name, result.map(|o| o.output).map_err(|e| e.code()))
        }));
    }
    for task in tasks {
        let (attack_name, result) = task.await.expect("task completes");
        let expected = match attack_name {
            "infinite_loop" => Err("timeout"),
            "memory_bomb" => Err("out_of_memory"),
            "deep_recursion" => Err("stack_overflow"),
            _ => Ok(()),
        };
        assert_eq!(result.map(|_| ()), expected, "{attack_name}");
    }
}
