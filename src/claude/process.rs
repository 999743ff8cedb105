//! The CLI child process: spawning, stdin, stdout lines, and stopping it.
//!
//! This is the only place that starts a process (clippy's `disallowed-methods`
//! keeps `Command::new` out of other modules). The child runs in its own
//! process group so that stopping it also stops the shells it started, and a
//! terminal's Ctrl-C reaches pincer only, which then closes the CLI gracefully.
//! The child pincer forks is a guard (`guard.rs`) that runs the CLI and kills
//! everything it started when pincer dies (even by SIGKILL) or lets go of it;
//! the guard's pid is the group's id.
//!
//! The CLI's stdin, stdout and stderr are Unix socket pairs, not pipes. Any
//! process that may look into `/proc/PID/fd` of the CLI (its own tools, same
//! uid) can open a pipe there again and so write frames into the CLI's stdin
//! or into pincer's reading end of its stdout; a socket cannot be opened that
//! way (`ENXIO`). Everything else is as with pipes: pincer writes lines to
//! its end of stdin and drops it to give the CLI EOF, and reads its ends of
//! stdout and stderr to EOF.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::guard::{self, Tether};
use super::lines::{LineRead, LineReader, MAX_LINE_BYTES};

/// Everything needed to start one CLI process.
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// Added to pincer's own environment.
    pub env: Vec<(String, String)>,
    /// Removed from it (`CLAUDECODE`: the CLI refuses to start nested).
    pub env_remove: Vec<String>,
    /// Names the process in logs (the group).
    pub label: String,
    /// A command (program, then arguments) that finishes the job when the
    /// process had to be killed: `docker rm --force NAME`, as killing the
    /// `docker run` client leaves its container running.
    pub after_kill: Option<Vec<String>>,
    /// Descriptors the CLI's process inherits at their own numbers (bwrap's
    /// `--add-seccomp-fd N`, `--bind-fd N …`); nothing else is inherited.
    pub pass_fds: Vec<PassFd>,
}

/// A descriptor a child inherits under the same number. It stays
/// close-on-exec in pincer, so no other child (started meanwhile by another
/// thread) gets it; only the child it is given to clears the flag, after the
/// fork. Clones share the open file, and so its offset.
#[derive(Clone, Debug)]
pub struct PassFd(Arc<OwnedFd>);

impl PassFd {
    pub fn new(fd: OwnedFd) -> io::Result<PassFd> {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        // std puts the child's stdio on 0-2, which would replace a descriptor there.
        let fd = if fd.as_raw_fd() < 3 {
            let above = fcntl(fd.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(3))?;
            // SAFETY: a fresh descriptor from F_DUPFD_CLOEXEC, owned by nothing else.
            unsafe { std::os::fd::FromRawFd::from_raw_fd(above) }
        } else {
            fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
            fd
        };
        Ok(PassFd(Arc::new(fd)))
    }

