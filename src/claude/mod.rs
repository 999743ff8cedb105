//! The boundary to the Claude Code CLI: finding the executable, the arguments
//! of a session, the child process, and the stream-json protocol. The CLI's
//! JSON never leaves this module: callers get [`protocol::CliEvent`]s built
//! from our domain types.

mod guard;
pub mod install;
pub mod lines;
pub mod mcp;
pub mod process;
pub mod protocol;

use std::path::{Path, PathBuf};

use crate::config::{ClaudeConfig, Config};

/// The CLI could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "claude.command is `{0}`, which is not an executable file or a command on the PATH.\n\
         Fix `[claude] command` in pincer.toml (or PINCER_CLAUDE__COMMAND), or unset it and run `pincer setup`."
    )]
    Configured(PathBuf),
    #[error(
        "the Claude Code CLI was not found: claude.command (PINCER_CLAUDE__COMMAND) is not set, \
         `claude` is not on the PATH, and `pincer setup` has not installed it into {0}.\n\
         Run `pincer setup` to install the pinned version ({pin}) from npm, or set claude.command to the path of `claude`.",
         pin = install::PINNED_VERSION
    )]
    NotFound(PathBuf),
}

/// Finds the CLI: `claude.command` if set, else the one `pincer setup`
/// installed into `data_dir`, else `claude` on the PATH.
pub fn resolve_program(config: &Config) -> Result<PathBuf, ResolveError> {
    if let Some(cmd) = &config.claude.command {
        return which::which(cmd).map_err(|_| ResolveError::Configured(cmd.clone()));
    }
    let installed = install::installed_binary(&config.data_dir);
    if is_executable(&installed) {
        return Ok(std::path::absolute(&installed).unwrap_or(installed));
    }
    which::which("claude").map_err(|_| ResolveError::NotFound(install::install_prefix(&config.data_dir)))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The arguments of one session process.
///
/// `--replay-user-messages` makes the CLI echo each message (with our uuid)
/// when a turn takes it in, which is how pincer knows which messages a
/// crashed process had not answered yet.
///
/// `--mcp-config` declares pincer's own tools as an in-process (`sdk`) MCP
/// server: the CLI asks for them over the control protocol on this same pipe.
/// The CLI's own cron tools are withheld: their jobs live only as long as the
/// process (which idles out) and skip `can_use_tool`, so the agent schedules
/// through pincer's `schedule_task` instead.
///
/// The shared memory (`groups/global/CLAUDE.md`) is not an ancestor of the
/// group's folder, so the CLI would not load it by itself: it is appended to
/// the system prompt from its file at every start.
pub fn session_args(config: &ClaudeConfig, resume: Option<&str>, global_memory: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-prompt-tool",
        "stdio",
        "--replay-user-messages",
        "--mcp-config",
        mcp::SERVER_CONFIG,
        "--disallowedTools",
        mcp::REPLACED_BUILTINS,
    ]
    .map(String::from)
    .to_vec();
    if let Some(id) = resume {
        // The equals form: an id is never mistaken for a flag.
        args.push(format!("--resume={id}"));
    }
    if let Some(path) = global_memory {
        args.push("--append-system-prompt-file".to_owned());
        args.push(path.display().to_string());
    }
    args.extend(config.args.iter().cloned());
    args
}
