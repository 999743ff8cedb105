//! The agent's code runs apart from the CLI that runs it: inside a sandbox,
//! every shell (and `git`) the CLI starts enters a Landlock domain of its own.
//!
//! Inside a bwrap or Docker sandbox the CLI and the commands it runs for the
//! agent share a uid. Without more, a command could reach into the CLI (pid 2
//! in bwrap): open its stdio again through `/proc/2/fd` (closed by socket
//! pairs, see `claude::process`), ptrace it, `pidfd_getfd` its descriptors
//! (both denied by the seccomp filter in bwrap), or read and write its memory
//! through `/proc/2/mem`, a path, which no seccomp filter can see. A process
//! in a Landlock domain can do none of these to a process outside its domain
//! (the kernel's ptrace access check: `/proc/PID/mem`, `/proc/PID/fd`,
//! `ptrace`, `pidfd_getfd`, `process_vm_*`), whatever the domain's rules.
//!
//! How the commands get there. The wrapper is bound read-only into the
//! sandbox once under each name in [`NAMES`], in [`DIR`]. The CLI's
//! `CLAUDE_CODE_SHELL` (and `SHELL`) is [`SHELL`], and its `PATH` starts with
//! [`DIR`]. Seen on 2.1.197 and 2.1.330: every shell the CLI starts is
//! `CLAUDE_CODE_SHELL` (the one that reads the environment, the snapshot
//! shell, `-c -l`, which sources `~/.bashrc` and the login files the agent can
//! write, and each command's, background ones included), and it finds `git`
//! on `PATH` (run in the group's folder, where a repository's config, such as
//! `core.fsmonitor` or a filter driver, is code the agent can plant).
//! `CLAUDE_CODE_SHELL_PREFIX` is not used: the CLI runs the prefix inside a
//! shell of its own, and the snapshot shell without it.
//!
//! The first thing a process started under one of those names runs is not
//! pincer's binary but a small static one, stage 0 ([`early`], embedded and
//! written out by [`wrapper`]): it has no program interpreter, so no loader
//! runs and nothing a loader variable (`LD_PRELOAD`, `LD_AUDIT`, `GCONV_PATH`,
//! … [`LOADER`]) names is loaded, nor any library's constructor; its `main`
//! is the C one, so the command starts with the umask and signal handling
//! the CLI gave it. It puts itself in a Landlock domain of its own
//! ([`restrict_self`]), leaves the CLI's session (`setsid`: no controlling
//! terminal to type into or signal through), takes every loader variable out
//! of the environment, and execs the real program, the first of its name on
//! `PATH` that is not the wrapper, with the same arguments. When it cannot
//! restrict itself (a kernel without Landlock), it runs nothing: it says why
//! on stderr, which the agent reads as the command's output, and exits 126.
//!
//! As `git`, stage 0 execs pincer's binary (beside [`DIR`], at
//! `/opt/pincer/pincer`) as [`GIT_ROLE`] instead, already confined and with
//! a clean loader environment: a startup hook (`main.rs`) calls
//! [`enter_if_asked`] before `main`, which pins every configuration key that
//! names a program ([`git`]), so no repository in a folder the agent writes
//! runs code of its own, and execs the real git stage 0 chose.
//!
//! The ruleset's point is the domain ([`early::ruleset`]). A command that
//! starts `bash` or `git` from `PATH` again adds a domain inside its own; at
//! Landlock's limit of 16 the process is confined already, and the exec goes
//! on.

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::libc;

pub mod early;
pub mod git;
pub mod wrapper;

pub use early::{
    landlock_abi, real_program, restrict_self, wrapper_name, Domain, DIR, GIT_ROLE, LOADER, NAMES, PATH, SHELL,
};

/// The exit status of a command pincer did not run (a shell's "cannot execute").
const NOT_RUN: i32 = early::NOT_RUN;

/// Whether the loader or the C library's start-up acts on a variable of this name.
pub fn is_loader_variable(name: &str) -> bool {
    early::is_loader_variable(name.as_bytes())
}

/// The most the wrapper reads of `git config --list`: a configuration past
/// this is refused, not half pinned.
const LISTING_CAP: u64 = 8 << 20;