    /// The number the child finds it under.
    pub fn number(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Has the process `cmd` starts keep exactly `fds` open across its exec,
/// besides its stdio: whatever else it inherited without close-on-exec
/// (pincer's own parent may leave descriptors open, as a test runner's
/// jobserver pipe) is marked close-on-exec first. Registered after the
/// guard's hook, it runs only in the process that becomes the CLI.
fn inherit(cmd: &mut Command, fds: &[PassFd]) {
    use nix::libc;
    let numbers: Vec<RawFd> = fds.iter().map(PassFd::number).collect();
    // SAFETY: between fork and exec, only `close_range` and `fcntl` on
    // descriptors the child holds (the vector was allocated before the fork
    // and is only read).
    unsafe {
        cmd.pre_exec(move || {
            // Kernels before 5.11 lack the flag: there inherited descriptors pass as before.
            libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
            for fd in &numbers {
                if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// One stdout line as read, stamped for latency metrics.
#[derive(Debug)]
pub struct StdoutLine {
    pub read_at: Instant,
    pub line: LineRead,
}

/// The child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("the Claude Code CLI was not found at `{0}`")]
    NotFound(PathBuf),
    #[error("the Claude Code CLI at `{0}` is not executable")]
    NotExecutable(PathBuf),
    #[error("could not start the Claude Code CLI `{program}`: {source}")]
    Io { program: PathBuf, source: io::Error },
}

/// A running CLI child. Dropping it kills the CLI and what it started.
pub struct CliProcess {
    child: Child,
    /// Dropped to have the guard kill the CLI's tree.
    tether: Option<Tether>,
    /// pincer's end of the CLI's stdin; dropped to close it.
    stdin: Option<UnixStream>,
    pid: Option<u32>,
    label: String,
    /// The group was killed after the leader stopped: the pgid may be reused now.
    group_killed: bool,
    after_kill: Option<Vec<String>>,
}

/// How long a write to the CLI's stdin may wait for room in the socket. A live
/// CLI reads its input even mid-turn, so a full buffer for this long means a hung one.
const STDIN_WRITE_LIMIT: Duration = Duration::from_secs(30);
/// How many stdout lines may wait for the session actor.
const STDOUT_QUEUE: usize = 64;
/// stderr is only logged, so a shorter cap is plenty.
const STDERR_LINE_BYTES: usize = 64 * 1024;

impl CliProcess {
    /// Starts the child; its stdout lines arrive on the returned receiver,
    /// which ends when stdout closes.
    pub fn spawn(spec: &SpawnSpec) -> Result<(CliProcess, mpsc::Receiver<StdoutLine>), SpawnError> {
        let io = |source| SpawnError::Io { program: spec.program.clone(), source };
        let (stdin, their_stdin) = stdio_pair().map_err(io)?;
        let (stdout, their_stdout) = stdio_pair().map_err(io)?;
        let (stderr, their_stderr) = stdio_pair().map_err(io)?;
        #[allow(clippy::disallowed_methods)] // the one place that starts the CLI
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(their_stdin))
            .stdout(Stdio::from(their_stdout))
            .stderr(Stdio::from(their_stderr))
            // Not `kill_on_drop`: a SIGKILL to the guard would leave the
            // CLI's shells running; dropping the tether has it kill them.
            .process_group(0);
        for key in &spec.env_remove {
            cmd.env_remove(key);
        }
        let mut tether = guard::install(&mut cmd).map_err(io)?;
        inherit(&mut cmd, &spec.pass_fds);
        let child = cmd.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => SpawnError::NotFound(spec.program.clone()),
            io::ErrorKind::PermissionDenied => SpawnError::NotExecutable(spec.program.clone()),
            _ => io(source),
        })?;
        crate::metrics::hop("cli_spawned");
        tether.spawned();
        // The CLI's ends go now: its exit must leave pincer's ends at EOF.
        drop(cmd);
        let (tx, rx) = mpsc::channel(STDOUT_QUEUE);
        tokio::spawn(read_stdout(stdout, tx, spec.label.clone()));
        tokio::spawn(log_stderr(stderr, spec.label.clone()));
        let pid = child.id();
        tracing::info!(group = %spec.label, pid, "started the Claude Code CLI");
        let label = spec.label.clone();
        let after_kill = spec.after_kill.clone();
        let stdin = Some(stdin);
        let tether = Some(tether);
        Ok((CliProcess { child, tether, stdin, pid, label, group_killed: false, after_kill }, rx))
    }

    /// Writes one line (a newline is added) and flushes it. A CLI that does
    /// not take it within [`STDIN_WRITE_LIMIT`] is killed (its stdout then
    /// closes, as for any exit) and the write fails with `TimedOut`.
    pub async fn write_line(&mut self, line: &str) -> io::Result<()> {
        self.write_line_within(line, STDIN_WRITE_LIMIT).await
    }

    async fn write_line_within(&mut self, line: &str, limit: Duration) -> io::Result<()> {
        debug_assert!(!line.contains('\n'), "stdin lines are single JSON lines");
        let stdin = self.stdin.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin is closed"))?;
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        let write = async {
            stdin.write_all(&buf).await?;
            stdin.flush().await
        };
        let Ok(written) = tokio::time::timeout(limit, write).await else {
            // Hung, and part of a line may sit in its socket now: it cannot go on.
            tracing::warn!(group = %self.label, ?limit, "the CLI did not read its input in time; killing it");
            self.close_stdin();
            self.tether = None;
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the CLI did not read its input within {limit:?}"),
            ));
        };
        crate::metrics::hop("stdin_written");
        written
    }

    /// Closes stdin: the CLI finishes its work and exits by itself.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Has the guard kill the CLI by itself `after` from now (a cluster
    /// node's deadline; see `guard::Tether::kill_after`).
    pub fn kill_after(&self, after: Duration) {
        if let Some(tether) = &self.tether {
            tether.kill_after(after);
        }
    }

    /// The guard's pid, which is also the process group's id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Sends a signal to the child's whole process group.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            if let Err(e) = killpg(Pid::from_raw(pid), signal) {
                tracing::debug!(group = %self.label, %e, ?signal, "signal not delivered (already gone?)");
            }
        }
    }

    /// Waits up to `limit` for the child to exit.
    pub async fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(limit, self.child.wait()).await.ok().and_then(Result::ok)
    }

    /// Stops the child the way the SDKs do: stdin closed, a grace period, then
    /// SIGTERM, another grace period, then SIGKILL (by the guard, which kills
    /// the CLI's whole tree). Killing early would lose the CLI's last session
    /// writes. Whatever the CLI leaves behind (a background shell) is killed
    /// once the CLI has exited: by the guard, and in the process group again.
    /// If the CLI had to be killed (or never exited), `after_kill` runs.
    pub async fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let status = self.stop_leader(grace).await;
        self.signal(Signal::SIGKILL);
        self.group_killed = true;
        let killed = status.is_none_or(|s| s.signal() == Some(Signal::SIGKILL as i32));
        if let Some(command) = self.after_kill.take().filter(|_| killed) {
            after_kill(command, self.label.clone()).await;
        }
        status
    }

    async fn stop_leader(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.close_stdin();
        if let Some(status) = self.wait_for(grace).await {
            return Some(status);
        }
        tracing::warn!(group = %self.label, "the CLI did not exit after stdin closed; sending SIGTERM");
        self.signal(Signal::SIGTERM);
        if let Some(status) = self.wait_for(grace).await {
            return Some(status);
        }
        tracing::warn!(group = %self.label, "the CLI ignored SIGTERM; killing it");
        self.tether = None;
        if let Some(status) = self.wait_for(grace).await {
            return Some(status);
        }
        tracing::warn!(group = %self.label, "the CLI's guard did not end; killing its group");
        self.signal(Signal::SIGKILL);
        self.wait_for(grace).await
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        if !self.group_killed {
            // A live guard kills the tree and the group when the tether goes
            // (a SIGKILL now would kill the guard first); after it ended, the
            // group may still hold what a guard killed alone left behind.
            self.tether = None;
            if !matches!(self.child.try_wait(), Ok(None)) {
                self.signal(Signal::SIGKILL);
            }
            // Best effort: without a runtime (pincer is ending), the next start cleans up.
            if let (Some(command), Ok(runtime)) = (self.after_kill.take(), tokio::runtime::Handle::try_current()) {
                runtime.spawn(after_kill(command, self.label.clone()));
            }
        }
    }
}

