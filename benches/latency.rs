//! Follow-up message latency: pincer's long-lived stream-json session, in its
//! default sandbox and unconfined, against the raw CLI pipe it wraps and
//! against a fresh `claude -p --resume` process per message; plus pincer's
//! own overhead.
//!
//! Every side runs the real Claude Code CLI offline against the fake Messages
//! API from `tests/support` (it answers `ECHO: <prompt>` at once), so the
//! numbers are what the CLI and pincer cost, not what a model costs. The sides
//! are measured **interleaved**: follow-up 1 to each side in turn, then
//! follow-up 2 to each, and so on, so a busy moment of this shared machine
//! hits every side alike (runs one after the other drift apart by tens of
//! percent).
//!
//! - **Raw pipe:** `claude -p --input-format stream-json --output-format
//!   stream-json --verbose --permission-prompt-tool stdio`, driven directly:
//!   a user line written to stdin, lines read until the `result`. What pincer
//!   would cost if it cost nothing.
//! - **Raw pipe via the credential proxy:** the same pipe, its CLI sent
//!   through pincer's credential proxy over the proxy's Unix socket
//!   (`ANTHROPIC_UNIX_SOCKET`, a leased placeholder key), as in the sandbox,
//!   without the sandbox or pincer's engine: what the proxy hop alone costs.
//! - **... and in bwrap:** that proxied pipe inside bubblewrap exactly as
//!   pincer lays it out (`bwrap::args`, no network), started directly: what
//!   the sandbox adds, without pincer's engine.
//! - **pincer, sandboxed:** the engine as `main` runs it, one group, default
//!   `sandbox.mode` (`auto`: bubblewrap with no network; the API through the
//!   credential proxy's Unix socket). Measured from `router.send` to the reply
//!   coming out of the chat outbox.
//! - **pincer, unconfined:** the same with `sandbox.mode = "none"`.
//! - **Spawn per message:** `claude -p --resume=<id> --output-format
//!   stream-json --verbose <prompt>` with stdin closed, from spawning the
//!   process to its `result` line.
//! - Each side's first message (process start) is not counted.
//! - **Overhead:** `Engine::metrics` of the sandboxed engine for the counted
//!   follow-ups: inbound accepted → line written to the CLI's stdin, and
//!   `result` line read → stored in SQLite and handed to the outbox.
//!
//! Percentiles are nearest-rank, so with N = 30 the p95 is the 29th of 30.
//!
//! Run (N defaults to 30):
//!
//! ```text
//! cargo run -- setup && cargo bench --bench latency     # the CLI from data/claude
//! PINCER_BENCH_MESSAGES=50 cargo bench --bench latency
//! PINCER_TEST_CLAUDE=/path/to/claude cargo bench --bench latency
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use pincer::config::SandboxMode;
use pincer::domain::{GroupName, OutboundKind};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use pincer::config::Secret;
use pincer::sandbox::proxy::{Credential, Proxy};
use support::cli::{claude_bin, cli_env, TEST_API_KEY};
use support::fake_api::{echo, FakeApi};
use support::harness::{Running, Sandbox, PATIENCE};
use support::pipe::{ms, offline_cli, paired_median_ms, percentile, pipe_args, RawPipe};

/// Overrides how many follow-up messages each side sends.
const MESSAGES_ENV: &str = "PINCER_BENCH_MESSAGES";
const DEFAULT_MESSAGES: usize = 30;

fn main() {
    let n = message_count();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let report = runtime.block_on(run(n));
    report.print();
}

fn message_count() -> usize {
    match std::env::var(MESSAGES_ENV) {
        Ok(v) => v.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| panic!("{MESSAGES_ENV}={v}: want a count > 0")),
        Err(_) => DEFAULT_MESSAGES,
    }
}

/// Everything the bench prints.
struct Report {
    cli_version: String,
    cores: usize,
    messages: usize,
    raw: Vec<Duration>,
    proxied: Vec<Duration>,
    bwrapped: Vec<Duration>,
    sandboxed: Vec<Duration>,
    unconfined: Vec<Duration>,
    spawned: Vec<Duration>,
    stdin_writes: Vec<Duration>,
    result_deliveries: Vec<Duration>,
}

