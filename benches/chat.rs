//! pincer's own share of a turn, measured from outside: the `pincer` binary's
//! `pincer chat NAME` (no daemon, its own data dir) driven through its stdin
//! and stdout, against the raw CLI pipe it wraps (`support::pipe`), with the
//! real CLI and the fake Messages API answering after [`API_DELAY`].
//!
//! - **Follow-ups:** one message to each side in turn (20 ms apart), the
//!   order reversed every round (shuffled when there are more than two
//!   sides, from `PINCER_BENCH_SEED`, else the clock; the seed is printed),
//!   `PINCER_BENCH_MESSAGES` rounds (100); each side's first
//!   message (process start) is not counted. Sides: the raw pipe, `pincer
//!   chat` with `sandbox.mode = "none"` and with `"auto"` (bwrap, the API
//!   through the credential proxy). Printed: each side's median and p95, and
//!   the **paired Δ** (this side's time minus the raw pipe's in the same
//!   round), its median and p95, which cancels most of a shared machine's noise.
//!   Then each side's paired Δ split where its round's API request reached
//!   the fake API: written → the request, the request in flight, the
//!   answer's end → the answer read. The CLI's own run-to-run noise is in
//!   the first part (its JavaScript before the request); the last part,
//!   where the result is stored and printed, resolves a tenth of a
//!   millisecond and is pooled with the runs.
//! - **Runs:** `PINCER_BENCH_RUNS=k` (1) repeats the follow-ups k times,
//!   every process started afresh and each run's order from its own seed,
//!   then prints each comparison's paired median per run and their median:
//!   one run of 300 rounds moves by about ±0.8 ms from the next (a CLI
//!   process can be slow for its whole life), which only more runs average.
//! - **A/B:** `PINCER_BENCH_BINARY` replaces the build's own `pincer` (B);
//!   `PINCER_BENCH_BASELINE=/path/to/another/pincer` adds that
//!   binary's two sides to every round, and prints this build minus that one,
//!   paired by round: how a change moves the numbers, measured interleaved.
//!   Every `pincer chat` side has a data dir of its own whose store its own
//!   binary creates (`pincer groups add`), so the two builds may differ in
//!   their migrations; each side's sandbox runs its own binary's `pincer
//!   forward`. The config is this build's: a baseline must read it.
//! - **Progress:** `PINCER_BENCH_PROGRESS_OFF=1` adds an unconfined side
//!   whose group has `[progress] mode = "off"`, and prints the paired cost of
//!   progress being on (the activity the session publishes, the loop that
//!   follows it; these turns are too quick for a status message).
//! - **Seccomp:** `PINCER_BENCH_SECCOMP_OFF=1` adds a sandboxed side with
//!   `sandbox.seccomp = false`, and prints it against the sandboxed side.
//!   Without the filter bwrap also starts a session of its own
//!   (`--new-session`, `sandbox::bwrap`), so that side's CLI has a
//!   scheduling group of its own too (`kernel.sched_autogroup_enabled`).
//! - **Lines as pincer's:** `PINCER_BENCH_RAW_AS_PINCER=1` adds a raw pipe
//!   whose lines carry a `uuid` each, with `--replay-user-messages`, as
//!   pincer writes them (`RawPipe::start_as_pincer`), and prints what that
//!   costs the CLI against the plain raw pipe, paired by round.
//! - **pincer's process tree:** `PINCER_BENCH_RAW_SPAWNED=1` adds a raw pipe
//!   whose CLI pincer's `CliProcess::spawn` starts (the guard between, its
//!   own process group), driven like the plain one; printed against it.
//! - **PostgreSQL:** `PINCER_BENCH_POSTGRES=1` adds an unconfined side whose
//!   store is a PostgreSQL database (`[store] url`) on a server the bench
//!   starts (the tests' one: Unix socket, `synchronous_commit=off`, which like
//!   SQLite's WAL + NORMAL keeps a commit through a crash of pincer, not of
//!   the machine), against the same build on SQLite.
//! - **Noise floor:** `PINCER_BENCH_RAW_PIPES=k` runs k raw pipes (1),
//!   each a side of its own, and prints each side's paired Δ against every
//!   raw pipe, and each pair of raw pipes' against each other: how far
//!   apart identical CLIs land in one run.
//! - **A wrapper's floor:** `PINCER_BENCH_RELAY=1` adds five sides that
//!   stand between the bench and a raw CLI pipe as `pincer chat` does, this
//!   binary started again (`chat/relay.rs`): one relaying only, three also
//!   storing the message and the result first (through sqlx, with
//!   `rusqlite` on the relay's thread, on the blocking pool), and one making
//!   pincer's own store calls of a follow-up in line, in one task (its
//!   steps' medians printed when it ends). Printed like every side, and
//!   pincer's sides and each relay against each relay: the least a wrapper
//!   adds, the least one that keeps pincer's two durable writes adds, and
//!   what pincer's store path adds without its tasks. A list of roles
//!   instead of `1` picks them (`PINCER_BENCH_RELAY=sqlx,sqlx+proxy`); a
//!   role ending in `+proxy` has its CLI call the API through pincer's
//!   credential proxy in the relay's process, as a sandboxed CLI does: the
//!   sandboxed path's floor.
//! - **Cold first answer:** `PINCER_BENCH_COLD` rounds (5), each a fresh raw
//!   CLI and a fresh `pincer chat` per mode (fresh data dir, fresh session),
//!   order rotating: from starting the process to its first answer, as a
//!   ratio to the raw CLI's of the same round (median over rounds).
//! - **Breakdown:** `PINCER_BENCH_BREAKDOWN` follow-ups (30; 0 skips it) to
//!   one more `pincer chat` per mode that logs its hops
//!   (`RUST_LOG=pincer::hop=debug`, see `pincer::metrics::hop`): the median
//!   time between each hop of a follow-up, from the line written to its stdin
//!   to the answer read from its stdout. Logging costs a little itself, so
//!   these sides are not the measured ones. Also printed: pincer's own share
//!   per follow-up (the whole minus the CLI's stdin → result), and the CLI's
//!   time split where its API request arrives at the fake API and where its
//!   answer ends, in pincer and in a raw pipe beside it, with the requests'
//!   count and size.
//! - **The API's wire:** the fake answers as the real API does
//!   (`support::fake_api::Wire::REAL`): a streamed reply one SSE event per
//!   write, each connection closed after its answer, `TCP_NODELAY` on.
//!   `PINCER_BENCH_API_BATCHED=1` writes the whole body at once,
//!   `PINCER_BENCH_API_KEEPALIVE=1` keeps connections open,
//!   `PINCER_BENCH_API_NAGLE=1` leaves Nagle on (as a server that does not
//!   set `TCP_NODELAY`, e.g. Python's `http.server`).
//! - **The proxy's hop alone:** `PINCER_BENCH_RAW_PROXIED=1` adds a raw
//!   pipe whose CLI reaches the fake API through pincer's credential proxy
//!   (`chat/proxied.rs`), no sandbox, and prints it against the plain one,
//!   and the sandboxed side against the unconfined one, paired by round.
//! - **bwrap alone:** `PINCER_BENCH_RAW_BWRAP=1` adds a raw pipe through
//!   the proxy whose CLI runs in a bwrap of the bench's own: the file system
//!   as it is, new PID and network namespaces, nothing else of pincer's
//!   sandbox (`chat/proxied.rs`); bwrap flags in place of `1` choose the
//!   namespaces, and `;` between sets adds a side each
//!   (`"--unshare-pid;--unshare-net"`). With `PINCER_BENCH_RAW_PROXIED=1`
//!   each is printed against the proxied pipe: what its namespaces cost.
//! - **Stand-in:** `PINCER_BENCH_STANDIN=1` puts a stand-in that answers at
//!   once (`tests/support/standin.rs`, this binary) behind every side instead
//!   of the real CLI, unconfined only: the paired Δ is then pincer's own share
//!   without the real CLI's jitter (±1–2 ms run to run on our machine).
//!
//! Run (the CLI from `data/claude`, or `PINCER_TEST_CLAUDE`):
//!
//! ```text
//! cargo bench --bench chat --no-run      # then run the printed binary, or:
//! PINCER_BENCH_MESSAGES=100 PINCER_BENCH_COLD=5 cargo bench --bench chat
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/standin.rs"]
mod standin;

