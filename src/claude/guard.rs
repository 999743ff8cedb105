//! The parent-death guard: no CLI outlives pincer, however pincer ends.
//!
//! pincer stops its CLIs itself when it can (`CliProcess::stop`, `Drop`), but a
//! `kill -9` (or the OOM killer) ends it without running any code. Then a
//! CLI and the shells it started would keep running, answering no one. Two
//! obvious fixes fall short: `PR_SET_PDEATHSIG` on the CLI fires when the
//! *thread* that forked it ends (tokio's blocking threads come and go), and
//! only reaches the CLI itself, not the shells it started, which are simply
//! reparented. A subreaper or a pidfd in pincer needs pincer alive to act.
//!
//! So the process pincer forks becomes a small guard. Between fork and exec
//! (`pre_exec`) it forks once more: the grandchild goes on to exec the CLI,
//! in the same process group (the guard leads it, so the pid pincer knows is
//! still the group's id). The guard closes every descriptor but the read end
//! of its [`Tether`], a pipe whose write end only pincer holds (close-on-exec),
//! re-executes pincer's own binary as `pincer-guard CLI_PID FD` (a fork would
//! keep a copy of every page pincer writes to later, growing to pincer's size
//! over a long session; a startup hook sends that process straight to the
//! guard's loop, before `main`), and waits for either:
//! - EOF on that pipe: pincer is gone, whatever the cause (the kernel closes
//!   the write end when the last pincer thread dies, so this needs no code in
//!   pincer), or pincer dropped the tether to kill this CLI. The guard kills
//!   the CLI's whole tree, then its group and itself.
//! - the deadline pincer last wrote to that pipe (a cluster node's: "kill
//!   after N ms", 8 bytes, moved by every renewal): the guard kills the tree
//!   as at EOF, so a frozen pincer leaves no CLI alive once another node may
//!   run the group. Without a deadline written, none applies.
//! - the CLI's exit: the guard kills what the CLI left running, reaps it and
//!   ends the same way (same exit code, or the same signal), so pincer's
//!   `wait` reports the CLI's own status.
//!
//! The tree, not just the group: the real CLI (2.1.330) starts a background
//! Bash command detached, leading a process group of its own, so a signal to
//! the CLI's group never reaches it. The guard is a
//! subreaper (`PR_SET_CHILD_SUBREAPER`): whatever loses its parent in the
//! tree becomes the guard's child, so killing its children (each with its
//! group) round after round until none is left reaches every descendant.
//! That is also why pincer never SIGKILLs a live guard itself: it drops the
//! tether and lets the guard kill the tree first.
//!
//! Closing the descriptors matters twice: std's `spawn` returns only when its
//! close-on-exec error pipe is closed in every copy, and the guard must not
//! keep any socket or pipe pincer uses open (this CLI's stdin, another CLI's, another
//! guard's tether), or EOF would never come. The guard blocks the signals
//! pincer sends the group (SIGTERM when stopping), so they reach the CLI
//! while the guard waits for its answer. An exec failure in the grandchild
//! still reaches `spawn` through std's error pipe, which the grandchild holds
//! until its exec, so "not found" and "not executable" are reported as
//! before. The CLI also gets `PR_SET_PDEATHSIG` towards the guard
//! (single-threaded), so a guard killed alone takes the CLI with it.
//!
//! Everything between fork and exec, and the whole guard, is raw system
//! calls: no allocation, no lock, as `pre_exec` requires (and no Rust runtime
//! after the re-exec). Linux only, like the rest of pincer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::libc;
use tokio::process::Command;

/// How often a guard without a signalfd looks for its CLI's exit.
const POLL_WITHOUT_SIGNALFD_MS: libc::c_int = 100;

/// pincer's end of one guard's pipe. Dropping it (or pincer's death) makes
/// the guard kill the CLI and everything it started. On a cluster node,
/// pincer also writes the node's deadline to it ([`Tether::kill_after`]).
#[derive(Debug)]
pub struct Tether {
    /// Closing it is the message; written to only with deadlines. Non-blocking:
    /// a guard that stopped reading never holds up pincer.
    write: OwnedFd,
    /// pincer's copy of the guard's end, needed only until the fork.
    read: Option<OwnedFd>,
}

