//! `session::place` checked against the kernel: for paths generated over a
//! tree of links (into and out of the folder, chains, loops), `..`, `.`, `~`
//! and white space, a process in bubblewrap mounts shaped like the sandbox's
//! (the folder at `/workspace/group`, the home at `/home/agent`, its own
//! `/tmp`, a read-only rest) creates the file as the `Write` tool would
//! (parents first), and the host shows where it landed. `place` may never
//! say `Folder` for a file that lands anywhere but the folder or the `/tmp`,
//! nor `Elsewhere` for one that lands in the folder. (pincer cannot see the
//! sandbox's `/tmp`, nor so its links: a path there is `Elsewhere`.)
//!
//! The kernel does not know `~` or trimming: the CLI spells those out before
//! it opens a file (`docs/cli-observations.md`), and `cli_spelling` below
//! does as it does.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use pincer::domain::files::FileView;
use pincer::session::{place, Place};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const WORKSPACE: &str = "/workspace/group";
const HOME: &str = "/home/agent";
/// The file the generated paths end in: unique enough to find on the host.
const LEAF: &str = "landed-here";

/// Where a created file was found on the host.
#[derive(Debug, PartialEq)]
enum Landed {
    /// Under the folder.
    Folder,
    /// In the sandbox's own `/tmp`.
    Tmp,
    /// In the home (the only other place a test tree can be written).
    Elsewhere,
    /// Not created (a read-only place, a loop, a missing folder).
    Nowhere,
}

/// One case's host tree: the folder, the home and the `/tmp`, with links.
struct Tree {
    _dir: tempfile::TempDir,
    group: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let [group, home, tmp] = ["group", "home", "tmp"].map(|d| dir.path().join(d));
        for d in [group.join("sub/deep"), home.join("proj"), tmp.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        let links: &[(&Path, &str, &str)] = &[
            (&group, "in", "sub"),
            (&group, "in_abs", "/workspace/group/sub/deep"),
            (&group, "to_home", HOME),
            (&group, "to_home_rel", "../../home/agent"),
            (&group, "to_etc", "/etc"),
            (&group, "to_tmp", "/tmp"),
            (&group, "up", ".."),
            (&group, "chain1", "chain2"),
            (&group, "chain2", "chain3"),
            (&group, "chain3", "sub"),
            (&group, "loop1", "loop2"),
            (&group, "loop2", "loop1"),
            (&group, "file_out", "/home/agent/proj/x"),
            (&group, "dangling_in", "sub/new"),
            (&home, "back", WORKSPACE),
            (&home, "back_sub", "/workspace/group/sub"),
            (&tmp, "tmp_home", HOME),
        ];
        for (dir, name, target) in links {
            std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
        }
        Tree { _dir: dir, group, home, tmp }
    }

    /// The view pincer has of a bwrap sandbox (`sandbox::launch`): the
    /// folder and the home, not the sandbox's own `/tmp`.
    fn view(&self) -> FileView {
        FileView::sandboxed(
            WORKSPACE,
            HOME,
            vec![(WORKSPACE.into(), self.group.clone()), (HOME.into(), self.home.clone())],
        )
    }

