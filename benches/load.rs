//! Load and soak: the `pincer run` binary serving 1,000 Telegram groups with
//! far fewer live CLI processes than groups, 100,000 messages, every one
//! checked to be answered exactly once; and the same load on PostgreSQL and
//! on several cluster nodes (issue 36).
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
//! - **PostgreSQL against SQLite** (`PINCER_LOAD_POSTGRES=1`): two runs of the
//!   same plan in one invocation, SQLite first, then one node (no cluster) on a
//!   fresh database of the tests' PostgreSQL (`tests/support/postgres.rs`: a
//!   server of this process on a Unix socket, with `fsync=off` and
//!   `synchronous_commit=off`; pincer's SQLite runs WAL with
//!   `synchronous=NORMAL`, which does not sync at each commit either). The
//!   runs are sequential, not interleaved per message: two daemons at once
//!   would share the machine's two cores and each would slow the other.
//!   Printed side by side: messages/s and CPU per message, pincer's own
//!   (user + system from `/proc`) and, for PostgreSQL, the server's (its
//!   processes', which also serve the bench's own progress queries): with
//!   SQLite that work is inside pincer's process.
//! - **1 against M nodes** (`PINCER_LOAD_NODES=M`, on PostgreSQL): one cluster
//!   node, then M (`[cluster] enabled`, separate data dirs, the same database,
//!   `lease_ttl` 3 s), each capped at L live sessions, with a stand-in that
//!   takes `PINCER_LOAD_STANDIN_DELAY` per answer (200ms by default here), so
//!   live slots, not the two cores, bound a node: a node answers at most
//!   about L / delay messages/s. A node counts its busy sessions as its
//!   load: an idle one gives its slot to a group the node claims, as on one
//!   machine (`PINCER_LOAD_IDLE_TIMEOUT` still sets `claude.idle_timeout`,
//!   the harness's 600 s otherwise). The gateway node sends every reply, and
//!   teloxide's `Throttle` caps that at 30 sends/s, so the comparison is the
//!   engine's rate (to the last result stored); the end-to-end rate is shown
//!   beside it.
//! - **Exactly once**, checked from the store (`pincer.db` opened read-only,
//!   or the PostgreSQL database through a `PgPool`, the same SQL) and the
//!   chats: every message stored once and `answered`, named by exactly
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
//!   pincer's peak RSS (`VmHWM` from `/proc`, sampled while it runs) and CPU
//!   (summed over the nodes).
//!
//! Run (defaults: N = 100000, G = 1000, L = 32, W = 256, K = 5, seed 1; with
//! `PINCER_LOAD_POSTGRES` or `PINCER_LOAD_NODES`: N = 5000, G = 200, and with
//! `PINCER_LOAD_NODES` L = 4):
//!
//! ```text
//! cargo bench --bench load
//! PINCER_LOAD_MESSAGES=5000 PINCER_LOAD_GROUPS=200 cargo bench --bench load
//! PINCER_LOAD_SOAK=1 cargo bench --bench load
//! PINCER_LOAD_POSTGRES=1 cargo bench --bench load
//! PINCER_LOAD_NODES=3 PINCER_LOAD_LIVE=4 PINCER_LOAD_STANDIN_DELAY=200ms \
//!     cargo bench --bench load
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
use pincer::cluster::NodeId;
use pincer::config::Secret;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use sqlx::postgres::{PgPool, PgPoolOptions};
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
/// The cluster nodes' lease (short, as in the cluster tests).
const LEASE_TTL: Duration = Duration::from_secs(3);

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
    /// SQLite, then the same load on PostgreSQL.
    postgres: bool,
    /// One cluster node, then this many (0: no cluster runs).
    nodes: usize,
    /// How long the stand-in takes per answer.
    delay: Duration,
    /// `claude.idle_timeout`, when set.
    idle_timeout: Option<Duration>,
}

