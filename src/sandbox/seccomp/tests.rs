//! The filter's rule list, its compiled form, and what it answers when a
//! process runs under it (a forked child loads both programs, as bwrap does).

use std::io::Read;

use super::*;

fn denied_names() -> Vec<&'static str> {
    DENIED.iter().flat_map(|(_, calls)| calls.iter().map(|(name, _)| *name)).collect()
}

#[test]
fn the_rule_list_covers_what_an_agent_never_needs() {
    let names = denied_names();
    for wanted in [
        "unshare",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsmount",
        "fsconfig",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "open_by_handle_at",
        "pidfd_getfd",
        "kcmp",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "syslog",
    ] {
        assert!(names.contains(&wanted), "{wanted} is denied");
    }
    // Not denied outright: threads and processes need them (`clone` is checked by its flags).
    for needed in ["clone", "clone3", "execve", "fork", "vfork", "personality", "pidfd_open"] {
        assert!(!names.contains(&needed), "{needed} is not denied outright");
    }
    let flags: i64 = NAMESPACE_FLAGS.iter().map(|(_, f)| i64::from(*f)).sum();
    assert_eq!(flags, 0x7e02_0000, "every namespace flag clone takes, and not CLONE_NEWTIME (the exit signal's bit)");
    assert_eq!(denied_count(), names.len());
}

#[test]
fn both_programs_compile_for_this_architecture() {
    let filter = Filter::build().expect("x86_64 and aarch64 have a filter");
    let programs = filter.programs();
    assert_eq!(programs.len(), 2, "EPERM for the denied, ENOSYS for clone3");
    for p in programs {
        assert!(!p.is_empty() && p.len() % 8 == 0, "whole sock_filter instructions: {}", p.len());
        assert!(p.len() / 8 < 4096, "within the kernel's BPF_MAXINSNS");
    }
}

#[test]
fn each_descriptor_holds_one_program_from_its_start_and_is_sealed() {
    let filter = Filter::build().unwrap();
    let fds = filter.descriptors().unwrap();
    assert_eq!(fds.len(), 2);
    for (fd, program) in fds.iter().zip(filter.programs()) {
        // A second open file on the same memfd, so the test does not move the one bwrap reads.
        let mut file = std::fs::File::open(format!("/proc/self/fd/{}", fd.number())).unwrap();
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).unwrap();
        assert_eq!(&bytes, program);
        let offset = nix::unistd::lseek(fd.number(), 0, nix::unistd::Whence::SeekCur).unwrap();
        assert_eq!(offset, 0, "bwrap reads from the current offset");
        let written = nix::unistd::write(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd.number()) }, b"x");
        assert!(written.is_err(), "sealed against writes");
    }
}

/// Runs `checks` in a forked child under both programs, as bwrap loads them,
/// and returns its exit code: bit `i` set when check `i` failed (bit 0 is
/// loading the filter, where `checks` does not use it).
fn failed_under_the_filter(checks: unsafe fn() -> i32) -> i32 {
    let filter = Filter::build().unwrap();
    let programs: Vec<libc::sock_fprog> = filter
        .programs()
        .iter()
        .map(|p| libc::sock_fprog { len: (p.len() / 8) as u16, filter: p.as_ptr() as *mut libc::sock_filter })
        .collect();
    // SAFETY: the child makes raw system calls only, on memory allocated before the fork, then `_exit`s.
    let status = unsafe {
        match libc::fork() {
            0 => libc::_exit(load(&programs).map_or(1, |()| checks())),
            child => {
                let mut status = 0;
                assert_eq!(libc::waitpid(child, &mut status, 0), child);
                status
            }
        }
    };
    assert!(libc::WIFEXITED(status), "the child was not killed (status {status:#x})");
    libc::WEXITSTATUS(status)
}

/// # Safety
/// Only in a forked child.
unsafe fn load(programs: &[libc::sock_fprog]) -> Result<(), ()> {
    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    for p in programs {
        if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, p as *const libc::sock_fprog) != 0 {
            return Err(());
        }
    }
    Ok(())
}

/// # Safety
/// Only in a forked child.
unsafe fn errno() -> libc::c_int {
    *libc::__errno_location()
}

/// # Safety
/// Only in a forked child.
unsafe fn denied(ret: libc::c_long, with: libc::c_int) -> bool {
    ret == -1 && errno() == with
}

#[test]
fn under_the_filter_namespaces_mounts_and_ptrace_fail_with_eperm_and_ordinary_calls_work() {
    let failed = failed_under_the_filter(run_checks);
    assert_eq!(failed, 0, "failed checks (bits): {failed:#010b}; 1 = loading the filter");
}