async fn run(messages: usize) -> Report {
    let api = FakeApi::start(echo()).await;
    let cli_version = cli_version().await;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("latency bench: {messages} follow-ups per side, interleaved, CLI {cli_version}, {cores} cores");
    let mut raw = RawPipe::start(cli_env(&api.base_url(), Path::new("home")));
    // The same pipe with the CLI sent through pincer's credential proxy over
    // its Unix socket, as in the sandbox, but without the sandbox or pincer's
    // engine: what the proxy hop alone costs.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let proxy_dir = tempfile::tempdir().unwrap();
    let credential = Credential::ApiKey(Secret::new(TEST_API_KEY));
    let proxy = Proxy::start(&api.base_url(), credential, &proxy_dir.path().join("run/api.sock"), shutdown.clone())
        .await
        .expect("the credential proxy starts");
    let lease = proxy.lease("bench");
    let mut env = cli_env("http://localhost", Path::new("home"));
    env.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
    env.push(("ANTHROPIC_API_KEY".into(), lease.key().to_owned()));
    env.push(("ANTHROPIC_UNIX_SOCKET".into(), proxy.socket().display().to_string()));
    let mut proxied = RawPipe::start(env);
    // And the same again inside pincer's bubblewrap sandbox, no network,
    // without pincer's engine: what the sandbox adds to the proxy hop.
    let sandbox_lease = proxy.lease("bench");
    let mut bwrapped = start_in_bwrap(proxy.socket(), sandbox_lease.key());
    let boxed = Side::start(&api, SandboxMode::Auto).await;
    let plain = Side::start(&api, SandboxMode::None).await;
    let mut spawn = Spawner::start(&api).await;
    // The first message of each pays for starting its process: not counted.
    raw.round_trip("warm-up").await;
    proxied.round_trip("warm-up").await;
    bwrapped.round_trip("warm-up").await;
    boxed.round_trip("warm-up").await;
    plain.round_trip("warm-up").await;
    let metrics = &boxed.pincer.engine.metrics;
    let (writes_before, deliveries_before) = (metrics.stdin_writes().len(), metrics.result_deliveries().len());
    let mut report = Report {
        cli_version,
        cores,
        messages,
        raw: Vec::new(),
        proxied: Vec::new(),
        bwrapped: Vec::new(),
        sandboxed: Vec::new(),
        unconfined: Vec::new(),
        spawned: Vec::new(),
        stdin_writes: Vec::new(),
        result_deliveries: Vec::new(),
    };
    for i in 1..=messages {
        let text = format!("follow-up {i}");
        report.raw.push(raw.round_trip(&text).await);
        report.proxied.push(proxied.round_trip(&text).await);
        report.bwrapped.push(bwrapped.round_trip(&text).await);
        report.sandboxed.push(boxed.round_trip(&text).await);
        report.unconfined.push(plain.round_trip(&text).await);
        report.spawned.push(spawn.round_trip(&text).await);
    }
    report.stdin_writes = metrics.stdin_writes().split_off(writes_before);
    report.result_deliveries = metrics.result_deliveries().split_off(deliveries_before);
    for side in [boxed, plain] {
        assert_eq!(side.pincer.session_events(&side.group).await, ["started"], "one process served every message");
        side.pincer.stop().await;
    }
    raw.close().await;
    proxied.close().await;
    bwrapped.close().await;
    shutdown.cancel();
    report
}

async fn cli_version() -> String {
    #[allow(clippy::disallowed_methods)] // the bench runs the CLI outside pincer on purpose
    let out = Command::new(claude_bin()).arg("--version").output().await.expect("claude --version runs");
    // `2.1.330 (Claude Code)`: keep the number, the table already says what it is.
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next().unwrap_or("unknown").to_string()
}

/// pincer's streaming mode in one sandbox mode: an engine with one group.
struct Side {
    _sandbox: Sandbox,
    pincer: Running,
    group: GroupName,
}

impl Side {
    async fn start(api: &FakeApi, mode: SandboxMode) -> Side {
        let mut sandbox = Sandbox::new(api);
        sandbox.config.sandbox.mode = mode;
        let group = sandbox.add_group("bench", None).await;
        let pincer = sandbox.start().await;
        Side { _sandbox: sandbox, pincer, group }
    }

    /// One message through pincer, from the router to the chat outbox.
    async fn round_trip(&self, text: &str) -> Duration {
        let start = Instant::now();
        self.pincer.send(&self.group, text).await;
        let reply = self.pincer.next_outbound().await;
        let elapsed = start.elapsed();
        assert_eq!((reply.kind, reply.text.as_str()), (OutboundKind::Reply, format!("ECHO: {text}").as_str()));
        elapsed
    }
}

