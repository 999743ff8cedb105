//! The CLI child process: spawning, stdin, stdout lines, and stopping it.
//!
//! This is the only place that starts a process (clippy's `disallowed-methods`
//! keeps `Command::new` out of other modules). The child runs in its own
//! process group so that stopping it also stops the shells it started, and a
//! terminal's Ctrl-C reaches pincer only, which then closes the CLI gracefully.

use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

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

/// A running CLI child. Dropping it kills the child.
pub struct CliProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: Option<u32>,
    label: String,
}

/// How many stdout lines may wait for the session actor.
const STDOUT_QUEUE: usize = 64;
/// stderr is only logged, so a shorter cap is plenty.
const STDERR_LINE_BYTES: usize = 64 * 1024;

impl CliProcess {
    /// Starts the child; its stdout lines arrive on the returned receiver,
    /// which ends when stdout closes.
    pub fn spawn(spec: &SpawnSpec) -> Result<(CliProcess, mpsc::Receiver<StdoutLine>), SpawnError> {
        #[allow(clippy::disallowed_methods)] // the one place that starts the CLI
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        for key in &spec.env_remove {
            cmd.env_remove(key);
        }
        let mut child = cmd.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => SpawnError::NotFound(spec.program.clone()),
            io::ErrorKind::PermissionDenied => SpawnError::NotExecutable(spec.program.clone()),
            _ => SpawnError::Io { program: spec.program.clone(), source },
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel(STDOUT_QUEUE);
        tokio::spawn(read_stdout(stdout, tx, spec.label.clone()));
        tokio::spawn(log_stderr(stderr, spec.label.clone()));
        let pid = child.id();
        tracing::info!(group = %spec.label, pid, "started the Claude Code CLI");
        Ok((CliProcess { stdin: child.stdin.take(), child, pid, label: spec.label.clone() }, rx))
    }

    /// Writes one line (a newline is added) and flushes it.
    pub async fn write_line(&mut self, line: &str) -> io::Result<()> {
        debug_assert!(!line.contains('\n'), "stdin lines are single JSON lines");
        let stdin = self.stdin.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin is closed"))?;
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        stdin.write_all(&buf).await?;
        stdin.flush().await
    }

    /// Closes stdin: the CLI finishes its work and exits by itself.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
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
    /// SIGTERM, another grace period, then SIGKILL. Killing early would lose the
    /// CLI's last session writes.
    pub async fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
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
        self.signal(Signal::SIGKILL);
        self.wait_for(grace).await
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        // kill_on_drop reaches the leader only; the group takes its shells along.
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// Runs a short helper tool (the sandbox probes, `docker rm`) to completion,
/// killed when `limit` passes. Kept here so processes start in one module only.
pub async fn run_tool(program: &str, args: &[String], limit: Duration) -> io::Result<std::process::Output> {
    #[allow(clippy::disallowed_methods)] // the one place that starts processes
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    match tokio::time::timeout(limit, cmd.output()).await {
        Ok(output) => output,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("`{program}` did not finish within {limit:?}"))),
    }
}

async fn read_stdout(stdout: tokio::process::ChildStdout, tx: mpsc::Sender<StdoutLine>, label: String) {
    let mut reader = LineReader::new(BufReader::new(stdout), MAX_LINE_BYTES);
    loop {
        match reader.next_line().await {
            Ok(Some(line)) => {
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

async fn log_stderr(stderr: tokio::process::ChildStderr, label: String) {
    let mut lines = LineReader::new(BufReader::new(stderr), STDERR_LINE_BYTES);
    while let Ok(Some(line)) = lines.next_line().await {
        match line {
            LineRead::Line(line) => tracing::warn!(group = %label, "claude stderr: {line}"),
            other => tracing::warn!(group = %label, "claude stderr: unreadable line ({other:?})"),
        }
    }
}
