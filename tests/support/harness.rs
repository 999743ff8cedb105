//! Runs pincer's real engine (the same `Engine::start` as `main`) in a temp
//! directory, against the real CLI and a fake Messages API, with helpers to send
//! messages and wait for what the chat receives.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pincer::app::Engine;
use pincer::config::SandboxMode;
use pincer::config::{Config, Secret};
use pincer::domain::{GroupName, Inbound, Source};
use pincer::sandbox::egress::Resolve;
use pincer::session::SessionStatus;
use pincer::store::{GroupSettings, OutboxId, OutboxRow, Store};
use tokio_util::sync::CancellationToken;

use super::cli::{claude_bin, cli_env, TEST_API_KEY};
use super::fake_api::FakeApi;
use super::fake_bot::FakeBot;
use super::fake_wa::FakeWa;

/// How long a test waits for something the CLI does (a turn takes well under a second).
pub const PATIENCE: Duration = Duration::from_secs(60);
/// The harness's `progress.after`: longer than any test waits, so no status
/// message is posted unless a test sets a shorter one.
pub const NO_STATUS: Duration = Duration::from_secs(3600);

/// `TEST_PINCER_STORE=postgres` runs every test's daemon on a fresh
/// database of the tests' own PostgreSQL (`[store] url`) instead of its
/// SQLite file: CI runs the store-touching suites once more that way. (Not
/// `PINCER_*`: those are pincer's config, which the tests' own `pincer`
/// processes would read and refuse.)
pub const STORE_ENV: &str = "TEST_PINCER_STORE";

/// The `[store] url` the tests run on: a fresh PostgreSQL database when
/// [`STORE_ENV`] says `postgres`, else none (SQLite in the data dir).
pub fn store_under_test() -> Option<String> {
    match std::env::var(STORE_ENV).as_deref() {
        Ok("postgres") => {
            let server = super::postgres::server();
            Some(server.fresh_database())
        }
        Ok("sqlite") | Ok("") | Err(_) => None,
        Ok(other) => panic!("{STORE_ENV}={other}: say `postgres` or `sqlite`"),
    }
}

/// Whether the tests' daemons run on PostgreSQL ([`STORE_ENV`]).
pub fn on_postgres() -> bool {
    std::env::var(STORE_ENV).as_deref() == Ok("postgres")
}

/// A temp directory with pincer's data, groups, and the CLI's scratch HOME.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub config: Config,
}

impl Sandbox {
    /// A config that runs the real CLI against `api`, in the default sandbox
    /// mode (`auto`: bwrap where it works), so every test runs confined.
    pub fn new(api: &FakeApi) -> Sandbox {
        let mut sandbox = Self::with_program(claude_bin(), &api.base_url());
        sandbox.config.sandbox.mode = SandboxMode::Auto;
        sandbox
    }

