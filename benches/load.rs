//! Load and soak: the `pincer run` binary serving 1,000 Telegram groups with
//! far fewer live CLI processes than groups, 100,000 messages, every one
//! checked to be answered exactly once.
//!
//! - **Setup:** the fake Bot API (`tests/support/fake_bot.rs`, pincer long
//!   polls it on loopback), G groups registered as `pincer groups add` does,
//!   each bound to its own Telegram group chat and engaged by every message,
//!   `claude.max_live_sessions` = L, and `sandbox.mode = "none"` (the sandbox
//!   is not what is measured here). The CLI is a stand-in that answers at once
//!   (`tests/support/standin.rs`): this bench binary itself, started by pincer
//!   with `LOAD_BENCH_STANDIN` set. Its own cost is measured first, alone.
//! - **Load:** N messages, N/G per group, in a seeded random order over the
//!   groups, each naming itself (`msg-<group>-<n>`). At most W messages are
//!   in flight (said in the chat but not yet answered in the store), so
//!   queues stay bounded: the sender waits for pincer, never the reverse.
//! - **Soak** (`PINCER_LOAD_SOAK=1`): pincer is killed with SIGKILL K times at
//!   seeded random points of the run (by progress: messages answered plus
//!   replies sent) and started again on the same data each time.
//! - **Exactly once**, checked from the store (`pincer.db`, opened read-only)
//!   and the chats: every message stored once and `answered`, named by exactly
//!   one result, whose one outbox row is `delivered`, and exactly one reply
//!   naming it in its own chat. A reply the chat got twice while the store
//!   holds one delivered row is the one at-least-once window of a chat sender
//!   (pincer killed after Telegram took a reply, before pincer recorded it):
//!   counted apart in a soak, a failure otherwise. Any failure ends the bench
//!   with a non-zero exit; speed is never asserted.
//! - **Numbers:** messages/s from the first message said to the last one
//!   answered (pincer's engine) and to the last reply sent (end to end, which
//!   teloxide's `Throttle` caps at 30 sends/s, Telegram's own limit); per
//!   message the stored times: said → stored, stored → answered (pincer's
//!   overhead: the group's queue, waiting for a live slot, starting the
//!   stand-in, stdin, its answer, the result stored), answered → sent;
//!   pincer's peak RSS (`VmHWM` from `/proc`, sampled while it runs) and CPU.
//!
//! Run (defaults: N = 100000, G = 1000, L = 32, W = 256, K = 5, seed 1):
//!
//! ```text
//! cargo bench --bench load
//! PINCER_LOAD_MESSAGES=5000 PINCER_LOAD_GROUPS=200 cargo bench --bench load
//! PINCER_LOAD_SOAK=1 cargo bench --bench load
//! ```

#[path = "../tests/support/standin.rs"]
mod standin;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use support::bench::{print_row, print_summary_row, WallClock};
use support::fake_bot::{FakeBot, TgChat, TgUser};
use support::harness::{spawn_pincer_run_logging, Sandbox};

/// Set while the bench runs, so a copy of it started by pincer refuses to run.
const RUNNING_ENV: &str = "LOAD_BENCH_RUNNING";
/// A run that makes no progress for this long is stopped and reported.
const STALL_LIMIT: Duration = Duration::from_secs(300);
/// The whole run is stopped after this long, whatever it is doing.
const RUN_LIMIT: Duration = Duration::from_secs(4 * 3600);
/// How long everything must stay settled before the run counts as finished.
const SETTLED: Duration = Duration::from_secs(3);
/// Telegram group chat ids (not supergroups: 20 messages a minute per chat).
const FIRST_CHAT: i64 = -1_000_000;

struct Options {
    messages: usize,
    groups: usize,
    live: usize,
    window: usize,
    soak: bool,
    kills: usize,
    seed: u64,
    /// Keep the temp dir (pincer's logs and store) after the run.
    keep: bool,
}

