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
    /// The group was killed after the leader stopped: the pgid may be reused now.
    group_killed: bool,
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
        let label = spec.label.clone();
        Ok((CliProcess { stdin: child.stdin.take(), child, pid, label, group_killed: false }, rx))
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
    /// CLI's last session writes. Whatever the CLI leaves behind in its process
    /// group (a background shell) is killed once the CLI has exited.
    pub async fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let status = self.stop_leader(grace).await;
        self.signal(Signal::SIGKILL);
        self.group_killed = true;
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
        self.signal(Signal::SIGKILL);
        self.wait_for(grace).await
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        // kill_on_drop reaches the leader only; the group takes its shells
        // along, also when the leader has exited by itself.
        if !self.group_killed {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a process is gone (or only a zombie waiting for init).
    fn gone(pid: i32) -> bool {
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
        let spec = SpawnSpec {
            program: "sh".into(),
            args: vec!["-c".into(), script],
            cwd: dir.path().to_owned(),
            env: vec![],
            env_remove: vec![],
            label: "test".into(),
        };
        let (mut process, _lines) = CliProcess::spawn(&spec).unwrap();
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
}