    /// A config that runs `program` (the real CLI or a stand-in).
    pub fn with_program(program: PathBuf, base_url: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut config =
            Config { data_dir: dir.path().join("data"), groups_dir: dir.path().join("groups"), ..Config::default() };
        config.claude.command = Some(program);
        config.claude.env = cli_env(base_url, &home).into_iter().collect();
        config.claude.idle_timeout = Duration::from_secs(600);
        config.claude.shutdown_grace = Duration::from_secs(5);
        // A status message only where a test asks for one (`progress.rs` and
        // the few others set `progress.after`): on a loaded machine any turn
        // can run past the default 5 s, and tests that read what a chat was
        // sent would each have to skip it.
        config.progress.after = NO_STATUS;
        // Sandboxed agents reach the API through pincer's credential proxy, which
        // holds the key; unconfined ones get it from `claude.env` as before.
        config.anthropic.base_url = Some(base_url.to_owned());
        config.anthropic.api_key = Some(Secret::new(TEST_API_KEY));
        // Stand-in programs live (and write their logs) in host temp dirs.
        config.sandbox.mode = SandboxMode::None;
        // The sandboxes' egress forwarder is pincer's binary, not this test's.
        config.sandbox.pincer_binary = Some(PathBuf::from(env!("CARGO_BIN_EXE_pincer")));
        if let Some(url) = store_under_test() {
            config.store.url = Some(Secret::new(url));
        }
        Sandbox { dir, config }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn group_dir(&self, name: &str) -> PathBuf {
        self.config.groups_dir.join(name)
    }

    /// Registers a group (store row + folder), as `pincer groups add` does.
    pub async fn add_group(&self, name: &str, allow: Option<&[&str]>) -> GroupName {
        let tools: Option<Vec<String>> = allow.map(|a| a.iter().map(|s| s.to_string()).collect());
        self.add_group_with(name, GroupSettings { allowed_tools: tools, ..GroupSettings::default() }).await
    }

    /// Registers a group with any settings (a Telegram chat, admins, a trigger).
    pub async fn add_group_with(&self, name: &str, settings: GroupSettings) -> GroupName {
        let store = pincer::app::open_store(&self.config).await.unwrap();
        let name: GroupName = name.parse().unwrap();
        pincer::app::register_group(&store, &self.config, &name, &settings).await.unwrap();
        store.close().await;
        name
    }

    /// Serves `bot` and registers group `name` in Telegram chat `chat_id`,
    /// where every message engages the agent.
    pub async fn serve_telegram_group(&mut self, bot: &FakeBot, name: &str, chat_id: i64) -> GroupName {
        self.use_telegram(bot);
        let chat = Some(pincer::domain::ChatAddress::telegram(chat_id, None));
        self.add_group_with(name, GroupSettings { chat, requires_trigger: false, ..GroupSettings::default() }).await
    }

    /// Points pincer's Telegram channel at `bot`, with short polls so tests stop quickly.
    pub fn use_telegram(&mut self, bot: &FakeBot) {
        self.config.telegram.token = Some(Secret::new("123456:TEST-TOKEN"));
        self.config.telegram.api_url = Some(bot.api_url());
        self.config.telegram.poll_timeout = Duration::from_secs(1);
    }

    /// Has pincer receive Telegram updates by webhook on a free loopback
    /// port instead of polling; returns the webhook's URL.
    pub fn use_webhook(&mut self) -> String {
        // A port nobody uses: bind, note it, let go (pincer binds it right after).
        let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let url = format!("http://{listen}/telegram");
        self.config.telegram.webhook_url = Some(url.clone());
        self.config.telegram.webhook_listen = listen;
        url
    }

    pub async fn start(&self) -> Running {
        Running::start(self.config.clone()).await
    }

    /// [`start`](Self::start), the egress proxy resolving names through `resolver`.
    pub async fn start_resolving(&self, resolver: std::sync::Arc<dyn Resolve>) -> Running {
        let shutdown = CancellationToken::new();
        let engine =
            Engine::start_resolving(self.config.clone(), resolver, shutdown.clone()).await.expect("engine starts");
        Running::started(engine, shutdown).await
    }

    /// Runs the whole daemon (`pincer run`: engine and channels) in a task.
    pub fn spawn_daemon(&self) -> Daemon {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(pincer::app::run(self.config.clone(), shutdown.clone()));
        Daemon { task, shutdown }
    }

    /// Writes the config as `pincer.toml` in the temp dir, for the `pincer`
    /// binary (`pincer --config FILE run`); returns its path.
    pub fn write_config(&self) -> PathBuf {
        let path = self.root().join("pincer.toml");
        std::fs::write(&path, toml::to_string(&self.config).expect("the config serializes")).unwrap();
        path
    }

    /// Makes delivery retry quickly, so a test sees a reply soon after a fault ends.
    pub fn fast_retries(&mut self) {
        self.config.delivery.retry_first = Duration::from_millis(200);
        self.config.delivery.retry_cap = Duration::from_secs(2);
    }

    /// Runs the whole daemon with a fake WhatsApp connection (`app::run_with`,
    /// which `app::run` calls with the linked device).
    pub fn spawn_daemon_with_whatsapp(&self, wa: &FakeWa) -> Daemon {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(pincer::app::run_with(self.config.clone(), Some(wa.source()), shutdown.clone()));
        Daemon { task, shutdown }
    }

    /// Opens the store beside a running daemon (SQLite in WAL mode allows it).
    pub async fn store(&self) -> Store {
        pincer::app::open_store(&self.config).await.unwrap()
    }
}

/// `pincer::app::run` in a task, as `main` runs it.
pub struct Daemon {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    shutdown: CancellationToken,
}

impl Daemon {
    /// Stops the daemon the way SIGTERM does and checks that it ended cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let ended = tokio::time::timeout(PATIENCE, self.task).await.expect("pincer stops in time");
        ended.expect("the daemon task did not panic").expect("the daemon ended without an error");
    }
}

