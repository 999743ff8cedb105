//! Which file a file tool would write, and where that is: the group's folder,
//! somewhere else, or a file that runs code or configures the CLI. The path
//! is spelled out as the CLI's tools do (trimmed, `~` the home, relative to
//! the CLI's working directory) and resolved as the kernel would (`..`,
//! links), looking through the folders pincer can see (`FileView::mounts`).
//! A `.git` or `.claude` anywhere on the way is refused by its name alone.
//! The verdict is `permission::decide`'s.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::claude::mcp::TOOL_PREFIX;
use crate::domain::files::FileView;

/// Where a file tool's path leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The group's folder, or a sandbox's own `/tmp` where pincer sees into it.
    Folder,
    /// Anywhere else the agent might write (the rest of its home, an extra mount).
    Elsewhere(PathBuf),
    /// Never written by a tool: what it holds runs as code or configures the CLI.
    Forbidden { path: PathBuf, why: &'static str },
}

/// How many links one path may pass through (Linux's own limit).
const MAX_LINKS: usize = 40;

/// The shell's (and other shells', and git's) start-up files in a home:
/// code in them runs at the next command, whoever approved that command.
const START_UP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    ".logout",
    ".inputrc",
    ".envrc",
    ".gitconfig",
    ".bash_aliases",
];

/// The path a file tool writes, for the tools decided by path: the CLI's
/// writing tools and pincer's `send_file` (relative to the group's folder).
pub fn target(tool_name: &str, input: &Value) -> Option<String> {
    let field = match tool_name {
        "Write" | "Edit" | "MultiEdit" => "file_path",
        "NotebookEdit" => "notebook_path",
        name if name.strip_prefix(TOOL_PREFIX) == Some("send_file") => "path",
        _ => return None,
    };
    // A missing or odd path is judged as the empty path: the folder itself, which no tool can write.
    Some(input.get(field).and_then(Value::as_str).unwrap_or_default().to_owned())
}

/// Where `raw` leads for a process that sees `view`, with `cwd` its working
/// directory (the group's folder when the CLI does not say).
pub fn place(view: &FileView, cwd: Option<&str>, raw: &str) -> Place {
    let cwd = cwd.map(PathBuf::from).filter(|c| c.is_absolute()).unwrap_or_else(|| view.workspace.clone());
    let joined = spelled(view, &cwd, raw);
    match resolve(view, &joined) {
        Some(walk) => classify(view, walk),
        None => Place::Forbidden { path: joined, why: "it passes through too many links" },
    }
}

/// Where a write to `raw` lands when it is in the group's folder ([`place`]
/// says [`Place::Folder`]): relative to the folder, or as the process sees it
/// in a sandbox's own `/tmp`. What the approval prompt names (`provenance`).
pub fn in_folder(view: &FileView, cwd: Option<&str>, raw: &str) -> Option<PathBuf> {
    if !matches!(place(view, cwd, raw), Place::Folder) {
        return None;
    }
    let cwd = cwd.map(PathBuf::from).filter(|c| c.is_absolute()).unwrap_or_else(|| view.workspace.clone());
    let path = resolve(view, &spelled(view, &cwd, raw))?.path;
    Some(path.strip_prefix(&view.workspace).map(Path::to_path_buf).unwrap_or(path))
}

/// The path as the CLI's tools spell it out before they open it (its
/// `expandPath`, seen in 2.1.197 and 2.1.332): trimmed of white space, a
/// leading `~` or `~/` is the home (`~user` is not: a name like any other),
/// a relative path is under the working directory.
fn spelled(view: &FileView, cwd: &Path, raw: &str) -> PathBuf {
    // JavaScript's `trim` also drops a byte-order mark, which Rust's does not call white space.
    let raw = raw.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if raw == "~" {
        return view.home.clone();
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        // Node's `join`: `~//etc/x` is the home's `etc/x`, never `/etc/x` (which `Path::join` would make it).
        let mut home = view.home.clone().into_os_string();
        home.push("/");
        home.push(rest);
        return home.into();
    }
    cwd.join(raw)
}