#[path = "chat/relay.rs"]
mod relay;

#[path = "chat/proxied.rs"]
mod proxied;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pincer::config::SandboxMode;
use pincer::domain::activity::ProgressMode;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use support::cli::cli_env;
use support::fake_api::{delayed, echo, FakeApi, Wire};
use support::harness::{Sandbox, PATIENCE};
use support::pipe::{median_of_sorted, ms, paired_median_ms, paired_percentile_ms, percentile, RawPipe};

/// How long the fake model takes to answer.
const API_DELAY: Duration = Duration::from_millis(25);

/// The pause before each round trip.
const SETTLE: Duration = Duration::from_millis(20);

/// The hops of one follow-up, in the order it passes them (`pincer::metrics::hop`).
const HOPS: &[(&str, &str)] = &[
    ("console_read", "line written → read by the console"),
    ("stored", "→ stored queued (router)"),
    ("pull", "→ session woken, pull starts"),
    ("pulled", "→ pulled (SELECT)"),
    ("context_taken", "→ context taken (UPDATE, if lines wait)"),
    ("stdin_written", "→ written to the CLI's stdin"),
    ("result_read", "→ CLI result line read (the CLI)"),
    ("result_storing", "→ session handles it, store begins"),
    ("result_stored", "→ result + outbox row stored (1 tx)"),
    ("console_woken", "→ console woken"),
    ("console_printed", "→ printed"),
];

fn main() {
    // pincer asks its CLI for `--version` without `claude.env`: answered as the CLI would.
    if std::env::args().any(|a| a == "--version") {
        println!("{}", standin::VERSION);
        return;
    }
    if std::env::var_os(standin::ENV).is_some() {
        standin::run();
    }
    if let Ok(role) = std::env::var(relay::ROLE) {
        relay::run(&role);
    }
    let n = env_count("PINCER_BENCH_MESSAGES", 100);
    let cold = env_count("PINCER_BENCH_COLD", 5);
    let breakdown = env_count("PINCER_BENCH_BREAKDOWN", 30);
    let baseline = std::env::var_os("PINCER_BENCH_BASELINE").map(PathBuf::from);
    let progress_off = std::env::var_os("PINCER_BENCH_PROGRESS_OFF").is_some();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(run(n, cold, breakdown, baseline, progress_off));
}

/// The fake API's wire: the real API's, less what `PINCER_BENCH_API_*` turns off.
fn api_wire() -> Wire {
    let set = |key: &str| std::env::var_os(key).is_some();
    Wire {
        flush_per_event: !set("PINCER_BENCH_API_BATCHED"),
        close: !set("PINCER_BENCH_API_KEEPALIVE"),
        nodelay: !set("PINCER_BENCH_API_NAGLE"),
    }
}

fn env_count(key: &str, default: usize) -> usize {
    match std::env::var(key) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{key}={v}: want a count")),
        Err(_) => default,
    }
}

async fn run(n: usize, cold: usize, breakdown: usize, baseline: Option<PathBuf>, progress_off: bool) {
    let wire = api_wire();
    let api = FakeApi::start_on(delayed(API_DELAY, echo()), wire).await;
    let this = std::env::var_os("PINCER_BENCH_BINARY")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pincer")), PathBuf::from);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "chat bench: CLI {}, {cores} cores, API answers after {API_DELAY:?}, {n} follow-ups per side, {cold} cold rounds",
        cli_version()
    );
    println!("the fake API's wire: {wire:?}");
    let mut builds = vec![("", this.clone())];
    if let Some(path) = baseline {
        println!("baseline (A) = {}; this build (B) = {}", path.display(), this.display());
        builds.push(("A: ", path));
    }
    if n > 0 {
        let runs = env_count("PINCER_BENCH_RUNS", 1).max(1);
        let seed = base_seed();
        let mut pooled: Vec<Vec<(String, f64)>> = Vec::with_capacity(runs);
        for run in 0..runs {
            if runs > 1 {
                println!("\nrun {} of {runs}", run + 1);
            }
            pooled.push(follow_ups(&api, &builds, n, progress_off, seed.wrapping_add(run as u64)).await);
        }
        if runs > 1 {
            print_pooled(&pooled);
        }
    }
    if cold > 0 {
        cold_rounds(&api, &builds, cold).await;
    }
    if breakdown > 0 {
        for mode in modes() {
            hop_breakdown(&api, &this, mode, breakdown).await;
        }
    }
}

