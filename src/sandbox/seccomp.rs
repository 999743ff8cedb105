//! The seccomp filter every bwrap sandbox runs under: what an agent never
//! needs is answered with `EPERM` (never a kill, so a tool gets an ordinary
//! error and the CLI goes on).
//!
//! bwrap drops every capability of the sandboxed process, so most of these
//! calls fail there anyway; the filter closes what capabilities do not cover:
//! a new user namespace (which hands its creator a full set of capabilities
//! over it, and with them mounts that rearrange the sandbox), the ways into
//! another process of the same uid (the CLI that runs the agent's code:
//! `ptrace`, `process_vm_*`, `pidfd_getfd`, `kcmp`; `/proc/PID/mem` is a
//! path, which a filter cannot see: see `confine.rs`), and kernel interfaces
//! that are rich in bugs and useless to an agent (`bpf`, `perf_event_open`,
//! keyrings, `userfaultfd`, `io_uring`, whose operations pass no filter, the
//! kernel's log, and `personality` other than the default persona).
//!
//! Two programs, because a `seccompiler` filter has one action on a match:
//! the first answers [`DENIED`], `clone` with a namespace flag and
//! `personality` outside [`PERSONALITIES`] with `EPERM`; the second answers `clone3` with `ENOSYS`. `clone3` passes its
//! flags in a struct that a filter cannot read, and on `ENOSYS` the C library
//! falls back to `clone`, whose flags the first program checks (an `EPERM`
//! would fail every new thread instead). When several filters are loaded the
//! kernel takes the strictest answer, so each program allows what it does
//! not name. The programs are built once at startup for the host's
//! architecture (x86_64, aarch64; another one has no filter, and then
//! bwrap groups do not start unless `sandbox.seccomp = false`). A system call
//! made for another architecture (32-bit `int 0x80` on x86_64) kills the
//! process: `seccompiler` checks the architecture first. x86_64's x32 calls
//! carry the architecture of 64-bit ones, so each denied call is denied under
//! its x32 number too.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

use crate::claude::process::PassFd;

/// System calls answered with `EPERM`, grouped by why no agent needs them.
pub const DENIED: &[(&str, &[(&str, libc::c_long)])] = &[
    (
        "new namespaces: a user namespace gives back the capabilities the sandbox dropped",
        &[("unshare", libc::SYS_unshare), ("setns", libc::SYS_setns)],
    ),
    (
        "mounts: the layout is bwrap's, set before the agent starts",
        &[
            ("mount", libc::SYS_mount),
            ("umount2", libc::SYS_umount2),
            ("pivot_root", libc::SYS_pivot_root),
            ("move_mount", libc::SYS_move_mount),
            ("open_tree", libc::SYS_open_tree),
            ("fsopen", libc::SYS_fsopen),
            ("fsmount", libc::SYS_fsmount),
            ("fsconfig", libc::SYS_fsconfig),
            ("fspick", libc::SYS_fspick),
            ("mount_setattr", libc::SYS_mount_setattr),
        ],
    ),
    (
        "other processes' memory and descriptors (the CLI's among them)",
        &[
            ("ptrace", libc::SYS_ptrace),
            ("process_vm_readv", libc::SYS_process_vm_readv),
            ("process_vm_writev", libc::SYS_process_vm_writev),
            ("pidfd_getfd", libc::SYS_pidfd_getfd),
            ("kcmp", libc::SYS_kcmp),
        ],
    ),
    (
        "io_uring, whose operations the kernel runs without this filter seeing them",
        &[
            ("io_uring_setup", libc::SYS_io_uring_setup),
            ("io_uring_enter", libc::SYS_io_uring_enter),
            ("io_uring_register", libc::SYS_io_uring_register),
        ],
    ),
    ("the kernel's log", &[("syslog", libc::SYS_syslog)]),
    (
        "kernel keyrings, which namespaces do not separate",
        &[("keyctl", libc::SYS_keyctl), ("add_key", libc::SYS_add_key), ("request_key", libc::SYS_request_key)],
    ),
    (
        "kernel interfaces no tool needs and exploits favour",
        &[
            ("bpf", libc::SYS_bpf),
            ("perf_event_open", libc::SYS_perf_event_open),
            ("userfaultfd", libc::SYS_userfaultfd),
        ],
    ),
    (
        "the kernel itself: modules, kexec, swap, reboot",
        &[
            ("init_module", libc::SYS_init_module),
            ("finit_module", libc::SYS_finit_module),
            ("delete_module", libc::SYS_delete_module),
            ("kexec_load", libc::SYS_kexec_load),
            ("kexec_file_load", libc::SYS_kexec_file_load),
            ("swapon", libc::SYS_swapon),
            ("swapoff", libc::SYS_swapoff),
            ("reboot", libc::SYS_reboot),
        ],
    ),
    ("opening files by handle, around the mount layout", &[("open_by_handle_at", libc::SYS_open_by_handle_at)]),
];

