//! A real PostgreSQL for tests: one server per test process, started on first
//! use in a temp dir, reachable only through a Unix socket there, and killed
//! with the process; each test takes an empty database of its own.
//!
//! Self-contained (std, nix, sqlx, tokio, url: no `crate::` or `super::`), so
//! the lib's unit tests include it by `#[path]` and the integration tests as a
//! module. The binaries come from `PINCER_TEST_PG_BIN`, else a PATH directory
//! holding both `initdb` and `postgres`, else the newest Debian
//! `/usr/lib/postgresql/*/bin` (what `apt-get install postgresql` gives, with
//! no links on PATH). PostgreSQL refuses to run as root, so under root both run
//! as the `postgres` user, which owns the temp dir.
//!
//! The server is `postgres` itself, a child of a thread that lives as long as
//! the process, with `PR_SET_PDEATHSIG(SIGKILL)`: the kernel kills it when that
//! thread dies, which is only when the process ends (normally, by a panic or
//! by a kill). A child of a libtest thread would die with its test.
//! `pg_ctl start` would daemonize and outlive us. Temp dirs of earlier test
//! processes that are gone are removed at the next start, with the small
//! System V segment a killed server leaves behind.
#![allow(dead_code)]

use std::fmt::Display;
use std::fs;
use std::future::Future;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{chown, geteuid, Gid, Pid, Uid, User};
use sqlx::{Connection, Executor};

/// The superuser `initdb` creates; trusted on the socket, no password.
const SUPERUSER: &str = "pincer";
/// Temp dirs are named this plus the owning test process's pid.
const DIR_PREFIX: &str = "pincer-pg-";
/// How long a fresh cluster may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Speed over durability (a test's data dies with it), no TCP at all, and
/// room for many tests' pools at once. Dynamic shared memory in files of the
/// data dir rather than /dev/shm, so a killed server leaves nothing there.
/// No autovacuum: the tests' databases are small and short-lived, and the
/// machine's cores are better spent on the tests.
const SETTINGS: &[&str] = &[
    "listen_addresses=",
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=300",
    "shared_buffers=32MB",
    "dynamic_shared_memory_type=mmap",
    "autovacuum=off",
];
const INSTALL_HINT: &str = "install PostgreSQL (Debian/Ubuntu: `apt-get install postgresql`), \
     or set PINCER_TEST_PG_BIN to the directory holding its `initdb` and `postgres`";

/// This process's PostgreSQL server.
pub struct Server {
    root: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
    /// The server's major version (from the cluster's `PG_VERSION`).
    major: u32,
    next_database: AtomicU64,
}

/// The server of this test process, started by the first caller. Panics
/// (in every caller, with the same message) when it cannot be started.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    match SERVER.get_or_init(Server::start) {
        Ok(server) => server,
        Err(why) => panic!("no PostgreSQL for the tests: {why}"),
    }
}

impl Server {
    /// A new empty database (`t_<pid>_<n>`) and its sqlx URL.
    pub fn fresh_database(&self) -> String {
        let n = self.next_database.fetch_add(1, Ordering::Relaxed);
        let name = format!("t_{}_{n}", std::process::id());
        // From 15 on, CREATE DATABASE writes the whole template to the WAL
        // by default; copying its files is quicker for a tiny template.
        let strategy = if self.major >= 15 { " STRATEGY = FILE_COPY" } else { "" };
        let sql = format!("CREATE DATABASE {name}{strategy}");
        let admin = self.url("postgres");
        block_on(async move {
            let mut conn = sqlx::PgConnection::connect(&admin).await?;
            conn.execute(sqlx::raw_sql(&sql)).await?;
            conn.close().await
        })
        .unwrap_or_else(|e| panic!("cannot create database {name}: {e} (server log: {})", self.log.display()));
        self.url(&name)
    }

    /// The sqlx URL of `database` on this server, through its Unix socket.
    pub fn url(&self, database: &str) -> String {
        // The URL's host only has to parse: `host=` with a path selects the socket.
        format!("postgres://{SUPERUSER}@localhost/{database}?host={}", query_value(&self.socket_dir))
    }