/// The first run's seed for the rounds' order: `PINCER_BENCH_SEED`, else
/// the clock. Run k (`PINCER_BENCH_RUNS`) shuffles from this plus k.
fn base_seed() -> u64 {
    std::env::var("PINCER_BENCH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64
    })
}

/// The rounds' order, shuffled from `seed`, which is printed so a run can
/// be repeated. A seed of its own per run keeps one fixed sequence of
/// neighbours from favouring a side in every run.
fn rounds_rng(seed: u64) -> fastrand::Rng {
    println!("the rounds' order: PINCER_BENCH_SEED={seed}");
    fastrand::Rng::with_seed(seed)
}

/// `PINCER_BENCH_RUNS`: each comparison's paired median, one per run, and
/// their median and range. Runs start every process afresh, so this pools
/// what differs from one process to the next (a CLI slow for its whole
/// life), which more rounds in one run cannot.
fn print_pooled(runs: &[Vec<(String, f64)>]) {
    println!();
    println!(
        "pooled over {} runs (fresh processes, an order of its own each): paired Δ p50 of each run, ms",
        runs.len()
    );
    for (k, (what, _)) in runs[0].iter().enumerate() {
        let mut each: Vec<f64> = runs.iter().filter_map(|run| run.get(k).map(|c| c.1)).collect();
        let shown: Vec<String> = each.iter().map(|d| format!("{d:+.2}")).collect();
        each.sort_by(f64::total_cmp);
        let median = median_of_sorted(&each);
        println!("  {what:<52} median {median:>+6.2} ({})", shown.join(", "));
    }
}

fn cli_version() -> String {
    let (a, b, c) = support::cli::cli_version();
    format!("{a}.{b}.{c}")
}

/// A side of a round: the raw pipe or a `pincer chat`.
enum Side {
    Raw(Box<RawPipe>),
    Chat(Box<Chat>),
    Spawned(Box<Spawned>),
    Relay(Box<Relay>),
}

impl Side {
    async fn round_trip(&mut self, text: &str) -> Duration {
        match self {
            Side::Raw(pipe) => pipe.round_trip(text).await,
            Side::Chat(chat) => chat.round_trip(text).await,
            Side::Spawned(pipe) => pipe.round_trip(text).await,
            Side::Relay(relay) => relay.round_trip(text).await,
        }
    }

    async fn close(self) {
        match self {
            Side::Raw(pipe) => pipe.close().await,
            Side::Chat(chat) => drop(chat.close().await),
            Side::Spawned(mut pipe) => drop(pipe.process.stop(Duration::from_secs(5)).await),
            Side::Relay(relay) => relay.close().await,
        }
    }
}

/// `PINCER_BENCH_RAW_SPAWNED=1`: a raw pipe whose CLI pincer's own spawn
/// starts (`CliProcess::spawn`: the guard between, the CLI leading its own
/// process group, its stderr read), driven by the bench as the raw pipe is:
/// what pincer's process tree costs the CLI, without the rest of pincer.
struct Spawned {
    _dir: tempfile::TempDir,
    process: pincer::claude::process::CliProcess,
    lines: tokio::sync::mpsc::Receiver<pincer::claude::process::StdoutLine>,
}

impl Spawned {
    fn start(api: &FakeApi) -> Spawned {
        let (dir, home, cwd) = support::pipe::scratch();
        let spec = pincer::claude::process::SpawnSpec {
            program: support::cli::claude_bin(),
            args: support::pipe::pipe_args(),
            cwd,
            env: cli_env(&api.base_url(), &home),
            env_remove: support::cli::ENV_TO_REMOVE.iter().map(|k| (*k).to_owned()).collect(),
            label: "bench".into(),
            after_kill: None,
            pass_fds: Vec::new(),
        };
        let (process, lines) = pincer::claude::process::CliProcess::spawn(&spec).expect("the CLI starts");
        Spawned { _dir: dir, process, lines }
    }

    async fn round_trip(&mut self, text: &str) -> Duration {
        let start = Instant::now();
        let line = serde_json::json!({"type": "user", "message": {"role": "user", "content": text}});
        self.process.write_line(&line.to_string()).await.expect("the CLI reads its stdin");
        loop {
            let read = self.lines.recv().await.expect("the CLI's stdout");
            let pincer::claude::lines::LineRead::Line(line) = read.line else { continue };
            if let Some(result) = support::pipe::result_frame(&line) {
                assert_eq!(result["result"].as_str(), Some(answer_to(text).as_str()), "{result}");
                return start.elapsed();
            }
        }
    }
}

