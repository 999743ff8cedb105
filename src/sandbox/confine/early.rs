//! Stage 0 of the wrapper: what runs first in every shell and `git` a
//! sandboxed CLI starts, before any code but the C library's own start-up.
//!
//! This one file is compiled twice: by `build.rs` into a static binary
//! (`stage0_main.rs` is its root), which the sandbox binds under each of
//! [`NAMES`] in [`DIR`]; and into pincer's library, for `pincer doctor`, the
//! startup log and the tests. So it uses std and nothing else: the few C
//! library calls it needs are declared here.
//!
//! A static binary has no program interpreter: no loader runs, so nothing
//! a loader variable names (`LD_PRELOAD`, `LD_AUDIT`, …) is loaded, and no
//! library's constructor runs. `main` is the C one (`#![no_main]`), so
//! Rust's runtime does not ignore `SIGPIPE` for the command either. Stage 0
//! puts itself in a Landlock domain of its own ([`restrict_self`]), leaves
//! the CLI's session (`setsid`), takes every loader variable out of the
//! environment ([`scrubbed`]) and execs the next stage ([`stage0`]): the
//! real shell, or, for `git`, pincer's binary in its [`GIT_ROLE`], which
//! pins git's configuration (`confine::git`) and execs the real git.

use std::ffi::{c_char, c_int, c_long, c_ulong, c_void, CStr, CString, OsStr};
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The folder, inside a sandbox, of the wrapper under the names in [`NAMES`].
pub const DIR: &str = "/opt/pincer/confine";
/// What the CLI starts that runs code from the agent: its shell, and `git`
/// (repository hooks, `core.fsmonitor`, filter drivers).
pub const NAMES: &[&str] = &["bash", "git"];
/// The CLI's `CLAUDE_CODE_SHELL` and `SHELL` inside a sandbox.
pub const SHELL: &str = "/opt/pincer/confine/bash";
/// `PATH` inside a sandbox: the wrappers first.
pub const PATH: &str = "/opt/pincer/confine:/usr/local/bin:/usr/bin:/bin";
/// Where programs are looked for when the caller gave no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The `argv[0]` stage 0 gives pincer's binary to pin git's configuration
/// and run the real git; `argv[1]` is that git, the rest git's own argv.
pub const GIT_ROLE: &str = "pincer-confined-git";
/// pincer's binary, beside [`DIR`]: `/opt/pincer/pincer` in a sandbox.
pub const PINCER_NAME: &str = "pincer";
/// The exit status of a command pincer did not run (a shell's "cannot execute").
pub const NOT_RUN: i32 = 126;

/// Variables the C library's loader (or its start-up) reads to load or run
/// code, besides every `LD_*`: stage 0 passes none on, and pincer gives
/// none to the CLI.
pub const LOADER: &[&str] = &["GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "MALLOC_TRACE", "HOSTALIASES"];

/// Whether the loader or the C library's start-up acts on a variable of this name.
pub fn is_loader_variable(name: &[u8]) -> bool {
    name.starts_with(b"LD_") || LOADER.iter().any(|l| l.as_bytes() == name)
}

/// `env` (`NAME=value` entries) without the loader's variables.
pub fn scrubbed<'a>(env: impl IntoIterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    env.into_iter().filter(|entry| !is_loader_variable(entry_name(entry))).collect()
}

/// The value of `name` in `env`: the first entry, as the C library's `getenv` reads it.
pub fn env_value<'a>(env: &[&'a [u8]], name: &str) -> Option<&'a [u8]> {
    env.iter().find(|e| entry_name(e) == name.as_bytes()).map(|e| &e[(name.len() + 1).min(e.len())..])
}

fn entry_name(entry: &[u8]) -> &[u8] {
    entry.split(|b| *b == b'=').next().unwrap_or(entry)
}

/// The wrapper a process was started as, from its `argv[0]`.
pub fn wrapper_name(arg0: &[u8]) -> Option<&'static str> {
    let base = arg0.rsplit(|b| *b == b'/').next()?;
    NAMES.iter().copied().find(|name| name.as_bytes() == base)
}

