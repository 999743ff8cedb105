//! The wrapper's choices (its name, the real program), and what a process in
//! the domain [`restrict_self`] makes can still do, checked in a helper
//! process (another run of this test binary) below the test; the static
//! wrapper run as the sandbox binds it, and pincer's git role after it.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;

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

/// Tells [`git_role_helper`] to run.
const GIT_ROLE_TEST: &str = "PINCER_CONFINE_TEST_GIT_ROLE";
/// Its arguments after `argv[0]`, split by `\x1f`.
const WRAPPER_ARGS: &str = "PINCER_CONFINE_TEST_ARGS";

/// pincer's git role as stage 0 starts it (confined already): it pins git's
/// configuration and becomes the real git with these arguments, or says why
/// not and exits 126.
#[test]
#[ignore = "a helper process of the wrapper tests"]
fn git_role_helper() {
    if std::env::var_os(GIT_ROLE_TEST).is_none() {
        return;
    }
    let rest = std::env::var(WRAPPER_ARGS).unwrap_or_default();
    let args: Vec<CString> =
        std::iter::once("git").chain(rest.split('\x1f')).map(|a| CString::new(a).unwrap()).collect();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let real = real_program("git", &path, |_| false).expect("git on PATH");
    let err = git_role(&real, &args);
    eprintln!("{}", err.explain());
    std::process::exit(NOT_RUN);
}

/// The static wrapper as the sandbox binds it, `<dir>/confine/{bash,git}`,
/// written once for this test process.
fn stage0(name: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("confine")).unwrap();
        for name in NAMES {
            let path = dir.path().join("confine").join(name);
            std::fs::write(&path, wrapper::STAGE0).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        dir
    });
    dir.path().join("confine").join(name)
}

/// Runs `command`, again while another test's fork still holds the
/// wrapper's file open for writing (`ETXTBSY`, a race of tests in threads).
fn output(command: &mut std::process::Command) -> std::process::Output {
    const ETXTBSY: i32 = 26;
    for _ in 0..50 {
        match command.output() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) => std::thread::sleep(std::time::Duration::from_millis(20)),
            result => return result.unwrap(),
        }
    }
    command.output().unwrap()
}

/// Runs `name` with `args` in `dir`, with `HOME` at `home` and `env` added:
/// `bash` as the static wrapper; `git` as pincer's git role after it.
fn wrapper(name: &str, dir: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    #[allow(clippy::disallowed_methods)] // the wrapper under test, or this test binary again as the git role
    let mut command = if name == "git" {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "sandbox::confine::tests::git_role_helper", "--ignored", "--nocapture"])
            .args(["--test-threads=1"])
            .env(GIT_ROLE_TEST, "1")
            .env(WRAPPER_ARGS, args.join("\x1f"));
        command
    } else {
        let mut command = std::process::Command::new(stage0(name));
        command.args(args);
        command
    };
    command.current_dir(dir).env_remove("XDG_CONFIG_HOME").env("HOME", home).envs(env.iter().copied());
    output(&mut command)
}