impl Options {
    fn from_env() -> Options {
        let get = |name: &str, default: u64| -> u64 {
            match std::env::var(name) {
                Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name} must be a whole number, not {v:?}")),
                Err(_) => default,
            }
        };
        let postgres = get("PINCER_LOAD_POSTGRES", 0) != 0;
        let nodes = get("PINCER_LOAD_NODES", 0) as usize;
        let small = postgres || nodes > 0;
        let duration = |name: &str, default: Option<Duration>| match std::env::var(name) {
            Ok(v) => Some(humantime::parse_duration(&v).unwrap_or_else(|_| panic!("{name}: a duration such as 200ms"))),
            Err(_) => default,
        };
        let cluster = |d: u64| (nodes > 0).then_some(Duration::from_millis(d));
        let delay = duration("PINCER_LOAD_STANDIN_DELAY", cluster(200)).unwrap_or_default();
        let idle_timeout = duration("PINCER_LOAD_IDLE_TIMEOUT", None);
        let o = Options {
            messages: get("PINCER_LOAD_MESSAGES", if small { 5_000 } else { 100_000 }) as usize,
            groups: get("PINCER_LOAD_GROUPS", if small { 200 } else { 1_000 }) as usize,
            live: get("PINCER_LOAD_LIVE", if nodes > 0 { 4 } else { 32 }) as usize,
            window: get("PINCER_LOAD_WINDOW", 256) as usize,
            soak: get("PINCER_LOAD_SOAK", 0) != 0,
            kills: get("PINCER_LOAD_KILLS", 5) as usize,
            seed: get("PINCER_LOAD_SEED", 1),
            keep: get("PINCER_LOAD_KEEP", 0) != 0,
            postgres,
            nodes,
            delay,
            idle_timeout,
        };
        assert!(o.groups >= 1 && o.messages >= o.groups, "at least one group, and a message for each");
        assert!(o.live >= 1 && o.window >= 1, "PINCER_LOAD_LIVE and PINCER_LOAD_WINDOW: at least 1");
        assert!(!(o.soak && (o.postgres || o.nodes > 0)), "the soak runs on SQLite only");
        o
    }

    /// The runs of this invocation, in order.
    fn setups(&self) -> Vec<Setup> {
        let sqlite = Setup { postgres: false, cluster: false, nodes: 1 };
        if self.nodes > 0 {
            let one = Setup { postgres: true, cluster: true, nodes: 1 };
            vec![one, Setup { nodes: self.nodes, ..one }]
        } else if self.postgres {
            vec![sqlite, Setup { postgres: true, ..sqlite }]
        } else {
            vec![sqlite]
        }
    }
}

/// Where one run's store lives and how many nodes serve it.
#[derive(Clone, Copy)]
struct Setup {
    postgres: bool,
    cluster: bool,
    nodes: usize,
}

impl Setup {
    fn label(&self) -> String {
        let store = if self.postgres { "PostgreSQL" } else { "SQLite" };
        match (self.cluster, self.nodes) {
            (false, _) => format!("{store}, one node"),
            (true, 1) => format!("{store}, 1 cluster node"),
            (true, n) => format!("{store}, {n} cluster nodes"),
        }
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
        "load: {} messages over {} Telegram groups, max_live_sessions = {} per node, at most {} in flight, seed {}{}",
        o.messages,
        o.groups,
        o.live,
        o.window,
        o.seed,
        if o.soak { format!(", soak: {} kills (SIGKILL) and restarts", o.kills) } else { String::new() }
    );
    let answers = if o.delay.is_zero() { "answers at once".to_owned() } else { format!("answers after {:?}", o.delay) };
    let idle = o.idle_timeout.map_or(String::new(), |d| format!("; claude.idle_timeout = {d:?}"));
    println!("CLI: the stand-in ({answers}); sandbox.mode = \"none\"{idle}");
    calibrate_standin(&exe);

    let mut failures = 0;
    let mut summaries = Vec::new();
    for setup in o.setups() {
        println!("\n=== run: {} ===", setup.label());
        let summary = run(&o, &exe, setup).await;
        failures += summary.failures;
        summaries.push(summary);
    }
    if summaries.len() > 1 {
        print_comparison(&summaries);
    }
    failures
}