/// One of the CLI's stdio sockets: pincer's end, ready for tokio (it must be
/// called within the runtime), and the CLI's, which becomes its 0, 1 or 2.
/// Both are close-on-exec in pincer, so no other child inherits them.
fn stdio_pair() -> io::Result<(UnixStream, OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    Ok((UnixStream::from_std(ours)?, theirs.into()))
}

/// Runs a process's `after_kill` command; failures are only logged.
async fn after_kill(command: Vec<String>, label: String) {
    let Some((program, args)) = command.split_first() else { return };
    match run_tool(program, args, Duration::from_secs(60)).await {
        Ok(out) if out.status.success() => tracing::info!(group = %label, ?command, "cleaned up after a killed CLI"),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            tracing::warn!(group = %label, ?command, stderr = %stderr.trim(), "cleaning up after a killed CLI failed")
        }
        Err(e) => tracing::warn!(group = %label, ?command, %e, "cleaning up after a killed CLI failed"),
    }
}

/// Runs a short helper tool (the sandbox probes, `docker rm`) to completion,
/// killed when `limit` passes. Kept here so processes start in one module only.
pub async fn run_tool(program: &str, args: &[String], limit: Duration) -> io::Result<std::process::Output> {
    run_tool_passing(program, args, &[], limit).await
}

