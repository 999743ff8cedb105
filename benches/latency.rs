//! Follow-up message latency: pincer's long-lived stream-json session versus a
//! fresh `claude -p --resume` process per message, plus pincer's own overhead.
//!
//! Both sides run the real Claude Code CLI offline against the fake Messages API
//! from `tests/support` (it answers `ECHO: <prompt>` at once), so the numbers are
//! what the CLI and pincer cost, not what a model costs.
//!
//! - **Streaming (pincer):** the engine as `main` runs it, one group. The first
//!   message starts the CLI process and is not counted; then N follow-ups, each
//!   sent when the previous reply reached the chat outbox. Measured from
//!   `router.send` to the reply coming out of the outbox.
//! - **Spawn per message:** `claude -p --resume=<id> --output-format stream-json
//!   --verbose <prompt>` with stdin closed, same offline environment, HOME and
//!   cwd for every call so `--resume` finds the session. A first call creates
//!   the session and is not counted. Measured from spawning the process to
//!   reading its `result` line.
//! - **Sandbox cost:** the streaming side runs in the default `sandbox.mode`
//!   (`auto`: bubblewrap, API calls through the credential proxy); it runs once
//!   more with `none` for comparison, and both report their first message
//!   (process start included).
//! - **Overhead:** `Engine::metrics` for the counted follow-ups: inbound accepted
//!   → line written to the CLI's stdin, and `result` line read → stored in SQLite
//!   and handed to the outbox.
//!
//! Percentiles are nearest-rank, so with N = 20 the p95 is the 19th of 20 and the
//! p99 is the largest sample.
//!
//! Run (N defaults to 20):
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

use pincer::domain::{GroupName, OutboundKind};
use pincer::sandbox::SandboxMode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use support::cli::{claude_bin, cli_env, ENV_TO_REMOVE};
use support::fake_api::{echo, FakeApi};
use support::harness::{Running, Sandbox, PATIENCE};

/// Overrides how many follow-up messages each side sends.
const MESSAGES_ENV: &str = "PINCER_BENCH_MESSAGES";
const DEFAULT_MESSAGES: usize = 20;

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
    streaming: Vec<Duration>,
    unconfined: Vec<Duration>,
    /// The first message, process start included: sandboxed, unconfined.
    first: (Duration, Duration),
    spawned: Vec<Duration>,
    stdin_writes: Vec<Duration>,
    result_deliveries: Vec<Duration>,
}

async fn run(messages: usize) -> Report {
    let api = FakeApi::start(echo()).await;
    let cli_version = cli_version().await;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("latency bench: {messages} follow-ups per mode, CLI {cli_version}, {cores} cores");
    // One after the other: on a small machine the two would compete for the CPU.
    let sandboxed = bench_streaming(&api, messages, SandboxMode::Auto).await;
    let plain = bench_streaming(&api, messages, SandboxMode::None).await;
    let spawned = bench_spawn(&api, messages).await;
    Report {
        cli_version,
        cores,
        messages,
        streaming: sandboxed.follow_ups,
        unconfined: plain.follow_ups,
        first: (sandboxed.first, plain.first),
        spawned,
        stdin_writes: sandboxed.stdin_writes,
        result_deliveries: sandboxed.result_deliveries,
    }
}

async fn cli_version() -> String {
    #[allow(clippy::disallowed_methods)] // the bench runs the CLI outside pincer on purpose
    let out = Command::new(claude_bin()).arg("--version").output().await.expect("claude --version runs");
    // `2.1.330 (Claude Code)`: keep the number, the table already says what it is.
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next().unwrap_or("unknown").to_string()
}

/// What one streaming run measured.
struct Streaming {
    first: Duration,
    follow_ups: Vec<Duration>,
    stdin_writes: Vec<Duration>,
    result_deliveries: Vec<Duration>,
}

/// Pincer's streaming mode in `mode`: the first message, the follow-up round
/// trips, and the engine's stdin-write and result-delivery samples for those.
async fn bench_streaming(api: &FakeApi, n: usize, mode: SandboxMode) -> Streaming {
    let mut sandbox = Sandbox::new(api);
    sandbox.config.sandbox.mode = mode;
    let group = sandbox.add_group("bench", None).await;
    let pincer = sandbox.start().await;

    // The first message pays for starting the process, once per group.
    let first = round_trip(&pincer, &group, "warm-up").await;
    let metrics = &pincer.engine.metrics;
    let (writes_before, deliveries_before) = (metrics.stdin_writes().len(), metrics.result_deliveries().len());

    let mut samples = Vec::with_capacity(n);
    for i in 1..=n {
        samples.push(round_trip(&pincer, &group, &format!("follow-up {i}")).await);
    }
    let stdin_writes = metrics.stdin_writes().split_off(writes_before);
    let result_deliveries = metrics.result_deliveries().split_off(deliveries_before);
    assert_eq!(pincer.session_events(&group).await, ["started"], "one process served every message");
    pincer.stop().await;
    Streaming { first, follow_ups: samples, stdin_writes, result_deliveries }
}

