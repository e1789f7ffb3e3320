//! The mapping runtime: a built-in reasoner's mapping, published as a handler of
//! `Dialect::Mapping`, answers under the same limits, grants and error model as JavaScript.
//! (That it answers exactly as the JavaScript generated from the same mapping is checked in
//! `services/parley/tests/agent/mapping_equivalence.rs`, which has both.)

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use parley_sandbox::{
    CapabilityFuture, CapabilityHost, Dialect, Grants, Handler, Sandbox, SandboxConfig,
};
use serde_json::{Value, json};

/// A product lookup: `getProductInfo(productId)`, answering with the product or a status.
fn product_mapping() -> Value {
    json!({
        "capability": "getProductInfo",
        "checks": [
            { "field": "messageId", "types": ["string"], "required": true },
            { "field": "productId", "types": ["integer"], "required": true }
        ],
        "arguments": [{ "input": "productId", "request": "productId" }],
        "response": [
            { "field": "messageId", "source": { "kind": "echo", "field": "messageId" },
              "required": true, "nullable": false },
            { "field": "code", "source": { "kind": "status", "shape": { "kind": "integer" } },
              "required": true, "nullable": false },
            { "field": "name", "source": { "kind": "outputField", "field": "name" },
              "required": false, "nullable": true },
            { "field": "error", "source": { "kind": "errorMessage" },
              "required": false, "nullable": false }
        ],
        "codes": { "ok": 200, "badRequest": 400, "notFound": 404, "internal": 500 },
        "entity": "Product",
        "outputNullable": true
    })
}

fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            deadline_ms: 300,
            pool_instances: 4,
            ..SandboxConfig::default()
        })
        .expect("valid config")
    })
}

fn grants() -> Grants {
    ["getProductInfo"].into_iter().map(str::to_owned).collect()
}

/// Answers from a table, recording every call.
#[derive(Debug, Default)]
struct Catalogue {
    calls: Mutex<Vec<(String, Value)>>,
}

impl CapabilityHost for Catalogue {
    fn call(&self, capability: &str, args: Value) -> CapabilityFuture {
        self.calls
            .lock()
            .expect("calls lock")
            .push((capability.to_owned(), args.clone()));
        let answer = match args["productId"].as_i64() {
            Some(1) => Ok(json!({ "name": "Kettle", "price": 25.0 })),
            Some(2) => Ok(Value::Null),
            Some(3) => Err("database unavailable".to_owned()),
            _ => Err("no such product: Not Found".to_owned()),
        };
        Box::pin(std::future::ready(answer))
    }
}

#[test]
fn a_mapping_answers_through_its_capability() {
    let handler = sandbox()
        .publish_as(Dialect::Mapping, &product_mapping().to_string())
        .expect("a valid mapping publishes");
    assert_eq!(handler.dialect(), Dialect::Mapping);
    let host = Arc::new(Catalogue::default());
    let call = |request: Value| {
        sandbox()
            .call_blocking(&handler, &request, &grants(), host.clone())
            .expect("the call succeeds")
            .output
    };

    assert_eq!(
        call(json!({ "messageId": "m1", "productId": 1 })),
        json!({ "messageId": "m1", "code": 200, "name": "Kettle" })
    );
    assert_eq!(
        host.calls.lock().expect("calls lock").as_slice(),
        [("getProductInfo".to_owned(), json!({ "productId": 1 }))],
        "exactly the mapped arguments, nothing else from the request"
    );
    // A null result and a "not found" failure are both 404; other failures are 500.
    for id in [2, 9] {
        assert_eq!(
            call(json!({ "messageId": "m", "productId": id })),
            json!({ "messageId": "m", "code": 404, "name": null, "error": "Product not found" })
        );
    }
    assert_eq!(
        call(json!({ "messageId": "m", "productId": 3 })),
        json!({ "messageId": "m", "code": 500, "name": null,
                "error": "capability getProductInfo failed: database unavailable" })
    );
    // Bad requests never reach the capability.
    let before = host.calls.lock().expect("calls lock").len();
    assert_eq!(
        call(json!({ "messageId": "m", "productId": "1" })),
        json!({ "messageId": "m", "code": 400, "name": null,
                "error": "field productId must be of type integer" })
    );
    assert_eq!(
        call(json!([1])),
        json!({ "messageId": "", "code": 400, "name": null,
                "error": "the request must be a JSON object" })
    );
    assert_eq!(host.calls.lock().expect("calls lock").len(), before);
}

#[test]
fn a_source_that_is_not_a_mapping_is_an_invalid_handler() {
    for source in [
        "function handle(r) { return r; }",
        "{}",
        r#"{"capability": 1}"#,
    ] {
        let error = sandbox()
            .publish_as(Dialect::Mapping, source)
            .expect_err("not a mapping");
        assert_eq!(error.code(), "invalid_handler", "{source}: {error}");
        assert!(error.to_string().contains("mapping"), "{error}");
    }
}

#[test]
fn a_mapping_gets_only_its_grants() {
    let handler = sandbox()
        .publish_as(Dialect::Mapping, &product_mapping().to_string())
        .expect("publish");
    let error = sandbox()
        .call_blocking(
            &handler,
            &json!({ "messageId": "m", "productId": 1 }),
            &Grants::none(),
            Arc::new(Catalogue::default()),
        )
        .expect_err("the capability is not granted");
    assert_eq!(error.code(), "capability_refused", "{error}");
}

