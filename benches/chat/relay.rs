//! `PINCER_BENCH_RELAY=1`: the least a wrapper of the CLI can add, measured
//! beside pincer as a floor for its own share. This bench binary, started
//! again with [`ROLE`] set, stands between the bench and a raw CLI pipe as
//! `pincer chat` does: a line read from its stdin goes to the CLI as a user
//! line, and the `result`'s text is printed on its stdout (the stand-in CLI
//! instead with `PINCER_BENCH_STANDIN`, as behind every side). Its stdin and
//! stdout are read and written on the runtime, as pincer's console reads its
//! pipes (`channel::console::term`); the runtime is tokio's default, as
//! pincer's. Five roles:
//!
//! - `bare`: nothing else. What any wrapper costs: one more process on each
//!   side of the CLI.
//! - `sqlx`: also the two writes pincer's README promises are durable, each
//!   one INSERT through sqlx on a connection held open, WAL mode with
//!   `synchronous = NORMAL` as pincer's store: the message before it goes to
//!   the CLI, the result before its text is printed. The least a wrapper
//!   that keeps pincer's promises can add.
//! - `inline`: the same two writes on the relay's own thread (`rusqlite`, the
//!   same SQLite), no hand-off: SQLite's own cost, and so what sqlx's
//!   connection thread adds. (A wrapper must not do this on an async
//!   runtime: a write waiting for SQLite's lock would stall every task.)
//! - `blocking`: the same two writes with `rusqlite` on tokio's blocking
//!   pool (`spawn_blocking`): off the runtime by the least a hand-off can
//!   be, to tell what any thread hop costs from what sqlx's costs.
//! - `store`: pincer's own store path, called in line by one task: the
//!   message stored `queued` and pulled back, marked `sent` once written to
//!   the CLI, the result stored with its outbox row (`outbox::Outbox::result`),
//!   that row read for the terminal, printed and marked delivered, all
//!   through `pincer::store` on pincer's schema. pincer's sides minus this
//!   one are what its tasks (console, router, session, reader, outbox) and
//!   the rest of its work add; this one minus `sqlx` is what its schema and
//!   its two extra reads add.
//!
//! A role ending in `+proxy` (`sqlx+proxy`) has its CLI call the API through
//! pincer's credential proxy, run on the relay's runtime as pincer runs it
//! (`chat/proxied.rs`): the same floor for the sandboxed path, bwrap aside.

use std::os::fd::AsFd;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime};

use pincer::claude::protocol::{parse_line, CliEvent};
use pincer::domain::{ChatAddress, Inbound, InboundId, Source};
use pincer::store::InboundState;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, SqliteConnection};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

use crate::support::pipe::percentile;

/// Set (to a role) in a relay's environment: the bench binary relays.
pub const ROLE: &str = "PINCER_BENCH_RELAY_ROLE";

/// The fake API's base URL, for the relay's CLI.
pub const API: &str = "PINCER_BENCH_RELAY_API";

/// The roles, as the bench names their sides.
pub const ROLES: &[(&str, &str)] = &[
    ("bare", "relay, bare"),
    ("sqlx", "relay, 2 writes through sqlx"),
    ("inline", "relay, 2 writes on its thread"),
    ("blocking", "relay, 2 writes on blocking pool"),
    ("store", "relay, pincer's store path"),
];

/// A role's suffix: its CLI calls the API through pincer's credential proxy.
const PROXIED: &str = "+proxy";

/// The roles `PINCER_BENCH_RELAY` asks for: none when unset, all five for
/// `1`, else the ones listed (`sqlx,store+proxy`).
pub fn roles(asked: Option<&str>) -> Vec<String> {
    match asked {
        None | Some("") => Vec::new(),
        Some("1") => ROLES.iter().map(|(role, _)| (*role).to_owned()).collect(),
        Some(list) => list
            .split(',')
            .map(|asked| {
                let asked = asked.trim();
                let (role, proxied) = split(asked);
                assert!(
                    ROLES.iter().any(|(r, _)| *r == role),
                    "PINCER_BENCH_RELAY: {asked:?} is no role (bare, sqlx, inline, blocking, store, each maybe {PROXIED})"
                );
                assert!(!(proxied && crate::standin_mode()), "a stand-in calls no API to proxy");
                asked.to_owned()
            })
            .collect(),
    }
}

/// The side's name for `role`.
pub fn side_name(role: &str) -> String {
    let (role, proxied) = split(role);
    let name = ROLES.iter().find(|(r, _)| *r == role).map_or(role, |(_, name)| name);
    if proxied {
        format!("{name}, proxied")
    } else {
        name.to_owned()
    }
}

