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

/// pincer's settings for every session, given on the command line: no
/// project MCP server approved (none is read anyway). Not `disableAllHooks`:
/// no hook can come from a settings file once the sources are off, and with it
/// 2.1.330 prints a `ui_invalidate` system frame at every start, which would be
/// stored and shown in every group's history.
///
/// `disableBypassPermissionsMode` is a second wall behind the CLI's own rule
/// (bypass only when launched with `--dangerously-skip-permissions`): no
/// `set_permission_mode` can turn it on. It does not stop `acceptEdits`;
/// pincer's `PreToolUse` hook decides every call whatever the mode.
pub const LOCKED_SETTINGS: &str =
    r#"{"enableAllProjectMcpServers":false,"permissions":{"disableBypassPermissionsMode":"disable"}}"#;

/// Environment every session process gets, in every sandbox mode: read
/// `CLAUDE.md` in the `--add-dir` folders (the group's own, see [`session_args`]).
pub const SESSION_ENV: &[(&str, &str)] = &[("CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD", "1")];

/// Flags that would undo the lock if an operator put them in `claude.args`
/// (appended after pincer's own, so the CLI would take theirs).
const UNLOCKING_FLAGS: &[&str] = &[
    "--setting-sources",
    "--settings",
    "--mcp-config",
    "--allowedTools",
    "--allowed-tools",
    "--permission-mode",
    "--dangerously-skip-permissions",
    "--allow-dangerously-skip-permissions",
    "--plugin-dir",
    "--agents",
    "--add-dir",
];

/// The flags in the operator's `claude.args` that load settings, servers or
/// permissions from elsewhere than pincer: said by `pincer doctor` and at start.
pub fn unlocking_args(args: &[String]) -> Vec<&str> {
    args.iter()
        .map(|a| a.split_once('=').map_or(a.as_str(), |(flag, _)| flag))
        .filter(|flag| UNLOCKING_FLAGS.contains(flag))
        .collect()
}

/// What `pincer doctor` says about the CLI's settings.
pub fn settings_report(config: &ClaudeConfig) -> String {
    match unlocking_args(&config.args).as_slice() {
        [] => "locked: no settings file, hook, permission rule, MCP server, agent or skill from a group's folder \
               or the CLI's home is loaded (--setting-sources \"\", --settings from pincer, --strict-mcp-config); \
               bypass mode disabled; every tool call passes pincer's PreToolUse hook (file tools by the path they write)"
            .to_owned(),
        flags => format!(
            "NOT locked as pincer intends: claude.args in pincer.toml adds {}, which the CLI takes over pincer's own",
            flags.join(", ")
        ),
    }
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
///
/// Nothing the agent can write changes how its CLI runs (see [`LOCKED_SETTINGS`]):
/// `--setting-sources ""` loads no user, project or local settings file (so
/// no permission rule, hook, env, `apiKeyHelper`, model, plugin, agent, skill
/// or command from the group's folder or the CLI's home), `--settings` gives
/// pincer's own as a JSON string (no file the agent could reach), and
/// `--strict-mcp-config` takes MCP servers only from our `--mcp-config` (not
/// `.mcp.json`, nor `~/.claude.json`). Without the project source the CLI no
/// longer reads the group's `CLAUDE.md` by itself: `--add-dir <workspace>`
/// with [`SESSION_ENV`] has it read that folder's `CLAUDE.md` (and only that)
/// as memory again. The CLI's auto-memory and transcripts live in its home and
/// need no settings file. Seen on 2.1.197 and 2.1.330: docs/cli-observations.md.
/// `withheld` names built-in tools the group can never use, left out of the
/// model's tools with pincer's replaced ones.
pub fn session_args(
    config: &ClaudeConfig,
    resume: Option<&str>,
    global_memory: Option<&Path>,
    workspace: &Path,
    withheld: &[&str],
) -> Vec<String> {
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
        "",
        "--setting-sources",
        "",
        "--settings",
        LOCKED_SETTINGS,
        "--strict-mcp-config",
        "--add-dir",
    ]
    .map(String::from)
    .to_vec();
    args.push(workspace.display().to_string());
    let disallowed = args.iter().position(|a| a == "--disallowedTools").map(|i| i + 1);
    if let Some(value) = disallowed.and_then(|i| args.get_mut(i)) {
        *value = [mcp::REPLACED_BUILTINS, mcp::UNTRACED_BUILTINS]
            .into_iter()
            .chain(withheld.iter().copied())
            .collect::<Vec<_>>()
            .join(",");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags that keep every file the agent can write out of the CLI's
    /// configuration, with their values next to them.
    #[test]
    fn sessions_load_no_settings_file_and_only_pincers_mcp_server() {
        let config = ClaudeConfig { args: vec!["--model".into(), "m".into()], ..ClaudeConfig::default() };
        let args = session_args(&config, Some("abc"), None, Path::new("/workspace/group"), &["Bash"]);
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!(after("--setting-sources"), Some(""), "no user, project or local settings");
        assert_eq!(after("--settings"), Some(LOCKED_SETTINGS));
        assert_eq!(after("--add-dir"), Some("/workspace/group"), "the group's CLAUDE.md, read as memory");
        assert_eq!(after("--mcp-config"), Some(mcp::SERVER_CONFIG));
        assert_eq!(
            after("--disallowedTools"),
            Some("CronCreate,CronDelete,CronList,Monitor,Workflow,ScheduleWakeup,EnterWorktree,ExitWorktree,Bash"),
            "the untraced built-ins and a withheld tool too"
        );
        assert!(args.contains(&"--strict-mcp-config".to_owned()));
        assert!(args.contains(&"--resume=abc".to_owned()));
        assert_eq!(&args[args.len() - 2..], ["--model", "m"], "the operator's own arguments come last");
        let settings: serde_json::Value = serde_json::from_str(LOCKED_SETTINGS).unwrap();
        assert_eq!(settings["enableAllProjectMcpServers"], false);
        assert_eq!(settings["permissions"]["disableBypassPermissionsMode"], "disable");
        assert!(settings_report(&config).starts_with("locked"), "`--model` unlocks nothing");
    }

    #[test]
    fn operator_flags_that_undo_the_lock_are_named() {
        let args: Vec<String> = ["--model", "m", "--settings=/x.json", "--add-dir", "/y"].map(String::from).to_vec();
        assert_eq!(unlocking_args(&args), ["--settings", "--add-dir"]);
        let config = ClaudeConfig { args, ..ClaudeConfig::default() };
        assert!(settings_report(&config).contains("NOT locked"), "{}", settings_report(&config));
    }
}