/// `PINCER_BENCH_RELAY=1`: this binary as a relay in front of a raw CLI pipe
/// (`chat/relay.rs`), driven as a `pincer chat` is: a line in, its answer out.
struct Relay {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Relay {
    fn start(api: &FakeApi, role: &str) -> Relay {
        let exe = std::env::current_exe().expect("the bench knows its own path");
        #[allow(clippy::disallowed_methods)] // the bench's own relay, outside pincer on purpose
        let mut child = tokio::process::Command::new(exe)
            .env(relay::ROLE, role)
            .env(relay::API, api.base_url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the relay starts");
        let stdin = child.stdin.take().expect("stdin is piped");
        let lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        Relay { child, stdin, lines }
    }

    async fn round_trip(&mut self, text: &str) -> Duration {
        let start = Instant::now();
        self.stdin.write_all(format!("{text}\n").as_bytes()).await.expect("the relay reads its stdin");
        self.stdin.flush().await.unwrap();
        let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("an answer within the patience limit")
            .expect("the relay's stdout")
            .expect("the relay answers");
        assert_eq!(line, answer_to(text));
        start.elapsed()
    }

    async fn close(mut self) {
        drop(self.stdin);
        let status = tokio::time::timeout(PATIENCE, self.child.wait()).await.expect("the relay ends").unwrap();
        assert!(status.success(), "the relay exited with {status}");
    }
}

/// `PINCER_BENCH_RAW_PIPES`: how many raw pipes (1).
fn raw_pipes() -> usize {
    env_count("PINCER_BENCH_RAW_PIPES", 1).max(1)
}

/// `PINCER_BENCH_STANDIN`: the CLI behind every side is a stand-in that
/// answers at once (`tests/support/standin.rs`, this bench binary itself), so
/// the paired Δ is pincer's own share without the real CLI's jitter.
fn standin_mode() -> bool {
    std::env::var_os("PINCER_BENCH_STANDIN").is_some()
}

/// The answer `pincer chat` prints, and the raw pipe's `result`, for `text`.
fn answer_to(text: &str) -> String {
    if standin_mode() {
        standin::answer_text(&standin::tokens(text))
    } else {
        support::fake_api::echo_of(text)
    }
}

fn raw_pipe(api: &FakeApi) -> RawPipe {
    raw_pipe_to(&api.base_url())
}

/// [`raw_pipe`] with the fake API at `base_url` (a relay has no [`FakeApi`] of its own).
fn raw_pipe_to(base_url: &str) -> RawPipe {
    if !standin_mode() {
        return RawPipe::start(cli_env(base_url, Path::new("home")));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("the bench knows its own path");
    #[allow(clippy::disallowed_methods)] // the stand-in CLI, outside pincer on purpose
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(support::pipe::pipe_args())
        .env(standin::ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    RawPipe::spawn(dir, cmd).answering(answer_to)
}

/// The sandbox modes measured: with a stand-in (no API call, nothing for
/// the proxy to do) only the unconfined one.
fn modes() -> Vec<SandboxMode> {
    if standin_mode() {
        vec![SandboxMode::None]
    } else {
        vec![SandboxMode::None, SandboxMode::Auto]
    }
}

fn mode_name(mode: SandboxMode) -> &'static str {
    match mode {
        SandboxMode::None => "unconfined",
        _ => "sandboxed",
    }
}

/// One run of interleaved follow-ups, printed; returns its comparisons for
/// pooling: each side minus raw pipe #1, and this build minus the baseline.
async fn follow_ups(
    api: &FakeApi,
    builds: &[(&str, PathBuf)],
    n: usize,
    progress_off: bool,
    seed: u64,
) -> Vec<(String, f64)> {
    let mut names = vec!["raw CLI pipe".to_owned()];
    let mut sides = vec![Side::Raw(Box::new(raw_pipe(api)))];
    for (label, exe) in builds {
        for mode in modes() {
            names.push(format!("{label}pincer chat, {}", mode_name(mode)));
            sides.push(Side::Chat(Box::new(Chat::start(api, exe, mode, false).await)));
        }
    }
    // Last, so the A/B indices above stay as they are.
    let off = progress_off.then_some(sides.len());
    if off.is_some() {
        names.push("pincer chat, unconfined, progress off".to_owned());
        let chat = Chat::start_with(api, &builds[0].1, SandboxMode::None, false, ProgressMode::Off).await;
        sides.push(Side::Chat(Box::new(chat)));
    }
    // Last too: the sandboxed side without the seccomp filter.
    let no_seccomp = (std::env::var_os("PINCER_BENCH_SECCOMP_OFF").is_some() && !standin_mode()).then_some(sides.len());
    if no_seccomp.is_some() {
        names.push("pincer chat, sandboxed, no seccomp".to_owned());
        let chat = Chat::start_on(api, &builds[0].1, SandboxMode::Auto, ProgressMode::Status, None, false).await;
        sides.push(Side::Chat(Box::new(chat)));
    }
    // Last too: the raw pipe with lines as pincer writes them.
    let as_pincer = std::env::var_os("PINCER_BENCH_RAW_AS_PINCER").is_some() && !standin_mode();
    let uuids = as_pincer.then_some(sides.len());
    if as_pincer {
        names.push("raw CLI pipe, lines as pincer's".to_owned());
        sides.push(Side::Raw(Box::new(RawPipe::start_as_pincer(cli_env(&api.base_url(), Path::new("home"))))));
    }
    // Last too: the raw pipe through pincer's spawn.
    let spawned = (std::env::var_os("PINCER_BENCH_RAW_SPAWNED").is_some() && !standin_mode()).then_some(sides.len());
    if spawned.is_some() {
        names.push("raw CLI pipe, pincer's spawn".to_owned());
        sides.push(Side::Spawned(Box::new(Spawned::start(api))));
    }
    // Last too: the relays, a wrapper's floor.
    let roles = relay::roles(std::env::var("PINCER_BENCH_RELAY").ok().as_deref());
    let relays = sides.len()..sides.len() + roles.len();
    for role in &roles {
        names.push(relay::side_name(role));
        sides.push(Side::Relay(Box::new(Relay::start(api, role))));
    }
    // Last too: the raw pipe through the credential proxy.
    let mut proxies = Vec::new();
    let proxied = (std::env::var_os("PINCER_BENCH_RAW_PROXIED").is_some() && !standin_mode()).then_some(sides.len());
    if proxied.is_some() {
        let (pipe, running) = proxied::start(&api.base_url());
        names.push("raw CLI pipe, through the proxy".to_owned());
        sides.push(Side::Raw(Box::new(pipe)));
        proxies.push(running);
    }
    // Last too: a raw pipe through the proxy, its CLI in a bwrap of the bench's own.
    let mut in_bwrap = Vec::new();
    let asked = std::env::var("PINCER_BENCH_RAW_BWRAP").ok().filter(|_| !standin_mode());
    for flags in asked.iter().flat_map(|asked| asked.split(';')) {
        let namespaces: Vec<String> = match flags.trim() {
            "1" => vec!["--unshare-pid".into(), "--unshare-net".into()],
            flags => flags.split_whitespace().map(str::to_owned).collect(),
        };
        let (pipe, running) = proxied::start_in_bwrap(&api.base_url(), &namespaces);
        in_bwrap.push(sides.len());
        names.push(format!("raw pipe, proxied, bwrap {}", namespaces.join(" ")));
        sides.push(Side::Raw(Box::new(pipe)));
        proxies.push(running);
    }
    // Last too: the same build with its store in PostgreSQL.
    let on_postgres = std::env::var_os("PINCER_BENCH_POSTGRES").is_some().then_some(sides.len());
    if on_postgres.is_some() {
        names.push("pincer chat, unconfined, PostgreSQL".to_owned());
        let url = support::postgres::server().fresh_database();
        let chat = Chat::start_on(api, &builds[0].1, SandboxMode::None, ProgressMode::Status, Some(url), true).await;
        sides.push(Side::Chat(Box::new(chat)));
    }
    // Last too: more plain raw pipes, whose spread is the noise floor.
    let raws: Vec<usize> = std::iter::once(0).chain(sides.len()..sides.len() + raw_pipes() - 1).collect();
    for k in 2..=raws.len() {
        names.push(format!("raw CLI pipe #{k}"));
        sides.push(Side::Raw(Box::new(raw_pipe(api))));
    }
    let mut rng = rounds_rng(seed);
    let mut order: Vec<usize> = (0..sides.len()).collect();
    // Each side's processes start at its warm-up: in a shuffled order too,
    // so no build's sides are always the first ones started.
    rng.shuffle(&mut order);
    for &i in &order {
        sides[i].round_trip("warm-up").await;
    }
    let mut samples = vec![Vec::with_capacity(n); sides.len()];
    // Each round trip's wall-clock window, to find its API request in.
    let mut windows = vec![Vec::with_capacity(n); sides.len()];
    let text_of = |round: usize| format!("follow-up msg-1-{}", round + 1);
    for round in 0..n {
        let text = text_of(round);
        // Two sides alternate; more are shuffled afresh each round, so none
        // always follows the same one (a CLI works on after its answer).
        if sides.len() == 2 {
            order.reverse();
        } else {
            rng.shuffle(&mut order);
        }
        for &i in &order {
            // What the side before left running (a CLI saving its session) settles first.
            tokio::time::sleep(SETTLE).await;
            let from = wall_us();
            samples[i].push(sides[i].round_trip(&text).await);
            windows[i].push((from, wall_us()));
        }
    }
    let sides_len = sides.len();
    for side in sides {
        side.close().await;
    }
    let raw = &samples[0];
    println!();
    println!(
        "follow-up latency, message written → answer read ({n} rounds, interleaved, order alternating or shuffled)"
    );
    println!(
        "{:<34} {:>9} {:>9} {:>8} {:>13} {:>13}",
        "side", "median", "p95", "÷ raw", "paired Δ p50", "paired Δ p95"
    );
    for (name, side) in names.iter().zip(&samples) {
        println!(
            "{:<34} {:>6.2} ms {:>6.2} ms {:>7.3}x {:>+10.2} ms {:>+10.2} ms",
            name,
            ms(percentile(side, 50.0)),
            ms(percentile(side, 95.0)),
            ms(percentile(side, 50.0)) / ms(percentile(raw, 50.0)),
            paired_median_ms(side, raw),
            paired_percentile_ms(side, raw, 95.0),
        );
    }
    // A stand-in makes no API request to split at.
    let split = match standin_mode() {
        true => Vec::new(),
        false => print_segments(&names, &segments_of(&api.requests(), &windows, text_of)),
    };
    if let Some(off) = off {
        println!(
            "progress on minus off (unconfined), paired by round: median {:+.2} ms, p95 {:+.2} ms",
            paired_median_ms(&samples[1], &samples[off]),
            paired_percentile_ms(&samples[1], &samples[off], 95.0)
        );
    }
    if let Some(pg) = on_postgres {
        println!(
            "PostgreSQL minus SQLite (unconfined), paired by round: median {:+.2} ms, p95 {:+.2} ms",
            paired_median_ms(&samples[pg], &samples[1]),
            paired_percentile_ms(&samples[pg], &samples[1], 95.0)
        );
    }
    drop(proxies);
    for (side, proxied) in in_bwrap.iter().filter_map(|side| Some((*side, proxied?))) {
        println!(
            "{} minus the raw pipe through the proxy, paired by round: median {:+.2} ms, p95 {:+.2} ms",
            names[side],
            paired_median_ms(&samples[side], &samples[proxied]),
            paired_percentile_ms(&samples[side], &samples[proxied], 95.0)
        );
    }
    for (side, what) in
        [(uuids, "with lines as pincer's"), (spawned, "through pincer's spawn"), (proxied, "through the proxy")]
    {
        if let Some(side) = side {
            println!(
                "the raw pipe {what} minus plain, paired by round: median {:+.2} ms, p95 {:+.2} ms",
                paired_median_ms(&samples[side], raw),
                paired_percentile_ms(&samples[side], raw, 95.0)
            );
        }
    }
    if let Some(side) = no_seccomp {
        println!(
            "pincer chat sandboxed without seccomp minus with it, paired by round: median {:+.2} ms, p95 {:+.2} ms",
            paired_median_ms(&samples[side], &samples[2]),
            paired_percentile_ms(&samples[side], &samples[2], 95.0)
        );
    }
    if proxied.is_some() && modes().len() == 2 {
        println!(
            "pincer chat sandboxed minus unconfined, paired by round: median {:+.2} ms, p95 {:+.2} ms",
            paired_median_ms(&samples[2], &samples[1]),
            paired_percentile_ms(&samples[2], &samples[1], 95.0)
        );
    }
    if raws.len() > 1 {
        // Pairs of single pipes: the difference of two alike is symmetric,
        // where one against an average of several is not (tails skew it).
        println!("paired Δ p50 against each raw pipe (#1 is \"raw CLI pipe\"), ms; the raw pipes' own show the noise:");
        for i in 0..samples.len() {
            // A raw pipe against the ones after it only: each pair once.
            let after = raws.iter().position(|&r| r == i).map_or(0, |p| p + 1);
            let cells: Vec<String> = raws
                .iter()
                .enumerate()
                .skip(after)
                .map(|(k, &r)| format!("vs #{} {:+.2}", k + 1, paired_median_ms(&samples[i], &samples[r])))
                .collect();
            if !cells.is_empty() {
                println!("  {:<34} {}", names[i], cells.join(", "));
            }
        }
    }
    if !relays.is_empty() {
        println!("pincer's sides and each relay minus each relay before it, paired by round, median ms:");
        let rows = (1..sides_len).filter(|i| names[*i].contains("pincer chat") || relays.contains(i));
        for i in rows {
            let cells: Vec<String> = relays
                .clone()
                .take_while(|r| *r != i)
                .map(|r| format!("{} {:+.2}", names[r], paired_median_ms(&samples[i], &samples[r])))
                .collect();
            if !cells.is_empty() {
                println!("  {:<34} {}", names[i], cells.join(", "));
            }
        }
    }
    let mut comparisons: Vec<(String, f64)> =
        (1..sides_len).map(|i| (format!("{} − raw", names[i]), paired_median_ms(&samples[i], raw))).collect();
    comparisons.extend(split);
    if builds.len() == 2 {
        println!("this build (B) minus the baseline (A), paired by round:");
        // This build's sides, then the baseline's, in the same order.
        let per_build = modes().len();
        for b in 1..=per_build {
            let a = b + per_build;
            let median = paired_median_ms(&samples[b], &samples[a]);
            println!(
                "{:<34} median {:>+6.2} ms, p95 {:>+6.2} ms",
                names[b],
                median,
                paired_percentile_ms(&samples[b], &samples[a], 95.0)
            );
            comparisons.push((format!("B − A: {}", names[b]), median));
        }
    }
    comparisons
}

async fn cold_rounds(api: &FakeApi, builds: &[(&str, PathBuf)], rounds: usize) {
    let mut names = vec!["raw CLI, first answer".to_owned()];
    for (label, _) in builds {
        for mode in [SandboxMode::None, SandboxMode::Auto] {
            names.push(format!("{label}pincer chat, {}", mode_name(mode)));
        }
    }
    let mut samples = vec![Vec::with_capacity(rounds); names.len()];
    for round in 0..rounds {
        let text = format!("cold {round}");
        let count = names.len();
        for k in 0..count {
            let i = (round + k) % count;
            let elapsed = if i == 0 {
                let start = Instant::now();
                let mut pipe = raw_pipe(api);
                pipe.send(&text).await;
                pipe.answer(&text).await;
                let elapsed = start.elapsed();
                pipe.close().await;
                elapsed
            } else {
                let (build, mode) = ((i - 1) / 2, if i % 2 == 1 { SandboxMode::None } else { SandboxMode::Auto });
                let mut chat = Chat::start(api, &builds[build].1, mode, false).await;
                // `Chat::start` only prepared the data dir; the process starts with the first line.
                let elapsed = chat.round_trip(&text).await;
                chat.close().await;
                elapsed
            };
            samples[i].push(elapsed);
        }
    }
    let raw = &samples[0];
    println!();
    println!("cold first answer, process started → first answer read ({rounds} rounds, order rotating)");
    println!("{:<34} {:>9} {:>9} {:>15} {:>8}", "side", "median", "max", "÷ raw (paired)", "worst");
    for (name, side) in names.iter().zip(&samples) {
        let mut ratios: Vec<f64> = side.iter().zip(raw).map(|(s, r)| ms(*s) / ms(*r)).collect();
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        println!(
            "{:<34} {:>6.0} ms {:>6.0} ms {:>14.3}x {:>7.3}x",
            name,
            ms(percentile(side, 50.0)),
            ms(percentile(side, 100.0)),
            median,
            ratios[ratios.len() - 1]
        );
    }
}

async fn hop_breakdown(api: &FakeApi, exe: &Path, mode: SandboxMode, n: usize) {
    let mut chat = Chat::start(api, exe, mode, true).await;
    let started = wall_us();
    chat.round_trip("warm-up").await;
    let first = (started, wall_us());
    // The raw pipe beside it, so the CLI's share can be told from pincer's.
    let mut raw = raw_pipe(api);
    raw.round_trip("warm-up").await;
    let mut raw_times = Vec::with_capacity(n);
    let mut raw_windows = Vec::with_capacity(n);
    let mut windows = Vec::with_capacity(n);
    // Each side's text names its follow-up, so its API request can be found.
    let traced = |i: usize| format!("traced msg-1-{}.", i + 1);
    let raw_traced = |i: usize| format!("raw msg-2-{}.", i + 1);
    for i in 0..n {
        let (text, raw_text) = (traced(i), raw_traced(i));
        if i % 2 == 0 {
            tokio::time::sleep(SETTLE).await;
            let sent = wall_us();
            raw_times.push(raw.round_trip(&raw_text).await);
            raw_windows.push((sent, wall_us()));
        }
        tokio::time::sleep(SETTLE).await;
        let sent = wall_us();
        chat.round_trip(&text).await;
        windows.push((sent, wall_us()));
        if i % 2 == 1 {
            tokio::time::sleep(SETTLE).await;
            let sent = wall_us();
            raw_times.push(raw.round_trip(&raw_text).await);
            raw_windows.push((sent, wall_us()));
        }
    }
    raw.close().await;
    let hops = chat.close().await;
    println!();
    println!(
        "a cold start, pincer chat {}: each hop of its first message, ms after the process was started",
        mode_name(mode)
    );
    for (hop, at) in hops.iter().filter(|(_, at)| *at >= first.0 && *at <= first.1) {
        println!("  {:>8.1}  {hop}", (at - first.0) as f64 / 1e3);
    }
    println!("  {:>8.1}  answer read by the bench", (first.1 - first.0) as f64 / 1e3);
    // Every hop of follow-up i lies between its line being written and the next one's.
    let mut gaps: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    // The CLI's time inside pincer (stdin written → result read) minus the raw pipe's round trip.
    let mut cli_extra = Vec::new();
    // pincer's own share: the whole follow-up minus the CLI's part, unpaired.
    let mut own = Vec::new();
    // The CLI's part of each follow-up: its text, stdin written, result read.
    let mut cli_spans = Vec::new();
    let mut cli = Vec::new();
    let mut complete_count = 0;
    for (i, (sent, answered)) in windows.iter().enumerate() {
        let until = windows.get(i + 1).map_or(i64::MAX, |w| w.0);
        let mut at = *sent;
        let mut complete = true;
        for (k, (hop, _)) in HOPS.iter().enumerate() {
            // A hop a build does not mark is left out: the next one's gap covers it.
            match hops.iter().find(|(h, t)| h == hop && *t >= at && *t < until) {
                Some((_, t)) => {
                    gaps.entry(k).or_default().push(t - at);
                    at = *t;
                }
                // Context is taken only when observed lines wait before the message.
                None => complete &= *hop == "context_taken",
            }
        }
        let first_after = |hop: &str, from: i64| hops.iter().find(|(h, t)| h == hop && *t >= from && *t < until);
        if let Some((_, written)) = first_after("stdin_written", *sent) {
            if let Some((_, read)) = first_after("result_read", *written) {
                cli_extra.push(read - written - raw_times[i].as_micros() as i64);
                own.push(answered - sent - (read - written));
                cli_spans.push((traced(i), *written, *read));
            }
        }
        gaps.entry(HOPS.len()).or_default().push(answered - at);
        cli.push(answered - sent);
        complete_count += usize::from(complete);
    }
    println!();
    println!(
        "where a follow-up's time goes, pincer chat {} ({complete_count} of {n} follow-ups with every hop; median, p95 in µs)",
        mode_name(mode)
    );
    let show = |name: &str, values: &mut Vec<i64>| {
        values.sort();
        let at = |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        println!("{name:<44} {:>8} {:>8}", at(0.5), at(0.95));
    };
    for (k, (_, name)) in HOPS.iter().enumerate() {
        if let Some(values) = gaps.get_mut(&k) {
            show(name, values);
        }
    }
    if let Some(values) = gaps.get_mut(&HOPS.len()) {
        show("→ answer read by the bench", values);
        show("total (line written → answer read)", &mut cli);
    }
    if !cli_extra.is_empty() {
        show("pincer's own share (total − the CLI's part)", &mut own);
        show("the CLI in pincer minus the raw pipe, paired", &mut cli_extra);
    }
    // The CLI's share split at the API: its own work before the request, and
    // from the request's arrival to its result line (the model's 25 ms inside).
    let requests = api.requests();
    let [mut before, mut after, mut tail, mut count, mut bytes] = split_at_request(&requests, &cli_spans);
    let raw_spans: Vec<(String, i64, i64)> =
        raw_windows.iter().enumerate().map(|(i, (sent, answered))| (raw_traced(i), *sent, *answered)).collect();
    let [mut raw_before, mut raw_after, mut raw_tail, mut raw_count, mut raw_bytes] =
        split_at_request(&requests, &raw_spans);
    for (name, values) in [
        ("the CLI in pincer: stdin → API request", &mut before),
        ("the raw pipe: line written → API request", &mut raw_before),
        ("the CLI in pincer: API request → result", &mut after),
        ("the raw pipe: API request → result read", &mut raw_after),
        ("the CLI in pincer: answer's end → result", &mut tail),
        ("the raw pipe: answer's end → result read", &mut raw_tail),
        ("API requests per follow-up, pincer", &mut count),
        ("API requests per follow-up, raw pipe", &mut raw_count),
        ("request bytes, pincer", &mut bytes),
        ("request bytes, raw pipe", &mut raw_bytes),
    ] {
        if !values.is_empty() {
            show(name, values);
        }
    }
}

/// Where a round trip's time went, split at its API request: written →
/// the request arrived at the fake API, the request in flight (the model's
/// delay and the streamed answer), its end → the answer read. µs; none
/// when the round's request is not found in its window.
type Segments = Option<[i64; 3]>;

/// Each side's rounds split at their API request (the first one in the
/// round's window that carries its text).
fn segments_of(
    requests: &[support::fake_api::RecordedRequest],
    windows: &[Vec<(i64, i64)>],
    text_of: impl Fn(usize) -> String,
) -> Vec<Vec<Segments>> {
    let split = |round: usize, (from, until): (i64, i64)| {
        let text = text_of(round);
        let found = carrying(requests, &text, from, until).next()?;
        let ended = found.ended_us()?.min(until);
        Some([found.arrived_us() - from, ended - found.arrived_us(), until - ended])
    };
    windows.iter().map(|side| side.iter().enumerate().map(|(round, w)| split(round, *w)).collect()).collect()
}

/// Each side's segments against the raw pipe's (side 0), paired by round:
/// which part of a round trip a side's extra time is in. Returns the last
/// segment's paired median per side, to pool over runs: the CLI's own work
/// before its request varies from one process to the next by a millisecond
/// or two, what follows the answer's end by tenths.
fn print_segments(names: &[String], segments: &[Vec<Segments>]) -> Vec<(String, f64)> {
    const SEGMENTS: [&str; 3] = ["→ request", "in flight", "end → answer"];
    println!("where each side's paired Δ p50 lies, split at the API request (found in N of the rounds), ms:");
    println!("{:<34} {:>5} {:>16} {:>16} {:>16}", "side", "N", SEGMENTS[0], SEGMENTS[1], SEGMENTS[2]);
    let mut last = Vec::new();
    for (name, side) in names.iter().zip(segments).skip(1) {
        let pairs: Vec<([i64; 3], [i64; 3])> =
            side.iter().zip(&segments[0]).filter_map(|(s, r)| Some(((*s)?, (*r)?))).collect();
        if pairs.is_empty() {
            // Still one entry per side, so the pooled rows stay aligned across runs.
            println!("{name:<34} {:>5} (no request found in its rounds)", 0);
            last.push((format!("{name}: {} − raw's", SEGMENTS[2]), f64::NAN));
            continue;
        }
        let median = |k: usize| {
            let mut deltas: Vec<f64> = pairs.iter().map(|(s, r)| (s[k] - r[k]) as f64 / 1e3).collect();
            deltas.sort_by(f64::total_cmp);
            median_of_sorted(&deltas)
        };
        let [a, b, c] = [median(0), median(1), median(2)];
        println!("{:<34} {:>5} {:>+16.2} {:>+16.2} {:>+16.2}", name, pairs.len(), a, b, c);
        last.push((format!("{name}: {} − raw's", SEGMENTS[2]), c));
    }
    last
}

/// Each CLI turn `(text, from, until)` split where its first API request
/// (the one carrying `text`) arrived: µs before it and after it, from the
/// end of its answer to `until`, the turn's request count, and each
/// request's size.
fn split_at_request(requests: &[support::fake_api::ApiRequest], spans: &[(String, i64, i64)]) -> [Vec<i64>; 5] {
    let [mut before, mut after, mut tail, mut count, mut bytes] = [vec![], vec![], vec![], vec![], vec![]];
    for (text, from, until) in spans {
        let found: Vec<_> = carrying(requests, text, *from, *until).collect();
        if let Some(first) = found.first() {
            before.push(first.arrived_us() - from);
            after.push(until - first.arrived_us());
            tail.extend(first.ended_us().map(|ended| until - ended));
        }
        count.push(found.len() as i64);
        bytes.extend(found.iter().map(|r| r.bytes() as i64));
    }
    [before, after, tail, count, bytes]
}

/// The requests that arrived in `[from, until)` and carry `text`, in the
/// order they were recorded: a follow-up's, found by its window and its text.
fn carrying<'a>(
    requests: &'a [support::fake_api::ApiRequest],
    text: &'a str,
    from: i64,
    until: i64,
) -> impl Iterator<Item = &'a support::fake_api::ApiRequest> {
    requests.iter().filter(move |r| r.arrived_us() >= from && r.arrived_us() < until && r.all_text().contains(text))
}

fn wall_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_micros() as i64
}