/// `clone` flags that make a new namespace; `clone` with any of them is denied.
/// (`CLONE_NEWTIME` is not one: in `clone`'s flags that bit is the exit signal's.)
pub const NAMESPACE_FLAGS: &[(&str, libc::c_int)] = &[
    ("CLONE_NEWNS", libc::CLONE_NEWNS),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER),
    ("CLONE_NEWPID", libc::CLONE_NEWPID),
    ("CLONE_NEWNET", libc::CLONE_NEWNET),
];

/// The `personality` values allowed: Linux's default persona, and the query
/// that changes nothing. Any other (`ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC`,
/// another ABI) is denied: nothing an agent runs needs a weaker address space.
pub const PERSONALITIES: &[(&str, u32)] = &[("PER_LINUX", 0), ("query", 0xffff_ffff)];

/// `ioctl` requests that push input into a terminal (`TIOCSTI` fakes typed
/// keys, `TIOCLINUX` pastes the console's selection): denied, so an agent
/// that shares pincer's controlling terminal cannot type into it. With this
/// filter loaded, bwrap needs no `--new-session` (see `bwrap.rs`). Compared
/// on the request's low 32 bits, which is all the kernel reads.
pub const TERMINAL_INJECTION: &[(&str, libc::c_ulong)] = &[("TIOCSTI", libc::TIOCSTI), ("TIOCLINUX", libc::TIOCLINUX)];

/// The filter cannot be built here.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("pincer has no seccomp filter for this architecture ({0}); only x86_64 and aarch64 have one")]
    Arch(&'static str),
    #[error("building the seccomp filter failed: {0}")]
    Build(String),
}

/// The compiled programs, in the byte layout bwrap's `--add-seccomp-fd`
/// reads (an array of `struct sock_filter`).
#[derive(Clone, Debug)]
pub struct Filter {
    programs: Arc<[Vec<u8>]>,
}

impl Filter {
    /// Compiles both programs for the architecture pincer was built for.
    pub fn build() -> Result<Filter, SeccompError> {
        let arch = std::env::consts::ARCH;
        if !matches!(arch, "x86_64" | "aarch64") {
            return Err(SeccompError::Arch(arch));
        }
        let target = TargetArch::try_from(arch).map_err(|e| SeccompError::Build(e.to_string()))?;
        let deny = compile(deny_rules()?, libc::EPERM, target)?;
        let nosys = compile(nosys_rules(), libc::ENOSYS, target)?;
        Ok(Filter { programs: Arc::from([deny, nosys]) })
    }

    /// The programs, in the order bwrap loads them.
    pub fn programs(&self) -> &[Vec<u8>] {
        &self.programs
    }

    /// One descriptor per program, each a sealed in-memory file read from its
    /// start, for one bwrap process (which reads it to the end and closes it).
    /// Nothing on disk, so nothing another process could swap.
    pub fn descriptors(&self) -> std::io::Result<Vec<PassFd>> {
        self.programs.iter().map(|p| sealed_memfd(p).and_then(PassFd::new)).collect()
    }
}