impl Tether {
    /// The child is forked: pincer needs no read end.
    pub fn spawned(&mut self) {
        self.read = None;
    }

    /// Has the guard kill the CLI's tree by itself `after` from now unless a
    /// later call moves the deadline (the latest wins): a cluster node's CLIs
    /// die at its deadline even when pincer is frozen. One 8-byte write,
    /// atomic on a pipe; a full pipe (a guard not reading) drops it.
    pub fn kill_after(&self, after: std::time::Duration) {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX).to_le_bytes();
        // SAFETY: writes 8 bytes from a stack buffer to a descriptor we own.
        unsafe { libc::write(self.write.as_raw_fd(), ms.as_ptr().cast(), ms.len()) };
    }
}

/// Makes the child that `cmd` spawns a guard of the program it runs (see the
/// module's doc). `cmd` must also have `process_group(0)`: the guard ends by
/// killing its own group. Call [`Tether::spawned`] once `cmd` has spawned.
pub fn install(cmd: &mut Command) -> io::Result<Tether> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Only pincer's end (its own open file): the guard's reads still block in poll.
    // SAFETY: fcntl on a descriptor just made.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    // SAFETY: fresh descriptors, owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let tether = read.as_raw_fd();
    // SAFETY: `split` runs between fork and exec and makes only raw system
    // calls (no allocation, no locks), as `pre_exec` requires.
    unsafe {
        cmd.pre_exec(move || split(tether));
    }
    Ok(Tether { write, read: Some(read) })
}

/// In the forked child: forks the CLI's process and becomes its guard.
/// Returns only in the CLI's process, which std then execs.
fn split(tether: RawFd) -> io::Result<()> {
    // SAFETY: raw system calls in a single-threaded child (see `install`).
    unsafe {
        let guard = libc::getpid();
        // Orphans of the CLI's tree come to the guard (not inherited by the CLI).
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != guard {
                    // The guard died before the line above: follow it.
                    libc::_exit(1);
                }
                Ok(())
            }
            cli => {
                reexec(tether, cli);
                watch(tether, cli)
            }
        }
    }
}

/// `argv[0]` of a guard that re-executed itself (`ps` shows `pincer-guard CLI_PID TETHER_FD`).
const GUARD_ARG0: &[u8] = b"pincer-guard\0";

/// Replaces the guard's copy of pincer's memory with a fresh image of the same
/// binary, whose startup hook ([`ENTER_GUARD`]) goes straight to [`watch`].
/// A fork keeps every page pincer later writes to (copy-on-write leaves the
/// old one to the child): a guard that stays a fork would grow to pincer's
/// size over a long session. Returns only if the exec failed; the guard then
/// watches from here, as it would after the exec.
///
/// # Safety
/// Only in the forked guard.
unsafe fn reexec(tether: RawFd, cli: libc::pid_t) {
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    close_all_but(tether);
    let (mut cli_arg, mut tether_arg) = ([0u8; 24], [0u8; 24]);
    decimal(cli.unsigned_abs(), &mut cli_arg);
    decimal(tether.unsigned_abs(), &mut tether_arg);
    let argv = [GUARD_ARG0.as_ptr().cast(), cli_arg.as_ptr().cast(), tether_arg.as_ptr().cast(), std::ptr::null()];
    libc::fcntl(tether, libc::F_SETFD, 0);
    // pincer's own environment (std sets the CLI's only after this hook), so
    // the binary loads as pincer did (LD_LIBRARY_PATH, say).
    libc::execve(c"/proc/self/exe".as_ptr(), argv.as_ptr(), environ);
    libc::fcntl(tether, libc::F_SETFD, libc::FD_CLOEXEC);
}

extern "C" {
    /// The C library's environment: pincer's own in the forked guard.
    static environ: *const *const libc::c_char;
}

