//! Negotiation benchmark: what negotiating costs, and what it buys.
//!
//! Run: `cargo bench -p parley-tests --bench negotiation` (see tests/benches/README.md).
//!
//! In one run, against real Parley servers started in this process on loopback
//! (`parley_tests::TestApp`: SQLite in a temp dir, the example capabilities):
//!
//! - **(a)** full negotiations with the built-in backend, from the requester's hello to the
//!   first application answer, each against a provider that does not know the protocol.
//!   *cold*: a fresh provider (fresh data dir, so an empty sandbox artifact cache) per run;
//!   *warm*: one provider, the protocol text made unique per run (a sentence added to
//!   `# Requirements`, so a new hash), so only the compiled-artifact cache can be warm.
//!   Each run is split at the requester's progress reports into hello, the provider's
//!   evaluate + generate + verify (+ publish) exchange, the closing exchange, and the first
//!   application call.
//! - **(b)** application messages through the negotiated protocol (0-RTT: a protocol token,
//!   no negotiation, no model) and **(c)** plain NLIP text messages, sequentially over one
//!   connection, HTTP keep-alive (JSON) and WebSocket (CBOR), in alternating blocks so that
//!   load from other processes hits both alike; median, p99, mean, requests/s, and (b)/(c).
//!   Providers: in this process, in a process of its own (`parley serve`), and in this process
//!   with `negotiation.compiled_handlers = false`, so that (b) runs the verified JavaScript in
//!   QuickJS instead of its compiled form (the mapping runtime): the baseline for the latter.
//!   The provider in its own process is measured twice, pinned (`Placement`): on CPUs apart
//!   from the client's, as two agents are deployed (the goal's setting), and on one core shared
//!   with the client.
//! - **model calls**: full negotiations whose provider uses the OpenAI-compatible protocol
//!   reasoner against the scripted OpenAI-compatible server (`ScriptedOpenAi`), counting the
//!   chat-completion requests it received: with nothing failing, with one failed
//!   verification, and with the hybrid reasoner (built-in first).
//!
//! Knobs (environment): `BENCH_NEGOTIATIONS` (runs per (a) variant, default 5),
//! `BENCH_REQUESTS` (measured requests per message kind and transport, default 3000),
//! `BENCH_WARMUP_REQUESTS` (default 300), `BENCH_PARTS` (`a`, `bc`, `models`; default all),
//! `BENCH_PROVIDERS` (the providers of (b) and (c): `in-process`, `own-process`, `javascript`;
//! default all), `BENCH_PLACEMENTS` (`apart`, `shared`: the own-process provider's placements;
//! default both), `BENCH_TRANSPORTS` (`http`, `ws`; default both) and `BENCH_MESSAGES` (`b`, `c`;
//! default both: one of them alone, to profile it without the other's work in between).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parley::agent::Agent;
use parley::client::NlipClient;
use parley::config::{ProtocolBackend, ReasonerKind, Settings};
use parley::negotiation::requester::{Outcome, Requester};
use parley::startup::Bound;
use parley_anp::{ProtocolDoc, ProtocolHash};
use parley_nlip::{Content, Format, Message};
use parley_reasoner::testing::{ScriptedOpenAi, ScriptedReply};
use parley_reasoner::{BuiltinProtocolReasoner, DeclaredCapability, Evaluation};
use parley_store::Store;
use parley_tests::{TestApp, bench_settings, example_capabilities, repo_root};
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, String>;

/// Set on the child process this bench starts as a separate provider: it then runs the `parley` CLI.
const ROLE_ENV: &str = "PARLEY_NEGOTIATION_BENCH_ROLE";

