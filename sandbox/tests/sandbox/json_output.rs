//! How a handler's result and its capability arguments become JSON. The guest writes plain data
//! itself and hands anything else to `JSON.stringify` (sandbox/guest/src/json.rs); either way the
//! host must see the JSON value `JSON.stringify` describes, and no handler code may run twice.

use std::sync::{Arc, OnceLock};

use parley_sandbox::{CapabilityHost, Grants, Handler, Sandbox, SandboxConfig, SandboxError};
use serde_json::{Value, json};

const HANDLER: &str = r#"
function sample(name) {
  switch (name) {
    case "plain":
      return {
        s: "plain", n: 1, f: 29.99, neg: -5.5, sum: 0.1 + 0.2, int32: 2 ** 31, exact: 2 ** 53,
        huge: 2 ** 64, tiny: 1e-7, e21: 1e21, minusZero: -0, nan: NaN, inf: -Infinity,
        t: true, f0: false, nil: null,
        arr: [1, "two", [3], { four: 4 }, [], {}],
        nested: { a: { b: { c: [null] } } },
      };
    case "strings":
      return ["\"\\\n\r\t\b\f\u0001\u001f\u007f", "\u2028\u2029/</script>", "é漢字😀", ""];
    case "skipped":
      return {
        u: undefined, fn() {}, arrow: () => 1, sym: Symbol("s"), kept: 1,
        arr: [undefined, function () {}, Symbol("t")],
      };
    case "keys": {
      const o = { b: 1, 2: "two", a: 1, 1: "one" };
      o['with "quote"'] = 1;
      o[Symbol("x")] = 2;
      Object.defineProperty(o, "hidden", { value: 1, enumerable: false });
      return o;
    }
    case "array_extras": {
      const a = [1, 2];
      a.extra = 3;
      return a;
    }
    case "deep": {
      // Deeper than the guest's writer goes, within the host's parser's limit (128).
      let v = "leaf";
      for (let i = 0; i < 100; i++) v = { v };
      return v;
    }
    case "not_plain":
      return [
        new Date(0), new Number(5), new String("s"), new Boolean(false),
        Object.assign(Object.create(null), { bare: 1 }),
        new (class Point { constructor() { this.x = 1; } })(),
        new Proxy({ p: 1 }, {}), new Map([[1, 2]]), /re/g, new Error("e"), [1, , 3],
        { toJSON() { return "custom"; } },
      ];
  }
  throw new Error("unknown sample " + name);
}

function handle(request) {
  let n = 0;
  switch (request.case) {
    case "compare": {
      const value = sample(request.sample);
      return [value, JSON.stringify(value)];
    }
    case "getter_once":
      return { a: 1, get b() { n += 1; return n; }, nested: { get c() { n += 1; return n; } } };
    case "proto_to_json":
      Object.prototype.toJSON = function () { return "from the prototype"; };
      return { a: 1 };
    case "array_proto_hole":
      Array.prototype[1] = "from the prototype";
      return [1, , 3];
    case "cycle": {
      const o = { a: [] };
      o.a.push(o);
      return o;
    }
    case "bigint":
      return { a: 1n };
    case "lone_surrogate":
      return { s: "\ud800" };
    case "args":
      return host.call("echo", request.args === "getter"
        ? { get g() { n += 1; return n; }, h: n }
        : request.args === "date" ? { d: new Date(0) }
        : request.args === "none" ? undefined
        : request.args === "function" ? () => 1
        : { a: [1, "x", null, 2.5], u: undefined, nested: { s: "é😀" } });
    case "late_call": {
      // The handler's promise settles (its result is serialised) before a job it queued calls a
      // capability (whose arguments are serialised too).
      const settled = Promise.resolve({ settled: 1 });
      settled.then(() => {}).then(() => host.call("echo", { late: true }));
      return settled;
    }
    case "too_deep": {
      // Deeper than the host's parser takes (128 levels): as a result, and as capability arguments,
      // which fail that capability call (the handler can catch it) rather than the whole call.
      let v = "leaf";
      for (let i = 0; i < 200; i++) v = { v };
      if (request.as === "result") return v;
      try {
        host.call("echo", v);
        return "the call went through";
      } catch (error) {
        return { caught: error.name, message: error.message };
      }
    }
    case "reply": {
      const reply = host.call("echo", { x: { y: [1, "é😀", null, true] } });
      return {
        reply,
        types: reply.x.y.map((v) => v === null ? "null" : typeof v),
        isArray: Array.isArray(reply.x.y),
      };
    }
  }
  throw new Error("unknown case " + request.case);
}
"#;

fn shared() -> &'static (Sandbox, Handler) {
    static SHARED: OnceLock<(Sandbox, Handler)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let sandbox = Sandbox::new(SandboxConfig {
            pool_instances: 8,
            ..SandboxConfig::default()
        })
        .expect("the test config is valid");
        let handler = sandbox.publish(HANDLER).expect("the handler publishes");
        (sandbox, handler)
    })
}

fn run(request: Value) -> Result<Value, SandboxError> {
    let (sandbox, handler) = shared();
    let host: Arc<dyn CapabilityHost> =
        Arc::new(|_: &str, args: Value| -> Result<Value, String> { Ok(args) });
    let grants: Grants = ["echo"].into_iter().collect();
    sandbox
        .call_blocking(handler, &request, &grants, host)
        .map(|out| out.output)
}