    /// Creates `path` (as the CLI spelled it) from `cwd` inside the mounts;
    /// then where on the host a new file is.
    fn create(&self, cwd: &str, path: &str) -> Landed {
        #[allow(clippy::disallowed_methods)] // the kernel's answer, in the sandbox's shape; no session runs here
        let status = std::process::Command::new("bwrap")
            .args(["--unshare-all", "--die-with-parent", "--tmpfs", "/"])
            .args(system_binds())
            .args(["--proc", "/proc", "--dev", "/dev"])
            .args(["--bind", path_str(&self.tmp), "/tmp"])
            .args(["--bind", path_str(&self.home), HOME])
            .args(["--bind", path_str(&self.group), WORKSPACE])
            .args(["--remount-ro", "/", "--chdir", cwd])
            .args(["sh", "-c", r#"mkdir -p -- "$(dirname -- "$1")" 2>/dev/null; : > "$1""#, "sh", path])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("bwrap runs");
        let _ = status; // a refused create is an answer too: `Nowhere`
        if found(&self.group) {
            Landed::Folder
        } else if found(&self.tmp) {
            Landed::Tmp
        } else if found(&self.home) {
            Landed::Elsewhere
        } else {
            Landed::Nowhere
        }
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The system's folders, read-only, as the sandbox binds them.
fn system_binds() -> Vec<String> {
    ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"]
        .iter()
        .flat_map(|p| ["--ro-bind-try".to_owned(), p.to_string(), p.to_string()])
        .collect()
}

/// Whether a regular file named `LEAF` (or any file the links lead to) was made under `dir`, not following links.
fn found(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| {
        let Ok(kind) = e.file_type() else { return false };
        let name = e.file_name();
        (kind.is_file() && (name == LEAF || name == "x" || name == "new")) || (kind.is_dir() && found(&e.path()))
    })
}

/// The CLI's `expandPath` (2.1.197 and 2.1.332): trimmed, `~` and `~/` the home.
fn cli_spelling(raw: &str) -> String {
    let raw = raw.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if raw == "~" {
        HOME.to_owned()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        format!("{HOME}/{rest}")
    } else {
        raw.to_owned()
    }
}

fn a_path() -> impl Strategy<Value = (String, String)> {
    let cwd = prop::sample::select(vec![WORKSPACE, "/workspace/group/sub", HOME, "/tmp", "/workspace/group/in"]);
    let start =
        prop::sample::select(vec!["", "", "/", "/workspace/group/", "/home/agent/", "/tmp/", "~/", "~//", "./"]);
    let part = prop::sample::select(vec![
        "sub",
        "deep",
        "new",
        "..",
        ".",
        "in",
        "in_abs",
        "to_home",
        "to_home_rel",
        "to_etc",
        "to_tmp",
        "up",
        "chain1",
        "loop1",
        "back",
        "back_sub",
        "tmp_home",
        "proj",
        "~",
        "~agent",
        "workspace",
        "group",
        "home",
        "agent",
        "tmp",
    ]);
    let leaf = prop::sample::select(vec![LEAF, LEAF, "file_out", "dangling_in", "loop1"]);
    let pad = prop::sample::select(vec!["", "", " ", "  \t", "\n"]);
    (cwd, start, prop::collection::vec(part, 0..7), leaf, pad.clone(), pad).prop_map(
        |(cwd, start, parts, leaf, before, after)| {
            let mut path = start.to_owned();
            for p in parts {
                path.push_str(p);
                path.push('/');
            }
            path.push_str(leaf);
            (cwd.to_owned(), format!("{before}{path}{after}"))
        },
    )
}

fn no_bwrap() -> bool {
    #[allow(clippy::disallowed_methods)] // asks bwrap its version, nothing more
    let missing = std::process::Command::new("bwrap").arg("--version").output().is_err();
    if missing {
        println!("skipped: bwrap is not installed (CI has it)");
    }
    missing
}

#[test]
fn place_agrees_with_where_the_kernel_writes() {
    if no_bwrap() {
        return;
    }
    let mut runner = TestRunner::new(Config { cases: 300, failure_persistence: None, ..Config::default() });
    runner
        .run(&a_path(), |(cwd, raw)| {
            let tree = Tree::new();
            let said = place(&tree.view(), Some(&cwd), &raw);
            let landed = tree.create(&cwd, &cli_spelling(&raw));
            let folder_but_home = said == Place::Folder && landed == Landed::Elsewhere;
            prop_assert!(!folder_but_home, "`Folder`, but it landed in the home");
            // Through the unseen `/tmp` pincer says `Elsewhere` (an admin decides) wherever it lands.
            let seen = |p: &Path| !p.starts_with("/tmp");
            let elsewhere_but_folder = matches!(&said, Place::Elsewhere(p) if seen(p)) && landed == Landed::Folder;
            prop_assert!(!elsewhere_but_folder, "`Elsewhere`, but it landed in the folder: {said:?}");
            Ok(())
        })
        .unwrap();
}

/// The generator reaches each kind of answer, so the property above is not vacuous.
#[test]
fn the_cases_reach_the_folder_the_home_and_nowhere() {
    if no_bwrap() {
        return;
    }
    let tree = Tree::new();
    assert_eq!(tree.create(WORKSPACE, &cli_spelling(" chain1/landed-here ")), Landed::Folder);
    let tree = Tree::new();
    assert_eq!(tree.create(WORKSPACE, &cli_spelling("~/proj/landed-here")), Landed::Elsewhere);
    assert_eq!(
        place(&tree.view(), Some(WORKSPACE), "~/proj/landed-here"),
        Place::Elsewhere("/home/agent/proj/landed-here".into())
    );
    let tree = Tree::new();
    assert_eq!(tree.create(WORKSPACE, "to_etc/landed-here"), Landed::Nowhere);
    let tree = Tree::new();
    assert_eq!(tree.create(WORKSPACE, "/tmp/tmp_home/proj/landed-here"), Landed::Elsewhere, "a link in /tmp");
    assert_ne!(place(&tree.view(), Some(WORKSPACE), "/tmp/tmp_home/proj/landed-here"), Place::Folder);
    let tree = Tree::new();
    assert_eq!(tree.create(HOME, "back/landed-here"), Landed::Folder);
    assert_eq!(place(&tree.view(), Some(HOME), "back/landed-here"), Place::Folder);
}
