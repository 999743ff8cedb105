//! A CLI home of its own for each isolated scheduled run.
//!
//! A confined CLI keeps its state (`~/.claude.json`, `~/.claude/`, the
//! session transcripts) in its home, `data_dir/homes/<group>`. An isolated
//! run is a second CLI process of the same group, often beside the group's
//! live session: sharing that home would have two processes writing one
//! `~/.claude.json`, and would leave the run's transcript in the group's
//! home. So each isolated run gets a fresh home outside every group's,
//! `data_dir/isolated-homes/<group>.<n>` (group names hold no `.`, so two
//! runs never meet), created 0700 and removed with its [`IsolatedHome`]
//! when the run's session ends. A pincer killed mid-run leaves one behind:
//! [`clear`] removes them at the next start, when no run can be using them
//! (the data directory's lock is held).
//!
//! Unconfined (`none`) runs keep pincer's own HOME, as every unconfined
//! session does: there the CLI may hold an operator's `claude login`, which a
//! fresh home would not have.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::GroupName;

/// The folder under `data_dir` that holds the isolated runs' homes.
const DIR: &str = "isolated-homes";

/// An isolated run's home, removed when this is dropped.
#[derive(Debug)]
pub struct IsolatedHome {
    path: PathBuf,
}

impl IsolatedHome {
    /// Creates a fresh, empty home for an isolated run of `group`.
    pub fn create(data_dir: &Path, group: &GroupName) -> io::Result<IsolatedHome> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let root = data_dir.join(DIR);
        crate::private::create_dir(&root)?;
        loop {
            let path = root.join(format!("{group}.{}", NEXT.fetch_add(1, Ordering::Relaxed)));
            // Not recursive: an existing folder (a leftover) is an error, never reused.
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(IsolatedHome { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for IsolatedHome {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                home = %self.path.display(), %e,
                "cannot remove an isolated run's CLI home; it is removed at the next start"
            ),
        }
    }
}

/// Removes the homes a killed pincer's isolated runs left behind. Call it only
/// while holding the data directory's lock, before any session starts.
pub fn clear(data_dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(data_dir.join(DIR)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn each_run_gets_a_fresh_private_home_outside_every_groups_home_removed_when_it_ends() {
        let data = tempfile::tempdir().unwrap();
        let group: GroupName = "team".parse().unwrap();
        let live = data.path().join("homes").join("team");
        let (one, two) =
            (IsolatedHome::create(data.path(), &group).unwrap(), IsolatedHome::create(data.path(), &group).unwrap());
        for home in [&one, &two] {
            assert!(!home.path().starts_with(data.path().join("homes")), "outside every group's home: {home:?}");
            assert!(!live.starts_with(home.path()), "{home:?}");
            let meta = std::fs::metadata(home.path()).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o700);
            assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0, "empty: nothing of another run");
        }
        assert_ne!(one.path(), two.path(), "two runs at once never share one");
        std::fs::write(one.path().join(".claude.json"), "{}").unwrap();
        let path = one.path().to_owned();
        drop(one);
        assert!(!path.exists(), "removed when the run ends");
        assert!(two.path().exists());
    }

    #[test]
    fn leftovers_are_cleared_at_the_next_start() {
        let data = tempfile::tempdir().unwrap();
        let group: GroupName = "team".parse().unwrap();
        let home = IsolatedHome::create(data.path(), &group).unwrap();
        let leftover = home.path().to_owned();
        std::mem::forget(home);
        let next = IsolatedHome::create(data.path(), &group).unwrap();
        assert_ne!(next.path(), leftover);
        drop(next);
        clear(data.path()).unwrap();
        assert!(!leftover.exists());
        clear(data.path()).expect("nothing to clear is no error");
    }
}