impl Options {
    fn from_env() -> Options {
        let get = |name: &str, default: u64| -> u64 {
            match std::env::var(name) {
                Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name} must be a whole number, not {v:?}")),
                Err(_) => default,
            }
        };
        let o = Options {
            messages: get("PINCER_LOAD_MESSAGES", 100_000) as usize,
            groups: get("PINCER_LOAD_GROUPS", 1_000) as usize,
            live: get("PINCER_LOAD_LIVE", 32) as usize,
            window: get("PINCER_LOAD_WINDOW", 256) as usize,
            soak: get("PINCER_LOAD_SOAK", 0) != 0,
            kills: get("PINCER_LOAD_KILLS", 5) as usize,
            seed: get("PINCER_LOAD_SEED", 1),
            keep: get("PINCER_LOAD_KEEP", 0) != 0,
        };
        assert!(o.groups >= 1 && o.messages >= o.groups, "at least one group, and a message for each");
        assert!(o.live >= 1 && o.window >= 1, "PINCER_LOAD_LIVE and PINCER_LOAD_WINDOW: at least 1");
        o
    }
}

fn main() {
    // pincer asks its CLI for `--version` without `claude.env`: answered as the CLI would.
    if std::env::args().any(|a| a == "--version") {
        println!("{}", standin::VERSION);
        return;
    }
    // Started as a session (by its environment, or failing that its arguments).
    if std::env::var_os(standin::ENV).is_some() || std::env::args().any(|a| a == "--input-format") {
        standin::run();
    }
    // Whatever pincer starts inherits this: the bench must never start itself again.
    if std::env::var_os(RUNNING_ENV).is_some() {
        eprintln!("load bench: started from within a load bench run (as pincer's CLI?); refusing to run again");
        std::process::exit(2);
    }
    let options = Options::from_env();
    // pincer reads every PINCER_* variable as configuration and refuses unknown
    // keys; its child inherits ours. Still one thread here, so this is sound.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("PINCER_LOAD_")) {
            std::env::remove_var(name);
        }
    }
    std::env::set_var(RUNNING_ENV, "1");
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let failures = runtime.block_on(bench(options));
    if failures > 0 {
        eprintln!("load bench: {failures} exactly-once check(s) failed (see above)");
        std::process::exit(1);
    }
}

/// A small seeded generator (splitmix64): the same seed, the same run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One planned message: its group and its token.
struct Planned {
    group: usize,
    token: String,
}

/// N messages over G groups (N/G each, the remainder to the first groups),
/// in a random order; within a group they are numbered in the order they go.
fn plan(o: &Options, rng: &mut Rng) -> Vec<Planned> {
    let mut groups: Vec<usize> = (0..o.messages).map(|i| i % o.groups).collect();
    for i in (1..groups.len()).rev() {
        groups.swap(i, rng.below(i + 1));
    }
    let mut next = vec![0usize; o.groups];
    groups
        .into_iter()
        .map(|group| {
            next[group] += 1;
            Planned { group, token: standin::token(group, next[group]) }
        })
        .collect()
}

fn group_name(group: usize) -> String {
    format!("load-{group:04}")
}

fn chat_of(group: usize) -> TgChat {
    TgChat::group(FIRST_CHAT - group as i64, &format!("Load {group}"))
}