fn main() -> ExitCode {
    if std::env::var(ROLE_ENV).as_deref() == Ok("parley") {
        return parley::cli::main();
    }
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "negotiation benchmark skipped: run it with `cargo bench -p parley-tests --bench negotiation`"
        );
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("negotiation benchmark failed: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The bench runs as a task on the runtime's workers, like a requester inside a server, and
    // not on this thread: a future that `block_on` polls here is woken by the worker that saw
    // its socket ready, one more thread hand-off per reply.
    match runtime.block_on(async { tokio::spawn(run()).await.map_err(|e| e.to_string())? }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("negotiation benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The providers of (b) and (c), as `BENCH_PROVIDERS` names them.
const PROVIDERS: [&str; 3] = ["in-process", "own-process", "javascript"];

#[derive(Debug, Clone, Copy)]
struct Config {
    negotiations: usize,
    requests: usize,
    warmup: usize,
    /// Which parts run: (a), (b)+(c), (b)+(c) under load, model calls.
    part_a: bool,
    part_bc: bool,
    part_load: bool,
    part_models: bool,
    /// Under load: connections, rounds per message kind, and each round's length.
    load_connections: usize,
    load_rounds: usize,
    load_round: Duration,
    /// Which providers (b) and (c) run against: in this process, in its own, serving JavaScript.
    providers: [bool; 3],
    /// Over which transports (HTTP, WebSocket), and which of the two messages: (b), (c).
    transports: [bool; 2],
    messages: [bool; 2],
    /// Where the provider in its own process runs against the client: apart, on one core.
    placements: [bool; 2],
}

impl Config {
    fn from_env() -> Result<Config> {
        fn num(name: &str, default: usize) -> Result<usize> {
            match std::env::var(name) {
                Ok(v) => v.parse().map_err(|e| format!("{name}={v:?}: {e}")),
                Err(_) => Ok(default),
            }
        }
        /// Which of `names` the comma list in variable `name` picks (all of them when unset).
        fn pick<const N: usize>(name: &str, names: [&str; N]) -> Result<[bool; N]> {
            let list = std::env::var(name).unwrap_or_else(|_| names.join(","));
            let picked: Vec<&str> = list.split(',').map(str::trim).collect();
            if let Some(unknown) = picked.iter().find(|p| !names.contains(p)) {
                return Err(format!(
                    "{name}: unknown {unknown:?} ({})",
                    names.join(", ")
                ));
            }
            Ok(names.map(|n| picked.contains(&n)))
        }
        let [part_a, part_bc, part_load, part_models] =
            pick("BENCH_PARTS", ["a", "bc", "load", "models"])?;
        Ok(Config {
            negotiations: num("BENCH_NEGOTIATIONS", 5)?.clamp(1, 50),
            requests: num("BENCH_REQUESTS", 3000)?.clamp(100, 100_000),
            warmup: num("BENCH_WARMUP_REQUESTS", 300)?.min(10_000),
            part_a,
            part_bc,
            part_load,
            part_models,
            load_connections: num("BENCH_LOAD_CONNECTIONS", 8)?.clamp(1, 256),
            load_rounds: num("BENCH_LOAD_ROUNDS", 3)?.clamp(1, 100),
            load_round: Duration::from_millis(num("BENCH_LOAD_MS", 1000)?.clamp(100, 60_000) as u64),
            providers: pick("BENCH_PROVIDERS", PROVIDERS)?,
            transports: pick("BENCH_TRANSPORTS", ["http", "ws"])?,
            messages: match pick("BENCH_MESSAGES", ["b", "c"])? {
                [false, false] => return Err("BENCH_MESSAGES: pick b, c or both".into()),
                picked => picked,
            },
            placements: pick("BENCH_PLACEMENTS", ["apart", "shared"])?,
        })
    }
}

async fn run() -> Result<()> {
    let config = Config::from_env()?;
    let started = Instant::now();
    println!(
        "negotiation benchmark: {} negotiations per variant, {} requests per series after {} warm-up; {} CPUs, load average {}",
        config.negotiations,
        config.requests,
        config.warmup,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    let base = product_protocol()?;

    if config.part_a {
        negotiations(&base, config).await?;
    }
    if config.part_bc {
        latency(&base, config).await?;
    }
    if config.part_load {
        load(&base, config).await?;
    }
    if config.part_models {
        // Model calls with the OpenAI-compatible protocol reasoner.
        let model_rows = model_calls(&base).await?;
        print_model_calls(&model_rows);
    }

    println!();
    println!(
        "total benchmark time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// (a): full negotiations against cold and warm providers.
async fn negotiations(base: &str, config: Config) -> Result<()> {
    let mut cold = Vec::new();
    for _ in 0..config.negotiations {
        let provider_dir = tempdir()?;
        let app = TestApp::spawn(&bench_settings(provider_dir.path())).await;
        let cache_dir = provider_dir.path().join("sandbox-cache");
        let before = artifacts(&cache_dir);
        let requester_dir = tempdir()?;
        let requester = requester(&requester_dir).await?;
        // The product protocol itself: every provider here is new, so every run is cold.
        let mut timing = negotiate_and_call(&requester, &app.url(), base).await?;
        timing.cache_before = before;
        timing.cache_after = artifacts(&cache_dir);
        cold.push(timing);
        app.stop().await;
    }
    let warm = {
        let provider_dir = tempdir()?;
        let app = TestApp::spawn(&bench_settings(provider_dir.path())).await;
        let cache_dir = provider_dir.path().join("sandbox-cache");
        let requester_dir = tempdir()?;
        let requester = requester(&requester_dir).await?;
        // One untimed negotiation fills the artifact cache (and any lazy start-up work).
        negotiate_and_call(&requester, &app.url(), &unique(base, "warm-up")).await?;
        let mut runs = Vec::new();
        for i in 0..config.negotiations {
            let text = unique(base, &format!("warm run {i}"));
            let before = artifacts(&cache_dir);
            let mut timing = negotiate_and_call(&requester, &app.url(), &text).await?;
            timing.cache_before = before;
            timing.cache_after = artifacts(&cache_dir);
            runs.push(timing);
        }
        app.stop().await;
        runs
    };
    print_negotiations(&cold, &warm);
    Ok(())
}

/// (b) and (c): application messages through the cached protocol and plain text messages.
async fn latency(base: &str, config: Config) -> Result<()> {
    let provider_dir = tempdir()?;
    let settings = bench_settings(provider_dir.path());
    let server = KeptServer::spawn(&settings).await?;
    let requester_dir = tempdir()?;
    let requester = requester(&requester_dir).await?;
    let hash = ProtocolHash::of(base);
    let payload = product_request("m1");
    let application = parley::negotiation::nlip::application_message(&hash, payload.clone());
    let text = Message::text("english", "Hello");
    let mut rows = Vec::new();
    // The provider in this process, sharing its runtime with the requester; then as it is
    // deployed: its own process (`parley serve`), with its own runtime and threads.
    let [in_process, own_process, javascript] = config.providers;
    let process_dir = tempdir()?;
    let provider = match own_process {
        true => Some(ProviderProcess::start(process_dir.path()).await?),
        false => None,
    };
    // The baseline for the compiled form: a provider that serves the verified JavaScript.
    let js_dir = tempdir()?;
    let mut js_settings = bench_settings(js_dir.path());
    js_settings.negotiation.compiled_handlers = false;
    let js_server = KeptServer::spawn(&js_settings).await?;
    // The provider in its own process is measured in each placement (`Placement`): apart, as
    // two agents are deployed, and on one shared core. Without pinning the scheduler picks one of
    // the two at random, stretch by stretch, and the medians then swing between them.
    let (placements, pinning) = match &provider {
        Some(_) => Placement::available(config.placements),
        None => (Vec::new(), Pinning::default()),
    };
    let mut providers = Vec::new();
    if in_process {
        let labels = ["HTTP/1.1 JSON", "WebSocket CBOR"];
        providers.push((server.addr, None, labels));
    }
    if let Some(p) = &provider {
        for placement in &placements {
            let own = (p.child.id(), *placement);
            providers.push((p.addr, Some(own), placement.labels()));
        }
    }
    if javascript {
        let labels = ["HTTP, JS handler", "WS, JS handler"];
        providers.push((js_server.addr, None, labels));
    }
    let mut agreed = Vec::new();
    for (addr, own, labels) in providers {
        if !agreed.contains(&addr) {
            agree(&requester, addr, base).await?;
            agreed.push(addr);
        }
        if let Some((pid, placement)) = own {
            placement.apply(&pinning, pid)?;
        }
        let server_pid = own.map(|(pid, _)| pid);
        let urls = [
            format!("http://{addr}/nlip"),
            format!("ws://{addr}/nlip/ws"),
        ];
        let picked = labels.into_iter().zip(urls).zip(config.transports);
        for (label, url) in picked.filter_map(|(pair, on)| on.then_some(pair)) {
            let client = NlipClient::connect(&url, false)
                .await
                .map_err(|e| format!("connect {url}: {e}"))?;
            let mut driver = Driver {
                client: Some(client),
                agent: server.agent.clone(),
                hash,
                peer: addr,
                server_pid,
            };
            let messages = [
                ("(b) application 0-RTT", Op::Send(&application)),
                ("(c) text", Op::Send(&text)),
            ];
            let picked: Vec<_> = messages
                .into_iter()
                .zip(config.messages)
                .filter_map(|(message, on)| on.then_some(message))
                .collect();
            let ops: Vec<Op<'_>> = picked.iter().map(|(_, op)| *op).collect();
            let series = driver.alternate_ops(&ops, config).await?;
            for ((name, _), s) in picked.into_iter().zip(series) {
                rows.push((label, name, s));
            }
        }
        if let Some((_, placement)) = own {
            placement.undo(&pinning)?;
        }
    }
    if let Some(provider) = provider {
        provider.stop();
    }
    if in_process {
        // The same work without a transport: where (b)'s time goes.
        let mut driver = Driver::direct(&server, hash);
        let [handler, b, c] = driver
            .alternate(
                [
                    Op::Application(&payload),
                    Op::Handle(&application),
                    Op::Handle(&text),
                ],
                config,
            )
            .await?;
        rows.push(("in-process", "(b) Agent::handle", b));
        rows.push(("in-process", "(c) Agent::handle", c));
        rows.push(("in-process", "(b) Provider::application", handler));
    }
    if javascript {
        // The same call through the verified JavaScript instead of its compiled form.
        let mut driver = Driver::direct(&js_server, hash);
        let [js_handler] = driver
            .alternate([Op::Application(&payload)], config)
            .await?;
        rows.push(("in-process", "(b) same, JavaScript", js_handler));
    }
    js_server.stop().await;
    server.stop().await;
    let goal = placements.into_iter().find(|p| p.goal().is_some());
    print_latency(&rows, goal);
    Ok(())
}

/// Negotiates `base` with the provider at `addr` until it is agreed: what (b) needs first.
async fn agree(
    requester: &Requester,
    addr: std::net::SocketAddr,
    base: &str,
) -> Result<ProtocolHash> {
    let negotiated = requester
        .negotiate(&format!("http://{addr}/nlip"), base, |_| {})
        .await
        .map_err(|e| format!("negotiation with {addr}: {e}"))?;
    match negotiated.outcome {
        Outcome::Agreed => Ok(negotiated.hash),
        other => Err(format!("negotiation with {addr}: {other:?}")),
    }
}

/// (b) and (c) under load: `load_connections` WebSocket connections to the provider in its own
/// process, each sending its next message as soon as its last one is answered. Rounds of
/// `load_round` alternate (b) and (c), so that outside load falls on both alike. What this adds to
/// the sequential figures: how many messages per second one provider answers when it is kept
/// busy, and what each costs it then, including the work done after the answer (an instance's
/// reset), which sequential latency does not see.
async fn load(base: &str, config: Config) -> Result<()> {
    let process_dir = tempdir()?;
    let provider = ProviderProcess::start(process_dir.path()).await?;
    let pid = provider.child.id();
    let requester_dir = tempdir()?;
    let requester = requester(&requester_dir).await?;
    let hash = agree(&requester, provider.addr, base).await?;
    let application = Arc::new(parley::negotiation::nlip::application_message(
        &hash,
        product_request("load"),
    ));
    let text = Arc::new(Message::text("english", "Hello"));
    let url = format!("ws://{}/nlip/ws", provider.addr);
    let mut clients = Vec::with_capacity(config.load_connections);
    for _ in 0..config.load_connections {
        let mut client = NlipClient::connect(&url, false)
            .await
            .map_err(|e| format!("connect {url}: {e}"))?;
        for message in [&application, &text] {
            for _ in 0..20 {
                let received = client.send(message).await.map_err(|e| e.to_string())?;
                check_reply(message, &received.message)?;
            }
        }
        clients.push(client);
    }
    let mut series: [Series; 2] = Default::default();
    for _ in 0..config.load_rounds {
        for (message, s) in [&application, &text].into_iter().zip(series.iter_mut()) {
            let before = ProcessCounters::read(pid)?;
            let started = Instant::now();
            let until = started + config.load_round;
            // One task per connection: the clients use every core, as separate agents would.
            let tasks: Vec<_> = clients
                .drain(..)
                .map(|mut client| {
                    let message = Arc::clone(message);
                    tokio::spawn(async move {
                        let mut samples = Vec::new();
                        while Instant::now() < until {
                            let t = Instant::now();
                            let received = match client.send(&message).await {
                                Ok(received) => received,
                                Err(e) => return Err(e.to_string()),
                            };
                            check_reply(&message, &received.message)?;
                            samples.push(t.elapsed());
                        }
                        Ok((client, samples))
                    })
                })
                .collect();
            for task in tasks {
                let (client, samples) = task.await.map_err(|e| e.to_string())??;
                clients.push(client);
                s.samples.extend(samples);
            }
            s.busy += started.elapsed();
            let spent = ProcessCounters::read(pid)?.since(before);
            s.server = Some(s.server.unwrap_or_default().add(spent));
        }
    }
    provider.stop();
    print_load(&series, config);
    Ok(())
}

fn print_load(series: &[Series; 2], config: Config) {
    println!();
    println!(
        "(b) and (c) under load: {} WebSocket connections to the provider in its own process, each sending",
        config.load_connections
    );
    println!(
        "    its next message when the last is answered; {} rounds of {} ms per message, alternating",
        config.load_rounds,
        config.load_round.as_millis()
    );
    println!(
        "    provider per request, all threads: CPU and run-queue wait in µs, times a thread was put on a CPU"
    );
    println!(
        "{:<26} {:>8} {:>9} {:>8} {:>8} {:>7} {:>6} {:>5}",
        "message", "n", "req/s", "median", "p99", "CPU", "wait", "runs"
    );
    let per_request = |s: &Series| s.server_per_request().unwrap_or_default();
    for (name, s) in ["(b) application 0-RTT", "(c) text"]
        .into_iter()
        .zip(series)
    {
        let server = per_request(s);
        println!(
            "{:<26} {:>8} {:>9.0} {:>8} {:>8} {:>7.1} {:>6.1} {:>5.2}",
            name,
            s.samples.len(),
            s.per_second(),
            us(s.median()),
            us(s.p99()),
            server.cpu_ns / 1e3,
            server.wait_ns / 1e3,
            server.runs,
        );
    }
    let [b, c] = series;
    println!(
        "(b)/(c): throughput {:.2}x, provider CPU per request {:.2}x",
        b.per_second() / c.per_second().max(1e-9),
        per_request(b).cpu_ns / per_request(c).cpu_ns.max(1e-9)
    );
}

// --- helpers ------------------------------------------------------------------------------

/// The 1-, 5- and 15-minute load averages (other processes share this machine's cores).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".to_owned(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn product_protocol() -> Result<String> {
    let path = repo_root().join("examples/protocols/product-info.md");
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

fn product_request(id: &str) -> Value {
    json!({"messageId": id, "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"})
}

fn tempdir() -> Result<tempfile::TempDir> {
    tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))
}

/// The protocol text with one sentence added to `# Requirements`: a different hash, so a
/// provider must negotiate it from scratch.
fn unique(text: &str, tag: &str) -> String {
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    text.replacen(
        "# Requirements\n\n",
        &format!("# Requirements\n\nBenchmark protocol ({tag}, {nonce}).\n\n"),
        1,
    )
}

async fn requester(dir: &tempfile::TempDir) -> Result<Requester> {
    let url = format!("sqlite://{}/requester.db?mode=rwc", dir.path().display());
    let store: Arc<dyn Store> = parley_store::connect(&url, Default::default())
        .await
        .map_err(|e| format!("requester store: {e}"))?;
    Ok(Requester::new(store))
}

/// Files in the sandbox's artifact cache directory (compiled handlers and their MACs).
fn artifacts(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .count()
    })
}

/// One full negotiation and its first application answer, split at the requester's progress
/// reports.
#[derive(Debug, Clone, Default)]
struct NegotiationTiming {
    total: Duration,
    /// Hello → the provider's destinationHello (plus the requester's local store write).
    hello: Duration,
    /// protocolNegotiation → the provider's acceptance and codeGeneration: evaluation,
    /// handler generation, sandbox publish (top-level code evaluated into a memory image; the
    /// runtime's code is compiled once per provider) and verification.
    provider_build: Duration,
    /// The requester's codeGeneration and its local records.
    finish: Duration,
    /// The first application message and its answer (`Requester::call`, a new connection).
    first_call: Duration,
    messages: u32,
    cache_before: usize,
    cache_after: usize,
}

async fn negotiate_and_call(
    requester: &Requester,
    url: &str,
    text: &str,
) -> Result<NegotiationTiming> {
    let mut marks: Vec<(&'static str, Instant)> = Vec::new();
    let start = Instant::now();
    let negotiated = requester
        .negotiate(url, text, |p| marks.push((p.stage, Instant::now())))
        .await
        .map_err(|e| format!("negotiation failed: {e}"))?;
    let negotiated_at = Instant::now();
    if negotiated.outcome != Outcome::Agreed {
        return Err(format!(
            "negotiation did not agree: {:?}",
            negotiated.outcome
        ));
    }
    let called = requester
        .call(url, &negotiated.hash, product_request("first"))
        .await
        .map_err(|e| format!("first application call failed: {e}"))?;
    let end = Instant::now();
    if called.answer["productInfo"]["productId"] != "P12345" || called.renegotiated.is_some() {
        return Err(format!("unexpected first answer: {}", called.answer));
    }
    let at = |stage: &str| {
        marks
            .iter()
            .find(|(s, _)| *s == stage)
            .map(|(_, t)| *t)
            .ok_or_else(|| format!("no {stage:?} progress report; stages: {marks:?}"))
    };
    let negotiating = at("negotiating")?;
    let agreed = at("agreed; code generation")?;
    Ok(NegotiationTiming {
        total: end - start,
        hello: negotiating - start,
        provider_build: agreed - negotiating,
        finish: negotiated_at - agreed,
        first_call: end - negotiated_at,
        messages: negotiated.messages,
        ..NegotiationTiming::default()
    })
}

fn check_application(reply: &Message) -> Result<()> {
    match (&reply.format, &reply.content) {
        (Format::Structured, Content::Json(v)) if v["productInfo"]["productId"] == "P12345" => {
            Ok(())
        }
        _ => Err(format!("unexpected application reply: {reply:?}")),
    }
}

fn check_text(reply: &Message) -> Result<()> {
    if reply.format == Format::Text {
        Ok(())
    } else {
        Err(format!("unexpected text reply: {reply:?}"))
    }
}

/// Latencies of request/reply exchanges of one kind (sequential over one connection, or under
/// load over several) and the time they took.
#[derive(Debug, Clone, Default)]
struct Series {
    samples: Vec<Duration>,
    busy: Duration,
    /// What the provider process spent while this series ran, when it runs in a process of its
    /// own (all its threads: the request, the instance reset after it, the epoch ticker).
    server: Option<ProcessCounters>,
}

impl Series {
    fn sorted(&self) -> Vec<Duration> {
        let mut s = self.samples.clone();
        s.sort_unstable();
        s
    }
    fn median(&self) -> Duration {
        percentile(&self.sorted(), 50.0)
    }
    fn p99(&self) -> Duration {
        percentile(&self.sorted(), 99.0)
    }
    fn mean(&self) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        self.samples.iter().sum::<Duration>() / self.samples.len() as u32
    }
    fn per_second(&self) -> f64 {
        self.samples.len() as f64 / self.busy.as_secs_f64().max(1e-9)
    }
    /// The provider's counters per request.
    fn server_per_request(&self) -> Option<ProcessCounters<f64>> {
        Some(self.server?.per(self.samples.len()))
    }
}

/// A process's counters so far, summed over its threads: from `/proc/PID/task/TID/schedstat` the
/// scheduler's own nanoseconds on a CPU and waiting for one (not the tick-rounded figures of
/// `/proc/PID/stat`) and how many times a thread was put on a CPU (each wake-up is one); from
/// `/proc/PID/stat` the page faults. Threads that exited in between are missed, which a
/// long-running server's are not.
#[derive(Debug, Clone, Copy, Default)]
struct ProcessCounters<T = u64> {
    cpu_ns: T,
    wait_ns: T,
    runs: T,
    faults: T,
}

impl ProcessCounters {
    fn read(pid: u32) -> Result<Self> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|e| format!("/proc/{pid}/task: {e}"))?;
        let mut counters = ProcessCounters::default();
        for task in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let mut fields = stat
                .split_whitespace()
                .map(|n| n.parse::<u64>().unwrap_or(0));
            counters.cpu_ns += fields.next().unwrap_or(0);
            counters.wait_ns += fields.next().unwrap_or(0);
            counters.runs += fields.next().unwrap_or(0);
        }
        // Fields 10 and 12 (minflt, majflt), counted after the command's closing parenthesis.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<u64> = after
            .split_whitespace()
            .map(|n| n.parse().unwrap_or(0))
            .collect();
        counters.faults = fields.get(7).copied().unwrap_or(0) + fields.get(9).copied().unwrap_or(0);
        Ok(counters)
    }

    fn since(self, before: Self) -> Self {
        ProcessCounters {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            wait_ns: self.wait_ns.saturating_sub(before.wait_ns),
            runs: self.runs.saturating_sub(before.runs),
            faults: self.faults.saturating_sub(before.faults),
        }
    }

    /// Each counter divided by `n` requests.
    fn per(self, n: usize) -> ProcessCounters<f64> {
        let n = n.max(1) as f64;
        ProcessCounters {
            cpu_ns: self.cpu_ns as f64 / n,
            wait_ns: self.wait_ns as f64 / n,
            runs: self.runs as f64 / n,
            faults: self.faults as f64 / n,
        }
    }

    fn add(self, other: Self) -> Self {
        ProcessCounters {
            cpu_ns: self.cpu_ns + other.cpu_ns,
            wait_ns: self.wait_ns + other.wait_ns,
            runs: self.runs + other.runs,
            faults: self.faults + other.faults,
        }
    }
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One way of sending a message.
#[derive(Debug, Clone, Copy)]
enum Op<'a> {
    /// Over the driver's NLIP connection.
    Send(&'a Message),
    /// Straight into `Agent::handle` (everything but the transport).
    Handle(&'a Message),
    /// Straight into `Provider::application` (protocol cache, schema checks, sandbox call).
    Application(&'a Value),
}

struct Driver {
    client: Option<NlipClient>,
    agent: Arc<Agent>,
    hash: ProtocolHash,
    peer: std::net::SocketAddr,
    /// The provider's process, when it runs in one of its own: its CPU time is read per block.
    server_pid: Option<u32>,
}

impl Driver {
    /// Calls straight into `server`'s agent, without a transport.
    fn direct(server: &KeptServer, hash: ProtocolHash) -> Driver {
        Driver {
            client: None,
            agent: server.agent.clone(),
            hash,
            peer: server.addr,
            server_pid: None,
        }
    }

    /// Sends once and checks the answer.
    async fn exec(&mut self, op: Op<'_>) -> Result<()> {
        match op {
            Op::Send(message) => {
                let client = self.client.as_mut().ok_or("no connection")?;
                let received = client.send(message).await.map_err(|e| e.to_string())?;
                if received.status != 200 {
                    return Err(format!("HTTP {}: {:?}", received.status, received.message));
                }
                check_reply(message, &received.message)
            }
            Op::Handle(message) => {
                // As an anonymous peer of the server (allowed everything in the benchmarks).
                let caller = parley::peer::Caller::new(self.peer, self.agent.access().anonymous());
                let reply = self.agent.handle(message, &caller).await;
                check_reply(message, &reply.message)
            }
            Op::Application(payload) => {
                let answer = self
                    .agent
                    .provider()
                    .application(
                        &self.hash,
                        payload,
                        "bench",
                        tokio::runtime::Handle::current(),
                    )
                    .await
                    .map_err(|e| format!("application: {e:?}"))?;
                if answer["productInfo"]["productId"] == "P12345" {
                    Ok(())
                } else {
                    Err(format!("unexpected application answer: {answer}"))
                }
            }
        }
    }

    /// [`Driver::alternate_ops`] for a fixed number of ops.
    async fn alternate<const N: usize>(
        &mut self,
        ops: [Op<'_>; N],
        config: Config,
    ) -> Result<[Series; N]> {
        let series = self.alternate_ops(&ops, config).await?;
        series
            .try_into()
            .map_err(|_| "one series per op".to_string())
    }

    /// Warm-up, then `requests` exchanges of each op, sequentially, in alternating blocks
    /// of 100 so that outside load falls on every series alike.
    async fn alternate_ops(&mut self, ops: &[Op<'_>], config: Config) -> Result<Vec<Series>> {
        for _ in 0..config.warmup {
            for op in ops {
                self.exec(*op).await?;
            }
        }
        let mut series: Vec<Series> = ops.iter().map(|_| Series::default()).collect();
        const BLOCK: usize = 100;
        let mut done = 0;
        while done < config.requests {
            let n = BLOCK.min(config.requests - done);
            for (op, s) in ops.iter().zip(series.iter_mut()) {
                let before = self.server_pid.map(ProcessCounters::read).transpose()?;
                let block = Instant::now();
                for _ in 0..n {
                    let t = Instant::now();
                    self.exec(*op).await?;
                    s.samples.push(t.elapsed());
                }
                s.busy += block.elapsed();
                if let (Some(pid), Some(before)) = (self.server_pid, before) {
                    let spent = ProcessCounters::read(pid)?.since(before);
                    s.server = Some(s.server.unwrap_or_default().add(spent));
                }
            }
            done += n;
        }
        Ok(series)
    }
}

/// An application message must get its product, a text message a text answer.
fn check_reply(sent: &Message, reply: &Message) -> Result<()> {
    if sent.format == Format::Text {
        check_text(reply)
    } else {
        check_application(reply)
    }
}

// --- model calls -----------------------------------------------------------------------------

struct ModelRow {
    scenario: &'static str,
    reasoner: &'static str,
    outcome: String,
    nlip_messages: u32,
    meta_messages: usize,
    requests: Vec<&'static str>,
    elapsed: Duration,
}

/// A server built as `TestApp` builds one, keeping its agent for in-process measurements.
struct KeptServer {
    addr: std::net::SocketAddr,
    agent: Arc<Agent>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::result::Result<(), parley::startup::StartupError>>,
}

impl KeptServer {
    async fn spawn(settings: &Settings) -> Result<KeptServer> {
        let bound = Bound::new(settings)
            .await
            .map_err(|e| format!("server: {}", parley::error::chain(&e)))?;
        let (addr, agent) = (bound.addr, bound.state.agent.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bound.run(async {
            let _ = rx.await;
        }));
        Ok(KeptServer {
            addr,
            agent,
            shutdown: Some(tx),
            task,
        })
    }

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Where the bench's threads (the client) and the provider process run while (b) and (c) are
/// measured against a provider in its own process.
///
/// Unpinned, on a small machine, the scheduler sometimes wakes the two on different CPUs (each
/// wake-up a cross-CPU interrupt, through the hypervisor on a VM) and sometimes keeps them on
/// one CPU (a local switch, several times cheaper), in stretches of tens to hundreds of
/// milliseconds: every series is then a mix of two modes, and its median falls in one or the
/// other by chance. Pinning measures each mode on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Where the scheduler likes: pinning is not possible here (one CPU, or no `taskset`).
    Unpinned,
    /// The client on the first half of the CPUs, the provider on the other half: two agents,
    /// each with cores of its own, as they are deployed. The setting of the goal.
    Apart,
    /// Client and provider on one CPU: two agents sharing a core.
    Shared,
}

/// The CPU lists (as `taskset --cpu-list` takes them, e.g. `0-1,4`) of each placement.
#[derive(Debug, Clone, Default)]
struct Pinning {
    client: String,
    provider: String,
    shared: String,
    all: String,
}

impl Placement {
    /// The placements `picked` (apart, shared) names, on the CPUs this process may use, and
    /// their CPUs. Pinning needs two CPUs and util-linux's `taskset` (the workspace forbids the
    /// `unsafe` a direct `sched_setaffinity` would take); without them the provider runs where
    /// the scheduler puts it, and its rows say so.
    fn available(picked: [bool; 2]) -> (Vec<Placement>, Pinning) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(str::trim)
            .unwrap_or_default();
        let cpus = parse_cpu_list(allowed);
        let taskset = std::process::Command::new("taskset")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if cpus.len() < 2 || !taskset {
            println!(
                "placement: not pinned ({} CPUs, taskset {}): the provider runs where the scheduler puts it",
                cpus.len(),
                if taskset { "found" } else { "missing" }
            );
            return (vec![Placement::Unpinned], Pinning::default());
        }
        let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let (first, second) = cpus.split_at(cpus.len() / 2);
        let pinning = Pinning {
            client: list(first),
            provider: list(second),
            shared: list(&second[..1]),
            all: list(&cpus),
        };
        let [apart, shared] = picked;
        let placements = [(apart, Placement::Apart), (shared, Placement::Shared)]
            .into_iter()
            .filter_map(|(on, p)| on.then_some(p))
            .collect();
        (placements, pinning)
    }

    fn labels(self) -> [&'static str; 2] {
        match self {
            Placement::Unpinned => ["HTTP, own process", "WS, own process"],
            Placement::Apart => ["HTTP, own cores", "WS, own cores"],
            Placement::Shared => ["HTTP, one core", "WS, one core"],
        }
    }

    /// What the goal is judged on, said as the heading of its ratios: the provider apart from
    /// the client, or unpinned where pinning is not possible; `None` for one shared core.
    fn goal(self) -> Option<&'static str> {
        match self {
            Placement::Apart => Some(
                "goal: (b) within 1.5x of (c), two agents each in its own process on CPUs of its own",
            ),
            Placement::Unpinned => Some(
                "goal: (b) within 1.5x of (c), a provider in its own process, not pinned (where it runs is the scheduler's choice)",
            ),
            Placement::Shared => None,
        }
    }

    /// Pins this process (the client) and the provider process `pid`, every thread of each.
    fn apply(self, pinning: &Pinning, pid: u32) -> Result<()> {
        let (client, provider) = match self {
            Placement::Unpinned => return Ok(()),
            Placement::Apart => (&pinning.client, &pinning.provider),
            Placement::Shared => (&pinning.shared, &pinning.shared),
        };
        pin(std::process::id(), client)?;
        pin(pid, provider)
    }

    /// Lets this process run on every CPU again (the provider is pinned anew by the next
    /// placement's `apply`).
    fn undo(self, pinning: &Pinning) -> Result<()> {
        match self {
            Placement::Unpinned => Ok(()),
            Placement::Apart | Placement::Shared => pin(std::process::id(), &pinning.all),
        }
    }
}

/// `0-2,5` → [0, 1, 2, 5].
fn parse_cpu_list(list: &str) -> Vec<u32> {
    list.split(',')
        .filter_map(|part| match part.trim().split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?..=b.parse().ok()?).collect::<Vec<u32>>()),
            None => part.trim().parse().ok().map(|n| vec![n]),
        })
        .flatten()
        .collect()
}