/// A role's store part, and whether its CLI is proxied.
fn split(role: &str) -> (&str, bool) {
    match role.strip_suffix(PROXIED) {
        Some(store) => (store, true),
        None => (role, false),
    }
}

/// Where a relay stores: nowhere, through sqlx, on its own thread, on the
/// blocking pool, or through pincer's store.
enum Store {
    None,
    Sqlx(SqliteConnection),
    Inline(rusqlite::Connection),
    Blocking(std::sync::Arc<std::sync::Mutex<rusqlite::Connection>>),
    Pincer(Box<PincerPath>),
}

impl Store {
    async fn open(role: &str, path: &Path) -> Store {
        match role {
            "bare" => Store::None,
            "sqlx" => Store::Sqlx(open(path).await),
            "inline" => Store::Inline(open_rusqlite(path)),
            "blocking" => Store::Blocking(std::sync::Arc::new(std::sync::Mutex::new(open_rusqlite(path)))),
            "store" => Store::Pincer(Box::new(PincerPath::open(path).await)),
            other => panic!("{ROLE}={other}: want bare, sqlx, inline, blocking or store"),
        }
    }

    /// One INSERT of `sql` with a text and a time.
    async fn insert(&mut self, sql: &str, text: &str) {
        match self {
            Store::None | Store::Pincer(_) => {}
            Store::Sqlx(conn) => {
                sqlx::query(sql).bind(text).bind(now_us()).execute(&mut *conn).await.expect("a row is stored");
            }
            Store::Inline(conn) => {
                conn.execute(sql, rusqlite::params![text, now_us()]).expect("a row is stored");
            }
            Store::Blocking(conn) => {
                let (conn, sql, text) = (conn.clone(), sql.to_owned(), text.to_owned());
                tokio::task::spawn_blocking(move || {
                    let conn = conn.lock().expect("one writer at a time");
                    conn.execute(&sql, rusqlite::params![text, now_us()]).expect("a row is stored");
                })
                .await
                .expect("the write ran");
            }
        }
    }
}

/// A fresh database through `rusqlite`, as [`open`] makes it.
fn open_rusqlite(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("the relay's database opens");
    conn.pragma_update(None, "journal_mode", "WAL").expect("WAL");
    conn.pragma_update(None, "synchronous", "NORMAL").expect("synchronous");
    conn.execute_batch(&TABLES.join(";")).expect("the relay's tables");
    conn
}

const TABLES: [&str; 2] = [
    "CREATE TABLE inbound (id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT NOT NULL, at_us INTEGER NOT NULL, state TEXT NOT NULL DEFAULT 'queued')",
    "CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, frame TEXT NOT NULL, at_us INTEGER NOT NULL)",
];

/// Relays until stdin ends, then exits.
pub fn run(role: &str) -> ! {
    let api = std::env::var(API).unwrap_or_else(|_| panic!("a relay needs {API}"));
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(relay(role, &api));
    std::process::exit(0)
}

async fn relay(role: &str, api: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (role, proxied) = split(role);
    let mut store = Store::open(role, &dir.path().join("relay.db")).await;
    // The stand-in instead with `PINCER_BENCH_STANDIN`, as every side's. A
    // proxied CLI's proxy runs on this runtime, as pincer's runs on its own.
    let (mut cli, _proxy) = match proxied {
        true => {
            let (cli, proxy) = crate::proxied::start_here(api).await;
            (cli, Some(proxy))
        }
        false => (crate::raw_pipe_to(api), None),
    };
    let stdin = std::io::stdin().as_fd().try_clone_to_owned().expect("stdin");
    let stdout = std::io::stdout().as_fd().try_clone_to_owned().expect("stdout");
    let mut lines = BufReader::new(pipe::Receiver::from_owned_fd(stdin).expect("stdin is a pipe")).lines();
    let mut out = pipe::Sender::from_owned_fd(stdout).expect("stdout is a pipe");
    while let Some(text) = lines.next_line().await.expect("the relay's stdin") {
        if let Store::Pincer(path) = &mut store {
            let id = path.stored_and_pulled(&text).await;
            cli.send(&text).await;
            path.sent(id).await;
            let result = cli.answer(&text).await;
            path.answered(id, &result.to_string(), &mut out).await;
            continue;
        }
        store.insert("INSERT INTO inbound (text, at_us) VALUES (?1, ?2)", &text).await;
        cli.send(&text).await;
        let result = cli.answer(&text).await;
        let answer = result["result"].as_str().unwrap_or_default().to_owned();
        store.insert("INSERT INTO results (frame, at_us) VALUES (?1, ?2)", &result.to_string()).await;
        out.write_all(format!("{answer}\n").as_bytes()).await.expect("the relay's stdout");
    }
    cli.close().await;
    if let Store::Pincer(path) = &store {
        path.steps.report();
    }
}