async fn bench(o: Options) -> usize {
    let exe = std::env::current_exe().expect("the bench knows its own path");
    println!(
        "load: {} messages over {} Telegram groups, max_live_sessions = {}, at most {} in flight, seed {}{}",
        o.messages,
        o.groups,
        o.live,
        o.window,
        o.seed,
        if o.soak { format!(", soak: {} kills (SIGKILL) and restarts", o.kills) } else { String::new() }
    );
    println!("CLI: the stand-in (answers at once); sandbox.mode = \"none\"");
    calibrate_standin(&exe);

    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::with_program(exe, "http://127.0.0.1:9");
    sandbox.use_telegram(&bot);
    sandbox.config.claude.max_live_sessions = o.live;
    sandbox.config.claude.env.insert(standin::ENV.to_owned(), "1".to_owned());
    if o.keep {
        // For a look at pincer's logs and store afterwards.
        sandbox.dir.disable_cleanup(true);
        println!("keeping {}", sandbox.root().display());
    }
    register_groups(&sandbox, o.groups).await;
    let config = sandbox.write_config();
    let db = sandbox.config.data_dir.join("pincer.db");

    let mut rng = Rng(o.seed);
    let plan = plan(&o, &mut rng);
    // Kills at random points of the progress (answers + replies, out of 2N).
    let mut kill_at: Vec<f64> = (0..if o.soak { o.kills } else { 0 }).map(|_| 0.05 + 0.9 * rng.unit()).collect();
    kill_at.sort_by(f64::total_cmp);

    let clock = WallClock::now();
    let mut pincer = Pincer::start(sandbox.root(), &config, 1).await;
    let progress_pool = read_only(&db).await;
    let mut progress = Progress::default();
    let user = TgUser::new(42, "Load");
    let chats: Vec<TgChat> = (0..o.groups).map(chat_of).collect();

    let mut said: Vec<Instant> = Vec::with_capacity(o.messages);
    let mut kills: Vec<Kill> = Vec::new();
    let started = Instant::now();
    let mut last_change = Instant::now();
    let mut last_seen = (0u64, 0u64, 0usize);
    let mut settled_since: Option<Instant> = None;
    let mut kill_when: Option<Instant> = None;
    let outcome = loop {
        pincer.sample();
        let (stored, done) = progress.read(&progress_pool).await;
        let sent = bot.sent_count();
        while said.len() < o.messages && (said.len() as u64) < done + o.window as u64 {
            let p = &plan[said.len()];
            bot.say(&chats[p.group], &user, &p.token);
            said.push(Instant::now());
        }
        let now = Instant::now();
        if (stored, done, sent) != last_seen {
            last_seen = (stored, done, sent);
            last_change = now;
        }
        let fraction = (done as f64 + sent.min(o.messages) as f64) / (2 * o.messages) as f64;
        if kills.len() < kill_at.len() && fraction >= kill_at[kills.len()] && kill_when.is_none() {
            // A random moment within the next second, while the load goes on.
            kill_when = Some(now + Duration::from_millis(rng.below(1000) as u64));
        }
        if kill_when.is_some_and(|at| now >= at) {
            kill_when = None;
            let (stored, done) = progress.read(&progress_pool).await;
            let at = started.elapsed();
            pincer.kill().await;
            let restart = Instant::now();
            pincer = Pincer::start(sandbox.root(), &config, kills.len() + 2).await.inheriting(&pincer);
            kills.push(Kill { at, said: said.len(), unanswered: stored - done, restart: restart.elapsed() });
            continue;
        }
        let quiet = said.len() == o.messages
            && stored == done
            && bot.pending_updates() == 0
            && queued_replies(&progress_pool).await == 0;
        if quiet {
            let since = *settled_since.get_or_insert(now);
            if now - since >= SETTLED {
                break Ok(());
            }
        } else {
            settled_since = None;
        }
        if now - last_change > STALL_LIMIT {
            break Err(format!("no progress for {STALL_LIMIT:?}"));
        }
        if now - started > RUN_LIMIT {
            break Err(format!("the run took longer than {RUN_LIMIT:?}"));
        }
        let nap = if said.len() < o.messages { 20 } else { 250 };
        tokio::time::sleep(Duration::from_millis(nap)).await;
    };
    let elapsed = started.elapsed();
    let usage = pincer.stop().await;
    progress_pool.close().await;

    let mut failures = 0;
    if let Err(why) = &outcome {
        println!("\nRUN STOPPED: {why}");
        failures += 1;
    }
    let store = read_only(&db).await;
    let facts = Facts::gather(&store, &bot).await;
    store.close().await;
    failures += report(&o, &plan, &said, clock, started, elapsed, &facts, &usage, &kills, sandbox.root());
    failures
}

/// Registers the groups as `pincer groups add NAME --telegram ID --no-trigger` does.
async fn register_groups(sandbox: &Sandbox, groups: usize) {
    let store = pincer::app::open_store(&sandbox.config).await.expect("the store opens");
    for group in 0..groups {
        let name = group_name(group).parse().expect("a group name");
        let settings = GroupSettings {
            chat: Some(ChatAddress::telegram(chat_of(group).id, None)),
            requires_trigger: false,
            ..GroupSettings::default()
        };
        pincer::app::register_group(&store, &sandbox.config, &name, &settings).await.expect("the group registers");
    }
    store.close().await;
}