    /// The directory of the server's Unix socket (`.s.PGSQL.5432`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// Where the server writes its log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    fn start() -> Result<Server, String> {
        let bin = bin_dir()?;
        remove_stale_dirs();
        let root = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
        // An earlier process with our pid left it: nothing in it is alive.
        let _ = fs::remove_dir_all(&root);
        let socket_dir = root.join("socket");
        fs::create_dir_all(&socket_dir).map_err(|e| format!("cannot create {}: {e}", socket_dir.display()))?;
        if socket_dir.join(".s.PGSQL.5432").as_os_str().len() > 100 {
            return Err(format!(
                "the socket path under {} is too long for a Unix socket: set a shorter TMPDIR",
                root.display()
            ));
        }
        let owner = Owner::of_this_process()?;
        owner.take(&root)?;
        owner.take(&socket_dir)?;
        let data = root.join("data");
        init_cluster(&bin, &data, &root, &owner)?;
        let log = root.join("postgres.log");
        let exited = spawn_postmaster(postmaster_command(&bin, &data, &socket_dir, &log, &owner)?)?;
        wait_ready(&data, &log, &exited)?;
        let major = read_major(&data)?;
        Ok(Server { root, socket_dir, log, major, next_database: AtomicU64::new(0) })
    }
}

/// Who runs `initdb` and the server: this process's user, or the `postgres`
/// user under root (PostgreSQL refuses to run as root).
struct Owner(Option<(Uid, Gid)>);

impl Owner {
    fn of_this_process() -> Result<Owner, String> {
        if !geteuid().is_root() {
            return Ok(Owner(None));
        }
        match User::from_name("postgres") {
            Ok(Some(user)) => Ok(Owner(Some((user.uid, user.gid)))),
            _ => Err(format!(
                "running as root, which PostgreSQL refuses, and there is no `postgres` user to run it as: {INSTALL_HINT}"
            )),
        }
    }

    /// Makes `dir` the owner's.
    fn take(&self, dir: &Path) -> Result<(), String> {
        match self.0 {
            Some((uid, gid)) => chown(dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot give {} to the postgres user: {e}", dir.display())),
            None => Ok(()),
        }
    }

    /// `program` run as the owner, in `dir`, its output appended to `log`.
    fn command(&self, program: PathBuf, dir: &Path, log: &Path) -> Result<Command, String> {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        #[allow(clippy::disallowed_methods)] // the tests' database server, not a session
        let mut command = Command::new(program);
        // The postgres user may not be allowed into our working directory.
        command.current_dir(dir).stdin(Stdio::null()).stdout(out).stderr(err);
        if let Some((uid, gid)) = self.0 {
            command.uid(uid.as_raw()).gid(gid.as_raw());
        }
        Ok(command)
    }
}

/// The directory holding `initdb` and `postgres`.
fn bin_dir() -> Result<PathBuf, String> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("PINCER_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has_both(&dir) {
            Ok(dir)
        } else {
            Err(format!("PINCER_TEST_PG_BIN={} holds no initdb and postgres", dir.display()))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|dir| has_both(dir)) {
        return Ok(dir);
    }
    newest_debian_bin_dir().filter(|dir| has_both(dir)).ok_or_else(|| {
        format!("initdb and postgres are neither on PATH nor in /usr/lib/postgresql/*/bin: {INSTALL_HINT}")
    })
}

/// The highest version's `/usr/lib/postgresql/VERSION/bin` (Debian's layout).
fn newest_debian_bin_dir() -> Option<PathBuf> {
    let version = |name: &str| -> Option<Vec<u32>> { name.split('.').map(|part| part.parse().ok()).collect() };
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| Some((version(entry.file_name().to_str()?)?, entry.path().join("bin"))))
        .max()
        .map(|(_, dir)| dir)
}

/// Removes the temp dirs of earlier test processes that are gone, and the
/// System V segment each one's killed server left.
fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|name| name.strip_prefix(DIR_PREFIX)).and_then(|pid| pid.parse::<i32>().ok());
        let Some(pid) = pid else { continue };
        // EPERM: alive, under another user.
        if pid as u32 == std::process::id() || kill(Pid::from_raw(pid), None) != Err(Errno::ESRCH) {
            continue;
        }
        remove_shared_memory(&entry.path().join("data").join("postmaster.pid"));
        let _ = fs::remove_dir_all(entry.path());
    }
}