/// A path resolved, and every path it passed through whose last part is a
/// name that is refused by principle (`.git`, `.claude`): the spelling's
/// and the links' on the way, not only where it lands, since git and the CLI
/// find their files through the same links.
struct Walk {
    path: PathBuf,
    guarded: Vec<PathBuf>,
}

/// `path` with `.`, `..` and every link pincer can see resolved, as the
/// kernel would for the process (a `..` after a link leaves the link's
/// target). Parts outside the known folders are taken as written.
fn resolve(view: &FileView, path: &Path) -> Option<Walk> {
    let mut todo: Vec<OsString> = Vec::new();
    push_front(&mut todo, path);
    let mut out = PathBuf::from("/");
    let mut guarded = Vec::new();
    let mut links = 0;
    while let Some(part) = todo.pop() {
        if part == ".." {
            out.pop();
            continue;
        }
        if part == "." || part.is_empty() {
            continue;
        }
        out.push(&part);
        if Guarded::of(&part).is_some() {
            guarded.push(out.clone());
        }
        let Some(host) = view.host_of(&out) else { continue };
        let Ok(target) = std::fs::read_link(&host) else { continue };
        links += 1;
        if links > MAX_LINKS {
            return None;
        }
        out.pop();
        if target.is_absolute() {
            out = PathBuf::from("/");
        }
        push_front(&mut todo, &target);
    }
    Some(Walk { path: out, guarded })
}

/// Puts `path`'s parts before what is left to do (`todo` is a stack).
fn push_front(todo: &mut Vec<OsString>, path: &Path) {
    for part in path.components().rev() {
        match part {
            Component::Normal(name) => todo.push(name.to_owned()),
            Component::ParentDir => todo.push("..".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
}

/// The names no file tool writes through, wherever they are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Guarded {
    /// A repository's directory, or a `.git` file naming one (`gitdir:`):
    /// git runs what its config (`core.fsmonitor`, `core.pager`, aliases)
    /// and hooks name at any git command, whoever approved that command.
    Git,
    /// The CLI's own folder: skills, commands, agents and settings it loads
    /// (a skill is instructions the model follows as the admins' own).
    Claude,
}

impl Guarded {
    /// Compared without case: git itself treats `.GIT` as `.git` where the
    /// file system folds case (`core.ignorecase`, macOS, a vfat or casefolded
    /// ext4 mount among the extra mounts), and no honest file needs the name.
    fn of(name: &std::ffi::OsStr) -> Option<Guarded> {
        let name = name.as_encoded_bytes();
        if name.eq_ignore_ascii_case(b".git") {
            Some(Guarded::Git)
        } else if name.eq_ignore_ascii_case(b".claude") {
            Some(Guarded::Claude)
        } else {
            None
        }
    }

    fn why(self) -> &'static str {
        match self {
            Guarded::Git => "a `.git` file or folder becomes git's config and hooks, which run as code at any git command",
            Guarded::Claude => "a `.claude` folder holds the CLI's skills, commands, agents and settings, which steer the agent as if its admins wrote them",
        }
    }
}

fn classify(view: &FileView, walk: Walk) -> Place {
    let Walk { path, guarded } = walk;
    if let Some(why) = refused_by_name(view, &path, &guarded) {
        return Place::Forbidden { path, why };
    }
    if path.starts_with(&view.workspace) && path != view.workspace {
        return Place::Folder;
    }
    // A sandbox's own `/tmp` is the group's only where pincer sees into it: a
    // link there (made by any approved command) leads anywhere, the home's
    // start-up files too, and pincer cannot follow what it cannot see.
    let tmp_seen = view.host_of(Path::new("/tmp")).is_some();
    if view.private_tmp && tmp_seen && path.starts_with("/tmp") && path != Path::new("/tmp") {
        return Place::Folder;
    }
    if let Ok(rel) = path.strip_prefix(&view.home) {
        let mut parts = rel.components().filter_map(|c| match c {
            Component::Normal(name) => name.to_str(),
            _ => None,
        });
        let first = parts.next().unwrap_or_default();
        if START_UP_FILES.contains(&first) {
            return Place::Forbidden { path, why: "a shell's start-up file runs as code at the next command" };
        }
        if first == ".config" && matches!(parts.next(), Some("fish" | "git" | "environment.d")) {
            return Place::Forbidden { path, why: "a shell's or git's start-up file runs as code" };
        }
    }
    Place::Elsewhere(path)
}

/// Why a path that passed through `guarded` is refused, if it is: any
/// `.git`; any `.claude` but the one way to the CLI's memory in its home.
fn refused_by_name(view: &FileView, path: &Path, guarded: &[PathBuf]) -> Option<&'static str> {
    let kinds = || guarded.iter().filter_map(|p| p.file_name().and_then(Guarded::of));
    if kinds().any(|kind| kind == Guarded::Git) {
        return Some(Guarded::Git.why());
    }
    // The memory is asked of an admin, not refused: it is text the model
    // reads (as it reads the group's CLAUDE.md), not settings or code, and
    // the CLI writes it there itself, so the agent keeping it is expected.
    let home_claude = view.home.join(".claude");
    let to_memory = guarded.iter().all(|p| *p == home_claude) && path.strip_prefix(&view.home).is_ok_and(is_memory);
    (kinds().any(|kind| kind == Guarded::Claude) && !to_memory).then_some(Guarded::Claude.why())
}