async fn read_only(db: &Path) -> SqlitePool {
    let options = SqliteConnectOptions::new().filename(db).read_only(true);
    SqlitePoolOptions::new().max_connections(1).connect_with(options).await.expect("pincer.db opens read-only")
}

/// Counts the inbound rows stored and those done (answered or failed), reading
/// only rows from the oldest one not done yet.
#[derive(Default)]
struct Progress {
    /// The oldest row not known to be done.
    low: i64,
    /// Rows below `low`: all done.
    done_below: u64,
}

impl Progress {
    async fn read(&mut self, pool: &SqlitePool) -> (u64, u64) {
        let rows: Vec<(i64, String)> = sqlx::query_as("SELECT id, state FROM inbound WHERE id >= ? ORDER BY id")
            .bind(self.low)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
        let stored = self.done_below + rows.len() as u64;
        let mut done = self.done_below;
        let mut prefix = true;
        for (id, state) in &rows {
            if state == "answered" || state == "failed" {
                done += 1;
                if prefix {
                    self.low = id + 1;
                    self.done_below += 1;
                }
            } else {
                prefix = false;
            }
        }
        (stored, done)
    }
}

async fn queued_replies(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE state = 'queued'").fetch_one(pool).await.unwrap_or(-1)
}

/// One SIGKILL of the soak.
struct Kill {
    at: Duration,
    said: usize,
    unanswered: u64,
    restart: Duration,
}

/// What /proc says about pincer: peak RSS and CPU time.
#[derive(Clone, Copy, Default)]
struct Usage {
    peak_rss_kib: u64,
    /// pincer's own user + system time, summed over its runs.
    cpu: Duration,
    /// Its children's (the stand-ins pincer reaped).
    children_cpu: Duration,
}

/// One `pincer run` and its usage so far.
struct Pincer {
    child: tokio::process::Child,
    pid: i32,
    /// The runs before this one (a soak's killed ones).
    before: Usage,
    now: Usage,
}

impl Pincer {
    async fn start(root: &Path, config: &Path, run: usize) -> Pincer {
        let log = root.join(format!("pincer-{run}.log"));
        let args = ["--config".as_ref(), config.as_os_str()];
        let child = spawn_pincer_run_logging(root, &args, &[], Some(&log)).await;
        let pid = child.id().expect("pincer runs") as i32;
        Pincer { child, pid, before: Usage::default(), now: Usage::default() }
    }

    /// Carries the usage of the run that was killed over to this one.
    fn inheriting(mut self, killed: &Pincer) -> Pincer {
        self.before = killed.total();
        self
    }

    fn total(&self) -> Usage {
        Usage {
            peak_rss_kib: self.before.peak_rss_kib.max(self.now.peak_rss_kib),
            cpu: self.before.cpu + self.now.cpu,
            children_cpu: self.before.children_cpu + self.now.children_cpu,
        }
    }

    /// Reads the peak RSS and CPU times while the process is there to read.
    fn sample(&mut self) {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) {
            let hwm = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            if let Some(kib) = hwm {
                self.now.peak_rss_kib = self.now.peak_rss_kib.max(kib);
            }
        }
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // Fields after the command name, which may hold spaces: state is field 3.
            let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
            let tick = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
            let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as u64;
            let secs = |ticks: u64| Duration::from_millis(ticks * 1000 / hz);
            self.now.cpu = secs(tick(14) + tick(15));
            self.now.children_cpu = secs(tick(16) + tick(17));
        }
    }

    async fn kill(&mut self) {
        self.sample();
        kill(Pid::from_raw(self.pid), Signal::SIGKILL).expect("pincer can be killed");
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }

    /// SIGTERM, as a user stops it; returns the usage over all runs.
    async fn stop(mut self) -> Usage {
        self.sample();
        kill(Pid::from_raw(self.pid), Signal::SIGTERM).expect("pincer can be signalled");
        match tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            other => println!("pincer did not stop cleanly on SIGTERM: {other:?}"),
        }
        self.total()
    }
}

