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
//! How the commands get there. pincer's binary is bound read-only into the
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
//! A process started under one of those names never reaches `main`: a startup
//! hook (`main.rs`) calls [`enter_if_asked`] first, before Rust's runtime
//! ignores `SIGPIPE` and before `main` sets the umask, so the command starts
//! with exactly what the CLI gave it. It restricts itself ([`restrict_self`])
//! and execs the real program, the first of its name on `PATH` that is not
//! pincer's binary, with the same arguments and environment. When it cannot
//! restrict itself (a kernel without Landlock), it runs nothing: it says why
//! on stderr, which the agent reads as the command's output, and exits 126.
//!
//! The ruleset's point is the domain. It handles making block devices, which
//! nobody in a sandbox can do anyway, and moving files between directories,
//! which Landlock would deny under any ruleset that handles a file access and
//! which is granted everywhere (Landlock ABI 2, Linux 5.19; on ABI 1 such a
//! move fails with `EXDEV`, which `mv` and most tools answer by copying).
//! A command that starts `bash` or `git` from `PATH` again adds a domain inside
//! its own; at Landlock's limit of 16 the process is confined already, and the
//! exec goes on.
//!
//! Before the exec the wrapper also leaves the CLI's session (`setsid`: no
//! controlling terminal to type into or signal through), and as `git` it
//! pins every configuration key that names a program ([`git`]), so no
//! repository in a folder the agent writes runs code of its own.
//!
//! The wrapper is pincer's dynamically linked binary, so the loader runs
//! before the startup hook: a loader variable (`LD_PRELOAD`, `LD_AUDIT`,
//! `GCONV_PATH`, … [`LOADER`]) would load code before the first, unconfined
//! wrapper confines itself. pincer never gives the CLI one (`env.rs` drops
//! them from `claude.env`), and a wrapper that sees one runs nothing.

use std::ffi::{CString, OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use landlock::{
    AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, RestrictSelfError, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus,
};
use nix::libc;

pub mod git;

/// The folder, inside a sandbox, of pincer's binary under the names in [`NAMES`].
pub const DIR: &str = "/opt/pincer/confine";
/// What the CLI starts that runs code from the agent: its shell, and `git`
/// (repository hooks, `core.fsmonitor`, filter drivers).
pub const NAMES: &[&str] = &["bash", "git"];
/// The CLI's `CLAUDE_CODE_SHELL` and `SHELL` inside a sandbox.
pub const SHELL: &str = "/opt/pincer/confine/bash";
/// `PATH` inside a sandbox: the wrappers first.
pub const PATH: &str = "/opt/pincer/confine:/usr/local/bin:/usr/bin:/bin";

/// The exit status of a command pincer did not run (a shell's "cannot execute").
const NOT_RUN: i32 = 126;

/// Variables the C library's loader (or its start-up) reads to load or run
/// code, besides every `LD_*`: a wrapper that sees one runs nothing, and
/// pincer passes none to the CLI.
pub const LOADER: &[&str] = &["GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "MALLOC_TRACE", "HOSTALIASES"];

/// Whether the loader or the C library's start-up acts on a variable of this name.
pub fn is_loader_variable(name: &str) -> bool {
    name.starts_with("LD_") || LOADER.contains(&name)
}

/// The most the wrapper reads of `git config --list`: a configuration past
/// this is refused, not half pinned.
const LISTING_CAP: u64 = 8 << 20;

/// Why a command was not run.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("Landlock is not available: {0}")]
    Landlock(String),
    #[error("no `{0}` found on PATH besides pincer's wrapper")]
    NotFound(String),
    #[error("cannot run {path}: {source}")]
    Exec { path: PathBuf, source: std::io::Error },
    #[error("{0} is set, which makes the loader run code before the command is confined; unset it")]
    Loader(String),
    #[error("git's configuration here could not be read ({0})")]
    GitConfig(String),
    #[error(transparent)]
    GitEnv(#[from] git::EnvError),
}

impl ConfineError {
    /// What the agent reads as the command's output.
    fn explain(&self) -> String {
        match self {
            ConfineError::Landlock(_) | ConfineError::NotFound(_) | ConfineError::Exec { .. } => format!(
                "pincer did not run this command: it runs commands only where they cannot reach the Claude Code \
                 CLI, and here {self}. Tell pincer's operator (`pincer doctor` shows what this machine lacks)."
            ),
            ConfineError::Loader(_) => format!("pincer did not run this command: {self}."),
            ConfineError::GitConfig(_) | ConfineError::GitEnv(_) => format!(
                "pincer did not run git: it reads the configuration git would read first, so that none of it \
                 runs a program, and {self}."
            ),
        }
    }
}

/// The domain a command runs in after [`restrict_self`].
#[derive(Debug, PartialEq, Eq)]
pub enum Domain {
    /// A new one, inside whatever domain it was in.
    New,
    /// None added: it is 16 domains deep already, Landlock's limit.
    AtLimit,
}

/// The Landlock ABI this kernel has, or why it has none: for `pincer doctor`
/// and the startup log (the sandbox runs on the same kernel).
pub fn landlock_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query: no attribute, no size, no descriptor made.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi > 0 {
        return Ok(i32::try_from(abi).unwrap_or(i32::MAX));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => {
            Err("this kernel has Landlock but it is off (add `landlock` to the `lsm=` boot parameter)".to_owned())
        }
        _ => Err("this kernel has no Landlock (Linux 5.13 or later, built with CONFIG_SECURITY_LANDLOCK)".to_owned()),
    }
}

/// Puts this thread (the whole process when it has one thread, as in the
/// startup hook) in a new Landlock domain, and sets `no_new_privs`.
pub fn restrict_self() -> Result<Domain, ConfineError> {
    let landlock = |e: RulesetError| ConfineError::Landlock(e.to_string());
    let root = PathFd::new("/").map_err(|e| ConfineError::Landlock(format!("cannot open /: {e}")))?;
    let restricted = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::MakeBlock)
        .map_err(landlock)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::Refer)
        .map_err(landlock)?
        .create()
        .map_err(landlock)?
        .add_rule(PathBeneath::new(root, AccessFs::Refer))
        .map_err(landlock)?
        .restrict_self();
    match restricted {
        Ok(status) if status.ruleset == RulesetStatus::NotEnforced => {
            Err(ConfineError::Landlock("the kernel did not enforce the ruleset".to_owned()))
        }
        Ok(_) => Ok(Domain::New),
        Err(RulesetError::RestrictSelf(RestrictSelfError::RestrictSelfCall { source, .. }))
            if source.raw_os_error() == Some(libc::E2BIG) =>
        {
            Ok(Domain::AtLimit)
        }
        Err(e) => Err(landlock(e)),
    }
}

