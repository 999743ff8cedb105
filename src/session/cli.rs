//! The session's port to the Claude Code CLI: start a process, write lines to
//! it, read its stdout lines, stop it. [`RealCli`] is today's way (the group's
//! folder, an isolated home, the sandbox's [`Launcher`], [`CliProcess`]);
//! the session tests drive a scripted fake through the same port.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use crate::claude::process::{CliProcess, SpawnError, StdoutLine};
use crate::config::Config;
use crate::domain::files::FileView;
use crate::domain::GroupName;
use crate::groups;
use crate::sandbox::docker::EnvFile;
use crate::sandbox::proxy::KeyLease;
use crate::sandbox::{IsolatedHome, Launcher, SandboxError};
use crate::session::trust::HookFailure;

/// What a session asks for when it needs a process.
pub struct StartRequest<'a> {
    pub group: &'a GroupName,
    /// The CLI session to resume; `None` starts a fresh one.
    pub resume: Option<&'a str>,
    /// The main group's agent writes the shared memory.
    pub main: bool,
    /// A throwaway session (an isolated scheduled run) runs in a CLI home of
    /// its own, made at its first start and kept here across its restarts.
    pub isolated: bool,
    pub home: &'a mut Option<IsolatedHome>,
    /// Built-in tools the group can never use: not offered to the model.
    pub withheld: Vec<&'static str>,
}

/// A started process: its handle and its stdout, one line at a time. The
/// receiver ends when stdout closes (the process is gone or going).
pub struct Started {
    pub child: Box<dyn CliChild>,
    pub lines: mpsc::Receiver<StdoutLine>,
    /// The folders as this process sees them (file tools are decided by path).
    pub view: FileView,
}

/// Starts CLI processes.
pub trait CliPort: Send + Sync {
    fn start<'a>(&'a self, request: StartRequest<'a>) -> BoxFuture<'a, Result<Started, StartError>>;

    /// The folders `group`'s next process will see, before it starts (where
    /// its transcript is put back before a resume); `None` when unknown.
    fn view_of(&self, _group: &GroupName) -> Option<FileView> {
        None
    }
}

/// One running CLI process. Dropping it kills the process and what it started,
/// and releases what had to live as long as it (the proxy's key lease, a
/// container's env file).
pub trait CliChild: Send + Sync {
    /// Writes one line (a newline is added). Fails when the process is dying.
    fn write_line<'a>(&'a mut self, line: &'a str) -> BoxFuture<'a, io::Result<()>>;
    /// The CLI finishes its work and exits by itself.
    fn close_stdin(&mut self);
    /// Stops the process: stdin closed, `grace`, then signals (see [`CliProcess::stop`]).
    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Option<ExitStatus>>;
    /// On a cluster node: the process must be dead `after` from now even if
    /// pincer cannot act then (frozen); a later call moves it. Nothing by default.
    fn kill_after(&mut self, _after: Duration) {}
}

/// Why no process could be started. Each says what to fix in the chat's words.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The group's folder (the CLI's cwd) could not be made.
    #[error("cannot create the group's folder in {}: {source}", dir.display())]
    Folder { dir: PathBuf, source: io::Error },
    /// An isolated run's own CLI home could not be made.
    #[error(transparent)]
    Home(SandboxError),
    /// The sandbox refused (no credential, no bwrap, a reserved name, ...).
    #[error(transparent)]
    Sandbox(SandboxError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The CLI started but refused pincer's `PreToolUse` hook, or did not
    /// answer it in time: without it the gate would be open, so it was stopped.
    #[error("{}", hook_text(*.0))]
    Hook(HookFailure),
}

fn hook_text(failure: HookFailure) -> &'static str {
    match failure {
        HookFailure::Refused => "The Claude Code CLI refused pincer's tool check (its PreToolUse hook)",
        HookFailure::Unanswered => {
            "The Claude Code CLI did not answer pincer's tool check (its PreToolUse hook) in time"
        }
    }
}

/// What to do about a CLI without pincer's hook.
const HOOK_FIX: &str = "This CLI version is not supported: whoever runs pincer should run `pincer setup` \
                        (and `pincer doctor`) to install the supported one.";

impl StartError {
    /// The line the chat gets: what happened and what to do.
    pub fn chat_text(&self) -> String {
        match self {
            StartError::Folder { dir, source } => format!(
                "Cannot create the group's folder in {}: {source}. Your message was not answered; \
                 fix the folder's permissions (groups_dir in pincer.toml), then send it again.",
                dir.display()
            ),
            StartError::Home(e) | StartError::Sandbox(e) => {
                format!("{e}. Your message was not answered; fix this, then send it again.")
            }
            StartError::Hook(_) => format!("{self}. Your message was not answered. {HOOK_FIX}"),
            StartError::Spawn(e) => format!(
                "{e}. Your message was not answered. Fix `[claude] command` in pincer.toml \
                 (or PINCER_CLAUDE__COMMAND), or run `pincer setup`, then send it again."
            ),
        }
    }