/// The stand-in alone, so its share of the numbers below is known: started,
/// one message answered, ended; and one live process answering many.
fn calibrate_standin(exe: &Path) {
    let mut starts = Vec::new();
    for i in 0..30 {
        let started = Instant::now();
        let mut child = standin_process(exe);
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        writeln!(stdin, "{}", user_line(&standin::token(0, i + 1))).expect("the stand-in reads");
        stdin.flush().expect("the stand-in reads");
        let answered = stdout.lines().map_while(Result::ok).any(|l| l.contains("\"type\":\"result\""));
        assert!(answered, "the stand-in answers");
        drop(stdin);
        child.wait().expect("the stand-in ends");
        starts.push(started.elapsed());
    }
    print_row("stand-in alone: start, answer one message, end (30 runs)", starts);

    let n = 20_000;
    let started = Instant::now();
    let mut child = standin_process(exe);
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || {
        for i in 0..n {
            writeln!(stdin, "{}", user_line(&standin::token(0, i + 1))).expect("the stand-in reads");
        }
    });
    let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let results = stdout.lines().map_while(Result::ok).filter(|l| l.contains("\"type\":\"result\"")).count();
    writer.join().expect("the writer ends");
    child.wait().expect("the stand-in ends");
    assert_eq!(results, n, "one result per message");
    let secs = started.elapsed().as_secs_f64();
    println!("\nstand-in alone, one live process: {n} messages in {secs:.2} s = {:.0} messages/s", n as f64 / secs);
}

fn standin_process(exe: &Path) -> std::process::Child {
    #[allow(clippy::disallowed_methods)] // the bench runs its own stand-in to measure it alone
    let child = std::process::Command::new(exe)
        .env(standin::ENV, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn();
    child.expect("the stand-in starts")
}

fn user_line(text: &str) -> String {
    pincer::claude::protocol::user_message(text, &[], &uuid::Uuid::new_v4().to_string())
}

/// An outbox row: its state and when it was delivered.
type OutboxState = (String, Option<i64>);

/// What the store and the chats hold after the run.
struct Facts {
    /// Per inbound row: id, text (a token), state, stored at.
    inbound: Vec<(i64, String, String, i64)>,
    /// Per result: id, its text, stored at.
    results: Vec<(i64, Option<String>, i64)>,
    /// Reply rows by result id: state, delivered at.
    rows_by_result: HashMap<i64, Vec<OutboxState>>,
    /// Outbox rows that carry no result (pincer's notices), by state.
    notices: HashMap<String, u64>,
    /// Per sendMessage that Telegram took: chat, text, when.
    replies: Vec<(i64, String, Instant)>,
    /// CLI processes pincer started.
    processes: i64,
    /// Session lifecycle events by kind.
    events: Vec<(String, i64)>,
}

impl Facts {
    async fn gather(store: &SqlitePool, bot: &FakeBot) -> Facts {
        let inbound = sqlx::query_as("SELECT id, text, state, at_us FROM inbound ORDER BY id")
            .fetch_all(store)
            .await
            .expect("the inbound table reads");
        let results =
            sqlx::query_as("SELECT id, text, at_us FROM results ORDER BY id").fetch_all(store).await.expect("results");
        let rows: Vec<(Option<i64>, String, Option<i64>)> =
            sqlx::query_as("SELECT result_id, state, delivered_at_us FROM outbox ORDER BY id")
                .fetch_all(store)
                .await
                .expect("the outbox reads");
        let mut rows_by_result: HashMap<i64, Vec<OutboxState>> = HashMap::new();
        let mut notices: HashMap<String, u64> = HashMap::new();
        for (result, state, at) in rows {
            match result {
                Some(id) => rows_by_result.entry(id).or_default().push((state, at)),
                None => *notices.entry(state).or_default() += 1,
            }
        }
        let processes = sqlx::query_scalar("SELECT COUNT(*) FROM session_events WHERE kind IN ('started', 'resumed')")
            .fetch_one(store)
            .await
            .expect("session events");
        let events = sqlx::query_as("SELECT kind, COUNT(*) FROM session_events GROUP BY kind ORDER BY kind")
            .fetch_all(store)
            .await
            .expect("session events");
        let replies = bot
            .calls_to("sendMessage")
            .into_iter()
            .filter(|c| c.ok)
            .filter_map(|c| {
                let chat = c.params.get("chat_id").and_then(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok()))?;
                let text = c.params.get("text").and_then(|t| t.as_str()).unwrap_or_default().to_owned();
                Some((chat, text, c.at))
            })
            .collect();
        Facts { inbound, results, rows_by_result, notices, replies, processes, events }
    }
}