/// `pincer chat bench` as a child process, started at its first line.
struct Chat {
    _sandbox: Sandbox,
    command: Option<tokio::process::Command>,
    child: Option<tokio::process::Child>,
    stdin: Option<tokio::process::ChildStdin>,
    lines: Option<tokio::io::Lines<BufReader<tokio::process::ChildStdout>>>,
    /// `(hop, unix µs)` from its log, when it logs hops.
    hops: Arc<Mutex<Vec<(String, i64)>>>,
    log: Option<tokio::task::JoinHandle<()>>,
}

impl Chat {
    /// A data dir with group `bench` in `mode`; the process is not started yet.
    async fn start(api: &FakeApi, exe: &Path, mode: SandboxMode, hops: bool) -> Chat {
        Self::start_with(api, exe, mode, hops, ProgressMode::Status).await
    }

    /// [`Chat::start`] with the group's progress mode.
    async fn start_with(api: &FakeApi, exe: &Path, mode: SandboxMode, hops: bool, progress: ProgressMode) -> Chat {
        let mut chat = Self::start_on(api, exe, mode, progress, None, true).await;
        if hops {
            chat.command.as_mut().expect("not started yet").env("RUST_LOG", "warn,pincer::hop=debug");
        }
        chat
    }

    /// [`Chat::start_with`] without hop marks, its store in PostgreSQL at
    /// `store_url` when given, a bwrap sandbox without pincer's seccomp
    /// filter unless `seccomp`.
    async fn start_on(
        api: &FakeApi,
        exe: &Path,
        mode: SandboxMode,
        progress: ProgressMode,
        store_url: Option<String>,
        seccomp: bool,
    ) -> Chat {
        let mut sandbox = Sandbox::new(api);
        sandbox.config.store.url = store_url.map(pincer::config::Secret::new);
        if standin_mode() {
            sandbox.config.claude.command = Some(std::env::current_exe().expect("the bench knows its own path"));
            sandbox.config.claude.env.insert(standin::ENV.to_owned(), "1".to_owned());
        }
        sandbox.config.sandbox.mode = mode;
        sandbox.config.progress.mode = progress;
        sandbox.config.sandbox.seccomp = pincer::config::DefaultOn(seccomp);
        // The sandbox's `pincer forward` is the side's own build too.
        sandbox.config.sandbox.pincer_binary = Some(exe.to_owned());
        let config = sandbox.write_config();
        register_group(exe, &config, sandbox.root()).await;
        let mut command = pincer_command(exe, &config, sandbox.root());
        command
            .args(["chat", "bench"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        Chat {
            _sandbox: sandbox,
            command: Some(command),
            child: None,
            stdin: None,
            lines: None,
            hops: Arc::default(),
            log: None,
        }
    }

    fn spawn(&mut self) {
        let Some(mut command) = self.command.take() else { return };
        let mut child = command.spawn().expect("pincer chat starts");
        self.stdin = child.stdin.take();
        self.lines = Some(BufReader::new(child.stdout.take().expect("stdout is piped")).lines());
        let mut log = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
        let hops = self.hops.clone();
        self.log = Some(tokio::spawn(async move {
            while let Ok(Some(line)) = log.next_line().await {
                match parse_hop(&line) {
                    Some(hop) => hops.lock().unwrap().push(hop),
                    None => eprintln!("pincer chat: {line}"),
                }
            }
        }));
        self.child = Some(child);
    }

    /// One line in, lines read until its answer.
    async fn round_trip(&mut self, text: &str) -> Duration {
        let start = Instant::now();
        self.spawn();
        let stdin = self.stdin.as_mut().expect("started");
        stdin.write_all(format!("{text}\n").as_bytes()).await.expect("pincer chat reads its stdin");
        stdin.flush().await.unwrap();
        let want = answer_to(text);
        let lines = self.lines.as_mut().expect("started");
        let read = async {
            while let Some(line) = lines.next_line().await.expect("pincer chat's stdout") {
                if line == want {
                    return;
                }
                eprintln!("pincer chat printed: {line}");
            }
            panic!("pincer chat ended before answering {text:?}");
        };
        tokio::time::timeout(PATIENCE, read).await.expect("an answer within the patience limit");
        start.elapsed()
    }

    /// Ends input, waits for the process; returns the hops it logged.
    async fn close(mut self) -> Vec<(String, i64)> {
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            let status = tokio::time::timeout(PATIENCE, child.wait()).await.expect("pincer chat ends").unwrap();
            assert!(status.success(), "pincer chat exited with {status}");
        }
        if let Some(log) = self.log.take() {
            let _ = log.await;
        }
        std::mem::take(&mut *self.hops.lock().unwrap())
    }
}

/// `exe --config config`, run in `root`, without the bench's environment
/// that pincer would refuse.
fn pincer_command(exe: &Path, config: &Path, root: &Path) -> tokio::process::Command {
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let mut command = tokio::process::Command::new(exe);
    command.arg("--config").arg(config).current_dir(root).env_remove("CLAUDECODE").env("NO_COLOR", "1");
    // pincer rejects unknown PINCER_* variables: the bench's own knobs and the tests' CLI path.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PINCER_") {
            command.env_remove(key);
        }
    }
    command
}

/// Registers group `bench` with the side's own binary (`pincer groups add`),
/// which creates the side's store with its own migrations: a baseline build
/// (`PINCER_BENCH_BASELINE`) before a schema change opens a store it made,
/// not one this build's migrations went through.
async fn register_group(exe: &Path, config: &Path, root: &Path) {
    let out = pincer_command(exe, config, root)
        .args(["groups", "add", "bench"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("pincer groups add runs");
    assert!(
        out.status.success(),
        "{} groups add bench failed ({}): {}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `(hop, at_us)` of a `pincer::hop` debug line (`... pincer::hop: hop="stored" at_us=1700000000000000`).
fn parse_hop(line: &str) -> Option<(String, i64)> {
    if !line.contains("pincer::hop") {
        return None;
    }
    let field = |key: &str| {
        let at = line.find(key)? + key.len();
        let rest = &line[at..];
        Some(rest.split_whitespace().next()?.trim_matches('"').to_owned())
    };
    Some((field("hop=")?, field("at_us=")?.parse().ok()?))
}
