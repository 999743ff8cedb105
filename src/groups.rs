//! Group folders on disk: `groups/<name>/CLAUDE.md` (the group's memory) and
//! `groups/global/CLAUDE.md` (memory every group shares).
//!
//! Existing files are never overwritten: they are the agent's memory.

use std::io;
use std::path::{Path, PathBuf};

use crate::domain::GroupName;

/// The folder of shared memory.
pub const GLOBAL_DIR: &str = "global";

/// The folders under `groups_dir` that pincer keeps for itself, with what
/// each holds: a group of that name would have its agent write there.
const RESERVED: &[(&str, &str)] = &[(GLOBAL_DIR, "the memory every group's agent reads (its CLAUDE.md)")];

/// A group name that is one of pincer's own folders under `groups_dir`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the group name `{name}` is reserved: groups/{name} is {holds}, and a group of that name would let its \
     agent rewrite it. Choose another name, e.g. `{name}-chat`"
)]
pub struct ReservedName {
    pub name: String,
    pub holds: &'static str,
}

/// Refuses a name pincer uses for a folder of its own under `groups_dir`.
pub fn check_not_reserved(name: &GroupName) -> Result<(), ReservedName> {
    match RESERVED.iter().find(|(folder, _)| *folder == name.as_str()) {
        Some((folder, holds)) => Err(ReservedName { name: (*folder).to_owned(), holds }),
        None => Ok(()),
    }
}

fn write_if_missing(path: &Path, text: &str) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(mut f) => io::Write::write_all(&mut f, text.as_bytes()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the shared memory file if it is missing.
pub fn ensure_global(groups_dir: &Path, assistant_name: &str) -> io::Result<PathBuf> {
    let path = groups_dir.join(GLOBAL_DIR).join("CLAUDE.md");
    write_if_missing(
        &path,
        &format!(
            "# Shared memory\n\nYou are {assistant_name}, an assistant that lives in group chats.\n\
             Facts and preferences written here are read by every group's agent.\n"
        ),
    )?;
    Ok(path)
}

/// Creates a group's folder with a starter `CLAUDE.md`, and the shared memory.
pub fn create(groups_dir: &Path, name: &GroupName, assistant_name: &str) -> io::Result<PathBuf> {
    ensure_global(groups_dir, assistant_name)?;
    let dir = groups_dir.join(name.as_str());
    write_if_missing(
        &dir.join("CLAUDE.md"),
        &format!(
            "# Memory of the group `{name}`\n\n\
             You are {assistant_name}, the assistant of this group chat. This folder is your\n\
             workspace; keep notes that should survive across conversations in this file.\n"
        ),
    )?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pincers_own_folders_are_no_group_names() {
        let reserved = check_not_reserved(&"global".parse().unwrap()).unwrap_err();
        assert_eq!(reserved.name, "global");
        assert!(reserved.to_string().contains("Choose another name, e.g. `global-chat`"), "{reserved}");
        for ok in ["team", "globals", "global-chat", "my-global"] {
            assert_eq!(check_not_reserved(&ok.parse().unwrap()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn creates_memory_once_and_keeps_edits() {
        let tmp = tempfile::tempdir().unwrap();
        let name: GroupName = "team".parse().unwrap();
        let dir = create(tmp.path(), &name, "Andy").unwrap();
        let memory = dir.join("CLAUDE.md");
        assert!(std::fs::read_to_string(&memory).unwrap().contains("Andy"));
        std::fs::write(&memory, "edited").unwrap();
        create(tmp.path(), &name, "Andy").unwrap();
        assert_eq!(std::fs::read_to_string(&memory).unwrap(), "edited");
        assert!(tmp.path().join("global/CLAUDE.md").exists());
    }
}
