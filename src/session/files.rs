//! Which file a file tool would write, and where that is: the group's folder,
//! somewhere else, or a file that runs code or configures the CLI. The path
//! is resolved as the tool would resolve it (relative to the CLI's working
//! directory, `..`, links), looking through the folders pincer can see
//! (`FileView::mounts`); the verdict is `permission::decide`'s.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::claude::mcp::TOOL_PREFIX;
use crate::domain::files::FileView;

/// Where a file tool's path leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The group's folder, or a sandbox's own `/tmp`.
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
    let joined = cwd.join(raw);
    match resolve(view, &joined) {
        Some(path) => classify(view, path),
        None => Place::Forbidden { path: joined, why: "it passes through too many links" },
    }
}

/// `path` with `.`, `..` and every link pincer can see resolved, as the
/// kernel would for the process (a `..` after a link leaves the link's
/// target). Parts outside the known folders are taken as written.
fn resolve(view: &FileView, path: &Path) -> Option<PathBuf> {
    let mut todo: Vec<OsString> = Vec::new();
    push_front(&mut todo, path);
    let mut out = PathBuf::from("/");
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
    Some(out)
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

fn classify(view: &FileView, path: PathBuf) -> Place {
    if let Some(why) = runs_code_in_folder(&path) {
        return Place::Forbidden { path, why };
    }
    if path.starts_with(&view.workspace) && path != view.workspace {
        return Place::Folder;
    }
    if view.private_tmp && path.starts_with("/tmp") && path != Path::new("/tmp") {
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
        if first == ".claude" && !is_memory(rel) {
            return Place::Forbidden {
                path,
                why: "the CLI's own files (settings, shell snapshots) are not the agent's to write; only its memory is",
            };
        }
    }
    Place::Elsewhere(path)
}

/// A git repository's configuration and hooks, anywhere: git runs what they
/// name (`core.fsmonitor`, hooks) at a `git status` nobody would think twice about.
fn runs_code_in_folder(path: &Path) -> Option<&'static str> {
    let parts: Vec<&str> = path.components().filter_map(|c| c.as_os_str().to_str()).collect();
    parts
        .windows(2)
        .any(|w| w[0] == ".git" && matches!(w[1], "config" | "hooks"))
        .then_some("git runs what a repository's config and hooks name, at any git command")
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
        assert_eq!(place(&view, None, "/tmp/scratch.py"), Place::Folder);
        assert_eq!(place(&view, None, ""), Place::Elsewhere("/workspace/group".into()), "the folder itself");
    }

    #[test]
    fn start_up_files_and_the_clis_own_files_are_refused() {
        let (_dir, view) = sandboxed();
        for path in [
            "/home/agent/.bashrc",
            "~/.bashrc",
            "../../home/agent/.bash_profile",
            "/workspace/group/../../home/agent/.profile",
            "/home/agent/.zshenv",
            "/home/agent/.config/fish/config.fish",
            "/home/agent/.claude/settings.json",
            "/home/agent/.claude/shell-snapshots/snapshot-bash-1.sh",
            "/workspace/group/repo/.git/config",
            "/workspace/group/repo/.git/hooks/pre-commit",
        ] {
            let got = place(&view, None, path);
            // `~` is not expanded by the tools: it is a folder named `~` in the workspace.
            if path.starts_with('~') {
                assert_eq!(got, Place::Folder, "{path}");
            } else {
                assert!(forbidden(&got), "{path}: {got:?}");
            }
        }
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
        // `rel` resolves inside the sandbox's view: /workspace/home/agent/.claude, which is not the home.
        assert_eq!(
            place(&view, None, "rel/settings.json"),
            Place::Elsewhere("/workspace/home/agent/.claude/settings.json".into())
        );
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
