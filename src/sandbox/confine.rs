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

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use landlock::{
    AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, RestrictSelfError, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus,
};
use nix::libc;

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

/// Why a command was not run.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("Landlock is not available: {0}")]
    Landlock(String),
    #[error("no `{0}` found on PATH besides pincer's wrapper")]
    NotFound(String),
    #[error("cannot run {path}: {source}")]
    Exec { path: PathBuf, source: std::io::Error },
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
    let _ = writeln!(
        std::io::stderr(),
        "pincer did not run this command: it runs commands only where they cannot reach the Claude Code \
         CLI, and here {err}. Tell pincer's operator (`pincer doctor` shows what this machine lacks)."
    );
    // SAFETY: ends the process without running Rust's or anyone's exit handlers.
    unsafe { libc::_exit(NOT_RUN) }
}

/// Restricts this process and execs the real `name` with `args`; returns only on failure.
fn confine_and_exec(name: &str, args: &[CString]) -> ConfineError {
    let me = std::fs::metadata("/proc/self/exe").map(|m| (m.dev(), m.ino())).ok();
    let is_wrapper = |p: &Path| std::fs::metadata(p).is_ok_and(|m| Some((m.dev(), m.ino())) == me);
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let Some(real) = real_program(name, &path, is_wrapper) else {
        return ConfineError::NotFound(name.to_owned());
    };
    if let Err(e) = restrict_self() {
        return e;
    }
    let Ok(program) = CString::new(real.as_os_str().as_bytes()) else {
        return ConfineError::NotFound(name.to_owned());
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: NUL-terminated strings that outlive the call, in a NULL-terminated array.
    unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
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