/// The wrapper a process was started as, from its `argv[0]`.
pub fn wrapper_name(arg0: &[u8]) -> Option<&'static str> {
    let base = arg0.rsplit(|b| *b == b'/').next()?;
    NAMES.iter().copied().find(|name| name.as_bytes() == base)
}

/// The program `name` stands for: the first executable file of that name in
/// an absolute folder of `path` that `is_wrapper` does not take for pincer's
/// own binary. Relative and empty entries (the current folder, the agent's)
/// are skipped.
pub fn real_program(name: &str, path: &OsStr, is_wrapper: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    std::env::split_paths(path).filter(|dir| dir.is_absolute()).map(|dir| dir.join(name)).find(|candidate| {
        let executable = std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        executable && !is_wrapper(candidate)
    })
}

/// Run by the startup hook in `main.rs` in every start of pincer's binary:
/// returns at once unless it was started as one of [`NAMES`]; then the
/// process becomes the confined program, or exits 126 saying why not.
pub fn enter_if_asked() {
    let Some(args) = own_args() else { return };
    let Some(name) = args.first().and_then(|a| wrapper_name(a.as_bytes())) else { return };
    let err = confine_and_exec(name, &args);
    let _ = writeln!(std::io::stderr(), "{}", err.explain());
    // SAFETY: ends the process without running Rust's or anyone's exit handlers.
    unsafe { libc::_exit(NOT_RUN) }
}

/// Restricts this process and execs the real `name` with `args`; returns only on failure.
fn confine_and_exec(name: &str, args: &[CString]) -> ConfineError {
    if let Some(var) =
        std::env::vars_os().find_map(|(k, _)| k.to_str().filter(|k| is_loader_variable(k)).map(str::to_owned))
    {
        return ConfineError::Loader(var);
    }
    let me = std::fs::metadata("/proc/self/exe").map(|m| (m.dev(), m.ino())).ok();
    let is_wrapper = |p: &Path| std::fs::metadata(p).is_ok_and(|m| Some((m.dev(), m.ino())) == me);
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let Some(real) = real_program(name, &path, is_wrapper) else {
        return ConfineError::NotFound(name.to_owned());
    };
    if let Err(e) = restrict_self() {
        return e;
    }
    // Out of the CLI's session: no controlling terminal. It fails only for a
    // process that leads its group already (started detached), which is fine.
    // SAFETY: a plain system call.
    unsafe { libc::setsid() };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let env = if name == "git" {
        match git_environment(&real, args, env) {
            Ok(env) => env,
            Err(e) => return e,
        }
    } else {
        env
    };
    exec(real, args, env)
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
    let Ok(program) = CString::new(real.as_os_str().as_bytes()) else {
        return ConfineError::NotFound(real.display().to_string());
    };
    let env: Vec<CString> = env
        .into_iter()
        .filter_map(|(k, v)| {
            let mut entry = k.into_vec();
            entry.push(b'=');
            entry.extend(v.into_vec());
            CString::new(entry).ok()
        })
        .collect();
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: NUL-terminated strings that outlive the call, in NULL-terminated arrays.
    unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    ConfineError::Exec { path: real, source: std::io::Error::last_os_error() }
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