/// Why git was not run.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot run {path}: {source}")]
    Exec { path: PathBuf, source: std::io::Error },
    #[error("pincer's binary was started as {0} without the git to run")]
    NoGit(&'static str),
    #[error("git's configuration here could not be read ({0})")]
    GitConfig(String),
    #[error(transparent)]
    GitEnv(#[from] git::EnvError),
}

impl ConfineError {
    /// What the agent reads as the command's output.
    fn explain(&self) -> String {
        match self {
            ConfineError::Exec { .. } | ConfineError::NoGit(_) => format!("pincer did not run git: {self}."),
            ConfineError::GitConfig(_) | ConfineError::GitEnv(_) => format!(
                "pincer did not run git: it reads the configuration git would read first, so that none of it \
                 runs a program, and {self}."
            ),
        }
    }
}

/// Run by the startup hook in `main.rs` in every start of pincer's binary:
/// returns at once unless stage 0 started it as [`GIT_ROLE`]; then the
/// process becomes the real git with its configuration pinned, or exits
/// 126 saying why not. Stage 0 confined it and scrubbed its environment.
pub fn enter_if_asked() {
    let Some(args) = own_args() else { return };
    if args.first().map(|a| a.as_bytes()) != Some(GIT_ROLE.as_bytes()) {
        return;
    }
    let err = match args.get(1) {
        Some(real) if args.len() > 2 => git_role(Path::new(std::ffi::OsStr::from_bytes(real.as_bytes())), &args[2..]),
        _ => ConfineError::NoGit(GIT_ROLE),
    };
    let _ = writeln!(std::io::stderr(), "{}", err.explain());
    // SAFETY: ends the process without running Rust's or anyone's exit handlers.
    unsafe { libc::_exit(NOT_RUN) }
}

/// Pins git's configuration for this run and execs `real` with `args`
/// (`args[0]` is git's `argv[0]`); returns only on failure.
fn git_role(real: &Path, args: &[CString]) -> ConfineError {
    // Stage 0 passed none on; nor does this, whoever started it.
    let env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| !early::is_loader_variable(k.as_bytes())).collect();
    match git_environment(real, args, env) {
        Ok(env) => exec(real.to_owned(), args, env),
        Err(e) => e,
    }
}

/// The real git's environment: the caller's with the pins of [`git`] for
/// the configuration this run will read.
fn git_environment(
    real: &Path,
    args: &[CString],
    caller: Vec<(OsString, OsString)>,
) -> Result<Vec<(OsString, OsString)>, ConfineError> {
    // The listing reads what the run will read, under the fixed pins (a bare
    // repository the agent planted is refused there too).
    let listing_env = git::environment(caller.clone(), &git::pins(&[]))?;
    let argv: Vec<OsString> = args.iter().skip(1).map(|a| OsString::from_vec(a.as_bytes().to_vec())).collect();
    let listing = list_config(real, &git::config_options(&argv), listing_env)?;
    Ok(git::environment(caller, &git::pins(&git::parse_listing(&listing)))?)
}

/// `git config --list -z` as this run would read it; runs no program.
fn list_config(real: &Path, options: &[OsString], env: Vec<(OsString, OsString)>) -> Result<Vec<u8>, ConfineError> {
    let failed = |what: String| ConfineError::GitConfig(what);
    // Inside the sandbox, already confined: not one of pincer's processes (`claude::process`).
    #[allow(clippy::disallowed_methods)]
    let mut child = std::process::Command::new(real)
        .args(options)
        .args(["config", "--list", "-z"])
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", real.display())))?;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let read = child.stdout.take().map(|o| o.take(LISTING_CAP + 1).read_to_end(&mut out));
    let _ = child.stderr.take().map(|e| e.take(2048).read_to_end(&mut err));
    if out.len() as u64 > LISTING_CAP {
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed(format!("it is over {} MiB", LISTING_CAP >> 20)));
    }
    let status = child.wait().map_err(|e| failed(e.to_string()))?;
    match read {
        Some(Ok(_)) if status.success() => Ok(out),
        _ => Err(failed(format!("git said: {}", String::from_utf8_lossy(&err).trim()))),
    }
}

/// Becomes `real` with `args` and exactly `env`; returns only on failure.
fn exec(real: PathBuf, args: &[CString], env: Vec<(OsString, OsString)>) -> ConfineError {
    let env: Vec<Vec<u8>> = env
        .into_iter()
        .map(|(k, v)| {
            let mut entry = k.into_vec();
            entry.push(b'=');
            entry.extend(v.into_vec());
            entry
        })
        .collect();
    let env: Vec<&[u8]> = env.iter().map(Vec::as_slice).collect();
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let source = early::exec(&real, &args, &env);
    ConfineError::Exec { path: real, source }
}

/// This process's arguments, from `/proc/self/cmdline` (the startup hook
/// runs before Rust's runtime has them, whatever the C library).
fn own_args() -> Option<Vec<CString>> {
    let cmdline = std::fs::read("/proc/self/cmdline").ok()?;
    let cmdline = cmdline.strip_suffix(&[0])?;
    cmdline.split(|b| *b == 0).map(|arg| CString::new(arg).ok()).collect()
}

#[cfg(test)]
mod tests;
