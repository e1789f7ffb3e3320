//! What a new user meets first, through the `parley` binary: output into a closed pipe ends
//! quietly, `--listen` takes host names, the protocol commands say where they looked for data
//! and take short hashes, error chains name each cause once, a port in use fails before the
//! sandbox warms up, an unreachable PostgreSQL fails fast naming host, port and cause, the
//! model key can come from a file, the upload URL peers are given is logged at start, and `/mcp`
//! is served when the flag, the environment or the config file says so.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_store::Store;

use crate::support::{BIN, Provider, examples, utf8};

/// `parley ARGS` with none of the `PARLEY_*` settings of the environment that runs the tests.
fn parley(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args);
    for var in [
        "PARLEY_CONFIG",
        "PARLEY_DATA_DIR",
        "PARLEY_DATABASE_URL",
        "PARLEY_DATABASE_CONNECT_TIMEOUT_MS",
        "PARLEY_LISTEN",
        "PARLEY_UPLOAD_LISTEN",
        "PARLEY_UPLOAD_PUBLIC_URL",
        "PARLEY_REASONER",
        "PARLEY_OPENAI_API_KEY",
        "PARLEY_OPENAI_API_KEY_FILE",
        "PARLEY_SERVE_MCP",
    ] {
        command.env_remove(var);
    }
    command.env("RUST_LOG", "info");
    command
}