/// The `store` role: pincer's store, its one group `bench` answered on the terminal.
struct PincerPath {
    store: pincer::store::Store,
    outbox: pincer::outbox::Outbox,
    group: pincer::domain::GroupName,
    steps: Steps,
}

/// The store path's steps, in the order a follow-up passes them.
const STEPS: [&str; 6] = [
    "stored queued",
    "pulled",
    "marked sent",
    "result + outbox row stored",
    "reply read for the terminal",
    "marked delivered",
];

/// How long each of [`STEPS`] took, per follow-up.
#[derive(Default)]
struct Steps([Vec<Duration>; STEPS.len()]);

impl Steps {
    fn add(&mut self, step: usize, since: Instant) {
        self.0[step].push(since.elapsed());
    }

    /// Each step's median and p95 on stderr, which the bench passes on.
    fn report(&self) {
        for (name, took) in STEPS.iter().zip(&self.0) {
            // The first follow-up starts the CLI: not counted, as by the bench.
            let Some(took) = took.get(1..).filter(|t| !t.is_empty()) else { continue };
            let at = |p| percentile(took, p).as_micros();
            eprintln!("relay, pincer's store path: {name:<28} median {:>5} µs, p95 {:>5} µs", at(50.0), at(95.0));
        }
    }
}

impl PincerPath {
    async fn open(path: &Path) -> PincerPath {
        let store = pincer::store::Store::open(path).await.expect("pincer's store opens");
        let group: pincer::domain::GroupName = "bench".parse().expect("a group name");
        let settings = pincer::store::GroupSettings { requires_trigger: false, ..Default::default() };
        store.groups().add_group(&group, &settings).await.expect("the group is added");
        let outbox = pincer::outbox::Outbox::new(store.outbox(), Some(group.clone()));
        PincerPath { store, outbox, group, steps: Steps::default() }
    }

    /// As the router stores a typed line and the session pulls it.
    async fn stored_and_pulled(&mut self, text: &str) -> InboundId {
        let msg = Inbound::new(self.group.clone(), Source::Console, "bench", text);
        let queue = self.store.queue();
        let at = Instant::now();
        let id = queue.insert_inbound(&msg, InboundState::Queued).await.expect("the message is stored");
        self.steps.add(0, at);
        let at = Instant::now();
        let pulled = queue.queued_inbound(&self.group, InboundId(id.0 - 1), 1).await.expect("the queue is read");
        self.steps.add(1, at);
        assert_eq!(pulled.first().map(|p| p.id), Some(id), "the message just stored is next");
        id
    }

    /// As the session marks a message written to the CLI.
    async fn sent(&mut self, id: InboundId) {
        let at = Instant::now();
        self.store.queue().settle(&self.group, &[id], InboundState::Sent).await.expect("the message is marked sent");
        self.steps.add(2, at);
    }

    /// As the session stores the result with its reply, and the console
    /// takes the reply, prints it and marks it delivered.
    async fn answered(&mut self, id: InboundId, raw: &str, out: &mut pipe::Sender) {
        let CliEvent::Result { result, .. } = parse_line(raw).expect("a result line") else {
            panic!("not a result: {raw}")
        };
        let text = result.text.clone().unwrap_or_default();
        let settles = [(id, InboundState::Answered)];
        let carried = pincer::store::Carried { settles: &settles, transcript: None };
        let cost = result.total_cost_usd;
        let at = Instant::now();
        self.outbox.result(&self.group, &result, cost, raw, Some(&text), carried).await.expect("the result is stored");
        self.steps.add(3, at);
        let here = ChatAddress::console(&self.group);
        let at = Instant::now();
        let row = self.outbox.next(&here).await.expect("the outbox is read").expect("the reply is queued");
        self.steps.add(4, at);
        out.write_all(format!("{}\n", row.text).as_bytes()).await.expect("the relay's stdout");
        let at = Instant::now();
        let marked = self.outbox.delivered(&row.seen(), 1).await.expect("the reply is marked delivered");
        assert_eq!(marked, pincer::store::Marked::Recorded, "no one else delivers it");
        self.steps.add(5, at);
    }
}

/// A fresh database as pincer's store opens its own.
async fn open(path: &Path) -> SqliteConnection {
    let mut conn = SqliteConnectOptions::from_str("sqlite://")
        .expect("sqlite options")
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .connect()
        .await
        .expect("the relay's database opens");
    for table in TABLES {
        sqlx::query(table).execute(&mut conn).await.expect("the relay's tables");
    }
    conn
}

fn now_us() -> i64 {
    pincer::domain::unix_us(SystemTime::now())
}
