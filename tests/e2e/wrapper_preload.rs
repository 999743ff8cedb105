//! The wrapper the sandbox binds as the CLI's `bash` runs no code of a
//! loader variable's, not even before it confines the command: a shared
//! library built here, whose constructor leaves a mark, is preloaded with
//! `LD_PRELOAD` (and `LD_AUDIT`), and the wrapper is run as bwrap binds it.
//! No process leaves the mark, and the command runs without the variables.

use std::path::{Path, PathBuf};

/// The library's constructor: appends `/proc/self/exe` to `$PRELOAD_MARK`.
const LIBRARY: &str = r#"
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    const char *path = getenv("PRELOAD_MARK");
    char exe[512];
    ssize_t n;
    int fd;
    if (!path) return;
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) n = 0;
    exe[n++] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) { write(fd, exe, n); close(fd); }
}
unsigned int la_version(unsigned int v) { return v; }
"#;

/// Builds the marking library in `dir` with `cc`; `None` when there is no `cc`.
fn marking_library(dir: &Path) -> Option<PathBuf> {
    let source = dir.join("mark.c");
    let library = dir.join("libmark.so");
    std::fs::write(&source, LIBRARY).unwrap();
    #[allow(clippy::disallowed_methods)] // the test's own compiler run
    let built = std::process::Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&library).arg(&source).output();
    match built {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cc: {e}"),
        Ok(out) => {
            assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
            Some(library)
        }
    }
}

/// The wrapper as the sandbox binds it: the static binary pincer embeds at
/// `<dir>/confine/bash` and `<dir>/confine/git`, pincer's binary beside that
/// folder (`/opt/pincer/confine/git` goes on in `/opt/pincer/pincer`).
/// Returns the `confine` folder.
pub(crate) fn wrapper_layout(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let confine = dir.join("confine");
    std::fs::create_dir_all(&confine).unwrap();
    for name in ["bash", "git"] {
        let path = confine.join(name);
        std::fs::write(&path, pincer::sandbox::confine::wrapper::STAGE0).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pincer"), dir.join("pincer")).unwrap();
    confine
}

/// `command`'s output; started again while another test's fork still holds
/// the wrapper just written open (`ETXTBSY`, a race of tests in threads).
pub(crate) fn output(command: &mut std::process::Command) -> std::process::Output {
    const ETXTBSY: i32 = 26;
    for _ in 0..50 {
        match command.output() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) => std::thread::sleep(std::time::Duration::from_millis(20)),
            result => return result.unwrap(),
        }
    }
    command.output().unwrap()
}

#[test]
fn a_preloaded_library_runs_nowhere_in_the_wrapper_nor_in_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let Some(library) = marking_library(dir.path()) else {
        eprintln!("SKIPPED: no `cc` on this machine to build the preloaded library (CI installs gcc)");
        return;
    };
    let bash = wrapper_layout(dir.path()).join("bash");
    let mark = dir.path().join("mark");
    let library = library.to_str().unwrap();
    // The library works: a plain program started with it leaves the mark.
    #[allow(clippy::disallowed_methods)] // the control, outside any wrapper
    let control =
        std::process::Command::new("/bin/true").env("LD_PRELOAD", library).env("PRELOAD_MARK", &mark).status();
    assert!(control.unwrap().success());
    assert!(std::fs::read_to_string(&mark).is_ok_and(|m| m.contains("true")), "the control left no mark");
    std::fs::remove_file(&mark).unwrap();

    let script = r#"echo "preload=${LD_PRELOAD:-none} audit=${LD_AUDIT:-none} keep=$KEEP""#;
    #[allow(clippy::disallowed_methods)] // the wrapper under test, as the CLI starts its shell
    let out = output(
        std::process::Command::new(&bash)
            .args(["-c", script])
            .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", bash.parent().unwrap().display()))
            .env_remove("LD_LIBRARY_PATH")
            .env("LD_PRELOAD", library)
            .env("LD_AUDIT", library)
            .env("PRELOAD_MARK", &mark)
            .env("KEEP", "kept"),
    );
    let text = format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let marked = std::fs::read_to_string(&mark).unwrap_or_default();
    assert_eq!(marked, "", "the preloaded library ran in these processes\n{text}");
    assert!(out.status.success(), "{text}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("preload=none audit=none keep=kept"), "{text}");
}