/// Runs a command to its end and returns (success, stdout, stderr).
fn output(mut command: Command) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("parley runs");
    (
        status.success(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A running `parley serve` and the lines it logged up to "parley is listening".
struct Served {
    child: Child,
    log: Vec<String>,
}

impl Served {
    /// Starts `serve` with `extra` arguments and ephemeral ports unless `extra` names them.
    #[allow(
        clippy::zombie_processes,
        reason = "the child is killed and waited for when the Served is dropped"
    )]
    fn start(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let mut command = parley(&["serve", "--data-dir", utf8(dir)]);
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        if !extra.contains(&"--upload-listen") {
            command.args(["--upload-listen", "127.0.0.1:0"]);
        }
        command.args(extra).envs(env.iter().copied());
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("parley starts");
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let mut log = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("parley exited while starting:\n{}", log.join("\n")))
                .expect("a UTF-8 log");
            let listening = line.contains("parley is listening");
            log.push(line);
            if listening {
                // Keep draining stderr so the child never blocks on a full pipe.
                std::thread::spawn(move || for _ in lines.by_ref() {});
                return Served { child, log };
            }
        }
        panic!("parley did not start in time:\n{}", log.join("\n"));
    }

    /// The value of `field=` on the "parley is listening" line.
    fn logged(&self, field: &str) -> String {
        let line = self.log.last().expect("the listening line");
        line.split(&format!("{field}="))
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {field}= in {line}"))
            .trim_matches('"')
            .to_owned()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` with its stdout, and its stderr too when `stderr_closed`, going into a pipe
/// nobody reads any more (what `parley … | head` does once head has its lines).
async fn into_closed_pipe(mut command: Command, stderr_closed: bool) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    if stderr_closed {
        command.stderr(writer.try_clone().expect("a second writer"));
    } else {
        command.stderr(Stdio::piped());
    }
    command.stdout(writer);
    let out = tokio::task::spawn_blocking(move || command.output().expect("parley runs"))
        .await
        .expect("the command's thread");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_printing_command_ends_quietly_when_its_reader_is_gone() {
    let provider_dir = tempfile::tempdir().expect("tempdir");
    let local = tempfile::tempdir().expect("tempdir");
    let local = utf8(local.path()).to_owned();
    let provider = Provider::start(provider_dir.path(), examples().join("capabilities.toml")).await;
    let url = provider.url();
    let url = url.as_str();
    let protocol = examples().join("protocols/product-info.md");
    let handler = local.clone() + "/handler.js";
    std::fs::write(&handler, "function handle(r) { return { echoed: r }; }").expect("write");
    let request = r#"{"messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"}"#;

    let commands: Vec<Vec<&str>> = vec![
        vec!["send", url, "What can you do?"],
        vec!["send", "--json", url, "What can you do?"],
        vec![
            "negotiate",
            url,
            "--protocol",
            utf8(&protocol),
            "--data-dir",
            &local,
        ],
        vec![
            "call",
            url,
            "--protocol",
            utf8(&protocol),
            "--json",
            request,
            "--data-dir",
            &local,
        ],
        vec!["protocols", "list", "--data-dir", &local],
        vec!["sandbox", "run", "--handler", &handler, "--input", "{}"],
    ];
    for args in &commands {
        for stderr_closed in [false, true] {
            let (code, stderr) = into_closed_pipe(parley(args), stderr_closed).await;
            assert_eq!(
                code,
                Some(0),
                "{args:?} (stderr closed: {stderr_closed}): {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        }
    }
    // `protocols show` needs the hash the negotiation stored.
    let hash = parley_store::connect(
        &format!("sqlite://{local}/parley.db"),
        parley_store::StoreOptions::default(),
    )
    .await
    .expect("the requester's store")
    .list_agreements(1)
    .await
    .expect("agreements")
    .remove(0)
    .protocol_hash;
    let (code, stderr) = into_closed_pipe(
        parley(&["protocols", "show", &hash, "--data-dir", &local]),
        true,
    )
    .await;
    assert_eq!(code, Some(0), "protocols show: {stderr}");
    // A failure still fails when nobody reads what it says.
    let (code, _) = into_closed_pipe(
        parley(&["protocols", "show", "abcdef", "--data-dir", &local]),
        true,
    )
    .await;
    assert_eq!(code, Some(1));
}

#[test]
fn serve_takes_host_names_and_refuses_one_that_does_not_resolve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = Served::start(
        dir.path(),
        &["--listen", "localhost:0", "--upload-listen", "localhost:0"],
        &[],
    );
    let nlip = served.logged("nlip");
    let addr: SocketAddr = nlip
        .trim_start_matches("http://")
        .trim_end_matches("/nlip")
        .parse()
        .expect("the bound address");
    assert!(addr.ip().is_loopback(), "{nlip}");
    let (ok, out, err) = output(parley(&["send", &nlip, "hello"]));
    assert!(ok && out.contains("Hello"), "{out}\n{err}");
    drop(served);

    for flag in ["--listen", "--upload-listen"] {
        let missing = dir.path().join(format!("never-created{flag}"));
        let (ok, _, err) = output(parley(&[
            "serve",
            flag,
            "no-such-host.invalid:8080",
            "--data-dir",
            utf8(&missing),
        ]));
        assert!(!ok);
        let setting = flag.trim_start_matches("--").replace('-', "_");
        assert!(
            err.contains(&format!("invalid setting {setting}"))
                && err.contains("no-such-host.invalid"),
            "{flag}: {err}"
        );
        assert!(!missing.exists(), "nothing started: {err}");
    }
}

#[test]
fn protocol_commands_say_where_they_looked_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-data-here");
    let looked = std::path::absolute(missing.join("parley.db")).expect("an absolute path");
    for args in [
        vec!["protocols", "list"],
        vec!["protocols", "show", "abcdef"],
    ] {
        let mut command = parley(&args);
        command.args(["--data-dir", utf8(&missing)]);
        let (ok, _, err) = output(command);
        assert!(!ok, "{args:?}");
        assert!(
            err.contains(&format!("no Parley data at {}", looked.display()))
                && err.contains("--data-dir")
                && err.contains("PARLEY_DATABASE_URL"),
            "{args:?}: {err}"
        );
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
}

/// Two protocols whose hashes share their first hex digit, in a requester's store in `dir`.
async fn two_protocols(dir: &Path) -> (String, String) {
    let store: Arc<dyn Store> = parley_store::connect(
        &format!("sqlite://{}/parley.db?mode=rwc", dir.display()),
        parley_store::StoreOptions::default(),
    )
    .await
    .expect("a store");
    let first = store
        .put_protocol("# A protocol\n")
        .await
        .expect("stored")
        .hash;
    for i in 0.. {
        let hash = parley_store::sha256_hex(format!("# Protocol {i}\n").as_bytes());
        if hash[..1] == first[..1] {
            let second = store
                .put_protocol(&format!("# Protocol {i}\n"))
                .await
                .expect("stored")
                .hash;
            return (first, second);
        }
    }
    unreachable!("one hex digit in sixteen matches")
}

#[tokio::test]
async fn protocols_show_takes_a_unique_prefix_as_call_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, second) = two_protocols(dir.path()).await;
    let data = utf8(dir.path());
    for given in [first[..10].to_owned(), format!("sha256:{}", &first[..7])] {
        let (ok, out, err) = output(parley(&["protocols", "show", &given, "--data-dir", data]));
        assert!(ok, "{given}: {err}");
        assert!(
            out.starts_with(&format!("protocol {first}\n")) && out.contains("# A protocol"),
            "{given}: {out}"
        );
    }
    let (ok, _, err) = output(parley(&[
        "protocols",
        "show",
        &first[..1],
        "--data-dir",
        data,
    ]));
    assert!(
        !ok && err.contains(&first) && err.contains(&second),
        "an ambiguous prefix lists the candidates: {err}"
    );
    let unknown = if first.starts_with("ff") { "00" } else { "ff" };
    let unknown = format!("{unknown}{}", &first[2..8]);
    let (ok, _, err) = output(parley(&["protocols", "show", &unknown, "--data-dir", data]));
    assert!(!ok && err.contains("not in the local store"), "{err}");
    let (ok, _, err) = output(parley(&["protocols", "show", "xyz", "--data-dir", data]));
    assert!(!ok && err.contains("\"xyz\""), "{err}");
}

#[test]
fn an_error_chain_names_each_cause_once() {
    let (ok, _, err) = output(parley(&["serve", "--config", "/no/such/parley.toml"]));
    assert!(!ok);
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
}

#[test]
fn a_port_in_use_fails_before_the_sandbox_warms_up_and_names_the_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address").to_string();
    for (flag, other) in [
        ("--listen", "--upload-listen"),
        ("--upload-listen", "--listen"),
    ] {
        let data = dir.path().join(flag.trim_start_matches('-'));
        let (ok, _, err) = output(parley(&[
            "serve",
            flag,
            &addr,
            other,
            "127.0.0.1:0",
            "--data-dir",
            utf8(&data),
            "--capabilities",
            utf8(&examples().join("capabilities.toml")),
        ]));
        assert!(!ok, "{flag}");
        assert!(
            err.contains(&format!("cannot listen on {addr}")) && err.contains("in use"),
            "{flag}: {err}"
        );
        assert!(!err.contains("warm"), "the sandbox stayed cold: {err}");
    }
}

#[test]
fn an_unreachable_postgres_fails_fast_naming_host_port_and_cause() {
    // Nobody listens: refused at once.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a port")
        .local_addr()
        .expect("its address");
    let url = format!("postgres://parley@{free}/parley");
    let started = Instant::now();
    let serve = |url: &str, extra: &[&str]| {
        let mut command = parley(&["serve", "--database-url", url]);
        command.args(["--listen", "127.0.0.1:0", "--upload-listen", "127.0.0.1:0"]);
        command.args(extra);
        output(command)
    };
    let (ok, _, err) = serve(&url, &[]);
    assert!(!ok);
    assert!(
        err.contains("opening the database")
            && err.contains(&format!("database=postgres://parley@{free}/parley")),
        "the attempt is logged: {err}"
    );
    assert!(
        err.contains(&format!("cannot connect to PostgreSQL at {free}")) && err.contains("refused"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let (ok, _, err) = output(parley(&["protocols", "list", "--database-url", &url]));
    assert!(
        !ok && err.contains(&format!("PostgreSQL at {free}")),
        "{err}"
    );

    // Something accepts the connection and never answers: the configured timeout ends it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = silent.local_addr().expect("its address");
    let url = format!("postgres://parley@{addr}/parley");
    let started = Instant::now();
    let (ok, _, err) = serve(&url, &["--database-connect-timeout-ms", "300"]);
    assert!(!ok);
    assert!(
        err.contains(&format!("cannot connect to PostgreSQL at {addr}"))
            && err.contains("no answer within 300 ms"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_key_can_come_from_a_secrets_file() {
    let model = ScriptedOpenAi::start().await;
    model.set_fallback(ScriptedReply::text("Hello from the model."));
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("openai_api_key");
    std::fs::write(&key_file, "sk-from-a-file\n").expect("write");
    let base_url = model.base_url();
    let data = dir.path().join("data");
    let env = [
        ("PARLEY_OPENAI_API_KEY_FILE", utf8(&key_file)),
        ("PARLEY_OPENAI_BASE_URL", base_url.as_str()),
    ];
    let served =
        tokio::task::block_in_place(|| Served::start(&data, &["--reasoner", "openai"], &env));
    let nlip = served.logged("nlip");
    let (ok, out, err) =
        tokio::task::block_in_place(|| output(parley(&["send", &nlip, "Tell me something nice."])));
    assert!(ok && out.contains("Hello from the model."), "{out}\n{err}");
    let requests = model.requests();
    assert!(!requests.is_empty());
    for request in requests {
        assert_eq!(
            request.authorization.as_deref(),
            Some("Bearer sk-from-a-file")
        );
    }
    drop(served);

    let (ok, _, err) = output(parley(&[
        "serve",
        "--openai-api-key",
        "sk-inline",
        "--openai-api-key-file",
        utf8(&key_file),
    ]));
    assert!(
        !ok && err.contains("--openai-api-key,") && err.contains("--openai-api-key-file,"),
        "{err}"
    );
    let (ok, _, err) = output(parley(&["serve", "--openai-api-key-file", "/no/such/key"]));
    assert!(!ok && err.contains("/no/such/key"), "{err}");
}

#[test]
fn the_upload_url_peers_are_given_is_logged_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = Served::start(
        dir.path(),
        &[],
        &[("PARLEY_UPLOAD_PUBLIC_URL", "http://uploads.example:9000/")],
    );
    assert_eq!(
        served.logged("uploads"),
        "http://uploads.example:9000/upload"
    );
    drop(served);

    // Every interface: peers cannot use 0.0.0.0, and the log says what to set.
    let served = Served::start(dir.path(), &["--upload-listen", "0.0.0.0:0"], &[]);
    let announced = served.logged("uploads");
    assert!(announced.starts_with("http://0.0.0.0:"), "{announced}");
    assert!(
        served
            .log
            .iter()
            .any(|l| l.contains("WARN") && l.contains("PARLEY_UPLOAD_PUBLIC_URL")),
        "{:#?}",
        served.log
    );
}

#[tokio::test]
async fn mcp_is_served_when_the_flag_the_environment_or_the_config_file_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quiet = dir.path().join("quiet.toml");
    std::fs::write(&quiet, "[sandbox]\nwarm_up = false\n").expect("write");
    let on = dir.path().join("mcp.toml");
    std::fs::write(&on, "[sandbox]\nwarm_up = false\n[mcp]\nserve = true\n").expect("write");
    let (quiet, on) = (utf8(&quiet), utf8(&on));
    // The arguments, the environment, and whether /mcp is served.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], bool);
    let cases: [Case<'_>; 5] = [
        (&["--config", quiet], &[], false),
        (&["--config", quiet, "--serve-mcp"], &[], true),
        (&["--config", quiet], &[("PARLEY_SERVE_MCP", "true")], true),
        (&["--config", on], &[], true),
        (&["--config", on], &[("PARLEY_SERVE_MCP", "false")], false),
    ];
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "probe", "version": "1"}}
    });
    for (args, env, serves) in cases {
        let served = Served::start(dir.path(), args, env);
        let nlip = served.logged("nlip");
        let mcp = nlip.replace("/nlip", "/mcp");
        let logged = served.logged("mcp");
        assert_eq!(
            logged,
            if serves { mcp.as_str() } else { "off" },
            "{args:?} {env:?}"
        );
        let status = reqwest::Client::new()
            .post(&mcp)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .expect("an answer")
            .status();
        assert_eq!(status, if serves { 200 } else { 404 }, "{args:?} {env:?}");
    }
}