/// Writes `n` as a NUL-terminated decimal into `out`.
fn decimal(n: u32, out: &mut [u8; 24]) {
    let mut digits = [0u8; 10];
    let (mut rest, mut len) = (n, 0);
    loop {
        digits[len] = b'0' + (rest % 10) as u8;
        len += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    out[len] = 0;
}

/// Runs at the start of every program linking pincer, before `main` (and
/// before Rust's runtime): a process started as a re-executed guard never
/// reaches `main`. It is a startup hook rather than a line in `main` so that
/// test binaries, which run the engine in-process, get the same guards.
#[used]
#[link_section = ".init_array"]
static ENTER_GUARD: extern "C" fn() = enter_guard_if_asked;

extern "C" fn enter_guard_if_asked() {
    // SAFETY: raw system calls on stack buffers; `watch` is entered only in a
    // process that `reexec` started, with the descriptors it names.
    unsafe {
        let fd = libc::open(c"/proc/self/cmdline".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 64];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        let Ok(n) = usize::try_from(n) else { return };
        let Some(args) = buf[..n].strip_prefix(GUARD_ARG0) else { return };
        let mut numbers = args.split(|b| *b == 0).map(parse_decimal);
        if let (Some(Some(cli)), Some(Some(tether))) = (numbers.next(), numbers.next()) {
            if let (Ok(cli), Ok(tether)) = (libc::pid_t::try_from(cli), RawFd::try_from(tether)) {
                watch(tether, cli);
            }
        }
    }
}

/// A non-negative decimal, or `None`.
fn parse_decimal(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    digits.iter().try_fold(0i64, |n, b| b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0')))
}

/// The guard's life: wait for the tether's EOF or the CLI's exit.
///
/// # Safety
/// Only in the forked guard (see `split`).
unsafe fn watch(tether: RawFd, cli: libc::pid_t) -> ! {
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    close_all_but(tether);
    let mut chld: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut chld);
    libc::sigaddset(&mut chld, libc::SIGCHLD);
    // A SIGCHLD before this exists is not lost: exits are looked for below first.
    let sigfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC);
    let (watched, timeout) = if sigfd >= 0 { (2, -1) } else { (1, POLL_WITHOUT_SIGNALFD_MS) };
    // The kill deadline pincer wrote last, on the boot clock (ms); none yet: -1.
    let mut deadline: i64 = -1;
    loop {
        let now = boot_ms();
        if deadline >= 0 && now >= deadline {
            kill_tree_and_exit();
        }
        reap(cli);
        let mut fds = [
            libc::pollfd { fd: tether, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: sigfd, events: libc::POLLIN, revents: 0 },
        ];
        let timeout = until_deadline(timeout, deadline, now);
        if libc::poll(fds.as_mut_ptr(), watched, timeout) < 0 {
            if errno() != libc::EINTR {
                // Out of kernel memory, say: try again shortly rather than spin.
                pause(100);
            }
            continue;
        }
        if fds[0].revents != 0 {
            read_tether(tether, &mut deadline);
        }
        if fds[1].revents != 0 {
            let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
            libc::read(sigfd, info.as_mut_ptr().cast(), info.len());
        }
    }
}

/// Reaps the CLI, or an orphan of its tree that the guard adopted; when the
/// CLI itself exited, ends the guard the way it ended.
///
/// # Safety
/// Only in the forked guard.
unsafe fn reap(cli: libc::pid_t) {
    loop {
        let mut status = 0;
        match libc::waitpid(-1, &mut status, libc::WNOHANG) {
            -1 if errno() == libc::EINTR => {}
            0 | -1 => return,
            pid if pid == cli => {
                // What the CLI left behind goes with it, as `CliProcess::stop` would do.
                kill_descendants();
                exit_like(status);
            }
            _ => {}
        }
    }
}

/// The tether is readable: a deadline ("kill after N ms", 8 bytes each,
/// the last one wins), or EOF (pincer is gone or cut it: kill now).
///
/// # Safety
/// Only in the forked guard.
unsafe fn read_tether(tether: RawFd, deadline: &mut i64) {
    let mut buf = [0u8; 64];
    let n = libc::read(tether, buf.as_mut_ptr().cast(), buf.len());
    match usize::try_from(n) {
        Ok(0) => kill_tree_and_exit(),
        Ok(n) => {
            for record in buf[..n].chunks_exact(8) {
                let mut ms = [0u8; 8];
                ms.copy_from_slice(record);
                let after = i64::try_from(u64::from_le_bytes(ms)).unwrap_or(i64::MAX);
                *deadline = boot_ms().saturating_add(after);
            }
        }
        Err(_) if errno() == libc::EINTR || errno() == libc::EAGAIN => {}
        Err(_) => kill_tree_and_exit(),
    }
}