/// A sandbox of its own with `config`, and the product mapping published in it.
fn own_sandbox(config: SandboxConfig) -> (Sandbox, Handler) {
    let sandbox = Sandbox::new(config).expect("valid config");
    let handler = sandbox
        .publish_as(Dialect::Mapping, &product_mapping().to_string())
        .expect("a valid mapping publishes");
    (sandbox, handler)
}

#[test]
fn a_mapping_call_keeps_the_input_limit() {
    let (sandbox, handler) = own_sandbox(SandboxConfig {
        input_bytes: 64,
        ..SandboxConfig::default()
    });
    let error = sandbox
        .call_blocking(
            &handler,
            &json!({ "messageId": "x".repeat(100), "productId": 1 }),
            &grants(),
            Arc::new(Catalogue::default()),
        )
        .expect_err("over the input limit");
    assert_eq!(error.code(), "input_too_large", "{error}");
}

/// A capability whose product name is `len` bytes long.
#[derive(Debug)]
struct LongName(usize);

impl CapabilityHost for LongName {
    fn call(&self, _: &str, _: Value) -> CapabilityFuture {
        Box::pin(std::future::ready(Ok(
            json!({ "name": "n".repeat(self.0) }),
        )))
    }
}

/// The runtime's allocator never frees within a call, so a call that needs more than the memory the
/// handler's image keeps free grows memory, up to the limit; past it, the call runs out of memory,
/// and the next call starts again from the image.
#[test]
fn a_mapping_call_grows_memory_up_to_the_limit_and_the_next_starts_afresh() {
    let (sandbox, handler) = own_sandbox(SandboxConfig {
        memory_bytes: 8 * 1024 * 1024,
        input_bytes: 8 * 1024 * 1024,
        host_call_result_bytes: 8 * 1024 * 1024,
        ..SandboxConfig::default()
    });
    let request = json!({ "messageId": "m", "productId": 1 });
    let call = |len| sandbox.call_blocking(&handler, &request, &grants(), Arc::new(LongName(len)));
    // About 1.5 MB: the reply, its parsed form and the answer written out each hold the name, far
    // more than the image keeps free.
    let name_len = 500_000;
    for _ in 0..3 {
        let answer = call(name_len).expect("fits in the memory limit");
        assert_eq!(answer.output["name"].as_str().map(str::len), Some(name_len));
        assert_eq!(answer.output["code"], 200);
    }
    let error = call(3_000_000).expect_err("three copies of 3 MB do not fit in 8 MiB");
    assert_eq!(error.code(), "out_of_memory", "{error}");
    let answer = call(name_len).expect("a fresh instance after running out");
    assert_eq!(answer.output["name"].as_str().map(str::len), Some(name_len));
}

/// A capability that takes its time.
#[derive(Debug)]
struct Slow(Duration);

impl CapabilityHost for Slow {
    fn call(&self, _: &str, _: Value) -> CapabilityFuture {
        let hold = self.0;
        Box::pin(async move {
            tokio::time::sleep(hold).await;
            Ok(json!({ "name": "late" }))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapping_s_capability_is_cancelled_at_the_deadline() {
    let handler = sandbox()
        .publish_as(Dialect::Mapping, &product_mapping().to_string())
        .expect("publish");
    let started = Instant::now();
    let error = sandbox()
        .call(
            &handler,
            &json!({ "messageId": "m", "productId": 1 }),
            &grants(),
            Arc::new(Slow(Duration::from_secs(5))),
        )
        .await
        .expect_err("past the deadline");
    assert_eq!(error.code(), "timeout", "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let out = sandbox()
        .call(
            &handler,
            &json!({ "messageId": "m", "productId": 1 }),
            &grants(),
            Arc::new(Slow(Duration::from_millis(10))),
        )
        .await
        .expect("in time");
    assert_eq!(out.output["name"], "late");
}

/// `perf_map` names the compiled guest functions for `perf`: the runtime's exports are in
/// `/tmp/perf-<pid>.map` once a sandbox with it has published and called a handler. (Other
/// tests of this binary share the pid but not the setting, so only this sandbox writes there.)
#[test]
fn perf_map_names_the_guest_functions_for_perf() {
    let path = std::path::PathBuf::from(format!("/tmp/perf-{}.map", std::process::id()));
    let named = || {
        std::fs::read_to_string(&path)
            .is_ok_and(|map| map.lines().any(|line| line.ends_with(" parley_run")))
    };
    assert!(!named(), "nothing wrote {} before", path.display());
    let (sandbox, handler) = own_sandbox(SandboxConfig {
        perf_map: true,
        pool_instances: 2,
        warm_up: false,
        ..SandboxConfig::default()
    });
    let answer = sandbox
        .call_blocking(
            &handler,
            &json!({ "messageId": "m1", "productId": 1 }),
            &grants(),
            Arc::new(Catalogue::default()),
        )
        .expect("the call succeeds");
    assert_eq!(answer.output["name"], "Kettle");
    let written = named();
    let _ = std::fs::remove_file(&path);
    assert!(
        written,
        "the runtime's entry point is named in {}",
        path.display()
    );
}