/// How many system calls the first program denies outright (x32 numbers not
/// counted), for `pincer doctor`.
pub fn denied_count() -> usize {
    DENIED.iter().map(|(_, calls)| calls.len()).sum()
}

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

fn deny_rules() -> Result<Rules, SeccompError> {
    let mut rules = Rules::new();
    for (name, nr) in DENIED.iter().flat_map(|(_, calls)| calls.iter()) {
        for nr in numbers(name, *nr) {
            rules.insert(nr, Vec::new());
        }
    }
    // `clone` only with a namespace flag: any one of them (rules are or-ed).
    let mut clone = Vec::new();
    for (_, flag) in NAMESPACE_FLAGS {
        let flag = u64::from(flag.unsigned_abs());
        let cond = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(flag), flag)
            .map_err(|e| SeccompError::Build(e.to_string()))?;
        clone.push(SeccompRule::new(vec![cond]).map_err(|e| SeccompError::Build(e.to_string()))?);
    }
    for nr in numbers("clone", libc::SYS_clone) {
        rules.insert(nr, clone.clone());
    }
    // `personality` unless its argument (an `unsigned int` to the kernel) is
    // one allowed: every condition of one rule must hold.
    let mut other = Vec::new();
    for (_, value) in PERSONALITIES {
        let cond = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, u64::from(*value))
            .map_err(|e| SeccompError::Build(e.to_string()))?;
        other.push(cond);
    }
    let personality = SeccompRule::new(other).map_err(|e| SeccompError::Build(e.to_string()))?;
    for nr in numbers("personality", libc::SYS_personality) {
        rules.insert(nr, vec![personality.clone()]);
    }
    let mut ioctl = Vec::new();
    for (_, request) in TERMINAL_INJECTION {
        let cond = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, u64::from(*request as u32))
            .map_err(|e| SeccompError::Build(e.to_string()))?;
        ioctl.push(SeccompRule::new(vec![cond]).map_err(|e| SeccompError::Build(e.to_string()))?);
    }
    for nr in numbers("ioctl", libc::SYS_ioctl) {
        rules.insert(nr, ioctl.clone());
    }
    Ok(rules)
}

fn nosys_rules() -> Rules {
    numbers("clone3", libc::SYS_clone3).map(|nr| (nr, Vec::new())).collect()
}

fn compile(rules: Rules, errno: libc::c_int, target: TargetArch) -> Result<Vec<u8>, SeccompError> {
    let errno = errno.unsigned_abs();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno), target)
        .map_err(|e| SeccompError::Build(e.to_string()))?;
    let program = BpfProgram::try_from(filter).map_err(|e| SeccompError::Build(e.to_string()))?;
    Ok(program.iter().flat_map(|i| [&i.code.to_ne_bytes()[..], &[i.jt, i.jf], &i.k.to_ne_bytes()].concat()).collect())
}

/// The numbers a call is made under: its own, and on x86_64 its x32 number too.
fn numbers(name: &str, nr: libc::c_long) -> impl Iterator<Item = i64> {
    let x32 = x32_number(name, nr);
    std::iter::once(nr).chain(x32)
}

#[cfg(target_arch = "x86_64")]
fn x32_number(name: &str, nr: libc::c_long) -> Option<i64> {
    /// Set in every x32 system call number.
    const X32_BIT: i64 = 0x4000_0000;
    // The calls x32 makes under numbers of their own (arch/x86/entry/syscalls/syscall_64.tbl).
    let own = match name {
        "ioctl" => 514,
        "ptrace" => 521,
        "kexec_load" => 528,
        "process_vm_readv" => 539,
        "process_vm_writev" => 540,
        _ => nr,
    };
    Some(X32_BIT | own)
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_number(_name: &str, _nr: libc::c_long) -> Option<i64> {
    None
}

fn sealed_memfd(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    let flags = MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING;
    let fd = memfd_create(c"pincer-seccomp", flags)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    file.seek(SeekFrom::Start(0))?;
    let seals = SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL;
    fcntl(std::os::fd::AsRawFd::as_raw_fd(&file), FcntlArg::F_ADD_SEALS(seals))?;
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests;
