//! HTTP benchmark: the same NLIP text-message workload (wrk, keep-alive connections)
//! against Parley, Parley over TLS 1.3, the Python reference server (`uvicorn
//! nlip_server.echo:app`) and a bare axum echo server, one after the other in one run; prints
//! requests/s, median and p99 latency, peak RSS and CPU for each, and the ratios
//! Parley/reference, Parley/echo and Parley over TLS/Parley.
//!
//! Run: `cargo bench -p parley-tests --bench http` (see tests/benches/README.md).
//!
//! Parley runs as a separate process — this very binary re-executed with
//! `PARLEY_BENCH_ROLE=parley`, which calls `parley::cli::main()` exactly as the `parley`
//! binary does — so its peak RSS and CPU are its own and it is built with the bench
//! (release) profile.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use parley_tests::{parley_serve_command, repo_root};

const ROLE_ENV: &str = "PARLEY_BENCH_ROLE";
const BODY: &str = r#"{"format":"text","subformat":"english","content":"Hello"}"#;
/// Linux USER_HZ: the unit of utime/stime in /proc/PID/stat.
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

fn main() -> ExitCode {
    if std::env::var(ROLE_ENV).as_deref() == Ok("parley") {
        return parley::cli::main();
    }
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!("http benchmark skipped: run it with `cargo bench -p parley-tests --bench http`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("http benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, String>;

#[derive(Debug, Clone)]
struct Config {
    duration_secs: u64,
    warmup_secs: u64,
    rounds: u32,
    connections: u32,
    threads: u32,
    only: Option<Vec<String>>,
    /// uvicorn's --log-level for the reference server. The issue's setup is "access log
    /// off" at the default level (info), where nlip_server logs each session and message.
    reference_log_level: String,
}

impl Config {
    fn from_env() -> Result<Config> {
        fn num(name: &str, default: u64) -> Result<u64> {
            match std::env::var(name) {
                Ok(v) => v.parse().map_err(|e| format!("{name}={v:?}: {e}")),
                Err(_) => Ok(default),
            }
        }
        let only = std::env::var("BENCH_ONLY")
            .ok()
            .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
        Ok(Config {
            duration_secs: num("BENCH_DURATION", 5)?.clamp(1, 120),
            warmup_secs: num("BENCH_WARMUP", 3)?.min(30),
            rounds: u32::try_from(num("BENCH_ROUNDS", 3)?.clamp(1, 10))
                .map_err(|e| e.to_string())?,
            connections: u32::try_from(num("BENCH_CONNECTIONS", 16)?.clamp(1, 256))
                .map_err(|e| e.to_string())?,
            threads: u32::try_from(num("BENCH_THREADS", 2)?.clamp(1, 16))
                .map_err(|e| e.to_string())?,
            only,
            reference_log_level: std::env::var("BENCH_REFERENCE_LOG_LEVEL")
                .unwrap_or_else(|_| "info".to_owned()),
        })
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> Result<u16> {
    parley_tests::free_port().map_err(|e| format!("no free port: {e}"))
}

/// One server under test, owned by this process: stopped on drop whatever happens.
#[derive(Debug)]
struct Server {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Server {
    fn spawn(name: &'static str, mut cmd: Command, log: PathBuf) -> Result<Server> {
        let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {name} ({cmd:?}): {e}"))?;
        Ok(Server { name, child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits until `GET /health` answers 200, or fails after `limit`.
    fn wait_ready(&mut self, addr: SocketAddr, limit: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited during startup ({status}):\n{}",
                    self.name,
                    self.log_tail()
                ));
            }
            if let Ok((200, _)) = http_request(addr, "GET", "/health", None) {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "{} not ready after {limit:?}:\n{}",
                    self.name,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the port accepts connections, or fails after `limit`.
    fn wait_listening(&mut self, addr: SocketAddr, limit: Duration) -> Result<()> {
        let start = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited during startup ({status}):\n{}",
                    self.name,
                    self.log_tail()
                ));
            }
            if start.elapsed() > limit {
                return Err(format!("{} not listening after {limit:?}", self.name));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Drop kills it.
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A minimal HTTP/1.1 exchange over loopback (status and body), for readiness and sanity.
fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<(u16, String)> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let body = json.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if json.is_some() {
        let _ = write!(
            req,
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {text:.200}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// One POST of [`BODY`] over HTTPS, trusting `ca`: status and body.
fn https_post(addr: SocketAddr, path: &str, ca: &Path) -> Result<(u16, String)> {
    let pem = std::fs::read(ca).map_err(|e| e.to_string())?;
    let ca = reqwest::Certificate::from_pem(&pem).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .tls_certs_merge([ca])
            .build()
            .map_err(|e| e.to_string())?;
        let response = client
            .post(format!("https://{addr}{path}"))
            .header("content-type", "application/json")
            .body(BODY)
            .send()
            .await
            .map_err(|e| parley::error::chain(&e))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| e.to_string())?;
        Ok((status, body))
    })
}

fn read_proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS_PER_SEC)
}

#[derive(Debug, Default, Clone)]
struct WrkResult {
    requests_per_sec: f64,
    requests: u64,
    p50_ms: f64,
    p99_ms: f64,
    non_2xx: u64,
    socket_errors: String,
}

fn parse_duration_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, factor) = if let Some(v) = s.strip_suffix("us") {
        (v, 0.001)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 60_000.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1000.0)
    } else {
        (s, 1.0)
    };
    num.parse::<f64>().ok().map(|n| n * factor)
}

fn parse_wrk(out: &str) -> Result<WrkResult> {
    let mut r = WrkResult::default();
    let mut have_rps = false;
    for line in out.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            r.requests_per_sec = v.trim().parse().map_err(|e| format!("{t:?}: {e}"))?;
            have_rps = true;
        } else if let Some(v) = t.strip_prefix("50%") {
            r.p50_ms = parse_duration_ms(v).ok_or_else(|| format!("bad p50 {t:?}"))?;
        } else if let Some(v) = t.strip_prefix("99%") {
            r.p99_ms = parse_duration_ms(v).ok_or_else(|| format!("bad p99 {t:?}"))?;
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = v.trim().parse().unwrap_or(u64::MAX);
        } else if let Some(v) = t.strip_prefix("Socket errors:") {
            v.trim().clone_into(&mut r.socket_errors);
        } else if t.contains(" requests in ") {
            r.requests = t
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        }
    }
    if !have_rps {
        return Err(format!("no Requests/sec in wrk output:\n{out}"));
    }
    Ok(r)
}