/// One run's headline numbers, for the comparison of runs.
struct Summary {
    label: String,
    messages: usize,
    /// Messages/s to the last result stored, and to the last reply sent.
    engine_rate: f64,
    end_to_end_rate: f64,
    /// Per message: pincer's CPU (all nodes), the PostgreSQL server's, the stand-ins'.
    pincer_cpu_us: f64,
    postgres_cpu_us: Option<f64>,
    standin_cpu_us: f64,
    failures: usize,
}

fn print_comparison(summaries: &[Summary]) {
    println!("\nruns of this invocation, one after the other (not interleaved)");
    println!(
        "| run | messages | engine messages/s | end-to-end messages/s | pincer CPU per message | PostgreSQL CPU per \
         message | stand-ins' CPU per message | exactly once |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in summaries {
        let pg = s.postgres_cpu_us.map_or("-".to_owned(), |us| format!("{us:.0} µs"));
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.0} µs | {pg} | {:.0} µs | {} |",
            s.label,
            s.messages,
            s.engine_rate,
            s.end_to_end_rate,
            s.pincer_cpu_us,
            s.standin_cpu_us,
            if s.failures == 0 { "yes" } else { "NO" }
        );
    }
    if let [first, .., last] = summaries {
        println!(
            "\n{} against {}: engine rate ×{:.2}, pincer CPU per message ×{:.2}",
            last.label,
            first.label,
            last.engine_rate / first.engine_rate.max(1e-9),
            last.pincer_cpu_us / first.pincer_cpu_us.max(1e-9)
        );
    }
}

/// One run of the plan on `setup`: start the nodes, drive the load, stop
/// them, check exactly once and print the numbers.
async fn run(o: &Options, exe: &Path, setup: Setup) -> Summary {
    let bot = FakeBot::start().await;
    let url = setup.postgres.then(|| support::postgres::server().fresh_database());
    let sandboxes: Vec<Sandbox> =
        (1..=setup.nodes).map(|n| node_sandbox(o, exe, &bot, setup, url.as_deref(), n)).collect();
    register_groups(&sandboxes[0], o.groups).await;
    let configs: Vec<PathBuf> = sandboxes.iter().map(Sandbox::write_config).collect();
    let store = match &url {
        Some(url) => StoreAt::Postgres(url.clone()),
        None => StoreAt::Sqlite(sandboxes[0].config.data_dir.join("pincer.db")),
    };

    let mut rng = Rng(o.seed);
    let plan = plan(o, &mut rng);
    // Kills at random points of the progress (answers + replies, out of 2N).
    let mut kill_at: Vec<f64> = (0..if o.soak { o.kills } else { 0 }).map(|_| 0.05 + 0.9 * rng.unit()).collect();
    kill_at.sort_by(f64::total_cmp);

    let clock = WallClock::now();
    let postgres_before = setup.postgres.then(postgres_cpu).flatten();
    let mut nodes = Vec::with_capacity(sandboxes.len());
    for (sandbox, config) in sandboxes.iter().zip(&configs) {
        nodes.push(Pincer::start(sandbox.root(), config, 1).await);
    }
    let db = Db::open(&store).await;
    let mut driver = Driver::new(o, &plan, &bot, rng, kill_at);
    let outcome = driver.drive(&db, &mut nodes, &sandboxes, &configs).await;
    let elapsed = driver.started.elapsed();
    let mut usage = Usage::default();
    for node in nodes {
        usage = usage.plus(node.stop().await);
    }
    db.close().await;
    let postgres_used = postgres_before.zip(postgres_cpu()).map(|(before, after)| after.saturating_sub(before));

    let mut failures = 0;
    if let Err(why) = &outcome {
        println!("\nRUN STOPPED: {why}");
        failures += 1;
    }
    let db = Db::open(&store).await;
    let facts = Facts::gather(&db, &bot).await;
    db.close().await;
    let roots: Vec<&Path> = sandboxes.iter().map(Sandbox::root).collect();
    let ran = Ran { clock, started: driver.started, elapsed, usage, postgres: postgres_used };
    let mut summary = report(o, &plan, &driver.said, &ran, &facts, &driver.kills, &roots);
    summary.label = setup.label();
    summary.failures += failures;
    summary
}