/// In bubblewrap as pincer lays it out (no network, the proxy's socket
/// bound in), started directly: no pincer engine, no guard.
fn start_in_bwrap(api_socket: &Path, placeholder: &str) -> RawPipe {
    use pincer::sandbox::{bwrap, env};
    let dir = tempfile::tempdir().expect("temp dir");
    let (home, cwd, etc) = (dir.path().join("home"), dir.path().join("work"), dir.path().join("etc"));
    for d in [&home, &cwd] {
        std::fs::create_dir_all(d).unwrap();
    }
    bwrap::write_account_files(&etc).unwrap();
    let real = std::fs::canonicalize(claude_bin()).unwrap();
    let offline: std::collections::BTreeMap<String, String> =
        cli_env("http://localhost", &home).into_iter().filter(|(k, _)| !env::RESERVED.contains(&k.as_str())).collect();
    let mut command = vec![format!("{}/{}", bwrap::CLI_DIR, real.file_name().unwrap().to_string_lossy())];
    command.extend(pipe_args());
    let plan = bwrap::Plan {
        api_socket: api_socket.to_owned(),
        system: bwrap::host_system(),
        etc_dir: etc,
        group_dir: cwd.clone(),
        global: None,
        home,
        cli_dir: real.parent().unwrap().to_owned(),
        extra: Vec::new(),
        env: env::agent_env(|_| None, &offline, bwrap::HOME, bwrap::API_SOCKET, placeholder, None),
        command,
        // git's pins, after the static wrapper that confines each shell and git (`sandbox::confine`).
        pincer: std::path::PathBuf::from(env!("CARGO_BIN_EXE_pincer")),
        wrapper: pincer::sandbox::confine::wrapper::install(&dir.path().join("run")).unwrap(),
        egress: None,
        // Started without pincer's spawner, which is what passes the filter's descriptors.
        seccomp: Vec::new(),
        disable_userns: false,
    };
    #[allow(clippy::disallowed_methods)] // the bench runs the CLI outside pincer on purpose
    let mut cmd = Command::new("bwrap");
    cmd.args(bwrap::args(&plan))
        .current_dir(&cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    RawPipe::spawn(dir, cmd)
}

/// A fresh `claude -p --resume` process per message.
struct Spawner {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    session: String,
}

impl Spawner {
    async fn start(api: &FakeApi) -> Spawner {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let env = cli_env(&api.base_url(), &home);
        // Creates the session; not counted.
        let (_, session) = one_shot(&env, &dir.path().join("work"), None, "warm-up").await;
        Spawner { dir, env, session }
    }

    async fn round_trip(&mut self, text: &str) -> Duration {
        let (elapsed, id) = one_shot(&self.env, &self.dir.path().join("work"), Some(&self.session), text).await;
        // Follow whatever id the CLI reports, so history keeps growing even if
        // a resume ever forks a new session.
        self.session = id;
        elapsed
    }
}

/// Runs one `claude -p` and returns the time to its `result` line and the
/// session id it reported.
async fn one_shot(env: &[(String, String)], cwd: &Path, resume: Option<&str>, text: &str) -> (Duration, String) {
    let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"].map(String::from).to_vec();
    if let Some(id) = resume {
        args.push(format!("--resume={id}"));
    }
    args.push(text.to_string());

    let start = Instant::now();
    let mut cmd = offline_cli(cwd, env, Stdio::null());
    cmd.args(&args);
    let mut child = cmd.spawn().expect("claude starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let result = tokio::time::timeout(PATIENCE, read_result(stdout))
        .await
        .expect("a result line within the patience limit")
        .expect("the CLI printed a result line");
    let elapsed = start.elapsed();

    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"].as_str(), Some(format!("ECHO: {text}").as_str()), "{result}");
    // Let the process finish writing its session file before the next resume.
    let status = tokio::time::timeout(PATIENCE, child.wait()).await.expect("claude exits").expect("wait for claude");
    assert!(status.success(), "claude -p exited with {status}");
    let session = result["session_id"].as_str().expect("the result names its session").to_string();
    (elapsed, session)
}

/// The first `{"type":"result"}` line on stdout, or `None` if stdout closed first.
async fn read_result(stdout: tokio::process::ChildStdout) -> Option<Value> {
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await.ok()? {
        if let Some(result) = support::pipe::result_frame(&line) {
            return Some(result);
        }
    }
    None
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Report {
    fn print(&self) {
        let raw50 = percentile(&self.raw, 50.0);
        let raw95 = percentile(&self.raw, 95.0);
        let sides = [
            ("raw CLI pipe", &self.raw),
            ("raw CLI pipe via the credential proxy", &self.proxied),
            ("  ... and in bwrap (no network)", &self.bwrapped),
            ("pincer, sandboxed (bwrap, no network)", &self.sandboxed),
            ("pincer, unconfined (mode none)", &self.unconfined),
            ("spawn `claude -p --resume` each time", &self.spawned),
        ];
        let overhead = [("stdin write", &self.stdin_writes), ("result stored + queued", &self.result_deliveries)];

        println!();
        println!(
            "Claude Code {} · {} cores · {} follow-up messages per side, interleaved",
            self.cli_version, self.cores, self.messages
        );
        println!();
        println!(
            "{:<40} {:>10} {:>10} {:>12} {:>12} {:>12}",
            "follow-up latency (in -> result)", "median", "p95", "÷ raw p50", "÷ raw p95", "paired Δ p50"
        );
        for (name, samples) in sides {
            let (p50, p95) = (percentile(samples, 50.0), percentile(samples, 95.0));
            println!(
                "{:<40} {:>7.1} ms {:>7.1} ms {:>11.2}x {:>11.2}x {:>+9.1} ms",
                name,
                ms(p50),
                ms(p95),
                ms(p50) / ms(raw50),
                ms(p95) / ms(raw95),
                paired_median_ms(samples, &self.raw)
            );
        }
        println!("(paired Δ: the median over follow-ups of this side's time minus the raw pipe's for the same one)");
        println!();
        println!("{:<40} {:>10} {:>10}", "pincer overhead (sandboxed)", "p50", "p99");
        for (name, samples) in overhead {
            let (p50, p99) = (percentile(samples, 50.0), percentile(samples, 99.0));
            println!("{:<40} {:>7.0} µs {:>7.0} µs", name, us(p50), us(p99));
        }
    }
}