/// Removes the System V segment a dead server's `postmaster.pid` names (line
/// 7: key and id), when it is still there under that key and unattached.
fn remove_shared_memory(pid_file: &Path) {
    let Ok(text) = fs::read_to_string(pid_file) else { return };
    let Some(line) = text.lines().nth(6) else { return };
    let mut fields = line.split_whitespace().map(str::parse::<i64>);
    let (Some(Ok(key)), Some(Ok(id))) = (fields.next(), fields.next()) else { return };
    let Ok(id) = i32::try_from(id) else { return };
    // SAFETY: shmid_ds is plain data; IPC_STAT fills it, IPC_RMID takes no buffer.
    unsafe {
        let mut status: nix::libc::shmid_ds = std::mem::zeroed();
        if nix::libc::shmctl(id, nix::libc::IPC_STAT, &mut status) == 0
            && i64::from(status.shm_perm.__key) == key
            && status.shm_nattch == 0
        {
            nix::libc::shmctl(id, nix::libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

/// `initdb` without syncing, C locale (text compares by bytes, as in
/// SQLite), UTF-8, trust on the socket, superuser [`SUPERUSER`].
fn init_cluster(bin: &Path, data: &Path, root: &Path, owner: &Owner) -> Result<(), String> {
    let log = root.join("initdb.log");
    let mut initdb = owner.command(bin.join("initdb"), root, &log)?;
    initdb.arg("-D").arg(data).args(["-U", SUPERUSER, "-A", "trust", "-N", "-E", "UTF8", "--no-locale"]);
    let status = initdb.status().map_err(|e| format!("cannot run {}: {e}", bin.join("initdb").display()))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("initdb failed ({status}); its output is in {}", log.display())),
    }
}

fn postmaster_command(
    bin: &Path,
    data: &Path,
    socket_dir: &Path,
    log: &Path,
    owner: &Owner,
) -> Result<Command, String> {
    let mut postgres = owner.command(bin.join("postgres"), data, log)?;
    postgres.arg("-D").arg(data).arg("-k").arg(socket_dir);
    for setting in SETTINGS {
        postgres.args(["-c", setting]);
    }
    // SAFETY: between fork and exec only prctl(2), which is async-signal-safe.
    // After the uid change std makes, which would clear the signal.
    unsafe {
        postgres.pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
    }
    Ok(postgres)
}

/// Starts the server from a thread that lives as long as the process (see the
/// module doc), and returns where that thread says the server has exited.
fn spawn_postmaster(mut postgres: Command) -> Result<mpsc::Receiver<String>, String> {
    let (started_tx, started_rx) = mpsc::channel();
    let (exited_tx, exited_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("postgres".into())
        .spawn(move || match postgres.spawn() {
            Ok(mut child) => {
                let _ = started_tx.send(Ok(()));
                let status = child.wait().map_or_else(|e| e.to_string(), |status| status.to_string());
                let _ = exited_tx.send(status);
            }
            Err(e) => {
                let _ = started_tx.send(Err(format!("cannot run {:?}: {e}", postgres.get_program())));
            }
        })
        .map_err(|e| format!("cannot start the postgres thread: {e}"))?;
    started_rx.recv().map_err(|_| "the postgres thread died".to_string())??;
    Ok(exited_rx)
}

/// Waits until the server says it is ready (line 8 of `postmaster.pid`, what
/// `pg_ctl` reads), or it exits, or [`READY_WITHIN`] has passed.
fn wait_ready(data: &Path, log: &Path, exited: &mpsc::Receiver<String>) -> Result<(), String> {
    let deadline = Instant::now() + READY_WITHIN;
    let fail = |what: &dyn Display| Err(format!("postgres {what}; its log is {}", log.display()));
    loop {
        if let Ok(status) = exited.try_recv() {
            return fail(&format_args!("exited ({status}) before accepting connections"));
        }
        let pid_file = fs::read_to_string(data.join("postmaster.pid")).unwrap_or_default();
        if pid_file.lines().nth(7).is_some_and(|status| status.trim() == "ready") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return fail(&format_args!("did not accept connections within {READY_WITHIN:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_major(data: &Path) -> Result<u32, String> {
    let text = fs::read_to_string(data.join("PG_VERSION")).map_err(|e| format!("cannot read PG_VERSION: {e}"))?;
    let major = text.trim().split('.').next().and_then(|major| major.parse().ok());
    major.ok_or_else(|| format!("PG_VERSION says {text:?}"))
}

/// `path` as a URL query value: as it is when it needs no escaping.
fn query_value(path: &Path) -> String {
    let text = path.to_string_lossy();
    let plain = text.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b));
    match plain {
        true => text.into_owned(),
        false => url::form_urlencoded::byte_serialize(text.as_bytes()).collect(),
    }
}

/// Runs `work` to completion on a runtime of its own, on a thread of its own,
/// so it can be called from sync code and from inside a test's runtime alike.
fn block_on<T: Send>(work: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            runtime.expect("a tokio runtime").block_on(work)
        });
        thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