    /// The line the chat gets once while messages wait for the next try
    /// (in `retry_in`, then less and less often): what happened, that
    /// nothing is lost, and what to do.
    pub fn waiting_text(&self, retry_in: Duration) -> String {
        let (what, fix) = match self {
            StartError::Folder { dir, source } => (
                format!("Cannot create the group's folder in {}: {source}", dir.display()),
                "Fix the folder's permissions (groups_dir in pincer.toml).",
            ),
            StartError::Home(e) | StartError::Sandbox(e) => (e.to_string(), "Whoever runs pincer should fix this."),
            StartError::Hook(_) => (self.to_string(), HOOK_FIX),
            StartError::Spawn(e) => (
                e.to_string(),
                "Fix `[claude] command` in pincer.toml (or PINCER_CLAUDE__COMMAND), or run `pincer setup`.",
            ),
        };
        format!(
            "{what}. The agent cannot start, so messages wait (none is lost): pincer tries again in {}, then less \
             and less often, and answers them once it starts. {fix}",
            humantime::format_duration(retry_in)
        )
    }

    /// What pincer's log says about it (the folder's error is only the chat's).
    pub fn log_line(&self) -> Option<&'static str> {
        match self {
            StartError::Folder { .. } => None,
            StartError::Home(_) => Some("cannot prepare the isolated run's CLI home"),
            StartError::Sandbox(_) => Some("cannot prepare the CLI's sandbox"),
            StartError::Spawn(_) => Some("cannot start the CLI"),
            StartError::Hook(_) => Some("stopped a CLI without pincer's PreToolUse hook: the gate fails closed"),
        }
    }
}

/// The real CLI: each group's folder, its sandbox, a child process.
pub struct RealCli {
    config: Arc<Config>,
    launcher: Launcher,
}

impl RealCli {
    pub fn new(config: Arc<Config>, launcher: Launcher) -> RealCli {
        RealCli { config, launcher }
    }

    async fn start_process(&self, request: StartRequest<'_>) -> Result<Started, StartError> {
        let groups_dir =
            std::path::absolute(&self.config.groups_dir).unwrap_or_else(|_| self.config.groups_dir.clone());
        // The folder is the CLI's cwd; a missing one would read as "CLI not found".
        // Recreating it never touches existing memory. File work: off the runtime.
        let (dir, group, name) = (groups_dir.clone(), request.group.clone(), self.config.assistant_name.clone());
        tokio::task::spawn_blocking(move || groups::create(&dir, &group, &name))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
            .map_err(|source| StartError::Folder { dir: groups_dir.clone(), source })?;
        if request.isolated && request.home.is_none() {
            *request.home = self.launcher.isolated_home(request.group).await.map_err(StartError::Home)?;
        }
        let own_home = request.home.as_ref().map(IsolatedHome::path);
        let launch = self
            .launcher
            .launch(request.group, request.resume, request.main, own_home, &request.withheld)
            .await
            .map_err(StartError::Sandbox)?;
        let (process, lines) = CliProcess::spawn(&launch.spec)?;
        let child = RealChild { process, _lease: launch.lease, _env_file: launch.env_file };
        Ok(Started { child: Box::new(child), lines, view: launch.view })
    }
}

impl CliPort for RealCli {
    fn start<'a>(&'a self, request: StartRequest<'a>) -> BoxFuture<'a, Result<Started, StartError>> {
        Box::pin(self.start_process(request))
    }

    fn view_of(&self, group: &GroupName) -> Option<FileView> {
        self.launcher.view_of(group).ok()
    }
}

/// A CLI process and the guards that must live exactly as long as it.
struct RealChild {
    process: CliProcess,
    /// The proxy accepts this process's placeholder key until it is dropped.
    _lease: Option<KeyLease>,
    /// A Docker container's env file, removed when the process is gone.
    _env_file: Option<EnvFile>,
}

impl CliChild for RealChild {
    fn write_line<'a>(&'a mut self, line: &'a str) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(self.process.write_line(line))
    }

    fn close_stdin(&mut self) {
        self.process.close_stdin();
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Option<ExitStatus>> {
        Box::pin(self.process.stop(grace))
    }

    fn kill_after(&mut self, after: Duration) {
        self.process.kill_after(after);
    }
}