/// One message, followed through the store and its chat (times in unix µs).
#[derive(Debug, Default)]
struct Trace {
    group: usize,
    said: i64,
    /// Its inbound rows: id, state, stored at.
    stored: Vec<(i64, String, i64)>,
    /// The results naming it: id, stored at, and the state and delivery time
    /// of each of the result's outbox rows.
    answers: Vec<(i64, i64, Vec<OutboxState>)>,
    /// The replies naming it that Telegram took: chat, when.
    replies: Vec<(i64, i64)>,
}

impl Trace {
    fn stored_once(&self) -> bool {
        self.stored.len() == 1 && self.stored[0].1 == "answered"
    }

    /// Exactly one result, with exactly one delivered outbox row.
    fn answered_once(&self) -> bool {
        self.answers.len() == 1 && self.answers[0].2.len() == 1 && self.answers[0].2[0].0 == "delivered"
    }

    fn first_stored(&self) -> Option<i64> {
        self.stored.iter().map(|s| s.2).min()
    }

    fn answered(&self) -> Option<i64> {
        self.answers.first().map(|a| a.1)
    }

    fn delivered(&self) -> Option<i64> {
        self.answers.first()?.2.first()?.1
    }

    fn first_reply(&self) -> Option<i64> {
        self.replies.iter().map(|r| r.1).min()
    }

    /// Where it went, with times from `origin`, for a failure report.
    fn describe(&self, token: &str, origin: i64) -> String {
        let t = |us: i64| format!("{:.3}s", (us - origin) as f64 / 1e6);
        let stored: Vec<String> =
            self.stored.iter().map(|(id, state, at)| format!("#{id} {state} at {}", t(*at))).collect();
        let answers: Vec<String> = self
            .answers
            .iter()
            .map(|(id, at, rows)| {
                let rows: Vec<String> = rows.iter().map(|(state, _)| state.clone()).collect();
                format!("#{id} at {} (outbox: {})", t(*at), rows.join(", "))
            })
            .collect();
        let replies: Vec<String> = self.replies.iter().map(|(chat, at)| format!("{} in {chat}", t(*at))).collect();
        format!(
            "{token} ({}, said at {}): inbound [{}]; results [{}]; replies [{}]",
            group_name(self.group),
            t(self.said),
            stored.join("; "),
            answers.join("; "),
            replies.join("; ")
        )
    }
}

/// Follows every message said through the facts; also returns the results
/// and inbound rows that no message explains.
fn trace(plan: &[Planned], said: &[Instant], clock: WallClock, facts: &Facts) -> (HashMap<String, Trace>, Vec<String>) {
    let mut traces: HashMap<String, Trace> = plan
        .iter()
        .zip(said)
        .map(|(p, at)| (p.token.clone(), Trace { group: p.group, said: clock.micros(*at), ..Trace::default() }))
        .collect();
    let mut strays = Vec::new();
    for (id, text, state, at) in &facts.inbound {
        match traces.get_mut(text) {
            Some(trace) => trace.stored.push((*id, state.clone(), *at)),
            None => strays.push(format!("inbound #{id} {state}: {text:?}")),
        }
    }
    for (id, text, at) in &facts.results {
        let named = standin::tokens(text.as_deref().unwrap_or(""));
        if named.is_empty() {
            strays.push(format!("result #{id} names no message: {text:?}"));
        }
        let rows = facts.rows_by_result.get(id).cloned().unwrap_or_default();
        for token in named {
            match traces.get_mut(token) {
                Some(trace) => trace.answers.push((*id, *at, rows.clone())),
                None => strays.push(format!("result #{id} names {token}, which was never said")),
            }
        }
    }
    for (chat, text, at) in &facts.replies {
        for token in standin::tokens(text) {
            if let Some(trace) = traces.get_mut(token) {
                trace.replies.push((*chat, clock.micros(*at)));
            }
        }
    }
    (traces, strays)
}

