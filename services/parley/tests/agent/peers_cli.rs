//! `parley peers` through the binary: `add` prints the key alone on stdout and keeps only its
//! digest in the store, `list` shows peers without their digests, `revoke` keeps the first time,
//! `keygen` prints a key and the peers-file entry that reads back to it; existing and unknown
//! ids, bad ids and bad capability names are refused with a clear message.

use std::path::Path;

use parley::access::peers_file;
use parley_auth::{ApiKey, Grants, Scope};

use crate::support::{BIN, utf8};

/// Runs `parley peers ARGS --data-dir DIR` (no `--data-dir` for `keygen`) and returns
/// (success, stdout, stderr).
async fn peers(args: &[&str], dir: Option<&Path>) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(BIN);
    command
        .arg("peers")
        .args(args)
        .env_remove("PARLEY_DATABASE_URL")
        .env_remove("PARLEY_DATA_DIR");
    if let Some(dir) = dir {
        command.arg("--data-dir").arg(dir);
    }
    let out = command.output().await.expect("parley runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn peers_are_added_listed_and_revoked_with_only_digests_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = Some(dir.path());
    let (ok, _, err) = peers(&["list"], d).await;
    assert!(!ok && err.contains("no Parley data"), "{err}");

    let (ok, out, err) = peers(
        &[
            "add",
            "billing",
            "--negotiate",
            "--capability",
            "getProductInfo",
        ],
        d,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1, "the key alone: {out}");
    let key = ApiKey::parse(&out).expect("stdout is the key");
    assert!(
        err.contains("negotiate, capabilities getProductInfo, protocols -"),
        "{err}"
    );

    let url = format!("sqlite://{}?mode=rw", utf8(&dir.path().join("parley.db")));
    let store = parley_store::connect(&url, Default::default())
        .await
        .expect("the CLI's store");
    let stored = store
        .peer_by_key_id(key.key_id())
        .await
        .expect("lookup")
        .expect("the peer, by its key id");
    assert_eq!(stored.id, "billing");
    assert_eq!(stored.key_digest, Some(key.stored().digest.clone()));
    let grants: Grants = serde_json::from_value(stored.grants.clone()).expect("grants");
    assert_eq!(grants.capabilities, Scope::of(["getProductInfo"]));
    assert!(grants.negotiate && !grants.talk);

    let hash = "A".repeat(64);
    let (ok, _, err) = peers(
        &[
            "add",
            "desk",
            "--talk",
            "--protocol",
            &format!("sha256:{hash}"),
        ],
        d,
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("protocols {}", "a".repeat(64))),
        "{err}"
    );

    for (args, expected) in [
        (
            vec!["add", "billing"],
            "peer \"billing\" is declared already",
        ),
        (vec!["add", "bad id"], "is not a peer id"),
        (
            vec!["add", "c", "--capability", "get weather"],
            "not a valid capability name",
        ),
        (vec!["add", "c", "--protocol", "abc"], "not a protocol hash"),
        (vec!["revoke", "carol"], "no peer \"carol\" is declared"),
    ] {
        let (ok, out, err) = peers(&args, d).await;
        assert!(!ok && out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }

    let (ok, out, err) = peers(&["list"], d).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with(&format!("billing  key {}", key.key_id())),
        "{out}"
    );
    assert!(lines[1].starts_with("desk  key "), "{out}");
    assert!(!out.contains(&key.stored().digest), "no digest: {out}");

    let (ok, out, err) = peers(&["revoke", "billing"], d).await;
    assert!(
        ok && out.starts_with("peer billing revoked at "),
        "{out} {err}"
    );
    let (ok, again, _) = peers(&["revoke", "billing"], d).await;
    assert!(ok);
    assert_eq!(again, out, "revoking twice keeps the first time");

    let (ok, out, err) = peers(&["list", "--json"], d).await;
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(listed[0]["id"], "billing");
    assert_eq!(listed[0]["key_id"], key.key_id());
    assert_eq!(
        listed[0]["grants"]["capabilities"],
        serde_json::json!(["getProductInfo"])
    );
    assert!(listed[0]["revoked_at"].is_string(), "{out}");
    assert!(listed[1]["revoked_at"].is_null(), "{out}");
    assert!(
        !out.contains("digest") && !out.contains(&key.stored().digest),
        "{out}"
    );
}

#[tokio::test]
async fn keygen_prints_a_key_and_the_entry_that_declares_it() {
    let (ok, out, err) = peers(&["keygen", "warehouse", "--talk", "--protocol", "*"], None).await;
    assert!(ok, "{err}");
    let key = ApiKey::parse(&out).expect("stdout is the key");
    assert!(
        !err.contains(&key.reveal()),
        "the entry holds no key: {err}"
    );
    let entry = &err[err.find("[[peers]]").expect("an entry")..];
    let entry = &entry[..entry.find("\n\n").expect("the entry ends")];
    let file = peers_file::parse(Path::new("peers.toml"), entry).expect("the entry reads");
    let peer = file.by_key_id(key.key_id()).expect("found by the key's id");
    assert_eq!(peer.id, "warehouse");
    assert!(peer.key.as_ref().expect("a key").matches(&key));
    assert!(peer.grants.talk && !peer.grants.negotiate);
    assert_eq!(peer.grants.protocols, Scope::All);

    let (ok, _, err) = peers(&["keygen", "bad id"], None).await;
    assert!(!ok && err.contains("is not a peer id"), "{err}");
}