/// Pins every thread of process `pid` to `cpus` (threads it starts later inherit the mask).
fn pin(pid: u32, cpus: &str) -> Result<()> {
    let out = std::process::Command::new("taskset")
        .args(["--all-tasks", "--cpu-list", "--pid", cpus, &pid.to_string()])
        .output()
        .map_err(|e| format!("taskset: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset {cpus} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `parley serve` in a child process (this bench binary, re-executed as the CLI): SQLite in
/// `dir`, the example capabilities, loopback ports. Killed on drop whatever happens.
struct ProviderProcess {
    addr: std::net::SocketAddr,
    child: std::process::Child,
}

impl ProviderProcess {
    async fn start(dir: &Path) -> Result<ProviderProcess> {
        let port = parley_tests::free_port().map_err(|e| format!("no free port: {e}"))?;
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let log = std::fs::File::create(dir.join("provider.log")).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = parley_tests::parley_serve_command(ROLE_ENV, addr, &dir.join("data"))
            .map_err(|e| format!("cannot prepare the provider process: {e}"))?
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start the provider process: {e}"))?;
        let mut provider = ProviderProcess { addr, child };
        let health = format!("http://{addr}/health");
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = provider.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("provider.log")).unwrap_or_default();
                return Err(format!("the provider process exited ({status}):\n{log}"));
            }
            if reqwest::get(&health)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(provider);
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err("the provider process did not become healthy within 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn stop(self) {
        // Drop kills it.
    }
}

impl Drop for ProviderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn answer(value: Value) -> ScriptedReply {
    ScriptedReply::text(value.to_string())
}

/// What each recorded chat-completion request was for.
fn request_kind(body: &Value) -> &'static str {
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    let user = body["messages"][1]["content"].as_str().unwrap_or_default();
    if system.starts_with("You evaluate") {
        "evaluate"
    } else if user.contains("name=\"failure\"") {
        "fix"
    } else if system.starts_with("You write protocol handlers") {
        "generate"
    } else {
        "other"
    }
}

async fn model_calls(base: &str) -> Result<Vec<ModelRow>> {
    // A correct handler as a model would write it: the built-in generator's, for the
    // capability the built-in reasoner maps the protocol onto.
    let doc = ProtocolDoc::parse(base).map_err(|e| e.to_string())?;
    let capabilities = parley::startup::load_capabilities(Some(&example_capabilities()))
        .await
        .map_err(|e| format!("{e:#}"))?;
    let specs = DeclaredCapability::all(&capabilities);
    let Evaluation::Accept { mapping } = BuiltinProtocolReasoner.evaluate_sync(&doc, &specs) else {
        return Err("the built-in reasoner does not accept the product protocol".into());
    };
    let good = BuiltinProtocolReasoner
        .generate_sync(&doc, &specs, Some(&mapping))
        .map_err(|e| e.to_string())?;
    let capability = mapping.capability.clone();
    let accept = answer(json!({
        "decision": "accept",
        "reason": "getProductInfo serves every field.",
        "capability": capability,
    }));
    let good_handler = answer(json!({"source": good.source, "grants": good.grants}));
    // Answers every request with status 500: fails the protocol's test cases.
    let broken_handler = answer(json!({
        "source": "function handle(request) {\n  return { messageId: request.messageId, type: \"RESPONSE\", status: { code: 500, message: \"not implemented\" } };\n}\n",
        "grants": [capability],
    }));

    let scenarios = [
        (
            "nothing fails",
            ProtocolBackend::Openai,
            vec![accept.clone(), good_handler.clone()],
        ),
        (
            "one failed verification",
            ProtocolBackend::Openai,
            vec![accept.clone(), broken_handler, good_handler.clone()],
        ),
        ("nothing fails", ProtocolBackend::Hybrid, vec![]),
    ];
    let mut rows = Vec::new();
    for (scenario, backend, script) in scenarios {
        let model = ScriptedOpenAi::start().await;
        for reply in script {
            model.push(reply);
        }
        // The server configured as an operator would: `reasoner = "openai"` pointing at the
        // scripted endpoint, and the protocol backend under test.
        let provider_dir = tempdir()?;
        let mut settings = bench_settings(provider_dir.path());
        settings.reasoner = ReasonerKind::Openai;
        settings.openai.base_url = model.base_url();
        settings.openai.model = "scripted-model".into();
        settings.openai.timeout_secs = 10;
        settings.negotiation.backend = backend;
        let app = TestApp::spawn(&settings).await;
        let requester_dir = tempdir()?;
        let requester = requester(&requester_dir).await?;
        let t = Instant::now();
        let negotiated = requester
            .negotiate(&app.url(), base, |_| {})
            .await
            .map_err(|e| format!("{backend:?} negotiation ({scenario}): {e}"))?;
        let outcome = match &negotiated.outcome {
            Outcome::Agreed => {
                let called = requester
                    .call(&app.url(), &negotiated.hash, product_request("m1"))
                    .await
                    .map_err(|e| format!("{backend:?} call: {e}"))?;
                if called.answer["productInfo"]["productId"] == "P12345" {
                    "agreed, answered".to_owned()
                } else {
                    format!("agreed, wrong answer {}", called.answer)
                }
            }
            other => format!("{other:?}"),
        };
        let elapsed = t.elapsed();
        app.stop().await;
        rows.push(ModelRow {
            scenario,
            reasoner: match backend {
                ProtocolBackend::Openai => "openai",
                ProtocolBackend::Hybrid => "hybrid",
                _ => "other",
            },
            outcome,
            nlip_messages: negotiated.messages,
            meta_messages: negotiated.transcript.len(),
            requests: model
                .requests()
                .iter()
                .map(|r| request_kind(&r.body))
                .collect(),
            elapsed,
        });
    }
    Ok(rows)
}

// --- report --------------------------------------------------------------------------------

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn print_negotiations(cold: &[NegotiationTiming], warm: &[NegotiationTiming]) {
    println!();
    println!("(a) full negotiation, built-in backend: hello -> first application answer (ms)");
    println!(
        "{:<6} {:>4} {:>9} {:>8} {:>10} {:>8} {:>10} {:>6} {:>16}",
        "cache", "run", "total", "hello", "eval+gen+", "finish", "1st call", "NLIP", "cache files",
    );
    println!(
        "{:<6} {:>4} {:>9} {:>8} {:>10} {:>8} {:>10} {:>6} {:>16}",
        "", "", "", "", "pub+verify", "", "", "msgs", "before -> after"
    );
    for (label, runs) in [("cold", cold), ("warm", warm)] {
        for (i, t) in runs.iter().enumerate() {
            println!(
                "{:<6} {:>4} {:>9} {:>8} {:>10} {:>8} {:>10} {:>6} {:>16}",
                label,
                i + 1,
                ms(t.total),
                ms(t.hello),
                ms(t.provider_build),
                ms(t.finish),
                ms(t.first_call),
                t.messages,
                format!("{} -> {}", t.cache_before, t.cache_after),
            );
        }
        let series = |f: fn(&NegotiationTiming) -> Duration| Series {
            samples: runs.iter().map(f).collect(),
            ..Series::default()
        };
        let total = series(|t| t.total);
        println!(
            "{:<6} {:>4} {:>9} {:>8} {:>10} {:>8} {:>10}   (p99 = max at this n: {} ms; goal < 2000 ms: {})",
            label,
            "med",
            ms(total.median()),
            ms(series(|t| t.hello).median()),
            ms(series(|t| t.provider_build).median()),
            ms(series(|t| t.finish).median()),
            ms(series(|t| t.first_call).median()),
            ms(total.p99()),
            if total.p99() < Duration::from_secs(2) {
                "met"
            } else if total.median() < Duration::from_secs(2) {
                "median met, p99 missed"
            } else {
                "MISSED"
            }
        );
    }
    println!(
        "cold = a fresh provider per run (fresh data dir: empty sandbox artifact cache, so the \
         runtime's code is compiled during the run: the test app does not warm up); \
         warm = one provider after an untimed run, a new protocol hash per run: the handler (its \
         source names the hash) is evaluated into a new memory image every run, the compiled \
         runtime code is reused and nothing new is cached. cache files include the cache's key \
         file"
    );
}

fn print_latency(rows: &[(&str, &str, Series)], goal: Option<Placement>) {
    println!();
    println!("(b) application message through the cached protocol (0-RTT) vs (c) plain NLIP text");
    println!(
        "    sequential, one in flight, over one connection (in-process: direct calls); latency in µs"
    );
    println!(
        "    the provider process per request, all threads (own process rows only): CPU and run-queue wait in µs,"
    );
    println!("    times a thread was put on a CPU (wake-ups), page faults");
    println!(
        "{:<18} {:<26} {:>6} {:>8} {:>8} {:>8} {:>9} {:>7} {:>6} {:>5} {:>6}",
        "transport",
        "message",
        "n",
        "median",
        "p99",
        "mean",
        "req/s",
        "CPU",
        "wait",
        "runs",
        "faults"
    );
    for (transport, name, s) in rows {
        let server = s.server_per_request().map_or_else(String::new, |c| {
            format!(
                "{:>7.1} {:>6.1} {:>5.2} {:>6.2}",
                c.cpu_ns / 1e3,
                c.wait_ns / 1e3,
                c.runs,
                c.faults
            )
        });
        println!(
            "{:<18} {:<26} {:>6} {:>8} {:>8} {:>8} {:>9.0} {}",
            transport,
            name,
            s.samples.len(),
            us(s.median()),
            us(s.p99()),
            us(s.mean()),
            s.per_second(),
            server
        );
    }
    let ratio = |b: Duration, c: Duration| b.as_secs_f64() / c.as_secs_f64().max(1e-12);
    // The goal is about two agents talking over the wire, each in its own process on CPUs of its
    // own: the provider in its own process, pinned apart from the client (or unpinned where
    // pinning is not possible). The other rows share CPUs between client and provider, so that
    // their (c) is a local context switch, not a wake-up on another CPU; they are shown for
    // comparison. The in-process rows only show where the time goes.
    let pairs: Vec<_> = rows
        .windows(2)
        .filter_map(|pair| match pair {
            [(transport, bn, b), (t2, cn, c)]
                if transport == t2
                    && bn.starts_with("(b)")
                    && cn.starts_with("(c)")
                    && *transport != "in-process" =>
            {
                Some((*transport, b, c))
            }
            _ => None,
        })
        .collect();
    // The rows of the goal's placement first, under its heading; then the others.
    let in_goal = |t: &str| goal.is_some_and(|p| p.labels().contains(&t));
    let headings = [
        goal.and_then(Placement::goal),
        Some(
            "for comparison: client and provider sharing CPUs ((c) is then a local context switch)",
        ),
    ];
    for (heading, judged) in headings.into_iter().zip([true, false]) {
        let group: Vec<_> = pairs
            .iter()
            .filter(|(t, ..)| in_goal(t) == judged)
            .collect();
        let Some(heading) = heading.filter(|_| !group.is_empty()) else {
            continue;
        };
        println!();
        println!("{heading}");
        for (transport, b, c) in group {
            let median = ratio(b.median(), c.median());
            let verdict = match (judged, median <= 1.5) {
                (false, _) => String::new(),
                (true, met) => format!("  (goal <= 1.5x: {})", if met { "met" } else { "MISSED" }),
            };
            println!(
                "{:<18} (b)/(c): median {:.2}x, p99 {:.2}x, mean {:.2}x{}",
                transport,
                median,
                ratio(b.p99(), c.p99()),
                ratio(b.mean(), c.mean()),
                verdict
            );
        }
    }
}

fn print_model_calls(rows: &[ModelRow]) {
    println!();
    println!(
        "model calls per negotiation (provider configured with reasoner = openai against a \
         scripted OpenAI-compatible server; product protocol, hello -> agreed + first answer)"
    );
    println!(
        "{:<8} {:<24} {:<18} {:>5} {:>5} {:>6} {:>8}  requests",
        "reasoner", "scenario", "outcome", "NLIP", "meta", "calls", "ms"
    );
    for r in rows {
        println!(
            "{:<8} {:<24} {:<18} {:>5} {:>5} {:>6} {:>8}  {}",
            r.reasoner,
            r.scenario,
            r.outcome,
            r.nlip_messages,
            r.meta_messages,
            r.requests.len(),
            ms(r.elapsed),
            if r.requests.is_empty() {
                "-".to_owned()
            } else {
                r.requests.join(", ")
            }
        );
    }
    let worst = rows
        .iter()
        .filter(|r| r.scenario == "nothing fails")
        .map(|r| r.requests.len())
        .max()
        .unwrap_or(0);
    println!(
        "calls = chat-completion requests the scripted server received (NLIP = requester's NLIP \
         messages, meta = meta-protocol messages both ways); goal <= 3 when nothing fails: {} \
         (the public implementation: 14)",
        if worst <= 3 { "met" } else { "MISSED" }
    );
}
