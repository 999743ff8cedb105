//! The wrapper's choices (its name, the real program), and what a process in
//! the domain [`restrict_self`] makes can still do, checked in a helper
//! process (another run of this test binary) below the test.

use std::ffi::OsString;

use super::*;

#[test]
fn a_wrapper_is_known_by_the_last_part_of_its_name() {
    assert_eq!(wrapper_name(b"/opt/pincer/confine/bash"), Some("bash"));
    assert_eq!(wrapper_name(b"git"), Some("git"));
    for other in [&b"pincer"[..], b"/opt/pincer/pincer", b"pincer-guard", b"bash2", b"/usr/bin/gitk", b"", b"/"] {
        assert_eq!(wrapper_name(other), None, "{}", String::from_utf8_lossy(other));
    }
}

#[test]
fn the_sandbox_paths_agree() {
    assert_eq!(SHELL, format!("{DIR}/bash"));
    assert!(PATH.starts_with(&format!("{DIR}:")), "{PATH}");
    assert!(NAMES.iter().all(|n| !n.contains('/')));
}

#[test]
fn the_real_program_is_the_first_executable_on_path_that_is_not_the_wrapper() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = |name: &str| {
        let d = root.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let program = |d: &Path, mode: u32| {
        let p = d.join("git");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let (wrapper, plain, missing, real, later) =
        (dir("wrapper"), dir("plain"), dir("missing"), dir("real"), dir("later"));
    program(&wrapper, 0o755);
    program(&plain, 0o644);
    program(&real, 0o755);
    program(&later, 0o755);
    std::fs::create_dir(missing.join("git")).unwrap(); // a folder of that name
    let mut path = OsString::from("relative::");
    for d in [&wrapper, &plain, &missing, &real, &later] {
        path.push(":");
        path.push(d);
    }
    let is_wrapper = |p: &Path| p.starts_with(&wrapper);
    assert_eq!(real_program("git", &path, is_wrapper), Some(real.join("git")));
    assert_eq!(real_program("bash", &path, is_wrapper), None);
    // The current folder (an empty or relative entry) is never searched.
    std::fs::create_dir_all(root.path().join("relative")).unwrap();
    assert_eq!(real_program("git", OsStr::new("relative:"), |_| false), None);
}

/// Tells [`confined_helper`] to run; unset in a normal test run.
const HELPER: &str = "PINCER_CONFINE_TEST_HELPER";

/// Reports an attempt as `name=ok` or `name=<errno>`.
fn report<T>(name: &str, result: std::io::Result<T>) {
    match result {
        Ok(_) => println!("CHECK {name}=ok"),
        Err(e) => println!("CHECK {name}={}", e.raw_os_error().map_or_else(|| e.to_string(), |n| n.to_string())),
    }
}

/// The confined process: its parent is the test, outside its domain.
#[test]
#[ignore = "a helper process of a_confined_process_cannot_reach_into_the_process_that_started_it"]
fn confined_helper() {
    let Some(dir) = std::env::var_os(HELPER).map(PathBuf::from) else { return };
    let parent = nix::unistd::getppid().as_raw();
    report("before_mem", std::fs::File::open(format!("/proc/{parent}/mem")));
    println!("CHECK domain={:?}", restrict_self().map_err(|e| e.to_string()));
    report("mem", std::fs::File::open(format!("/proc/{parent}/mem")));
    // The folder lists numbers to its owner; what they are is the ptrace check's.
    report("fd", std::fs::read_link(format!("/proc/{parent}/fd/0")));
    report("stdin", std::fs::OpenOptions::new().write(true).open(format!("/proc/{parent}/fd/0")));
    // SAFETY: plain system calls on a pid and the descriptor they return.
    let getfd = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, parent, 0);
        if pidfd < 0 {
            -1
        } else {
            libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0)
        }
    };
    report("getfd", if getfd >= 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) });
    // Ordinary file work goes on, a move between folders included.
    let (a, b) = (dir.join("a"), dir.join("b"));
    let moved = std::fs::create_dir_all(&a)
        .and_then(|()| std::fs::create_dir_all(&b))
        .and_then(|()| std::fs::write(a.join("f"), "x"))
        .and_then(|()| std::fs::rename(a.join("f"), b.join("f")));
    report("rename", moved);
}

#[test]
fn a_confined_process_cannot_reach_into_the_process_that_started_it() {
    let dir = tempfile::tempdir().unwrap();
    #[allow(clippy::disallowed_methods)] // this test binary again, as the confined process
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sandbox::confine::tests::confined_helper", "--ignored", "--nocapture"])
        .env(HELPER, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let check = |name: &str| {
        let prefix = format!("CHECK {name}=");
        stdout.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("{name}: {stdout}"))
    };
    // Yama's ptrace_scope 1 or more keeps a child out of its parent by itself;
    // without it, the same open works before the domain is made.
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").is_ok_and(|s| s.trim() != "0");
    if !yama {
        assert_eq!(check("before_mem"), "ok", "the parent's memory is open to it before");
    }
    assert_eq!(check("domain"), "Ok(New)");
    let eacces = libc::EACCES.to_string();
    assert_eq!(check("mem"), eacces, "/proc/PID/mem of the process outside the domain");
    assert_eq!(check("fd"), eacces, "what its descriptors are");
    assert_eq!(check("stdin"), eacces, "one of them, opened");
    assert_eq!(check("getfd"), libc::EPERM.to_string(), "pidfd_getfd");
    assert_eq!(check("rename"), "ok", "a file moves between folders");
    assert!(std::fs::read_to_string(dir.path().join("b/f")).is_ok_and(|t| t == "x"));
}