/// The sandbox (data dir, config) of node `n` (from 1) of `setup`.
fn node_sandbox(o: &Options, exe: &Path, bot: &FakeBot, setup: Setup, url: Option<&str>, n: usize) -> Sandbox {
    let mut sandbox = Sandbox::with_program(exe.to_owned(), "http://127.0.0.1:9");
    sandbox.use_telegram(bot);
    sandbox.config.claude.max_live_sessions = o.live;
    sandbox.config.claude.env.insert(standin::ENV.to_owned(), "1".to_owned());
    if !o.delay.is_zero() {
        sandbox.config.claude.env.insert(standin::DELAY_ENV.to_owned(), o.delay.as_millis().to_string());
    }
    if let Some(idle) = o.idle_timeout {
        sandbox.config.claude.idle_timeout = idle;
    }
    if let Some(url) = url {
        sandbox.config.store.url = Some(Secret::new(url.to_owned()));
    }
    if setup.cluster {
        // As the cluster tests' nodes (`tests/support/cluster.rs`).
        sandbox.config.cluster.enabled = true;
        sandbox.config.cluster.node_id = Some(NodeId::new(format!("n{n}")).expect("a node id"));
        sandbox.config.cluster.lease_ttl = LEASE_TTL;
        sandbox.fast_retries();
    }
    if o.keep {
        // For a look at pincer's logs and store afterwards.
        sandbox.dir.disable_cleanup(true);
        println!("keeping {}", sandbox.root().display());
    }
    sandbox
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

/// Where the store of a run is.
enum StoreAt {
    Sqlite(PathBuf),
    Postgres(String),
}

/// The bench's reading connection to the store: `pincer.db` read-only, or
/// the PostgreSQL database. Every query is the same SQL on both ([`on_db`]).
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to whichever pool `$db` holds.
macro_rules! on_db {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            Db::Sqlite($pool) => $body,
            Db::Postgres($pool) => $body,
        }
    };
}

impl Db {
    async fn open(at: &StoreAt) -> Db {
        match at {
            StoreAt::Sqlite(path) => {
                let options = SqliteConnectOptions::new().filename(path).read_only(true);
                let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await;
                Db::Sqlite(pool.expect("pincer.db opens read-only"))
            }
            StoreAt::Postgres(url) => {
                let pool = PgPoolOptions::new().max_connections(1).connect(url).await;
                Db::Postgres(pool.expect("the PostgreSQL store opens"))
            }
        }
    }