/// Kills the CLI's tree and the guard's group, and ends the guard.
///
/// # Safety
/// Only in the forked guard.
unsafe fn kill_tree_and_exit() -> ! {
    kill_descendants();
    libc::kill(0, libc::SIGKILL);
    libc::_exit(137)
}

/// Now on the boot clock (monotonic, and counting a suspend, as the
/// database's clock does), in ms.
///
/// # Safety
/// Only in the forked guard (a raw system call).
unsafe fn boot_ms() -> i64 {
    let mut now: libc::timespec = std::mem::zeroed();
    libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now);
    now.tv_sec.saturating_mul(1000).saturating_add(now.tv_nsec / 1_000_000)
}

/// The poll timeout: `base` (-1: none), shortened to reach `deadline` (-1: none).
fn until_deadline(base: libc::c_int, deadline: i64, now: i64) -> libc::c_int {
    if deadline < 0 {
        return base;
    }
    let left = libc::c_int::try_from(deadline.saturating_sub(now).clamp(0, 60_000)).unwrap_or(60_000);
    if base < 0 {
        left
    } else {
        base.min(left)
    }
}

/// How long the guard keeps killing a tree that will not die (a process stuck
/// in the kernel) before it gives up: rounds of [`KILL_ROUND_MS`].
const KILL_ROUNDS: u32 = 1000;
const KILL_ROUND_MS: libc::c_long = 5;

/// Kills everything below the guard: each child with its process group (the
/// CLI starts its Bash shells in groups of their own), round after round,
/// until the guard has no child left. The guard is a subreaper, so whatever
/// loses its parent (a dead child's children, a daemon's double fork) becomes
/// its child and is found in the next round: only processes started outside
/// the tree (by another service) escape.
///
/// # Safety
/// Only in the forked guard.
unsafe fn kill_descendants() {
    for _ in 0..KILL_ROUNDS {
        loop {
            let mut status = 0;
            match libc::waitpid(-1, &mut status, libc::WNOHANG) {
                -1 if errno() == libc::EINTR => {}
                -1 => return, // no child at all: done
                0 => break,
                _ => {}
            }
        }
        if !for_each_child(|pid| {
            libc::kill(pid, libc::SIGKILL);
            libc::kill(-pid, libc::SIGKILL);
        }) {
            // No list of children (a kernel without CONFIG_PROC_CHILDREN):
            // the process group, which `CliProcess` also kills, is all we reach.
            return;
        }
        pause(KILL_ROUND_MS);
    }
}

/// Calls `f` with each pid in `/proc/thread-self/children` (the guard is
/// single-threaded); false when the file cannot be read.
///
/// # Safety
/// Only in the forked guard.
unsafe fn for_each_child(mut f: impl FnMut(libc::pid_t)) -> bool {
    let fd = libc::open(c"/proc/thread-self/children".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 512];
    let mut pid: libc::pid_t = 0;
    loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        // "pid pid pid " across reads: a number may be split between two.
        for &b in &buf[..n] {
            if b.is_ascii_digit() {
                pid = pid.saturating_mul(10).saturating_add(libc::pid_t::from(b - b'0'));
            } else if pid > 0 {
                f(pid);
                pid = 0;
            }
        }
    }
    if pid > 0 {
        f(pid);
    }
    libc::close(fd);
    true
}

/// Sleeps `ms` milliseconds.
///
/// # Safety
/// Only in the forked guard.
unsafe fn pause(ms: libc::c_long) {
    let time = libc::timespec { tv_sec: 0, tv_nsec: ms * 1_000_000 };
    libc::nanosleep(&time, std::ptr::null_mut());
}

