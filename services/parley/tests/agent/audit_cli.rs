//! `parley audit` against what a real server recorded: a negotiation (its start, its accepted
//! end, the handler's activation), capability calls made by the protocol's handler and by tool
//! calls (one of a capability that does not exist), each naming the peer's address; read back
//! through every filter, as text and as JSON, on SQLite and on PostgreSQL.

use std::process::Command;

use serde_json::{Value, json};

use crate::cli::{printed_hash, run, stop};
use crate::support::{BIN, examples, spawn_serve, utf8};

#[test]
fn audit_on_sqlite() {
    serve_negotiate_call_and_audit(None);
}

#[test]
fn audit_on_postgres() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (url, guard) = runtime.block_on(parley_store::testing::fresh_postgres_url());
    serve_negotiate_call_and_audit(Some(&url));
    runtime
        .block_on(guard.drop_database())
        .expect("test database dropped");
}

fn serve_negotiate_call_and_audit(database_url: Option<&str>) {
    let provider_dir = tempfile::tempdir().expect("tempdir");
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let local = utf8(requester_dir.path());
    let (provider, url) = spawn_serve(provider_dir.path(), |command| {
        command.env_remove("PARLEY_CONFIG");
        match database_url {
            Some(url) => command.env("PARLEY_DATABASE_URL", url),
            None => command.env_remove("PARLEY_DATABASE_URL"),
        };
    });
    let protocol = examples().join("protocols/product-info.md");
    let (ok, out, err) = run(&[
        "negotiate",
        &url,
        "--protocol",
        utf8(&protocol),
        "--data-dir",
        local,
    ]);
    assert!(ok && out.contains("status   agreed"), "{out}\n{err}");
    let hash = printed_hash(&out);
    let request = r#"{"messageId": "a1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#;
    let (ok, out, err) = run(&[
        "call",
        &url,
        "--protocol",
        &hash,
        "--data-dir",
        local,
        "--json",
        request,
    ]);
    assert!(
        ok && out.contains("High-performance Laptop"),
        "{out}\n{err}"
    );
    tool_call(&url, "getProductInfo", json!({"productId": "P12345"}));
    tool_call(&url, "launchRocket", json!({}));
    // A graceful stop writes the capability calls still buffered.
    stop(provider);

    let audit = |filters: &[&str]| {
        let mut args = vec!["audit", "--data-dir", utf8(provider_dir.path())];
        args.extend_from_slice(filters);
        let mut command = Command::new(BIN);
        command.args(&args).env_remove("PARLEY_CONFIG");
        match database_url {
            Some(url) => command.env("PARLEY_DATABASE_URL", url),
            None => command.env_remove("PARLEY_DATABASE_URL"),
        };
        let out = command.output().expect("parley audit runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        (out.status.success(), stdout, stderr)
    };
    let events = |filters: &[&str]| -> Vec<Value> {
        let mut args = filters.to_vec();
        args.push("--json");
        let (ok, out, err) = audit(&args);
        assert!(ok, "{out}\n{err}");
        serde_json::from_str::<Vec<Value>>(&out).expect("a JSON array")
    };

    let all = events(&[]);
    let has = |action: &str, subject: &str, outcome: &str| {
        all.iter()
            .any(|e| e["action"] == action && e["subject"] == subject && e["outcome"] == outcome)
    };
    assert!(has("handler.activate", &hash, "ok"), "{all:#?}");
    assert!(
        all.iter().any(|e| e["action"] == "negotiation.start"),
        "{all:#?}"
    );
    let ended = all.iter().find(|e| e["action"] == "negotiation.end");
    let ended = ended.expect("the negotiation's end");
    assert_eq!(ended["outcome"], "accepted");
    assert_eq!(ended["detail"]["protocol"], hash.as_str());
    assert!(
        has("capability.call", "launchRocket", "unknown_capability"),
        "{all:#?}"
    );
    let calls = events(&["--action", "capability.call", "--outcome", "ok"]);
    assert!(
        calls.len() >= 2 && calls.iter().all(|e| e["subject"] == "getProductInfo"),
        "the handler's call and the tool call: {calls:#?}"
    );
    assert!(calls.iter().all(|e| e["detail"]["duration_us"].is_u64()));
    // Every event names the peer by its address; none by an id, as no credential named one.
    assert!(
        all.iter()
            .all(|e| e["address"] == "127.0.0.1" && e["peer"].is_null()),
        "{all:#?}"
    );
    // Newest first.
    let times: Vec<&str> = all.iter().filter_map(|e| e["at"].as_str()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");

    // Filters, as text.
    let (ok, out, _) = audit(&["--outcome", "unknown_capability"]);
    assert!(ok && out.lines().count() == 1, "{out}");
    assert!(
        out.contains("127.0.0.1  capability.call  launchRocket  unknown_capability"),
        "{out}"
    );
    assert_eq!(events(&["--address", "127.0.0.1"]).len(), all.len());
    assert_eq!(events(&["--peer", "nobody"]).len(), 0);
    let (ok, out, _) = audit(&["--address", "10.9.9.9"]);
    assert!(ok && out.trim() == "no audit events match", "{out}");
    assert_eq!(events(&["--since", "1h"]).len(), all.len());
    assert_eq!(events(&["--until", "1h"]).len(), 0);
    assert_eq!(events(&["--since", "2999-01-01T00:00:00Z"]).len(), 0);
    let newest = events(&["--limit", "1"]);
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0], all[0]);
    for bad in [["--since", "yesterday"], ["--limit", "0"]] {
        let (ok, _, err) = audit(&bad);
        assert!(!ok && err.contains(bad[0]), "{bad:?}: {err}");
    }
}

/// A tool call as an NLIP message, answered (successfully or with the capability's error).
fn tool_call(url: &str, name: &str, arguments: Value) {
    let message = json!({
        "format": "structured", "subformat": "json",
        "content": {"tool": name, "arguments": arguments}
    });
    let status = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let client = reqwest::Client::new();
            client
                .post(url)
                .json(&message)
                .send()
                .await
                .map(|r| r.status())
        })
        .expect("the tool call is answered");
    assert!(status.as_u16() < 500, "{name}: {status}");
}