/// Checks exactly-once and prints the numbers; returns the number of failed checks.
#[allow(clippy::too_many_arguments)]
fn report(
    o: &Options,
    plan: &[Planned],
    said: &[Instant],
    clock: WallClock,
    started: Instant,
    elapsed: Duration,
    facts: &Facts,
    usage: &Usage,
    kills: &[Kill],
    root: &Path,
) -> usize {
    let origin = clock.micros(started);
    let (traces, strays) = trace(plan, said, clock, facts);
    let mut failures = 0;
    let mut check = |what: &str, failing: Vec<(&String, &Trace)>| {
        if failing.is_empty() {
            return;
        }
        failures += 1;
        println!("\nFAILED: {} message(s) {what}, e.g.:", failing.len());
        for (token, trace) in failing.iter().take(10) {
            println!("  {}", trace.describe(token, origin));
        }
    };
    let all: Vec<(&String, &Trace)> = traces.iter().collect();
    let such = |f: &dyn Fn(&Trace) -> bool| all.iter().filter(|(_, t)| f(t)).copied().collect::<Vec<_>>();
    check("never stored (lost)", such(&|t| t.stored.is_empty()));
    check("stored more than once", such(&|t| t.stored.len() > 1));
    check("with an inbound row not `answered`", such(&|t| t.stored.iter().any(|s| s.1 != "answered")));
    check("not named by exactly one result", such(&|t| t.answers.len() != 1));
    check(
        "whose result has not exactly one delivered outbox row",
        such(&|t| t.answers.iter().any(|a| a.2.len() != 1 || a.2[0].0 != "delivered")),
    );
    check("without a reply in their chat", such(&|t| t.replies.is_empty()));
    check("replied to in another chat", such(&|t| t.replies.iter().any(|r| r.0 != chat_of(t.group).id)));
    // A reply the chat got twice while the store holds one delivered row is the
    // window of a kill between Telegram's answer and pincer's record: a soak's only.
    let window = |t: &Trace| o.soak && t.replies.len() > 1 && t.answered_once();
    check("replied to more than once", such(&|t| t.replies.len() > 1 && !window(t)));
    if said.len() < plan.len() {
        failures += 1;
        println!("\nFAILED: only {} of {} messages were said", said.len(), plan.len());
    }
    if !strays.is_empty() {
        failures += 1;
        println!("\nFAILED: {} row(s) in the store that no message explains, e.g.:", strays.len());
        for stray in strays.iter().take(10) {
            println!("  {stray}");
        }
    }
    let sent_twice = such(&window);
    if !sent_twice.is_empty() {
        println!("\n{} message(s) replied to twice with one delivered row (a kill's window), e.g.:", sent_twice.len());
        for (token, trace) in sent_twice.iter().take(10) {
            println!("  {}", trace.describe(token, origin));
        }
    }

    // Numbers.
    let n = said.len().max(1) as f64;
    let first_said = said.first().map_or(origin, |at| clock.micros(*at));
    let span_to = |end: Option<i64>| Duration::from_micros(end.map_or(0, |e| (e - first_said).max(1)) as u64);
    let to_answered = span_to(traces.values().filter_map(Trace::answered).max());
    let to_replied = span_to(traces.values().filter_map(Trace::first_reply).max());
    let per_msg = |d: Duration| d.as_secs_f64() * 1e6 / n;
    let notices: Vec<String> = facts.notices.iter().map(|(s, k)| format!("{k} {s}")).collect();
    let events: Vec<String> = facts.events.iter().map(|(k, c)| format!("{k} {c}")).collect();
    println!("\nload, {} messages over {} groups, max_live_sessions = {}", said.len(), o.groups, o.live);
    println!("| measure | value |");
    println!("| --- | --- |");
    let rate = |d: Duration| n / d.as_secs_f64().max(1e-6);
    println!(
        "| first said → last answered (result stored) | {to_answered:.1?} = {:.0} messages/s |",
        rate(to_answered)
    );
    println!("| first said → last reply in its chat | {to_replied:.1?} = {:.0} messages/s |", rate(to_replied));
    println!("| whole run (until settled) | {elapsed:.1?} |");
    println!("| CLI processes started | {} ({:.2} per message) |", facts.processes, facts.processes as f64 / n);
    println!("| pincer peak RSS (VmHWM) | {:.1} MiB |", usage.peak_rss_kib as f64 / 1024.0);
    println!("| pincer CPU (user + system) | {:.1?} = {:.0} µs per message |", usage.cpu, per_msg(usage.cpu));
    println!(
        "| stand-ins' CPU (children pincer reaped) | {:.1?} = {:.0} µs per message |",
        usage.children_cpu,
        per_msg(usage.children_cpu)
    );
    println!("| replies sent twice (killed between Telegram's answer and pincer's record) | {} |", sent_twice.len());
    println!(
        "| pincer's notices in the chats | {} |",
        if notices.is_empty() { "none".into() } else { notices.join(", ") }
    );
    println!("| session events | {} |", events.join(", "));
    println!("| pincer's log | {} |", log_counts(root));

    let gaps = |from: fn(&Trace) -> Option<i64>, to: fn(&Trace) -> Option<i64>| -> Vec<Duration> {
        traces.values().filter_map(|t| Some(Duration::from_micros((to(t)? - from(t)?).max(0) as u64))).collect()
    };
    print_summary_row(
        "said → stored (fake Bot API queue, long poll, inbound stored)",
        gaps(|t| Some(t.said), Trace::first_stored),
    );
    print_summary_row(
        "stored → answered: pincer's overhead (group queue, live slot, CLI start, stdin, stand-in, result stored)",
        gaps(Trace::first_stored, Trace::answered),
    );
    print_summary_row("answered → delivered (outbox, teloxide's Throttle)", gaps(Trace::answered, Trace::delivered));
    print_summary_row("said → reply in the chat (end to end)", gaps(|t| Some(t.said), Trace::first_reply));

    if !kills.is_empty() {
        println!("\nsoak: SIGKILL and restart (times from the start of the run)");
        println!("| kill | at | messages said | unanswered then | restart → running |");
        println!("| --- | --- | --- | --- | --- |");
        for (i, k) in kills.iter().enumerate() {
            println!("| {} | {:.3?} | {} | {} | {:.1?} |", i + 1, k.at, k.said, k.unanswered, k.restart);
        }
    }
    let clean = traces.values().filter(|t| t.stored_once() && t.answered_once() && t.replies.len() == 1).count();
    println!(
        "\nexactly once: {clean} of {} messages stored once and answered, named by one result with one delivered \
         row, one reply in their chat{}",
        said.len(),
        if failures == 0 { " (all checks passed)" } else { "" }
    );
    failures
}

