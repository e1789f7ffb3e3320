//! Storage faults under a running server: readiness says when the database takes no writes,
//! nothing is acknowledged that was not stored, and the server recovers on its own once the
//! storage is back. Findings of a hostile trial: after a full disk had room again, every
//! negotiation failed ("attempted to call begin_with at non-zero transaction depth"); after a
//! read-only data directory was made writable again, "attempt to write a readonly database"
//! persisted; a database file deleted while the server ran silently lost what it acknowledged;
//! `/health` said 200 throughout.
//!
//! The faults are real file-system states, which need root: a full disk is a small tmpfs
//! (mounting needs CAP_SYS_ADMIN), a read-only database an immutable file (`chattr +i` needs
//! CAP_LINUX_IMMUTABLE). Without the permission these tests fail and say why. The store's own
//! tests cover the same recovery without a file system (`parley-store`, `sqlite::tests`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use parley::negotiation::requester::Outcome;
use parley_nlip::{Format, Message, Submessage};
use parley_tests::{TestApp, test_settings};
use serde_json::Value;

use crate::support::{
    conversation_of, new_requester, post_coded, product_protocol, until_ready_is,
};

/// A message in the conversation `client` names (so it is stored) saying `text`.
fn said(client: &str, text: &str) -> Value {
    let token = Submessage::new(Format::Token, "conversation_client", client);
    let message = Message::text("english", text).with_submessage(token);
    parley_nlip::to_json_value(&message)
}

/// A message in a conversation, with `bytes` of text.
fn logged(bytes: usize) -> Value {
    said("faults", &"x".repeat(bytes))
}

async fn post(app: &TestApp, body: &Value) -> (u16, String) {
    let (status, _, code) = post_coded(app, body).await;
    (status, code)
}

async fn ready(app: &TestApp) -> (u16, Value) {
    let reply = reqwest::get(app.http("/health/ready"))
        .await
        .expect("a reply");
    let status = reply.status().as_u16();
    (status, reply.json().await.expect("JSON"))
}

#[tokio::test]
async fn a_database_file_deleted_under_the_server_is_noticed_and_nothing_more_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    assert_eq!(post(&app, &logged(10)).await, (200, String::new()));
    assert_eq!(ready(&app).await.0, 200);

    std::fs::remove_file(settings.database_file()).expect("delete the database file");
    let body = until_ready_is(&app, 503).await;
    assert_eq!(body["store"], "not_writable");
    let health = reqwest::get(app.http("/health")).await.expect("a reply");
    assert_eq!(health.status(), 503);
    // A message that would be stored is refused, not acknowledged.
    assert_eq!(
        post(&app, &logged(10)).await,
        (503, "store_unavailable".into())
    );
    // One that touches no database is still answered.
    let stateless = parley_nlip::to_json_value(&Message::text("english", "help"));
    assert_eq!(post(&app, &stateless).await.0, 200);
    app.stop().await;
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Fails the test when this process may not mount (not root, or no CAP_SYS_ADMIN).
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            mounted,
            "mounting a tmpfs (a disk that fills up) needs root or CAP_SYS_ADMIN"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Waits for the server to say it is ready again, then shows that it stores and negotiates,
/// and stops it.
async fn recovered(app: TestApp) {
    until_ready_is(&app, 200).await;
    assert_eq!(post(&app, &logged(10)).await, (200, String::new()));
    let requester_dir = tempfile::tempdir().expect("tempdir");
    let requester = new_requester(requester_dir.path()).await;
    let negotiated = requester
        .negotiate(&app.url(), &product_protocol(), |_| {})
        .await
        .expect("a negotiation once the storage is back");
    assert_eq!(negotiated.outcome, Outcome::Agreed);
    app.stop().await;
}

/// Fills the file system `path` is on with one file; returns it.
fn fill(path: &Path) -> PathBuf {
    let filler = path.join("filler");
    let mut file = std::fs::File::create(&filler).expect("a filler file");
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // The last, partial chunk too.
    while file.write_all(&[0u8; 512]).is_ok() {}
    filler
}

#[tokio::test]
async fn the_server_recovers_when_a_full_disk_has_room_again() {
    let disk = Tmpfs::mount("8m");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(dir.path());
    // The database on the small disk; the sandbox's artifact cache elsewhere.
    settings.data_dir = disk.path().to_owned();
    settings.sandbox.cache_dir = Some(dir.path().join("sandbox-cache"));
    let app = TestApp::spawn(&settings).await;
    assert_eq!(post(&app, &logged(10)).await, (200, String::new()));

    // The disk fills up: a stored message is refused, and readiness says so.
    let filler = fill(disk.path());
    let mut refused = None;
    for _ in 0..100 {
        let (status, code) = post(&app, &logged(200_000)).await;
        if status != 200 {
            refused = Some((status, code));
            break;
        }
    }
    assert_eq!(refused, Some((503, "store_unavailable".into())));
    assert_eq!(until_ready_is(&app, 503).await["store"], "not_writable");

    // Room again: the server recovers on its own, and negotiates.
    std::fs::remove_file(filler).expect("free the disk");
    recovered(app).await;
}

/// A file made immutable (`chattr +i`) until dropped. Nobody, root included, can open it for
/// writing, while descriptors opened before keep writing through: to a running server it is a
/// data directory turned read-only, met by every connection its pool opens from then on.
struct Immutable(PathBuf);

impl Immutable {
    /// Fails the test when the attribute cannot be set (it needs root or CAP_LINUX_IMMUTABLE, and
    /// a file system that has it: ext4, xfs, tmpfs).
    fn hold(path: &Path) -> Immutable {
        let set = chattr("+i", path);
        assert!(
            set,
            "making {} immutable needs root or CAP_LINUX_IMMUTABLE",
            path.display()
        );
        Immutable(path.to_owned())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        chattr("-i", &self.0);
    }
}

fn chattr(flag: &str, path: &Path) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test]
async fn the_server_recovers_when_its_database_was_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(dir.path());
    let app = TestApp::spawn(&settings).await;
    assert_eq!(post(&app, &logged(10)).await, (200, String::new()));

    // The file turns read-only. The connections open now go on writing; bursts of concurrent
    // writers make the pool open more, and those cannot write.
    let read_only = Immutable::hold(&settings.database_file());
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for round in 0..20 {
        let burst = (0..32).map(|i| {
            let text = format!("burst {round}.{i}");
            let app = &app;
            async move {
                let (status, reply, code) = post_coded(app, &said(&text, &text)).await;
                (text, status, reply, code)
            }
        });
        for (text, status, reply, code) in futures::future::join_all(burst).await {
            if status == 200 {
                acknowledged.push((conversation_of(&reply), text));
            } else {
                refused.get_or_insert((status, code));
            }
        }
        if refused.is_some() {
            break;
        }
    }
    assert_eq!(
        refused,
        Some((503, "store_unavailable".into())),
        "a write on a connection opened while the file was read-only"
    );
    assert_eq!(until_ready_is(&app, 503).await["store"], "not_writable");

    // Writable again: the server recovers on its own, and negotiates.
    drop(read_only);
    recovered(app).await;

    // Every message acknowledged during the fault is in its conversation's log.
    let store = parley_store::connect(&settings.database_url(), Default::default())
        .await
        .expect("the database");
    for (conversation, text) in acknowledged {
        let log = store
            .list_messages(&conversation, 0, 10)
            .await
            .expect("the log");
        assert!(
            log.iter().any(|m| m.message.to_string().contains(&text)),
            "{text:?} was acknowledged but is not in {conversation}'s log"
        );
    }
}