/// [`run_tool`], the tool inheriting `fds` (see [`PassFd`]).
pub async fn run_tool_passing(
    program: &str,
    args: &[String],
    fds: &[PassFd],
    limit: Duration,
) -> io::Result<std::process::Output> {
    #[allow(clippy::disallowed_methods)] // the one place that starts processes
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    inherit(&mut cmd, fds);
    match tokio::time::timeout(limit, cmd.output()).await {
        Ok(output) => output,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("`{program}` did not finish within {limit:?}"))),
    }
}

async fn read_stdout(stdout: impl AsyncRead + Unpin, tx: mpsc::Sender<StdoutLine>, label: String) {
    let mut reader = LineReader::new(BufReader::new(stdout), MAX_LINE_BYTES);
    loop {
        match reader.next_line().await {
            Ok(Some(line)) => {
                if crate::metrics::hops_enabled()
                    && matches!(&line, LineRead::Line(l) if l.contains(r#""type":"result""#))
                {
                    crate::metrics::hop("result_read");
                }
                let line = StdoutLine { read_at: Instant::now(), line };
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(group = %label, %e, "reading the CLI's stdout failed");
                return;
            }
        }
    }
}

async fn log_stderr(stderr: impl AsyncRead + Unpin, label: String) {
    let mut lines = LineReader::new(BufReader::new(stderr), STDERR_LINE_BYTES);
    while let Ok(Some(line)) = lines.next_line().await {
        match line {
            LineRead::Line(line) => tracing::warn!(group = %label, "claude stderr: {line}"),
            other => tracing::warn!(group = %label, "claude stderr: unreadable line ({other:?})"),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Whether a process is gone (or only a zombie waiting for init).
    pub(in crate::claude) fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn stopping_kills_what_the_cli_left_running_in_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("bg.pid");
        // Like a CLI with a background shell: starts one, then exits when stdin closes.
        let script = format!("sleep 300 & echo $! > {}; cat > /dev/null", pid_file.display());
        let (mut process, _lines) = CliProcess::spawn(&sh(dir.path(), &script)).unwrap();
        let bg = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok()) {
                    return pid;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the background shell started");
        let status = process.stop(Duration::from_secs(5)).await.expect("the leader exited");
        assert!(status.success(), "the leader ended by itself when stdin closed: {status}");
        let killed = tokio::time::timeout(Duration::from_secs(10), async {
            while !gone(bg) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(killed.is_ok(), "the background process {bg} outlived its CLI");
    }

    fn sh(cwd: &std::path::Path, script: &str) -> SpawnSpec {
        SpawnSpec {
            program: "sh".into(),
            args: vec!["-c".into(), script.to_owned()],
            cwd: cwd.to_owned(),
            env: vec![],
            env_remove: vec![],
            label: "test".into(),
            after_kill: None,
            pass_fds: vec![],
        }
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn the_cli_inherits_exactly_the_descriptors_passed_and_pincer_keeps_them_close_on_exec() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let (passed, kept) = (dir.path().join("passed"), dir.path().join("kept"));
        std::fs::File::create(&passed).unwrap().write_all(b"through-the-fd\n").unwrap();
        std::fs::write(&kept, "must-not-leak\n").unwrap();
        let passed = PassFd::new(std::fs::File::open(&passed).unwrap().into()).unwrap();
        let kept = std::fs::File::open(&kept).unwrap();
        // As if pincer's parent had left it open: inheritable.
        let stray = std::fs::File::open("/dev/null").unwrap();
        nix::fcntl::fcntl(stray.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty())).unwrap();
        let (n, m, o) = (passed.number(), kept.as_raw_fd(), stray.as_raw_fd());
        // The checks come before any redirection, which a shell may do with descriptors of its own;
        // `cat` (which inherits the shell's) reads `n` by its /proc name: dash takes one digit after `<&`.
        let script = format!(
            "for fd in {m} {o}; do [ -e /proc/self/fd/$fd ] && echo leaked-$fd || echo closed; done; \
             cat /proc/self/fd/{n}"
        );
        let mut spec = sh(dir.path(), &script);
        spec.pass_fds = vec![passed.clone()];
        let (mut process, mut lines) = CliProcess::spawn(&spec).unwrap();
        let mut out = Vec::new();
        while let Some(line) = tokio::time::timeout(LONG, lines.recv()).await.expect("stdout closes") {
            if let LineRead::Line(l) = line.line {
                out.push(l);
            }
        }
        assert_eq!(out, ["closed", "closed", "through-the-fd"], "only the passed descriptor reached the CLI");
        assert!(process.wait_for(LONG).await.expect("exited").success());
        let flags = nix::fcntl::fcntl(n, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags & nix::libc::FD_CLOEXEC, nix::libc::FD_CLOEXEC, "still close-on-exec in pincer");
    }

    #[tokio::test]
    async fn the_clis_stdio_cannot_be_opened_again_through_proc() {
        let dir = tempfile::tempdir().unwrap();
        // What code in the CLI's tree tried: a new descriptor on the CLI's
        // stdin or stdout by its /proc name (`$$`: the CLI, the subshell's parent).
        let script = "for fd in 0 1 2; do \
             ( exec 3>/proc/$$/fd/$fd ) 2>/dev/null && echo reopened-$fd || echo refused-$fd; done";
        let (mut process, mut lines) = CliProcess::spawn(&sh(dir.path(), script)).unwrap();
        let mut out = Vec::new();
        while let Some(line) = tokio::time::timeout(LONG, lines.recv()).await.expect("stdout closes") {
            if let LineRead::Line(l) = line.line {
                out.push(l);
            }
        }
        assert_eq!(out, ["refused-0", "refused-1", "refused-2"], "sockets, not pipes");
        assert!(process.wait_for(LONG).await.expect("exited").success());
    }

    #[tokio::test]
    async fn lines_go_through_both_sockets_and_closing_stdin_ends_the_cli() {
        let dir = tempfile::tempdir().unwrap();
        let (mut process, mut lines) = CliProcess::spawn(&sh(dir.path(), "cat")).unwrap();
        process.write_line("hello").await.unwrap();
        let line = tokio::time::timeout(LONG, lines.recv()).await.unwrap().expect("a line");
        assert!(matches!(&line.line, LineRead::Line(l) if l == "hello"), "{line:?}");
        // The guard holds no copy of stdin or stdout: EOF reaches the CLI, then pincer.
        process.close_stdin();
        let end = tokio::time::timeout(LONG, lines.recv()).await.expect("stdout closes");
        assert!(end.is_none());
        let status = process.wait_for(LONG).await.expect("the CLI exited");
        assert!(status.success(), "{status}");
    }

    #[tokio::test]
    async fn a_cli_that_never_reads_its_input_is_given_up_on_and_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut process, mut lines) = CliProcess::spawn(&sh(dir.path(), "sleep 600")).unwrap();
        // Far more than a socket buffers: the write waits for a reader that never comes.
        let line = "x".repeat(4 << 20);
        let written = tokio::time::timeout(LONG, process.write_line_within(&line, Duration::from_millis(200)))
            .await
            .expect("the write gives up within its limit");
        assert_eq!(written.unwrap_err().kind(), io::ErrorKind::TimedOut);
        let end = tokio::time::timeout(LONG, lines.recv()).await.expect("stdout closes: the CLI was stopped");
        assert!(end.is_none());
        assert!(process.write_line("late").await.is_err(), "nothing more goes to a CLI given up on");
    }

    #[tokio::test]
    async fn the_status_reported_is_the_clis_own() {
        let dir = tempfile::tempdir().unwrap();
        let (mut process, _lines) = CliProcess::spawn(&sh(dir.path(), "exit 7")).unwrap();
        assert_eq!(process.wait_for(LONG).await.expect("exited").code(), Some(7));
        let (mut process, _lines) = CliProcess::spawn(&sh(dir.path(), "kill -USR1 $$")).unwrap();
        assert_eq!(process.wait_for(LONG).await.expect("exited").signal(), Some(Signal::SIGUSR1 as i32));
    }

    #[tokio::test]
    async fn sigterm_to_the_group_is_answered_by_the_cli() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let script = format!("trap 'exit 5' TERM; touch {}; while :; do sleep 0.1; done", ready.display());
        let (mut process, _lines) = CliProcess::spawn(&sh(dir.path(), &script)).unwrap();
        let started = tokio::time::timeout(LONG, async {
            while !ready.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        started.await.expect("the trap is set");
        process.signal(Signal::SIGTERM);
        let status = process.wait_for(LONG).await.expect("the CLI exited");
        assert_eq!(status.code(), Some(5), "the CLI's own answer to SIGTERM, not the guard's death: {status}");
    }

    #[tokio::test]
    async fn a_missing_or_unexecutable_program_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = sh(dir.path(), "true");
        spec.program = dir.path().join("missing");
        assert!(matches!(CliProcess::spawn(&spec), Err(SpawnError::NotFound(_))));
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        spec.program = plain;
        assert!(matches!(CliProcess::spawn(&spec), Err(SpawnError::NotExecutable(_))));
    }

    #[tokio::test]
    async fn the_after_kill_command_runs_only_when_the_cli_had_to_be_killed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("cleaned");
        let touch = Some(vec!["touch".to_owned(), marker.display().to_string()]);
        let mut polite = sh(dir.path(), "cat > /dev/null");
        polite.after_kill = touch.clone();
        let (mut process, _lines) = CliProcess::spawn(&polite).unwrap();
        process.stop(LONG).await.expect("exits when stdin closes");
        assert!(!marker.exists(), "a CLI that exited by itself leaves nothing to clean");

        let ready = dir.path().join("ready");
        let script = format!("trap '' TERM; touch {}; while :; do sleep 1; done", ready.display());
        let mut stubborn = sh(dir.path(), &script);
        stubborn.after_kill = touch;
        let (mut process, _lines) = CliProcess::spawn(&stubborn).unwrap();
        let started = tokio::time::timeout(LONG, async {
            while !ready.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        started.await.expect("the trap is set");
        let status = process.stop(Duration::from_millis(300)).await;
        assert_eq!(status.and_then(|s| s.signal()), Some(Signal::SIGKILL as i32));
        assert!(marker.exists(), "the CLI was killed, so its after_kill command ran");
    }

    /// Waits until `path` holds a pid.
    async fn pid_in(path: &std::path::Path) -> i32 {
        let read = async {
            loop {
                if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<i32>().ok()) {
                    return pid;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(LONG, read).await.expect("the pid file is written")
    }

    async fn until_gone(pid: i32) -> bool {
        tokio::time::timeout(LONG, async {
            while !gone(pid) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok()
    }

    /// The real CLI starts Bash detached, out of its process group (here with `setsid`).
    const SHELL_OF_ITS_OWN: &str = "setsid sleep 300 & echo $! > bg.pid";

    #[tokio::test]
    async fn a_shell_in_a_session_of_its_own_ends_with_the_cli() {
        let dir = tempfile::tempdir().unwrap();
        let script = format!("{SHELL_OF_ITS_OWN}; cat > /dev/null");
        let (mut process, _lines) = CliProcess::spawn(&sh(dir.path(), &script)).unwrap();
        let bg = pid_in(&dir.path().join("bg.pid")).await;
        assert!(process.stop(LONG).await.expect("exits when stdin closes").success());
        assert!(until_gone(bg).await, "the shell {bg} outlived the CLI that exited by itself");

        // Killed: the CLI ignores stdin's end and SIGTERM.
        std::fs::remove_file(dir.path().join("bg.pid")).unwrap();
        let script = format!("trap '' TERM; {SHELL_OF_ITS_OWN}; while :; do sleep 1; done");
        let (mut process, _lines) = CliProcess::spawn(&sh(dir.path(), &script)).unwrap();
        let bg = pid_in(&dir.path().join("bg.pid")).await;
        let status = process.stop(Duration::from_millis(300)).await.expect("killed");
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
        assert!(until_gone(bg).await, "the shell {bg} outlived the killed CLI");

        // Dropped without a stop.
        std::fs::remove_file(dir.path().join("bg.pid")).unwrap();
        let (process, _lines) = CliProcess::spawn(&sh(dir.path(), &script)).unwrap();
        let bg = pid_in(&dir.path().join("bg.pid")).await;
        drop(process);
        assert!(until_gone(bg).await, "the shell {bg} outlived the dropped CLI");
    }
}