/// WARN and ERROR lines in pincer's logs, with the most common messages.
fn log_counts(root: &Path) -> String {
    let mut warn = 0;
    let mut error = 0;
    let mut kinds: HashMap<String, u64> = HashMap::new();
    let logs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "log")).collect()
        })
        .unwrap_or_default();
    for log in logs {
        let Ok(text) = std::fs::read_to_string(&log) else { continue };
        for line in text.lines() {
            let line = strip_ansi(line);
            let line = line.as_str();
            let level = if line.contains(" WARN ") {
                warn += 1;
                "WARN"
            } else if line.contains("ERROR ") {
                error += 1;
                "ERROR"
            } else {
                continue;
            };
            // The message without the time and fields, to group alike lines.
            let message: String = line
                .split(": ")
                .nth(1)
                .unwrap_or(line)
                .chars()
                .take(80)
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect();
            *kinds.entry(format!("{level} {message}")).or_default() += 1;
        }
    }
    let mut kinds: Vec<(String, u64)> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    let top: Vec<String> = kinds.iter().take(3).map(|(k, n)| format!("{n}× {k}")).collect();
    format!(
        "{warn} warnings, {error} errors{}",
        if top.is_empty() { String::new() } else { format!(": {}", top.join("; ")) }
    )
}

/// `line` without terminal colour codes (pincer colours its log even into a pipe).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ … a letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