/// A started engine and its shutdown token.
pub struct Running {
    pub engine: Engine,
    pub shutdown: CancellationToken,
    /// The last outbox row [`Running::next_outbound`] returned.
    seen: std::sync::Mutex<OutboxId>,
}

impl Running {
    pub async fn start(config: Config) -> Running {
        let shutdown = CancellationToken::new();
        let engine = Engine::start(config, shutdown.clone()).await.expect("engine starts");
        Running::started(engine, shutdown).await
    }

    async fn started(engine: Engine, shutdown: CancellationToken) -> Running {
        // Only what this engine queues: a restarted one reads the same store.
        let seen = engine.store.outbox().outbox_last_id().await.expect("the outbox is readable");
        Running { engine, shutdown, seen: std::sync::Mutex::new(seen) }
    }

    pub fn store(&self) -> &Store {
        &self.engine.store
    }

    pub async fn send(&self, group: &GroupName, text: &str) {
        self.engine
            .router
            .send(Inbound::new(group.clone(), Source::Console, "tester", text))
            .await
            .expect("message routed");
    }

    /// The next message queued for any chat (the outbox, read in order);
    /// panics after [`PATIENCE`].
    pub async fn next_outbound(&self) -> OutboxRow {
        let mut written = self.engine.outbox.subscribe();
        let next = async {
            loop {
                let after = *self.seen.lock().unwrap();
                if let Some(row) = self.store().outbox().outbox_after(after, 1).await.unwrap().pop() {
                    *self.seen.lock().unwrap() = row.id;
                    return row;
                }
                // Woken by every write; the timeout only guards against a missed wake.
                let _ = tokio::time::timeout(Duration::from_millis(200), written.changed()).await;
            }
        };
        tokio::time::timeout(PATIENCE, next).await.expect("an outbound message within the patience limit")
    }

    /// Waits until the group's status satisfies `pred`.
    pub async fn wait_status(&self, group: &GroupName, pred: impl Fn(&SessionStatus) -> bool) -> SessionStatus {
        let mut handle = self.engine.router.session(group).await.unwrap();
        let wait = async {
            loop {
                let status = handle.status();
                if pred(&status) {
                    return status;
                }
                handle.changed().await;
            }
        };
        tokio::time::timeout(PATIENCE, wait).await.expect("status reached within the patience limit")
    }

    pub async fn status(&self, group: &GroupName) -> SessionStatus {
        self.engine.router.session(group).await.unwrap().status()
    }

    /// Session lifecycle events of a group, e.g. `["started", "idle_closed"]`.
    pub async fn session_events(&self, group: &GroupName) -> Vec<String> {
        self.store().journal().session_events(group).await.unwrap().into_iter().map(|(kind, _)| kind).collect()
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(PATIENCE, self.engine.stop()).await.expect("pincer stops in time");
    }
}

/// `pincer --config CONFIG ARGS…`, the binary under test, run to its end in
/// `cwd` (a command beside a running daemon: `status`, `reload`, …).
pub async fn pincer_command(cwd: &Path, config: &Path, args: &[&str]) -> std::process::Output {
    #[allow(clippy::disallowed_methods)] // the pincer binary under test
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .env_remove(super::cli::CLAUDE_BIN_ENV)
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir(cwd)
        .output()
        .await;
    out.expect("the pincer binary runs")
}

/// What a `pincer chat` printed, without its status lines (`[status] …`):
/// a turn still running after `progress.after` gets one. The harness sets
/// that past any test, but `pincer chat` run as a binary has its default (5 s),
/// which on a loaded machine even an echo's first turn can outlast.
pub fn said(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let lines: Vec<&str> = text.lines().filter(|line| !line.starts_with("[status] ")).collect();
    lines.join("\n")
}