/// Closes every descriptor except `keep`.
///
/// # Safety
/// Only in the forked guard: it closes descriptors other code may think it owns.
unsafe fn close_all_but(keep: RawFd) {
    let keep = keep as libc::c_uint;
    let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0, keep - 1, 0) == 0;
    if below && libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0) == 0 {
        return;
    }
    // Kernels before 5.9: the open ones, as /proc lists them (the descriptor
    // limit may be a billion in a container), else every one up to the limit.
    if close_listed_but(keep as RawFd) {
        return;
    }
    let mut limit: libc::rlimit = std::mem::zeroed();
    let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 { limit.rlim_cur } else { 1024 };
    let max = libc::c_int::try_from(max).unwrap_or(libc::c_int::MAX);
    for fd in 0..max {
        if fd as libc::c_uint != keep {
            libc::close(fd);
        }
    }
}

/// Closes the descriptors `/proc/self/fd` lists, except `keep`; false when
/// it cannot be read.
///
/// # Safety
/// Only in the forked guard.
unsafe fn close_listed_but(keep: RawFd) -> bool {
    let dir = libc::open(c"/proc/self/fd".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
    if dir < 0 {
        return false;
    }
    let mut buf = [0u8; 1024];
    loop {
        let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        // linux_dirent64: inode (8), offset (8), record length (2), type (1), name with a NUL.
        let mut at = 0;
        while at + 19 < n {
            let len = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            let mut fd: RawFd = -1;
            for &b in buf[at + 19..(at + len).min(n)].iter().take_while(|b| b.is_ascii_digit()) {
                fd = fd.max(0).saturating_mul(10).saturating_add(RawFd::from(b - b'0'));
            }
            if fd >= 0 && fd != keep && fd != dir {
                libc::close(fd);
            }
            at += len.max(1);
        }
    }
    libc::close(dir);
    true
}

/// Ends the guard the way the CLI ended.
///
/// # Safety
/// Only in the forked guard.
unsafe fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // The signal's default action, and no core file of the guard.
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(signal, libc::SIG_DFL);
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

fn errno() -> libc::c_int {
    // SAFETY: reads this thread's errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    use super::*;
    use crate::claude::process::{tests::gone, CliProcess, SpawnSpec};

    /// Tells [`spawner`] where to work; unset in a normal test run.
    const HELPER_DIR: &str = "PINCER_GUARD_TEST_DIR";

    fn read_pid(path: &Path) -> Option<i32> {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// The "pincer" that gets killed: another run of this test binary, which
    /// spawns a CLI stand-in with a background shell and then waits. (A fork
    /// of the multi-threaded test process could not safely spawn anything.)
    #[test]
    #[ignore = "a helper process of a_cli_and_its_shells_die_with_a_spawner_killed_by_sigkill"]
    fn spawner() {
        let Some(dir) = std::env::var_os(HELPER_DIR).map(std::path::PathBuf::from) else {
            return;
        };
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let spec = SpawnSpec {
                program: "sh".into(),
                // Detached (in a group of its own), as the real CLI starts Bash.
                args: vec!["-c".into(), "setsid sleep 300 & echo $! > bg.pid; echo $$ > cli.pid; wait".into()],
                cwd: dir.clone(),
                env: vec![],
                env_remove: vec![],
                label: "guarded".into(),
                after_kill: None,
                pass_fds: vec![],
            };
            let _process = CliProcess::spawn(&spec).unwrap();
            tokio::time::sleep(Duration::from_secs(600)).await;
        });
    }

    #[test]
    fn a_cli_and_its_shells_die_with_a_spawner_killed_by_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        #[allow(clippy::disallowed_methods)] // this test binary again, as the spawner
        let mut spawner = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "claude::guard::tests::spawner", "--ignored", "--nocapture"])
            .env(HELPER_DIR, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let (cli, bg) = loop {
            if let (Some(cli), Some(bg)) = (read_pid(&dir.path().join("cli.pid")), read_pid(&dir.path().join("bg.pid")))
            {
                break (cli, bg);
            }
            assert!(Instant::now() < deadline, "the stand-in CLI and its shell started");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!gone(cli) && !gone(bg), "both run before the spawner dies");

        kill(Pid::from_raw(spawner.id() as i32), Signal::SIGKILL).unwrap();
        spawner.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(gone(cli) && gone(bg)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone(cli), "the CLI {cli} outlived its killed spawner");
        assert!(gone(bg), "the CLI's background shell {bg} outlived the killed spawner");
    }

    /// Forks; the child runs `close` with `keep` and reports which of the
    /// two descriptors are still open in its exit code (1: keep, 2: other).
    fn open_after_closing(keep: RawFd, other: RawFd, close: unsafe fn(RawFd)) -> i32 {
        // SAFETY: the child makes only raw system calls, then `_exit`s.
        unsafe {
            match libc::fork() {
                0 => {
                    close(keep);
                    let open = |fd| libc::fcntl(fd, libc::F_GETFD) != -1;
                    libc::_exit(i32::from(open(keep)) | i32::from(open(other)) << 1);
                }
                child => {
                    let mut status = 0;
                    assert_eq!(libc::waitpid(child, &mut status, 0), child);
                    libc::WEXITSTATUS(status)
                }
            }
        }
    }

    #[test]
    fn every_descriptor_but_the_tethers_is_closed_with_or_without_close_range() {
        let (keep, other) = (std::fs::File::open("/dev/null").unwrap(), std::fs::File::open("/dev/null").unwrap());
        let (keep, other) = (keep.as_raw_fd(), other.as_raw_fd());
        assert_eq!(open_after_closing(keep, other, close_all_but), 1);
        unsafe fn listed(keep: RawFd) {
            if !close_listed_but(keep) {
                libc::_exit(4); // /proc/self/fd is not readable
            }
        }
        assert_eq!(open_after_closing(keep, other, listed), 1);
    }

    /// Private memory of a process, from `/proc/PID/smaps_rollup`, in KiB.
    fn private_kib(pid: u32) -> u64 {
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
        let field = |name: &str| {
            let line = rollup.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
        };
        field("Private_Clean:") + field("Private_Dirty:")
    }

    #[tokio::test]
    async fn a_guard_keeps_no_copy_of_pincers_memory() {
        const BALLAST: usize = 64 << 20;
        let mut ballast = vec![1u8; BALLAST];
        let dir = tempfile::tempdir().unwrap();
        let spec = SpawnSpec {
            program: "sleep".into(),
            args: vec!["30".into()],
            cwd: dir.path().to_owned(),
            env: vec![],
            env_remove: vec![],
            label: "memory".into(),
            after_kill: None,
            pass_fds: vec![],
        };
        let (process, _lines) = CliProcess::spawn(&spec).unwrap();
        let guard = process.pid().expect("the guard's pid");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read(format!("/proc/{guard}/cmdline")).unwrap().starts_with(GUARD_ARG0) {
            assert!(Instant::now() < deadline, "the guard re-executed itself");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Written after the fork: a guard that kept pincer's pages would own the old copies now.
        ballast.iter_mut().step_by(4096).for_each(|b| *b = 2);
        let private = private_kib(guard);
        assert!(private < (BALLAST as u64 / 1024) / 4, "the guard holds {private} KiB of its own");
        drop(ballast);
    }

    #[tokio::test]
    async fn a_guard_kills_its_cli_at_the_last_deadline_pincer_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SpawnSpec {
            program: "sleep".into(),
            args: vec!["300".into()],
            cwd: dir.path().to_owned(),
            env: vec![],
            env_remove: vec![],
            label: "deadline".into(),
            after_kill: None,
            pass_fds: vec![],
        };
        let (mut process, _lines) = CliProcess::spawn(&spec).unwrap();
        // A far deadline, then a near one: the latest wins, and the guard acts
        // alone (pincer never stops the process here).
        process.kill_after(Duration::from_secs(600));
        process.kill_after(Duration::from_millis(200));
        let status = process.wait_for(Duration::from_secs(60)).await.expect("the guard killed the CLI at its deadline");
        // The guard kills its group, itself with it (or exits as killed).
        assert!(
            std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGKILL) || status.code() == Some(137),
            "{status}"
        );
    }
}