fn ok(request: Value) -> Value {
    run(request.clone()).unwrap_or_else(|e| panic!("{request}: {e}"))
}

/// The handler's value as the host received it, against the value of `JSON.stringify`'s text for
/// it, computed in the same call.
fn compare(sample: &str) -> Value {
    let pair = ok(json!({ "case": "compare", "sample": sample }));
    let text = pair[1].as_str().expect("JSON.stringify's text");
    let expected: Value = serde_json::from_str(text).expect("JSON.stringify's text parses");
    assert_eq!(pair[0], expected, "sample {sample}");
    // Key order too: the host keeps it.
    assert_eq!(
        serde_json::to_string(&pair[0]).expect("serialises"),
        serde_json::to_string(&expected).expect("serialises"),
        "sample {sample}"
    );
    pair[0].clone()
}

#[test]
fn plain_values_come_out_as_json_stringify_describes_them() {
    let plain = compare("plain");
    assert_eq!(plain["f"], json!(29.99));
    assert_eq!(plain["exact"], json!(9_007_199_254_740_992_u64));
    assert_eq!(plain["int32"], json!(2_147_483_648_u64));
    assert_eq!(plain["minusZero"], json!(0));
    assert_eq!(plain["nan"], Value::Null);
    assert_eq!(plain["e21"], json!(1e21));

    let strings = compare("strings");
    assert_eq!(strings[0], json!("\"\\\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}"));
    assert_eq!(strings[2], json!("é漢字😀"));

    assert_eq!(
        compare("skipped"),
        json!({ "kept": 1, "arr": [null, null, null] })
    );
    let keys = compare("keys");
    let order: Vec<&String> = keys.as_object().expect("an object").keys().collect();
    assert_eq!(order, ["1", "2", "b", "a", "with \"quote\""]);
    assert_eq!(compare("array_extras"), json!([1, 2]));
    let mut deep = &compare("deep");
    for _ in 0..100 {
        deep = &deep["v"];
    }
    assert_eq!(deep, "leaf");
}

#[test]
fn anything_else_is_json_stringify_s_business() {
    let values = compare("not_plain");
    assert_eq!(
        values,
        json!([
            "1970-01-01T00:00:00.000Z", 5, "s", false, { "bare": 1 }, { "x": 1 }, { "p": 1 },
            {}, {}, {}, [1, null, 3], "custom"
        ])
    );
    assert_eq!(
        ok(json!({ "case": "proto_to_json" })),
        json!("from the prototype")
    );
    assert_eq!(
        ok(json!({ "case": "array_proto_hole" })),
        json!([1, "from the prototype", 3])
    );
}

#[test]
fn getters_run_once() {
    assert_eq!(
        ok(json!({ "case": "getter_once" })),
        json!({ "a": 1, "b": 1, "nested": { "c": 2 } })
    );
    assert_eq!(
        ok(json!({ "case": "args", "args": "getter" })),
        json!({ "g": 1, "h": 0 })
    );
}

#[test]
fn a_settled_result_survives_capability_calls_made_after_it() {
    assert_eq!(ok(json!({ "case": "late_call" })), json!({ "settled": 1 }));
}

#[test]
fn results_json_cannot_describe_fail_as_before() {
    for case in ["cycle", "bigint", "lone_surrogate"] {
        let error = run(json!({ "case": case })).expect_err(case);
        assert_eq!(error.code(), "invalid_output", "{case}: {error}");
    }
}

#[test]
fn json_nested_deeper_than_the_host_parses_is_the_handler_s_error() {
    let error = run(json!({ "case": "too_deep", "as": "result" })).expect_err("too deep");
    assert_eq!(error.code(), "invalid_output", "{error}");
    assert!(
        error.to_string().contains("nested deeper than 128 levels"),
        "{error}"
    );
    let caught = ok(json!({ "case": "too_deep", "as": "args" }));
    assert_eq!(caught["caught"], "CapabilityError", "{caught}");
    let message = caught["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("echo")
            && message.contains("the arguments are nested deeper than 128 levels"),
        "{caught}"
    );
}

#[test]
fn capability_arguments_and_replies_cross_as_json_values() {
    assert_eq!(
        ok(json!({ "case": "args" })),
        json!({ "a": [1, "x", null, 2.5], "nested": { "s": "é😀" } })
    );
    assert_eq!(
        ok(json!({ "case": "args", "args": "date" })),
        json!({ "d": "1970-01-01T00:00:00.000Z" })
    );
    assert_eq!(ok(json!({ "case": "args", "args": "none" })), Value::Null);
    let error = run(json!({ "case": "args", "args": "function" })).expect_err("a function");
    assert_eq!(error.code(), "handler_threw", "{error}");
    assert!(
        error.to_string().contains("not JSON-serialisable"),
        "{error}"
    );
    assert_eq!(
        ok(json!({ "case": "reply" })),
        json!({
            "reply": { "x": { "y": [1, "é😀", null, true] } },
            "types": ["number", "string", "null", "boolean"],
            "isArray": true
        })
    );
}