fn wrk(cfg: &Config, lua: &Path, url: &str, secs: u64) -> Result<WrkResult> {
    let out = Command::new("wrk")
        .arg(format!("-t{}", cfg.threads))
        .arg(format!("-c{}", cfg.connections))
        .arg(format!("-d{secs}s"))
        .args(["--timeout", "5s", "--latency", "-s"])
        .arg(lua)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "wrk failed ({}): {text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse_wrk(&text)
}

fn ensure_wrk() -> Result<()> {
    let found = || {
        Command::new("wrk")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    if found() {
        return Ok(());
    }
    eprintln!("wrk not found; installing Debian's wrk");
    let ok = Command::new("sh")
        .args([
            "-c",
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if ok && found() {
        Ok(())
    } else {
        Err("wrk is not installed and could not be installed (apt-get install wrk)".into())
    }
}

fn ensure_python(root: &Path) -> Result<PathBuf> {
    let status = Command::new("bash")
        .arg(root.join("scripts/setup-python.sh"))
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run scripts/setup-python.sh: {e}"))?;
    if !status.success() {
        return Err(format!("scripts/setup-python.sh failed ({status})"));
    }
    Ok(root.join(".venv/bin/python"))
}

/// A started server under test and what was measured on it.
#[derive(Debug)]
struct Target {
    name: &'static str,
    server: Server,
    url: String,
    runs: Vec<WrkResult>,
    cpu_seconds: f64,
    wall_seconds: f64,
}

impl Target {
    /// Starts the server and checks that one exchange answers 200 with an NLIP-looking body;
    /// over TLS when `ca` is given (the CA that signed the server's certificate).
    fn start(
        name: &'static str,
        cmd: Command,
        log: PathBuf,
        addr: SocketAddr,
        path: &str,
        ca: Option<&Path>,
    ) -> Result<Target> {
        let mut server = Server::spawn(name, cmd, log)?;
        let (status, body) = match ca {
            None => {
                server.wait_ready(addr, Duration::from_secs(60))?;
                http_request(addr, "POST", path, Some(BODY))?
            }
            Some(ca) => {
                server.wait_listening(addr, Duration::from_secs(60))?;
                https_post(addr, path, ca)?
            }
        };
        if status != 200 || !body.contains("\"format\"") {
            return Err(format!(
                "{name}: POST {path} answered {status}: {body:.300}"
            ));
        }
        println!(
            "  {name:<18} POST {path} -> {status} ({} bytes) {}",
            body.len(),
            shorten(&body, 90)
        );
        Ok(Target {
            name,
            server,
            url: format!(
                "{}://{addr}{path}",
                if ca.is_some() { "https" } else { "http" }
            ),
            runs: Vec::new(),
            cpu_seconds: 0.0,
            wall_seconds: 0.0,
        })
    }

    fn run_once(&mut self, cfg: &Config, lua: &Path) -> Result<()> {
        let pid = self.server.pid();
        let before = cpu_seconds(pid);
        let started = Instant::now();
        let result = wrk(cfg, lua, &self.url, cfg.duration_secs)?;
        let wall = started.elapsed().as_secs_f64();
        if let (Some(a), Some(b)) = (before, cpu_seconds(pid)) {
            self.cpu_seconds += b - a;
            self.wall_seconds += wall;
        }
        self.runs.push(result);
        Ok(())
    }

    fn median(&self, f: impl Fn(&WrkResult) -> f64) -> f64 {
        median(self.runs.iter().map(f).collect())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn shorten(s: &str, n: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

fn wanted(cfg: &Config, key: &str) -> bool {
    cfg.only.as_ref().is_none_or(|o| o.iter().any(|k| k == key))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            let v: Vec<&str> = l.split_whitespace().take(3).collect();
            (v.len() == 3).then(|| v.join(" "))
        })
        .unwrap_or_else(|| "?".to_owned())
}

fn run() -> Result<()> {
    let cfg = Config::from_env()?;
    let root = repo_root();
    let lua = root.join("tests/benches/nlip-post.lua");
    ensure_wrk()?;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;

    println!(
        "HTTP benchmark: POST {BODY} (application/json); wrk, {} keep-alive connections, {} threads; \
         {} round(s) of {} s per server, interleaved, after a {} s warm-up each; loopback; {} cores; load average {}",
        cfg.connections,
        cfg.threads,
        cfg.rounds,
        cfg.duration_secs,
        cfg.warmup_secs,
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );

    let mut targets = Vec::new();

    if wanted(&cfg, "parley") {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let cmd = parley_serve_command(ROLE_ENV, addr, &tmp.path().join("parley-data"))
            .map_err(|e| format!("cannot prepare `parley serve`: {e}"))?;
        let log = tmp.path().join("parley.log");
        targets.push(Target::start("parley", cmd, log, addr, "/nlip", None)?);
    }

    if wanted(&cfg, "parley-tls") {
        // The same server with a certificate of a CA made for the run: TLS 1.3, wrk's
        // connections kept alive, so the figure is the cost of encrypting the traffic.
        let ca = parley_tests::pki::TestCa::new("Parley bench CA");
        let ca_file = ca.write_cert(tmp.path(), "bench-ca.pem");
        let cert = ca.server(tmp.path(), "bench-server", "parley-bench", 1);
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let mut cmd = parley_serve_command(ROLE_ENV, addr, &tmp.path().join("parley-tls-data"))
            .map_err(|e| format!("cannot prepare `parley serve`: {e}"))?;
        cmd.arg("--tls-cert")
            .arg(&cert.cert)
            .arg("--tls-key")
            .arg(&cert.key);
        let log = tmp.path().join("parley-tls.log");
        targets.push(Target::start(
            "parley over TLS",
            cmd,
            log,
            addr,
            "/nlip",
            Some(&ca_file),
        )?);
    }

    if wanted(&cfg, "reference") {
        let python = ensure_python(&root)?;
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut cmd = Command::new(python);
        cmd.args([
            "-m",
            "uvicorn",
            "nlip_server.echo:app",
            "--host",
            "127.0.0.1",
        ])
        .arg("--port")
        .arg(port.to_string())
        .args(["--workers", "1", "--no-access-log", "--log-level"])
        .arg(&cfg.reference_log_level)
        .current_dir(tmp.path());
        println!(
            "  (reference runs with --no-access-log --log-level {})",
            cfg.reference_log_level
        );
        let log = tmp.path().join("reference.log");
        // The reference answers POST /nlip with a 307 to /nlip/; measure its real end-point.
        targets.push(Target::start(
            "python reference",
            cmd,
            log,
            addr,
            "/nlip/",
            None,
        )?);
    }

    if wanted(&cfg, "echo") {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_echo-baseline"));
        cmd.arg("--listen").arg(addr.to_string());
        let log = tmp.path().join("echo.log");
        targets.push(Target::start(
            "bare axum echo",
            cmd,
            log,
            addr,
            "/nlip",
            None,
        )?);
    }

    if cfg.warmup_secs > 0 {
        for t in &targets {
            wrk(&cfg, &lua, &t.url, cfg.warmup_secs)?;
        }
    }
    // Rounds interleave the servers so that a burst of load from elsewhere on the machine
    // hits all of them alike; the medians are reported.
    for round in 1..=cfg.rounds {
        let mut line = format!("  round {round}:");
        for t in &mut targets {
            t.run_once(&cfg, &lua)?;
            if let Some(r) = t.runs.last() {
                let _ = write!(line, "  {} {:.0}/s", t.name, r.requests_per_sec);
            }
        }
        println!("{line}   (load average {})", load_average());
    }

    let peaks: Vec<Option<u64>> = targets
        .iter()
        .map(|t| read_proc_status_kb(t.server.pid(), "VmHWM:"))
        .collect();
    print_report(&targets, &peaks);
    for t in targets {
        t.server.stop();
    }
    Ok(())
}

fn print_report(targets: &[Target], peaks: &[Option<u64>]) {
    println!();
    println!(
        "{:<18} {:>11} {:>10} {:>10} {:>12} {:>10} {:>12} {:>8}",
        "server", "requests/s", "p50", "p99", "peak RSS", "CPU cores", "CPU µs/req", "non-2xx"
    );
    for (t, peak) in targets.iter().zip(peaks) {
        let rss = peak.map_or_else(
            || "?".to_owned(),
            |kb| format!("{:.1} MB", kb as f64 / 1024.0),
        );
        let cpu = if t.wall_seconds > 0.0 {
            format!("{:.2}", t.cpu_seconds / t.wall_seconds)
        } else {
            "?".to_owned()
        };
        let non_2xx: u64 = t.runs.iter().map(|r| r.non_2xx).sum();
        let requests: u64 = t.runs.iter().map(|r| r.requests).sum();
        let per_request = if t.wall_seconds > 0.0 && requests > 0 {
            format!("{:.1}", t.cpu_seconds * 1e6 / requests as f64)
        } else {
            "?".to_owned()
        };
        println!(
            "{:<18} {:>11.0} {:>7.2} ms {:>7.2} ms {:>12} {:>10} {:>12} {:>8}",
            t.name,
            t.median(|r| r.requests_per_sec),
            t.median(|r| r.p50_ms),
            t.median(|r| r.p99_ms),
            rss,
            cpu,
            per_request,
            non_2xx
        );
        for r in t.runs.iter().filter(|r| !r.socket_errors.is_empty()) {
            println!("  {} socket errors: {}", t.name, r.socket_errors);
        }
    }
    println!(
        "(medians over rounds; CPU cores = server CPU time / wall time while measured; \
         CPU µs/req = server CPU time per request, which contention from other processes \
         distorts less than requests/s)"
    );
    let rps = |name: &str| {
        targets
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.median(|r| r.requests_per_sec))
    };
    println!();
    if let (Some(p), Some(r)) = (rps("parley"), rps("python reference")) {
        let ratio = p / r;
        println!(
            "Parley / reference: {ratio:>6.1}x   (goal >= 20x: {})",
            if ratio >= 20.0 { "met" } else { "NOT met" }
        );
    }
    if let (Some(p), Some(e)) = (rps("parley"), rps("bare axum echo")) {
        let ratio = p / e;
        println!(
            "Parley / echo:      {ratio:>6.2}    (goal >= 0.85: {})",
            if ratio >= 0.85 { "met" } else { "NOT met" }
        );
    }
    if let (Some(t), Some(p)) = (rps("parley over TLS"), rps("parley")) {
        let ratio = t / p;
        println!(
            "Parley TLS / plain: {ratio:>6.2}    (goal >= 0.8: {})",
            if ratio >= 0.8 { "met" } else { "NOT met" }
        );
    }
}