/// The program `name` stands for: the first executable file of that name in
/// an absolute folder of `path` that `is_wrapper` does not take for the
/// wrapper itself. Relative and empty entries (the current folder, the
/// agent's) are skipped.
pub fn real_program(name: &str, path: &OsStr, is_wrapper: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    std::env::split_paths(path).filter(|dir| dir.is_absolute()).map(|dir| dir.join(name)).find(|candidate| {
        let executable = std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        executable && !is_wrapper(candidate)
    })
}

/// pincer's binary for the git role, given the wrapper's own path:
/// `<DIR>/git` → `<DIR>/../pincer`.
pub fn pincer_beside(wrapper: &Path) -> Option<PathBuf> {
    Some(wrapper.parent()?.parent()?.join(PINCER_NAME))
}

/// Why stage 0 ran nothing.
#[derive(Debug)]
pub enum Refusal {
    /// No Landlock domain could be made.
    Landlock(String),
    /// Started under a name that is not one of [`NAMES`].
    Name(String),
    /// No program of the name on `PATH` but the wrapper.
    NotFound(String),
    /// The exec itself failed.
    Exec { path: PathBuf, error: std::io::Error },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Landlock(why) => write!(f, "Landlock is not available: {why}"),
            Refusal::Name(name) => write!(f, "the wrapper was started as `{name}`, not as one of {NAMES:?}"),
            Refusal::NotFound(name) => write!(f, "no `{name}` found on PATH besides pincer's wrapper"),
            Refusal::Exec { path, error } => write!(f, "cannot run {}: {error}", path.display()),
        }
    }
}