    async fn close(self) {
        on_db!(self, |pool| pool.close().await)
    }
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
    async fn read(&mut self, db: &Db) -> (u64, u64) {
        const SQL: &str = "SELECT id, state FROM inbound WHERE id >= $1 ORDER BY id";
        let rows: Vec<(i64, String)> =
            on_db!(db, |pool| sqlx::query_as(SQL).bind(self.low).fetch_all(pool).await.unwrap_or_default());
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

async fn queued_replies(db: &Db) -> i64 {
    const SQL: &str = "SELECT COUNT(*) FROM outbox WHERE state = 'queued'";
    on_db!(db, |pool| sqlx::query_scalar(SQL).fetch_one(pool).await.unwrap_or(-1))
}

/// The run's loop: says messages as the window allows, kills and restarts
/// pincer in a soak, and watches the store until everything has settled.
struct Driver<'a> {
    o: &'a Options,
    plan: &'a [Planned],
    bot: &'a FakeBot,
    chats: Vec<TgChat>,
    user: TgUser,
    rng: Rng,
    kill_at: Vec<f64>,
    kill_when: Option<Instant>,
    said: Vec<Instant>,
    kills: Vec<Kill>,
    progress: Progress,
    started: Instant,
    last_change: Instant,
    last_seen: (u64, u64, usize),
    settled_since: Option<Instant>,
}

impl<'a> Driver<'a> {
    fn new(o: &'a Options, plan: &'a [Planned], bot: &'a FakeBot, rng: Rng, kill_at: Vec<f64>) -> Driver<'a> {
        Driver {
            o,
            plan,
            bot,
            chats: (0..o.groups).map(chat_of).collect(),
            user: TgUser::new(42, "Load"),
            rng,
            kill_at,
            kill_when: None,
            said: Vec::with_capacity(o.messages),
            kills: Vec::new(),
            progress: Progress::default(),
            started: Instant::now(),
            last_change: Instant::now(),
            last_seen: (0, 0, 0),
            settled_since: None,
        }
    }

    /// Until settled (Ok) or stalled (Err). A soak's kills hit the first node.
    async fn drive(
        &mut self,
        db: &Db,
        nodes: &mut [Pincer],
        sandboxes: &[Sandbox],
        configs: &[PathBuf],
    ) -> Result<(), String> {
        self.started = Instant::now();
        self.last_change = self.started;
        loop {
            nodes.iter_mut().for_each(Pincer::sample);
            let (stored, done) = self.progress.read(db).await;
            let sent = self.bot.sent_count();
            while self.said.len() < self.o.messages && (self.said.len() as u64) < done + self.o.window as u64 {
                let p = &self.plan[self.said.len()];
                self.bot.say(&self.chats[p.group], &self.user, &p.token);
                self.said.push(Instant::now());
            }
            let now = Instant::now();
            if (stored, done, sent) != self.last_seen {
                self.last_seen = (stored, done, sent);
                self.last_change = now;
            }
            if self.kill_due(done, sent, now) {
                self.kill_and_restart(db, &mut nodes[0], sandboxes[0].root(), &configs[0]).await;
                continue;
            }
            if self.settled(db, stored, done, now).await {
                return Ok(());
            }
            if now - self.last_change > STALL_LIMIT {
                return Err(format!("no progress for {STALL_LIMIT:?}"));
            }
            if now - self.started > RUN_LIMIT {
                return Err(format!("the run took longer than {RUN_LIMIT:?}"));
            }
            let nap = if self.said.len() < self.o.messages { 20 } else { 250 };
            tokio::time::sleep(Duration::from_millis(nap)).await;
        }
    }

    /// Whether a soak's next kill is due now (picking its moment when its
    /// point of progress is reached).
    fn kill_due(&mut self, done: u64, sent: usize, now: Instant) -> bool {
        let fraction = (done as f64 + sent.min(self.o.messages) as f64) / (2 * self.o.messages) as f64;
        let next = self.kill_at.get(self.kills.len());
        if next.is_some_and(|at| fraction >= *at) && self.kill_when.is_none() {
            // A random moment within the next second, while the load goes on.
            self.kill_when = Some(now + Duration::from_millis(self.rng.below(1000) as u64));
        }
        if self.kill_when.is_some_and(|at| now >= at) {
            self.kill_when = None;
            return true;
        }
        false
    }

    async fn kill_and_restart(&mut self, db: &Db, node: &mut Pincer, root: &Path, config: &Path) {
        let (stored, done) = self.progress.read(db).await;
        let at = self.started.elapsed();
        node.kill().await;
        let restart = Instant::now();
        let restarted = Pincer::start(root, config, self.kills.len() + 2).await.inheriting(node);
        *node = restarted;
        let k = Kill { at, said: self.said.len(), unanswered: stored - done, restart: restart.elapsed() };
        self.kills.push(k);
    }

    /// Everything said, answered and sent, and so for [`SETTLED`].
    async fn settled(&mut self, db: &Db, stored: u64, done: u64, now: Instant) -> bool {
        let quiet = self.said.len() == self.o.messages
            && stored == done
            && self.bot.pending_updates() == 0
            && queued_replies(db).await == 0;
        if !quiet {
            self.settled_since = None;
            return false;
        }
        now - *self.settled_since.get_or_insert(now) >= SETTLED
    }
}

/// The CPU time (user + system) of this process's PostgreSQL server so far:
/// the postmaster (a child of ours, `tests/support/postgres.rs`), its live
/// children and the children it reaped. None when it is not found.
fn postgres_cpu() -> Option<Duration> {
    let me = std::process::id() as i64;
    let stats: Vec<(i64, i64, String, Vec<u64>)> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i64>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let comm = head.split_once('(')?.1.to_owned();
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ppid = fields.get(1)?.parse().ok()?;
            // utime, stime, cutime, cstime: fields 14 to 17 (3 is the first after the name).
            let times = (14..=17).map(|i| fields.get(i - 3).and_then(|f| f.parse().ok()).unwrap_or(0)).collect();
            Some((pid, ppid, comm, times))
        })
        .collect();
    let (postmaster, _, _, times) = stats.iter().find(|(_, ppid, comm, _)| *ppid == me && comm == "postgres")?;
    let children: u64 = stats.iter().filter(|s| s.1 == *postmaster).map(|s| s.3[0] + s.3[1]).sum();
    let ticks = times.iter().sum::<u64>() + children;
    Some(Duration::from_millis(ticks * 1000 / clock_ticks()))
}

fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as u64
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

impl Usage {
    /// Two processes' (or runs') usage together: the CPU summed, the highest peak.
    fn plus(self, other: Usage) -> Usage {
        Usage {
            peak_rss_kib: self.peak_rss_kib.max(other.peak_rss_kib),
            cpu: self.cpu + other.cpu,
            children_cpu: self.children_cpu + other.children_cpu,
        }
    }
}

/// How a run went, for its report.
struct Ran {
    clock: WallClock,
    started: Instant,
    elapsed: Duration,
    /// pincer's, over all nodes.
    usage: Usage,
    /// The PostgreSQL server's CPU over the run.
    postgres: Option<Duration>,
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
        self.before.plus(self.now)
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
            let hz = clock_ticks();
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
    async fn gather(db: &Db, bot: &FakeBot) -> Facts {
        const INBOUND: &str = "SELECT id, text, state, at_us FROM inbound ORDER BY id";
        const RESULTS: &str = "SELECT id, text, at_us FROM results ORDER BY id";
        const OUTBOX: &str = "SELECT result_id, state, delivered_at_us FROM outbox ORDER BY id";
        const PROCESSES: &str = "SELECT COUNT(*) FROM session_events WHERE kind IN ('started', 'resumed')";
        const EVENTS: &str = "SELECT kind, COUNT(*) FROM session_events GROUP BY kind ORDER BY kind";
        let inbound =
            on_db!(db, |pool| sqlx::query_as(INBOUND).fetch_all(pool).await.expect("the inbound table reads"));
        let results = on_db!(db, |pool| sqlx::query_as(RESULTS).fetch_all(pool).await.expect("results"));
        let rows: Vec<(Option<i64>, String, Option<i64>)> =
            on_db!(db, |pool| sqlx::query_as(OUTBOX).fetch_all(pool).await.expect("the outbox reads"));
        let mut rows_by_result: HashMap<i64, Vec<OutboxState>> = HashMap::new();
        let mut notices: HashMap<String, u64> = HashMap::new();
        for (result, state, at) in rows {
            match result {
                Some(id) => rows_by_result.entry(id).or_default().push((state, at)),
                None => *notices.entry(state).or_default() += 1,
            }
        }
        let processes = on_db!(db, |pool| sqlx::query_scalar(PROCESSES).fetch_one(pool).await.expect("session events"));
        let events = on_db!(db, |pool| sqlx::query_as(EVENTS).fetch_all(pool).await.expect("session events"));
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

/// Checks exactly-once and prints the numbers; returns the run's summary.
fn report(
    o: &Options,
    plan: &[Planned],
    said: &[Instant],
    ran: &Ran,
    facts: &Facts,
    kills: &[Kill],
    roots: &[&Path],
) -> Summary {
    let origin = ran.clock.micros(ran.started);
    let (traces, strays) = trace(plan, said, ran.clock, facts);
    let (failures, sent_twice) = check(o, plan.len(), said.len(), &traces, &strays, origin);
    let mut summary = print_numbers(o, said, ran, facts, &traces, sent_twice, roots);
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
    summary.failures = failures;
    summary
}

/// The exactly-once checks, each failure printed with examples; returns the
/// failed checks and the replies sent twice within a kill's window.
fn check(
    o: &Options,
    planned: usize,
    said: usize,
    traces: &HashMap<String, Trace>,
    strays: &[String],
    origin: i64,
) -> (usize, usize) {
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
    if said < planned {
        failures += 1;
        println!("\nFAILED: only {said} of {planned} messages were said");
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
    (failures, sent_twice.len())
}

/// The run's table and latency rows; returns its summary (no failures yet).
fn print_numbers(
    o: &Options,
    said: &[Instant],
    ran: &Ran,
    facts: &Facts,
    traces: &HashMap<String, Trace>,
    sent_twice: usize,
    roots: &[&Path],
) -> Summary {
    let n = said.len().max(1) as f64;
    let first_said = said.first().map_or(ran.clock.micros(ran.started), |at| ran.clock.micros(*at));
    let span_to = |end: Option<i64>| Duration::from_micros(end.map_or(0, |e| (e - first_said).max(1)) as u64);
    let to_answered = span_to(traces.values().filter_map(Trace::answered).max());
    let to_replied = span_to(traces.values().filter_map(Trace::first_reply).max());
    let per_msg = |d: Duration| d.as_secs_f64() * 1e6 / n;
    let rate = |d: Duration| n / d.as_secs_f64().max(1e-6);
    let notices: Vec<String> = facts.notices.iter().map(|(s, k)| format!("{k} {s}")).collect();
    let events: Vec<String> = facts.events.iter().map(|(k, c)| format!("{k} {c}")).collect();
    let (usage, elapsed) = (&ran.usage, ran.elapsed);
    println!("\nload, {} messages over {} groups, max_live_sessions = {} per node", said.len(), o.groups, o.live);
    println!("| measure | value |");
    println!("| --- | --- |");
    println!(
        "| first said → last answered (result stored) | {to_answered:.1?} = {:.1} messages/s |",
        rate(to_answered)
    );
    println!("| first said → last reply in its chat | {to_replied:.1?} = {:.1} messages/s |", rate(to_replied));
    println!("| whole run (until settled) | {elapsed:.1?} |");
    println!("| CLI processes started | {} ({:.2} per message) |", facts.processes, facts.processes as f64 / n);
    println!("| pincer peak RSS (VmHWM, the highest node) | {:.1} MiB |", usage.peak_rss_kib as f64 / 1024.0);
    println!(
        "| pincer CPU (user + system, all nodes) | {:.1?} = {:.0} µs per message |",
        usage.cpu,
        per_msg(usage.cpu)
    );
    if let Some(pg) = ran.postgres {
        println!("| PostgreSQL server CPU (all its processes) | {pg:.1?} = {:.0} µs per message |", per_msg(pg));
    }
    println!(
        "| stand-ins' CPU (children pincer reaped) | {:.1?} = {:.0} µs per message |",
        usage.children_cpu,
        per_msg(usage.children_cpu)
    );
    println!("| replies sent twice (killed between Telegram's answer and pincer's record) | {sent_twice} |");
    println!(
        "| pincer's notices in the chats | {} |",
        if notices.is_empty() { "none".into() } else { notices.join(", ") }
    );
    println!("| session events | {} |", events.join(", "));
    println!("| pincer's log | {} |", log_counts(roots));
    print_latencies(traces);
    Summary {
        label: String::new(),
        messages: said.len(),
        engine_rate: rate(to_answered),
        end_to_end_rate: rate(to_replied),
        pincer_cpu_us: per_msg(usage.cpu),
        postgres_cpu_us: ran.postgres.map(per_msg),
        standin_cpu_us: per_msg(usage.children_cpu),
        failures: 0,
    }
}

fn print_latencies(traces: &HashMap<String, Trace>) {
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
}

/// WARN and ERROR lines in pincer's logs, with the most common messages.
fn log_counts(roots: &[&Path]) -> String {
    let mut warn = 0;
    let mut error = 0;
    let mut kinds: HashMap<String, u64> = HashMap::new();
    let logs: Vec<PathBuf> = roots
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flat_map(|d| d.filter_map(Result::ok).map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    for log in logs {
        let Ok(text) = std::fs::read_to_string(&log) else { continue };
        for line in text.lines() {
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
