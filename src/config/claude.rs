//! `[claude]`: how the Claude Code CLI is run for each group.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClaudeConfig {
    /// Path or name of the `claude` executable. Unset: the one `pincer setup`
    /// installed in `data_dir`, else `claude` on the PATH.
    pub command: Option<PathBuf>,
    /// Extra arguments appended to every CLI invocation.
    pub args: Vec<String>,
    /// Extra environment for the CLI child (on top of pincer's own, minus `CLAUDECODE`).
    pub env: BTreeMap<String, String>,
    /// Close a session's stdin after this long without activity (never while
    /// background work runs).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// At most this many CLI processes at once; further groups wait in line.
    pub max_live_sessions: usize,
    /// Tools `can_use_tool` allows when a group has no list of its own. A name
    /// ending in `*` matches by prefix (`mcp__github__*`). Pincer's own tools need no
    /// entry: they are allowed by their exact names.
    pub allowed_tools: Vec<String>,
    /// In a group with `--tools admins`: the tools a turn holding a member's
    /// message may use without asking an admin (and only those of them the
    /// group allows). Same matching as `allowed_tools`.
    pub member_tools: Vec<String>,
    /// How long a closing CLI gets to exit after stdin closes, and again after SIGTERM.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Restarts after a crash before pincer gives up on the pending messages.
    pub max_restarts: u32,
    /// How long a tool call waits for an admin's approval before it is denied.
    #[serde(with = "humantime_serde")]
    pub approval_timeout: Duration,
    /// A turn that prints nothing for this long is taken as hung: pincer
    /// interrupts it, restarts the CLI with `--resume` and sends the unanswered
    /// messages again (once). Every stdout line restarts the clock (long tools
    /// print a heartbeat every 30 s); a wait for an admin's approval stops it.
    /// One long model reply prints nothing until it is complete, so keep this
    /// well above a few minutes.
    #[serde(with = "humantime_serde")]
    pub turn_timeout: Duration,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        ClaudeConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            idle_timeout: Duration::from_secs(30 * 60),
            max_live_sessions: 4,
            // Without a sandbox the agent runs as pincer's user, so the default
            // allows working on files but not arbitrary shell commands.
            allowed_tools: [
                "Read",
                "Glob",
                "Grep",
                "Edit",
                "Write",
                "NotebookEdit",
                "TodoWrite",
                "WebSearch",
                "WebFetch",
                "Task",
                "Agent",
            ]
            .map(String::from)
            .to_vec(),
            member_tools: ["Read", "Glob", "Grep", "WebSearch"].map(String::from).to_vec(),
            shutdown_grace: Duration::from_secs(5),
            max_restarts: 3,
            approval_timeout: Duration::from_secs(5 * 60),
            turn_timeout: Duration::from_secs(10 * 60),
        }
    }
}

impl ClaudeConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_live_sessions == 0 {
            return Err(ConfigError::Rule { key: "claude.max_live_sessions", problem: "must be at least 1" });
        }
        if self.idle_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "claude.idle_timeout",
                problem: "must be longer than 0s (e.g. \"30m\")",
            });
        }
        if self.turn_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "claude.turn_timeout",
                problem: "must be longer than 0s (e.g. \"10m\")",
            });
        }
        Ok(())
    }
}