impl Refusal {
    /// What the agent reads as the command's output.
    pub fn explain(&self) -> String {
        format!(
            "pincer did not run this command: it runs commands only where they cannot reach the Claude Code \
             CLI, and here {self}. Tell pincer's operator (`pincer doctor` shows what this machine lacks)."
        )
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

extern "C" {
    fn syscall(number: c_long, ...) -> c_long;
    fn prctl(option: c_int, ...) -> c_int;
    fn setsid() -> c_int;
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
}

// The same numbers on every architecture Linux added them to at once.
const SYS_LANDLOCK_CREATE_RULESET: c_long = 444;
const SYS_LANDLOCK_ADD_RULE: c_long = 445;
const SYS_LANDLOCK_RESTRICT_SELF: c_long = 446;
const LANDLOCK_CREATE_RULESET_VERSION: c_long = 1;
const LANDLOCK_RULE_PATH_BENEATH: c_long = 1;
const PR_SET_NO_NEW_PRIVS: c_int = 38;
const E2BIG: i32 = 7;
const EOPNOTSUPP: i32 = 95;

/// `LANDLOCK_ACCESS_FS_MAKE_BLOCK` (ABI 1).
pub const ACCESS_MAKE_BLOCK: u64 = 1 << 11;
/// `LANDLOCK_ACCESS_FS_REFER` (ABI 2).
pub const ACCESS_REFER: u64 = 1 << 13;

/// `struct landlock_ruleset_attr` up to the field this ruleset sets (the
/// kernel takes a shorter struct as zeros after it).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// What the ruleset handles and what its one rule, beneath `/`, grants, on
/// Landlock ABI `abi`. The point is the domain: it handles making block
/// devices, which nobody in a sandbox can do anyway, and moving files
/// between folders (ABI 2), which it grants everywhere (on ABI 1 such a
/// move fails with `EXDEV`, which `mv` and most tools answer by copying).
pub fn ruleset(abi: i32) -> (u64, u64) {
    if abi >= 2 {
        (ACCESS_MAKE_BLOCK | ACCESS_REFER, ACCESS_REFER)
    } else {
        (ACCESS_MAKE_BLOCK, 0)
    }
}

/// The Landlock ABI this kernel has, or why it has none.
pub fn landlock_abi() -> Result<i32, String> {
    // SAFETY: the version query: no attribute, no size, no descriptor made.
    let abi = unsafe {
        syscall(SYS_LANDLOCK_CREATE_RULESET, std::ptr::null::<c_void>(), 0usize, LANDLOCK_CREATE_RULESET_VERSION)
    };
    if abi > 0 {
        return Ok(i32::try_from(abi).unwrap_or(i32::MAX));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(EOPNOTSUPP) => {
            Err("this kernel has Landlock but it is off (add `landlock` to the `lsm=` boot parameter)".to_owned())
        }
        _ => Err("this kernel has no Landlock (Linux 5.13 or later, built with CONFIG_SECURITY_LANDLOCK)".to_owned()),
    }
}

/// Puts this thread (the whole process when it has one thread, as in stage
/// 0) in a new Landlock domain of [`ruleset`], and sets `no_new_privs`.
pub fn restrict_self() -> Result<Domain, Refusal> {
    let failed = |what: &str| Refusal::Landlock(format!("{what}: {}", std::io::Error::last_os_error()));
    let (handled, granted) = ruleset(landlock_abi().map_err(Refusal::Landlock)?);
    let attr = RulesetAttr { handled_access_fs: handled };
    // SAFETY: a valid attribute of the size given; the result is a new descriptor or -1.
    let fd = unsafe {
        syscall(SYS_LANDLOCK_CREATE_RULESET, &attr as *const RulesetAttr, std::mem::size_of::<RulesetAttr>(), 0usize)
    };
    if fd < 0 {
        return Err(failed("cannot create a ruleset"));
    }
    // SAFETY: the descriptor was just made and is owned here alone.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as c_int) };
    if granted != 0 {
        let root = std::fs::File::open("/").map_err(|e| Refusal::Landlock(format!("cannot open /: {e}")))?;
        let rule = PathBeneathAttr { allowed_access: granted, parent_fd: root.as_raw_fd() };
        // SAFETY: valid descriptors and a rule that outlives the call.
        let added = unsafe {
            syscall(
                SYS_LANDLOCK_ADD_RULE,
                ruleset.as_raw_fd() as c_long,
                LANDLOCK_RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0usize,
            )
        };
        if added != 0 {
            return Err(failed("cannot add the rule for /"));
        }
    }
    let (on, unused): (c_ulong, c_ulong) = (1, 0);
    // SAFETY: a plain prctl with its documented arguments.
    if unsafe { prctl(PR_SET_NO_NEW_PRIVS, on, unused, unused, unused) } != 0 {
        return Err(failed("cannot set no_new_privs"));
    }
    // SAFETY: a valid ruleset descriptor, no flags.
    if unsafe { syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset.as_raw_fd() as c_long, 0usize) } == 0 {
        return Ok(Domain::New);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(E2BIG) => Ok(Domain::AtLimit),
        _ => Err(failed("cannot enter the domain")),
    }
}

/// Stage 0 itself, given the process's `argv` and `envp`: confines this
/// process and becomes the next stage; returns only when it runs nothing.
/// A command that starts `bash` or `git` from `PATH` again adds a domain
/// inside its own; at Landlock's limit of 16 it is confined already, and
/// the exec goes on.
pub fn stage0(args: &[&CStr], env: &[&CStr]) -> Refusal {
    let me = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let arg0 = args.first().map_or(&b""[..], |a| a.to_bytes());
    let Some(name) = wrapper_name(arg0).or_else(|| wrapper_name(me.as_os_str().as_bytes())) else {
        return Refusal::Name(String::from_utf8_lossy(arg0).into_owned());
    };
    let env: Vec<&[u8]> = env.iter().map(|e| e.to_bytes()).collect();
    let path = env_value(&env, "PATH").unwrap_or(DEFAULT_PATH.as_bytes());
    let own = std::fs::metadata("/proc/self/exe").map(|m| (m.dev(), m.ino())).ok();
    let is_wrapper = |p: &Path| std::fs::metadata(p).is_ok_and(|m| Some((m.dev(), m.ino())) == own);
    let Some(real) = real_program(name, OsStr::from_bytes(path), is_wrapper) else {
        return Refusal::NotFound(name.to_owned());
    };
    if let Err(refusal) = restrict_self() {
        return refusal;
    }
    // Out of the CLI's session: no controlling terminal. It fails only for a
    // process that leads its group already (started detached), which is fine.
    // SAFETY: a plain system call.
    unsafe { setsid() };
    let env = scrubbed(env);
    let args: Vec<&[u8]> = args.iter().map(|a| a.to_bytes()).collect();
    if name == "git" {
        let Some(pincer) = pincer_beside(&me) else { return Refusal::NotFound(PINCER_NAME.to_owned()) };
        let role = [GIT_ROLE.as_bytes(), real.as_os_str().as_bytes()];
        let argv: Vec<&[u8]> = role.into_iter().chain(args).collect();
        return Refusal::Exec { error: exec(&pincer, &argv, &env), path: pincer };
    }
    Refusal::Exec { error: exec(&real, &args, &env), path: real }
}

/// Becomes `program` with `args` and exactly `env`; returns only on
/// failure, with why.
pub fn exec(program: &Path, args: &[&[u8]], env: &[&[u8]]) -> std::io::Error {
    let c = |bytes: &[u8]| CString::new(bytes).ok();
    let Some(path) = c(program.as_os_str().as_bytes()) else {
        return std::io::ErrorKind::InvalidInput.into();
    };
    // Entries come from C strings or the kernel's paths: none has a NUL inside.
    let args: Vec<CString> = args.iter().filter_map(|a| c(a)).collect();
    let env: Vec<CString> = env.iter().filter_map(|e| c(e)).collect();
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: NUL-terminated strings that outlive the call, in NULL-terminated arrays.
    unsafe { execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    std::io::Error::last_os_error()
}

/// The C strings of a NULL-terminated array such as `argv` or `envp`.
///
/// # Safety
/// `array` is NULL or points to a NULL-terminated array of pointers to
/// NUL-terminated strings that live as long as the process.
pub unsafe fn c_strings(array: *const *const c_char) -> Vec<&'static CStr> {
    let mut out = Vec::new();
    if array.is_null() {
        return out;
    }
    let mut at = array;
    // SAFETY: the caller's promise: each entry until the NULL is a C string.
    unsafe {
        while !(*at).is_null() {
            out.push(CStr::from_ptr(*at));
            at = at.add(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loader_variable_is_scrubbed_and_nothing_else() {
        let env: [&[u8]; 9] = [
            b"PATH=/usr/bin",
            b"LD_PRELOAD=/tmp/x.so",
            b"LD_AUDIT=/tmp/x.so",
            b"GCONV_PATH=/tmp",
            b"GLIBC_TUNABLES=glibc.malloc.check=3",
            b"LD_",
            b"OLD_PRELOAD=kept",
            b"HOME=/home/agent",
            b"LD_LIBRARY_PATH",
        ];
        let kept = scrubbed(env);
        assert_eq!(kept, [&b"PATH=/usr/bin"[..], b"OLD_PRELOAD=kept", b"HOME=/home/agent"]);
        assert!(LOADER.iter().all(|v| is_loader_variable(v.as_bytes())));
        assert!(!is_loader_variable(b"TMPDIR") && !is_loader_variable(b"XLD_PRELOAD"));
    }

    #[test]
    fn a_variable_is_read_as_getenv_reads_it() {
        let env: [&[u8]; 4] = [b"PATHX=/no", b"PATH=/first", b"PATH=/second", b"EMPTY="];
        assert_eq!(env_value(&env, "PATH"), Some(&b"/first"[..]));
        assert_eq!(env_value(&env, "EMPTY"), Some(&b""[..]));
        assert_eq!(env_value(&env, "HOME"), None);
    }

    #[test]
    fn pincers_binary_is_found_beside_the_wrappers_folder() {
        assert_eq!(pincer_beside(Path::new("/opt/pincer/confine/git")), Some(PathBuf::from("/opt/pincer/pincer")));
        assert_eq!(pincer_beside(Path::new("/git")), None);
    }

    #[test]
    fn the_ruleset_handles_block_devices_and_moves_and_grants_moves() {
        assert_eq!(ruleset(1), (ACCESS_MAKE_BLOCK, 0));
        assert_eq!(ruleset(2), (ACCESS_MAKE_BLOCK | ACCESS_REFER, ACCESS_REFER));
        assert_eq!(ruleset(7), ruleset(2));
    }
}