/// One message through pincer, from the router to the chat outbox.
async fn round_trip(pincer: &Running, group: &GroupName, text: &str) -> Duration {
    let start = Instant::now();
    pincer.send(group, text).await;
    let reply = pincer.next_outbound().await;
    let elapsed = start.elapsed();
    assert_eq!((reply.kind, reply.text.as_str()), (OutboundKind::Reply, format!("ECHO: {text}").as_str()));
    elapsed
}

/// The alternative: a fresh `claude -p --resume` process per message.
async fn bench_spawn(api: &FakeApi, n: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (home, cwd) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let env = cli_env(&api.base_url(), &home);

    // Creates the session, like pincer's warm-up message; not counted.
    let (_, mut session) = one_shot(&env, &cwd, None, "warm-up").await;
    let mut samples = Vec::with_capacity(n);
    for i in 1..=n {
        let (elapsed, id) = one_shot(&env, &cwd, Some(&session), &format!("follow-up {i}")).await;
        samples.push(elapsed);
        // Follow whatever id the CLI reports, so history keeps growing even if
        // a resume ever forks a new session.
        session = id;
    }
    samples
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
    #[allow(clippy::disallowed_methods)] // the bench runs the CLI outside pincer on purpose
    let mut cmd = Command::new(claude_bin());
    cmd.args(&args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for key in ENV_TO_REMOVE {
        cmd.env_remove(key);
    }
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
        if let Ok(value) = serde_json::from_str::<Value>(&line) {
            if value["type"] == "result" {
                return Some(value);
            }
        }
    }
    None
}

/// Nearest-rank percentile (`p` in 0..=100) of unsorted samples.
fn percentile(samples: &[Duration], p: f64) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Report {
    fn print(&self) {
        let (stream_p50, stream_p95) = (percentile(&self.streaming, 50.0), percentile(&self.streaming, 95.0));
        let (spawn_p50, spawn_p95) = (percentile(&self.spawned, 50.0), percentile(&self.spawned, 95.0));
        let (ratio_p50, ratio_p95) = (ms(spawn_p50) / ms(stream_p50), ms(spawn_p95) / ms(stream_p95));
        let overhead = [("stdin write", &self.stdin_writes), ("result stored + queued", &self.result_deliveries)];

        println!();
        println!("Claude Code {} · {} cores · {} follow-up messages", self.cli_version, self.cores, self.messages);
        println!();
        println!("{:<34} {:>10} {:>10}", "follow-up latency (in -> result)", "median", "p95");
        println!("{:<34} {:>7.1} ms {:>7.1} ms", "pincer streaming (sandboxed)", ms(stream_p50), ms(stream_p95));
        let (plain_p50, plain_p95) = (percentile(&self.unconfined, 50.0), percentile(&self.unconfined, 95.0));
        println!("{:<34} {:>7.1} ms {:>7.1} ms", "pincer streaming (mode none)", ms(plain_p50), ms(plain_p95));
        println!("{:<34} {:>7.1} ms {:>7.1} ms", "spawn `claude -p --resume`", ms(spawn_p50), ms(spawn_p95));
        println!("{:<34} {:>9.1}x {:>9.1}x", "ratio spawn / streaming", ratio_p50, ratio_p95);
        println!();
        println!("{:<34} {:>10} {:>10}", "pincer overhead", "p50", "p99");
        for (name, samples) in overhead {
            let (p50, p99) = (percentile(samples, 50.0), percentile(samples, 99.0));
            println!("{:<34} {:>7.0} µs {:>7.0} µs", name, us(p50), us(p99));
        }

        // One line per number, for pasting into a README.
        println!();
        println!("- CLI: Claude Code {}; machine: {} cores; N = {}", self.cli_version, self.cores, self.messages);
        println!(
            "- follow-up latency, pincer streaming: median {:.1} ms, p95 {:.1} ms",
            ms(stream_p50),
            ms(stream_p95)
        );
        println!(
            "- follow-up latency, spawn `claude -p --resume` per message: median {:.1} ms, p95 {:.1} ms",
            ms(spawn_p50),
            ms(spawn_p95)
        );
        println!("- spawn / streaming: {ratio_p50:.1}x at the median, {ratio_p95:.1}x at p95");
        println!(
            "- follow-up latency, pincer streaming with mode none: median {:.1} ms, p95 {:.1} ms",
            ms(percentile(&self.unconfined, 50.0)),
            ms(percentile(&self.unconfined, 95.0))
        );
        println!(
            "- first message (process start included): sandboxed {:.1} ms, mode none {:.1} ms",
            ms(self.first.0),
            ms(self.first.1)
        );
        for (name, samples) in overhead {
            let (p50, p99) = (percentile(samples, 50.0), percentile(samples, 99.0));
            println!("- pincer {name}: p50 {:.0} µs, p99 {:.0} µs", us(p50), us(p99));
        }
    }
}