/// The real git, for setting up what a test plants.
fn real_git(dir: &Path, args: &[&str]) {
    #[allow(clippy::disallowed_methods)] // the test's own setup, outside any wrapper
    let out = std::process::Command::new("git").args(args).current_dir(dir).env("HOME", dir).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A folder of planted programs' traces: each writes `<name>-ran` there.
struct Traces(tempfile::TempDir);

impl Traces {
    fn new() -> Traces {
        Traces(tempfile::tempdir().unwrap())
    }

    /// A command that leaves the trace `name` (and then does what `then` does).
    fn plant(&self, name: &str, then: &str) -> String {
        format!("touch {}/{name}-ran; {then}", self.0.path().display())
    }

    fn ran(&self) -> Vec<String> {
        let mut ran: Vec<String> = std::fs::read_dir(self.0.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        ran.sort();
        ran
    }
}

fn text(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_folder_planted_as_a_bare_repository_is_not_taken_for_one() {
    let traces = Traces::new();
    let folder = tempfile::tempdir().unwrap();
    let plant = |path: &str, content: &str| {
        let path = folder.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    // Four ordinary files, no `.git` in any path (issue 44).
    plant("HEAD", "ref: refs/heads/main\n");
    plant("objects/info/keep", "");
    plant("refs/heads/keep", "");
    plant("config", &format!("[core]\n\tworktree = .\n\tfsmonitor = \"{}\"\n", traces.plant("fsmonitor", "true")));
    let out = wrapper("git", folder.path(), folder.path(), &["status", "--short"], &[]);
    assert_eq!(traces.ran(), Vec::<String>::new(), "{}", text(&out));
    // git itself refuses it (the listing before reads no repository's configuration there).
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot use bare repository"), "{stderr}");
}

/// A repository whose `.git` is a file naming a folder beside it, whose
/// configuration names a program everywhere it can, with hooks; and a home
/// whose configuration includes a file with a `!` alias.
fn planted_repository(traces: &Traces) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir(&work).unwrap();
    real_git(&work, &["init", "-q", "--separate-git-dir", "../elsewhere", "-b", "main"]);
    std::fs::write(work.join("a.txt"), "one\n").unwrap();
    std::fs::write(work.join("b.txt"), "one\n").unwrap();
    real_git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "add", "."]);
    real_git(&work, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first"]);
    let config = format!(
        "[core]\n\tfsmonitor = \"{fsmonitor}\"\n\tpager = \"{pager}\"\n\teditor = \"{editor}\"\n\
         [filter \"f\"]\n\tclean = \"{clean}\"\n\tsmudge = \"{smudge}\"\n\trequired = true\n\
         [diff \"d\"]\n\tcommand = \"{command}\"\n[diff \"t\"]\n\ttextconv = \"{textconv}\"\n\
         [merge \"m\"]\n\tdriver = \"{driver}\"\n[credential]\n\thelper = \"!{helper}\"\n",
        fsmonitor = traces.plant("fsmonitor", "true"),
        pager = traces.plant("pager", "cat"),
        editor = traces.plant("editor", "true"),
        clean = traces.plant("clean", "cat"),
        smudge = traces.plant("smudge", "cat"),
        command = traces.plant("diff-command", "true"),
        textconv = traces.plant("textconv", "cat"),
        driver = traces.plant("merge-driver", "false"),
        helper = traces.plant("credential", "true"),
    );
    let gitdir = root.path().join("elsewhere");
    let mut existing = std::fs::read_to_string(gitdir.join("config")).unwrap();
    existing.push_str(&config);
    std::fs::write(gitdir.join("config"), existing).unwrap();
    std::fs::write(gitdir.join("info/attributes"), "a.txt filter=f diff=d merge=m\nb.txt diff=t\n").unwrap();
    for hook in ["pre-commit", "commit-msg", "post-commit", "post-checkout", "post-index-change"] {
        let path = gitdir.join("hooks").join(hook);
        std::fs::write(&path, format!("#!/bin/sh\n{}\n", traces.plant(hook, "true"))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let home = root.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join(".gitconfig"), "[user]\n\tname = t\n\temail = t@t\n[include]\n\tpath = more.conf\n")
        .unwrap();
    std::fs::write(home.join("more.conf"), format!("[alias]\n\thi = \"!{}\"\n", traces.plant("alias", "true")))
        .unwrap();
    (root, work)
}

#[test]
fn a_repositorys_configuration_and_the_homes_run_no_program_and_ordinary_git_works() {
    let traces = Traces::new();
    let (root, work) = planted_repository(&traces);
    let home = root.path().join("home");
    let git = |args: &[&str], env: &[(&str, &str)]| {
        let out = wrapper("git", &work, &home, args, env);
        (out.status.success(), text(&out))
    };
    std::fs::write(work.join("a.txt"), "two\n").unwrap();
    std::fs::write(work.join("b.txt"), "two\n").unwrap();
    let (ok, out) = git(&["status", "--short"], &[]);
    assert!(ok && out.contains(" M a.txt") && out.contains(" M b.txt"), "{out}");
    let (ok, out) = git(&["diff", "--no-ext-diff"], &[]);
    assert!(ok && out.contains("+two"), "{out}");
    let (ok, out) = git(&["diff"], &[]);
    assert!(ok && out.contains("pincer did not run the external diff"), "{out}");
    let (ok, out) = git(&["log", "-p", "--textconv", "-1"], &[]);
    assert!(ok && out.contains("first"), "{out}");
    let (ok, out) = git(&["add", "a.txt", "b.txt"], &[]);
    assert!(ok, "{out}");
    let (ok, out) = git(&["commit", "-qm", "second"], &[]);
    assert!(ok, "{out}");
    let (ok, out) = git(&["log", "--oneline"], &[]);
    assert!(ok && out.contains("second") && out.contains("first"), "{out}");
    let (ok, out) = git(&["checkout", "-q", "HEAD~1", "--", "a.txt"], &[]);
    assert!(ok, "{out}");
    let (ok, out) = git(&["commit", "--allow-empty"], &[]);
    assert!(!ok, "no editor runs, so no message: {out}");
    let (ok, out) = git(&["hi"], &[]);
    assert!(!ok, "the `!` alias from an included file is not run: {out}");
    // The caller's own configuration variables do not undo the pins.
    let fsmonitor = format!("'core.fsmonitor'='{}'", traces.plant("parameters", "true"));
    let hooks = root.path().join("elsewhere/hooks");
    let env = [
        ("GIT_CONFIG_PARAMETERS", fsmonitor.as_str()),
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "core.hooksPath"),
        ("GIT_CONFIG_VALUE_0", hooks.to_str().unwrap()),
    ];
    let (ok, out) = git(&["commit", "-q", "--allow-empty", "-m", "third"], &env);
    assert!(ok, "{out}");
    assert_eq!(traces.ran(), Vec::<String>::new(), "a planted program ran");
}

#[test]
fn the_wrapper_passes_no_loader_variable_on_and_runs_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}:/usr/bin:/bin", stage0("bash").parent().unwrap().display());
    let env = [("LD_LIBRARY_PATH", "/nowhere"), ("GCONV_PATH", "/nowhere"), ("KEEP", "kept"), ("PATH", &path)];
    let out = wrapper("bash", dir.path(), dir.path(), &["-c", "env; echo ran"], &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("\nran\n"), "{}", text(&out));
    assert!(stdout.contains("KEEP=kept") && stdout.contains(&format!("PATH={path}")), "{}", text(&out));
    for name in ["LD_LIBRARY_PATH", "GCONV_PATH"] {
        assert!(!stdout.contains(&format!("{name}=")), "{name}: {}", text(&out));
    }
}

#[test]
fn the_wrapper_under_another_name_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sh = dir.path().join("sh");
    std::fs::copy(stage0("bash"), &sh).unwrap();
    #[allow(clippy::disallowed_methods)] // the wrapper under test
    let out = output(std::process::Command::new(&sh).args(["-c", "echo ran"]));
    assert_eq!(out.status.code(), Some(NOT_RUN), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("started as"), "{}", text(&out));
}

#[test]
fn a_command_runs_in_a_session_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    // Field 6 of /proc/PID/stat is the session: bash's own pid when it leads one.
    let out =
        wrapper("bash", dir.path(), dir.path(), &["-c", "echo \"pid=$$ sid=$(cut -d' ' -f6 /proc/$$/stat)\""], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let at = stdout.find("pid=").unwrap_or_else(|| panic!("{}", text(&out)));
    let line = stdout[at..].lines().next().unwrap();
    let (pid, sid) = line.strip_prefix("pid=").unwrap().split_once(" sid=").unwrap();
    assert_eq!(pid, sid, "{line}");
}