/// The CLI's memory in its home: `~/.claude/CLAUDE.md` and a project's
/// `~/.claude/projects/<project>/memory/`.
fn is_memory(rel: &Path) -> bool {
    let parts: Vec<&str> = rel.components().filter_map(|c| c.as_os_str().to_str()).collect();
    matches!(parts.as_slice(), [".claude", "CLAUDE.md"])
        || matches!(parts.as_slice(), [".claude", "projects", _, "memory", _, ..])
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A bwrap-like view over real folders: the workspace and the home on the host.
    fn sandboxed() -> (tempfile::TempDir, FileView) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("group")).unwrap();
        std::fs::create_dir_all(dir.path().join("home/.claude")).unwrap();
        let view = FileView::sandboxed(
            "/workspace/group",
            "/home/agent",
            vec![
                ("/workspace/group".into(), dir.path().join("group")),
                ("/home/agent".into(), dir.path().join("home")),
            ],
        );
        (dir, view)
    }

    fn forbidden(place: &Place) -> bool {
        matches!(place, Place::Forbidden { .. })
    }

    #[test]
    fn the_folder_and_private_tmp_are_the_groups() {
        let (_dir, view) = sandboxed();
        assert_eq!(place(&view, None, "notes.md"), Place::Folder);
        assert_eq!(place(&view, None, "/workspace/group/a/b.txt"), Place::Folder);
        assert_eq!(place(&view, Some("/workspace/group/sub"), "../c.txt"), Place::Folder);
        assert_eq!(place(&view, None, ""), Place::Elsewhere("/workspace/group".into()), "the folder itself");
        // pincer cannot see the sandbox's own /tmp, nor a link there to the home.
        assert_eq!(place(&view, None, "/tmp/scratch.py"), Place::Elsewhere("/tmp/scratch.py".into()));
        let mut seen = view.clone();
        seen.mounts.push(("/tmp".into(), _dir.path().join("group")));
        assert_eq!(place(&seen, None, "/tmp/scratch.py"), Place::Folder, "a /tmp pincer sees into");
    }

    #[test]
    fn a_write_in_the_folder_is_named_relative_to_it() {
        let (_dir, view) = sandboxed();
        assert_eq!(in_folder(&view, None, "config"), Some("config".into()));
        assert_eq!(in_folder(&view, None, "/workspace/group/objects/info/keep"), Some("objects/info/keep".into()));
        assert_eq!(in_folder(&view, Some("/workspace/group/sub"), "../HEAD"), Some("HEAD".into()));
        assert_eq!(in_folder(&view, None, "/home/agent/notes"), None, "not the folder");
        assert_eq!(in_folder(&view, None, "/home/agent/.bashrc"), None, "refused, so never written");
    }

    #[test]
    fn start_up_files_and_the_clis_own_files_are_refused() {
        let (_dir, view) = sandboxed();
        for path in [
            "/home/agent/.bashrc",
            "~/.bashrc",
            "  ~/.profile ",
            "\t~/.zshrc\n",
            "~//.bashrc",
            "../../home/agent/.bash_profile",
            "/workspace/group/../../home/agent/.profile",
            "/home/agent/.zshenv",
            "/home/agent/.config/fish/config.fish",
            "/home/agent/.claude/settings.json",
            "~/.claude/settings.json",
            "/home/agent/.claude/shell-snapshots/snapshot-bash-1.sh",
            "/workspace/group/repo/.git/config",
            "/workspace/group/repo/.git/hooks/pre-commit",
        ] {
            let got = place(&view, None, path);
            assert!(forbidden(&got), "{path}: {got:?}");
        }
        // As the CLI reads them: `~user` is a name like any other, and `~` alone is the home.
        assert_eq!(place(&view, None, "~agent/.bashrc"), Place::Folder);
        assert_eq!(place(&view, None, " notes.md\t"), Place::Folder);
        assert_eq!(place(&view, None, "~"), Place::Elsewhere("/home/agent".into()));
        assert_eq!(place(&view, None, "~/notes.txt"), Place::Elsewhere("/home/agent/notes.txt".into()));
        assert_eq!(place(&view, None, "  "), Place::Elsewhere("/workspace/group".into()), "the folder itself");
        assert_eq!(
            place(&view, None, "/home/agent/.claude/CLAUDE.md"),
            Place::Elsewhere("/home/agent/.claude/CLAUDE.md".into()),
            "its memory is asked of an admin, not refused"
        );
        assert!(matches!(place(&view, None, "/home/agent/.claude/projects/-w/memory/x.md"), Place::Elsewhere(_)));
        assert!(matches!(place(&view, None, "/home/agent/notes.txt"), Place::Elsewhere(_)));
        assert!(matches!(place(&view, None, "/etc/hosts"), Place::Elsewhere(_)));
    }

    #[test]
    fn links_are_followed_as_the_tool_would() {
        let (dir, view) = sandboxed();
        let group = dir.path().join("group");
        symlink("/home/agent/.bashrc", group.join("innocent.txt")).unwrap();
        symlink("/home/agent", group.join("h")).unwrap();
        symlink("../home/agent/.claude", dir.path().join("group/rel")).unwrap();
        std::fs::create_dir(group.join("sub")).unwrap();
        symlink("sub", group.join("s")).unwrap();
        symlink("loop", group.join("loop")).unwrap();
        assert!(forbidden(&place(&view, None, "innocent.txt")), "a link to a start-up file");
        assert!(forbidden(&place(&view, None, "h/.profile")), "a link to the home, then a start-up file");
        assert_eq!(place(&view, None, "h/notes.txt"), Place::Elsewhere("/home/agent/notes.txt".into()));
        // `rel` resolves inside the sandbox's view: /workspace/home/agent/.claude, which is not the home,
        // but a `.claude` all the same.
        assert!(forbidden(&place(&view, None, "rel/settings.json")));
        symlink("../home/agent", dir.path().join("group/relhome")).unwrap();
        assert_eq!(place(&view, None, "relhome/notes.txt"), Place::Elsewhere("/workspace/home/agent/notes.txt".into()));
        assert_eq!(place(&view, None, "s/x.txt"), Place::Folder);
        assert_eq!(place(&view, None, "s/../x.txt"), Place::Folder, "`..` after a link leaves its target");
        assert!(forbidden(&place(&view, None, "loop")), "a link to itself");
    }

    #[test]
    fn an_unconfined_agent_sees_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let group = dir.path().join("groups/alpha");
        std::fs::create_dir_all(&group).unwrap();
        let view = FileView::unconfined(group.clone(), dir.path().join("home"));
        assert_eq!(place(&view, None, "notes.md"), Place::Folder);
        assert!(matches!(place(&view, None, "/tmp/x"), Place::Elsewhere(_)), "the host's /tmp is shared");
        symlink(dir.path().join("home/.bashrc"), group.join("rc")).unwrap();
        assert!(forbidden(&place(&view, None, "rc")));
    }

    #[test]
    fn git_and_the_clis_folder_are_refused_by_name_anywhere() {
        let (dir, view) = sandboxed();
        let group = dir.path().join("group");
        std::fs::create_dir_all(group.join("real")).unwrap();
        symlink("real", group.join("linked.git")).unwrap();
        std::fs::create_dir_all(group.join("sub")).unwrap();
        symlink("../real", group.join("sub/.git")).unwrap();
        symlink("/workspace/group/real", group.join(".claude")).unwrap();
        for path in [
            ".git/config",
            ".git/HEAD",
            "sub/.git",
            "a/b/.git",
            ".GIT/config",
            "sub/.Git/hooks/x",
            "sub/.git/config",
            "/tmp/repo/.git/config",
            "/home/agent/.git",
            "/home/agent/project/.git/info/attributes",
            ".git/../notes.md",
            ".claude/skills/x/SKILL.md",
            ".claude/settings.json",
            "deep/.claude/commands/go.md",
            ".Claude/agents/a.md",
            "/tmp/.claude/settings.json",
            "/home/agent/.claude/skills/x/SKILL.md",
        ] {
            let got = place(&view, None, path);
            assert!(forbidden(&got), "{path}: {got:?}");
        }
        assert!(
            matches!(place(&view, None, "~/.git"), Place::Forbidden { why, .. } if why.contains("git")),
            "its why says what it would become"
        );
        assert!(
            matches!(place(&view, None, ".claude/x"), Place::Forbidden { why, .. } if why.contains("skills")),
            "its why says what it would become"
        );
        assert_eq!(place(&view, None, "linked.git/x"), Place::Folder, "a name ending in .git is not .git");
        assert_eq!(place(&view, None, "real/config"), Place::Folder, "the link's target, spelled directly");
        assert_eq!(place(&view, None, "git/config"), Place::Folder);
        assert_eq!(place(&view, None, ".gitignore"), Place::Folder);
        assert_eq!(place(&view, None, ".claude.md"), Place::Folder);
        assert!(matches!(place(&view, None, "~/.claude/CLAUDE.md"), Place::Elsewhere(_)), "the memory, asked");
    }

    #[test]
    fn the_memory_exception_is_only_the_homes() {
        let (dir, view) = sandboxed();
        symlink("/home/agent/.claude", dir.path().join("group/mem")).unwrap();
        assert!(matches!(place(&view, None, "mem/CLAUDE.md"), Place::Elsewhere(_)), "through a link with another name");
        symlink("/home/agent", dir.path().join("group/.claude")).unwrap();
        assert!(forbidden(&place(&view, None, ".claude/.claude/CLAUDE.md")), "through the folder's own .claude");
        assert!(forbidden(&place(&view, None, "/home/agent/.CLAUDE/CLAUDE.md")));
    }

    #[test]
    fn only_writing_tools_have_a_target() {
        let input = serde_json::json!({"file_path": "a", "notebook_path": "b", "path": "c"});
        assert_eq!(target("Write", &input).as_deref(), Some("a"));
        assert_eq!(target("Edit", &input).as_deref(), Some("a"));
        assert_eq!(target("NotebookEdit", &input).as_deref(), Some("b"));
        assert_eq!(target("mcp__pincer__send_file", &input).as_deref(), Some("c"));
        assert_eq!(target("Read", &input), None);
        assert_eq!(target("Bash", &input), None);
        assert_eq!(target("Write", &serde_json::json!({})).as_deref(), Some(""));
    }
}