/// `pincer [args] run`, the binary under test, as a child process in `cwd`,
/// returned once it logs that it is running. Its log is drained from then
/// on, so it never blocks on a full pipe; the child is killed when dropped.
pub async fn spawn_pincer_run(
    cwd: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
) -> tokio::process::Child {
    spawn_pincer_run_logging(cwd, args, env, None).await
}

/// [`spawn_pincer_run`], also appending every line of pincer's log to `log`
/// (when given), for a bench that reports what pincer warned about.
pub async fn spawn_pincer_run_logging(
    cwd: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    log_file: Option<&Path>,
) -> tokio::process::Child {
    spawn_pincer(cwd, args, env, log_file).await.0
}

/// [`spawn_pincer_run_logging`] for a pincer whose `[http] listen` has port
/// 0, and the address its endpoint was given. A port a test picked and let
/// go could be taken by any other process before pincer binds it (it was,
/// under a parallel run); the system's own pick cannot.
pub async fn spawn_pincer_serving(
    cwd: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    log_file: Option<&Path>,
) -> (tokio::process::Child, std::net::SocketAddr) {
    let (child, at) = spawn_pincer(cwd, args, env, log_file).await;
    (child, at.expect("pincer logs where it serves its endpoint before it says it runs"))
}

/// The port a test lets pincer pick for its endpoint ([`spawn_pincer_serving`]).
pub fn any_port() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Where pincer says it serves its endpoint, if `line` says so.
fn serving_at(line: &str) -> Option<std::net::SocketAddr> {
    let (_, rest) = line.split_once("serving /metrics")?;
    let (_, at) = rest.split_once(" at=")?;
    at.split_whitespace().next()?.parse().ok()
}

async fn spawn_pincer(
    cwd: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    log_file: Option<&Path>,
) -> (tokio::process::Child, Option<std::net::SocketAddr>) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;

    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"));
    command
        .args(args)
        .arg("run")
        .current_dir(cwd)
        .env_remove(super::cli::CLAUDE_BIN_ENV)
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // A bench's own settings are not pincer's (PINCER_* is pincer's config).
    for (key, _) in std::env::vars_os().filter(|(k, _)| k.to_string_lossy().starts_with("PINCER_BENCH_")) {
        command.env_remove(key);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("the pincer binary starts");
    let mut log = tokio::io::BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    let mut copy = log_file.map(|path| {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("the log file opens");
        std::io::BufWriter::new(file)
    });
    let mut keep = move |line: &str| {
        if let Some(copy) = copy.as_mut() {
            let _ = writeln!(copy, "{line}").and_then(|()| copy.flush());
        }
    };
    let ready = async {
        // What it said last, for the failure: a test's data dir goes with it.
        let mut last = std::collections::VecDeque::new();
        let mut serving = None;
        while let Some(line) = log.next_line().await.expect("pincer's log is readable") {
            keep(&line);
            serving = serving.or_else(|| serving_at(&line));
            if line.contains("pincer is running") {
                return serving;
            }
            if last.len() == 30 {
                last.pop_front();
            }
            last.push_back(line);
        }
        let said: Vec<String> = last.into();
        panic!("pincer exited before it was running; its log ended:\n{}", said.join("\n"));
    };
    let serving = tokio::time::timeout(PATIENCE, ready).await.expect("pincer starts");
    tokio::spawn(async move {
        while let Ok(Some(line)) = log.next_line().await {
            keep(&line);
        }
    });
    (child, serving)
}

/// Polls `url` until `done` holds for its status and body; the body.
pub async fn http_until(url: &str, what: &str, done: impl Fn(u16, &str) -> bool) -> String {
    let polling = async {
        loop {
            if let Ok(response) = reqwest::get(url).await {
                let status = response.status().as_u16();
                let body = response.text().await.unwrap_or_default();
                if done(status, &body) {
                    return body;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PATIENCE, polling).await.unwrap_or_else(|_| panic!("{what}: timed out"))
}