#[test]
fn under_the_filter_io_uring_syslog_other_descriptors_and_personas_fail_with_eperm() {
    let failed = failed_under_the_filter(run_newer_checks);
    assert_eq!(failed, 0, "failed checks (bits): {failed:#010b}; 1 = loading the filter");
}

#[test]
fn under_the_filter_no_input_is_pushed_into_a_terminal_and_other_ioctls_pass() {
    let failed = failed_under_the_filter(run_terminal_checks);
    assert_eq!(failed, 0, "failed checks (bits): {failed:#010b}; 1 = loading the filter");
}

/// # Safety
/// Only in a forked child.
unsafe fn run_terminal_checks() -> i32 {
    let mut failed = 0;
    let mut check = |bit: u32, ok: bool| {
        if !ok {
            failed |= 1 << bit;
        }
    };
    let byte = b'x';
    check(1, denied(libc::syscall(libc::SYS_ioctl, 0, libc::TIOCSTI, &byte), libc::EPERM));
    // The kernel reads the request's low 32 bits: high bits set do not get past.
    let high = (0xdead_u64 << 32) | u64::from(libc::TIOCSTI as u32);
    check(2, denied(libc::syscall(libc::SYS_ioctl, 0, high, &byte), libc::EPERM));
    let subcode = 2u8; // TIOCL_SETSEL, then a paste
    check(3, denied(libc::syscall(libc::SYS_ioctl, 0, libc::TIOCLINUX, &subcode), libc::EPERM));
    // Any other request passes the filter: FIONREAD on a pipe works.
    let mut fds = [0; 2];
    let mut ready: libc::c_int = -1;
    check(
        4,
        libc::pipe(fds.as_mut_ptr()) == 0 && libc::syscall(libc::SYS_ioctl, fds[0], libc::FIONREAD, &mut ready) == 0,
    );
    check(5, ready == 0);
    failed
}

/// # Safety
/// Only in a forked child.
unsafe fn run_newer_checks() -> i32 {
    let mut failed = 0;
    let mut check = |bit: u32, ok: bool| {
        if !ok {
            failed |= 1 << bit;
        }
    };
    let mut params = [0u8; 120]; // struct io_uring_params
    check(1, denied(libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()), libc::EPERM));
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_int = 10;
    check(2, denied(libc::syscall(libc::SYS_syslog, SYSLOG_ACTION_SIZE_BUFFER, 0, 0), libc::EPERM));
    // The query and the default persona pass; a weaker address space does not.
    check(3, libc::syscall(libc::SYS_personality, 0xffff_ffff_u32) >= 0);
    check(4, libc::syscall(libc::SYS_personality, 0) >= 0);
    const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0004_0000;
    check(5, denied(libc::syscall(libc::SYS_personality, ADDR_NO_RANDOMIZE), libc::EPERM));
    // Another process's descriptor, here its own (a pidfd is still allowed).
    let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0);
    check(6, pidfd >= 0 && denied(libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0), libc::EPERM));
    const KCMP_FILE: libc::c_int = 0;
    let me = libc::getpid();
    check(7, denied(libc::syscall(libc::SYS_kcmp, me, me, KCMP_FILE, 0, 0), libc::EPERM));
    failed
}

/// # Safety
/// Only in a forked child.
unsafe fn run_checks() -> i32 {
    let mut failed = 0;
    let mut check = |bit: u32, ok: bool| {
        if !ok {
            failed |= 1 << bit;
        }
    };
    check(1, denied(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER), libc::EPERM));
    check(2, denied(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNS), libc::EPERM));
    let flags = libc::CLONE_NEWUSER | libc::SIGCHLD;
    check(3, denied(libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0), libc::EPERM));
    check(4, denied(libc::syscall(libc::SYS_clone3, 0, 0), libc::ENOSYS));
    check(5, denied(libc::syscall(libc::SYS_ptrace, libc::PTRACE_ATTACH, 1, 0, 0), libc::EPERM));
    check(6, denied(libc::syscall(libc::SYS_bpf, 0, 0, 0), libc::EPERM));
    // A plain fork still works: clone without namespace flags.
    let child = libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0);
    if child == 0 {
        libc::_exit(0);
    }
    let mut status = 0;
    check(7, child > 0 && libc::waitpid(child as libc::pid_t, &mut status, 0) as libc::c_long == child);
    #[cfg(target_arch = "x86_64")]
    check(0, denied(libc::syscall(0x4000_0000 | libc::SYS_unshare, libc::CLONE_NEWUSER), libc::EPERM));
    failed
}
