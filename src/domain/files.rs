//! Where a group's agent sees its files: the folder it works in, its home,
//! and where each folder it can write is on the host. The session decides a
//! file tool's call by the path it would write (`session::files`); this is
//! the map it reads, made by the sandbox that lays the folders out.

use std::path::{Path, PathBuf};

/// The paths of one CLI process, as that process sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileView {
    /// The group's folder: the CLI's working directory.
    pub workspace: PathBuf,
    /// The CLI's home (its settings, transcripts, memory, the shell's start-up files).
    pub home: PathBuf,
    /// A sandbox's own `/tmp`, which nothing outside it reads.
    pub private_tmp: bool,
    /// Unconfined (`sandbox.mode = "none"`): the agent writes as pincer's user.
    pub unconfined: bool,
    /// The folders the CLI sees that pincer can look into: (as the CLI sees
    /// it, where it is on the host). Links are followed through these.
    pub mounts: Vec<(PathBuf, PathBuf)>,
}

impl FileView {
    /// An unconfined process sees the host as it is.
    pub fn unconfined(workspace: PathBuf, home: PathBuf) -> FileView {
        FileView { workspace, home, private_tmp: false, unconfined: true, mounts: vec![("/".into(), "/".into())] }
    }

    /// A sandbox's view (bwrap or Docker): its own `/tmp`, and `mounts` the
    /// folders bound in that pincer can look into.
    pub fn sandboxed(workspace: &str, home: &str, mounts: Vec<(PathBuf, PathBuf)>) -> FileView {
        FileView { workspace: workspace.into(), home: home.into(), private_tmp: true, unconfined: false, mounts }
    }

    /// Where `inside` (absolute, as the CLI sees it) is on the host, if it is
    /// under one of the known folders (the longest match wins).
    pub fn host_of(&self, inside: &Path) -> Option<PathBuf> {
        self.mounts
            .iter()
            .filter_map(|(seen, host)| inside.strip_prefix(seen).ok().map(|rest| (seen, host, rest)))
            .max_by_key(|(seen, _, _)| seen.components().count())
            .map(|(_, host, rest)| if rest.as_os_str().is_empty() { host.clone() } else { host.join(rest) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_known_folder_maps_a_path() {
        let view = FileView::sandboxed(
            "/workspace/group",
            "/home/agent",
            vec![
                ("/workspace/group".into(), "/g/alpha".into()),
                ("/workspace/group/shelf".into(), "/srv/shelf".into()),
                ("/home/agent".into(), "/d/homes/alpha".into()),
            ],
        );
        assert_eq!(view.host_of(Path::new("/workspace/group/a/b")), Some("/g/alpha/a/b".into()));
        assert_eq!(view.host_of(Path::new("/workspace/group/shelf/x")), Some("/srv/shelf/x".into()));
        assert_eq!(view.host_of(Path::new("/home/agent")), Some("/d/homes/alpha".into()));
        assert_eq!(view.host_of(Path::new("/tmp/x")), None);
        assert_eq!(view.host_of(Path::new("/workspace/groupie")), None, "by components, not by text");
        let host = FileView::unconfined("/g/alpha".into(), "/root".into());
        assert_eq!(host.host_of(Path::new("/etc/passwd")), Some("/etc/passwd".into()));
    }
}
