//! A group's folder as a snapshot, so the folder moves with the group
//! between cluster nodes (issue 36): taken when its session's CLI stops
//! (idle close, shutdown), stored by the group's owner, and put in place by
//! the node that claims the group next. Touches only `groups_dir/<group>`
//! and, while restoring, two folders beside it whose names no group can
//! have (`.<group>.incoming`, `.<group>.replaced`).
//!
//! The folder is the agent's: any entry may be a link, a FIFO or a huge
//! file. So the walk never follows a link or uses a path twice: each entry
//! is opened from its folder's descriptor with `O_NOFOLLOW | O_NONBLOCK`,
//! asked what it is (`fstat`), and kept only as a regular file or a folder;
//! links, FIFOs, sockets and devices are left out. A snapshot is capped
//! ([`CAP_BYTES`], [`CAP_ENTRIES`], [`MAX_DEPTH`]): a bigger folder is not
//! snapshotted at all (the README says to share `groups_dir` then), never
//! cut. A restore writes a fresh folder beside the old one and swaps them
//! with two renames, so a half-written folder is never the group's.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};

use crate::domain::GroupName;

/// The most a snapshot holds, in file bytes.
pub const CAP_BYTES: u64 = 32 << 20;
/// The most entries (files and folders) a snapshot holds.
pub const CAP_ENTRIES: usize = 5_000;
/// Folders inside folders the walk goes into at most.
pub const MAX_DEPTH: usize = 32;

/// One kept entry: its path under the folder ('/'-separated, checked), and
/// its contents (a folder has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Folder { path: String },
    File { path: String, executable: bool, bytes: Vec<u8> },
}

/// Why a folder was not snapshotted.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the folder holds more than {CAP_BYTES} bytes or {CAP_ENTRIES} entries")]
    TooBig,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The folder's regular files and folders, links and the rest left out.
pub fn take(folder: &Path) -> Result<Vec<Entry>, SnapshotError> {
    let root = open_dir_path(folder)?;
    let mut walk = Walk { entries: Vec::new(), bytes: 0 };
    walk.dir(&root, "", 0)?;
    Ok(walk.entries)
}

struct Walk {
    entries: Vec<Entry>,
    bytes: u64,
}

impl Walk {
    fn dir(&mut self, dir: &OwnedFd, prefix: &str, depth: usize) -> Result<(), SnapshotError> {
        if depth >= MAX_DEPTH {
            return Ok(());
        }
        let mut names: Vec<OsString> = names_in(dir)?;
        names.sort();
        for name in names {
            let Some(name) = name.to_str().filter(|n| fit_name(n)).map(str::to_owned) else { continue };
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
            let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
            let Ok(fd) = open_at(dir, &name, flags, Mode::empty()) else {
                continue; // a link (ELOOP), gone, or unreadable: left out
            };
            let Ok(stat) = fstat(fd.as_raw_fd()) else { continue };
            let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
            if self.entries.len() >= CAP_ENTRIES {
                return Err(SnapshotError::TooBig);
            }
            if kind == SFlag::S_IFDIR {
                self.entries.push(Entry::Folder { path: path.clone() });
                self.dir(&fd, &path, depth + 1)?;
            } else if kind == SFlag::S_IFREG {
                let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
                if self.bytes.saturating_add(size) > CAP_BYTES {
                    return Err(SnapshotError::TooBig);
                }
                let mut bytes = Vec::new();
                File::from(fd).take(CAP_BYTES - self.bytes + 1).read_to_end(&mut bytes)?;
                self.bytes += bytes.len() as u64;
                if self.bytes > CAP_BYTES {
                    return Err(SnapshotError::TooBig);
                }
                self.entries.push(Entry::File { path, executable: stat.st_mode & 0o100 != 0, bytes });
            }
        }
        Ok(())
    }
}

/// A name one path component may have: not `.`/`..`, no `/` or NUL.
fn fit_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// Whether `path` is a relative path of fit names.
fn fit_path(path: &str) -> bool {
    path.split('/').all(fit_name)
}

/// Puts `entries` in place as `groups_dir/<group>`, replacing what is there.
pub fn restore(groups_dir: &Path, group: &GroupName, entries: &[Entry]) -> io::Result<()> {
    let parent = open_dir_path(groups_dir)?;
    let incoming = format!(".{group}.incoming");
    let replaced = format!(".{group}.replaced");
    remove_beside(groups_dir, &incoming)?;
    remove_beside(groups_dir, &replaced)?;
    mkdirat(Some(parent.as_raw_fd()), incoming.as_str(), Mode::from_bits_truncate(0o700))?;
    let fresh = open_at(&parent, &incoming, dir_flags(), Mode::empty())?;
    for entry in entries {
        write_entry(&fresh, entry)?;
    }
    fresh_permissions(&fresh)?;
    let name = group.as_str();
    let at = Some(parent.as_raw_fd());
    match nix::fcntl::renameat(at, name, at, replaced.as_str()) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    nix::fcntl::renameat(at, incoming.as_str(), at, name)?;
    remove_beside(groups_dir, &replaced)
}

/// A group folder's own permissions (the sandbox maps the agent to its owner).
fn fresh_permissions(dir: &OwnedFd) -> io::Result<()> {
    nix::sys::stat::fchmod(dir.as_raw_fd(), Mode::from_bits_truncate(0o755))?;
    Ok(())
}

fn write_entry(root: &OwnedFd, entry: &Entry) -> io::Result<()> {
    let path = match entry {
        Entry::Folder { path } | Entry::File { path, .. } => path,
    };
    if !fit_path(path) {
        return Err(io::Error::other(format!("a snapshot entry with an unfit path: {path:?}")));
    }
    let (parent, name) = match path.rsplit_once('/') {
        Some((dirs, name)) => (Some(open_dirs(root, dirs)?), name),
        None => (None, path.as_str()),
    };
    let at = parent.as_ref().unwrap_or(root);
    match entry {
        Entry::Folder { .. } => Ok(mkdirat(Some(at.as_raw_fd()), name, Mode::from_bits_truncate(0o755))?),
        Entry::File { executable, bytes, .. } => {
            let mode = if *executable { 0o755 } else { 0o644 };
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let fd = open_at(at, name, flags, Mode::from_bits_truncate(mode))?;
            File::from(fd).write_all(bytes)
        }
    }
}

/// Opens the folders of `dirs` under `root` (made by this restore: entries
/// come folder first), one descriptor at a time.
fn open_dirs(root: &OwnedFd, dirs: &str) -> io::Result<OwnedFd> {
    let mut at = open_at(root, ".", dir_flags(), Mode::empty())?;
    for name in dirs.split('/') {
        at = open_at(&at, name, dir_flags(), Mode::empty())?;
    }
    Ok(at)
}

fn remove_beside(groups_dir: &Path, name: &str) -> io::Result<()> {
    // std's remove_dir_all does not follow links (it works by descriptor).
    match std::fs::remove_dir_all(groups_dir.join(name)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// pincer's own folder (`groups_dir`, or a group's folder it names): a
/// path of the operator's, opened once.
fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let fd = nix::fcntl::open(path, dir_flags(), Mode::empty())?;
    // SAFETY: a fresh descriptor from open, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `name` opened from the folder `dir`.
fn open_at(dir: &OwnedFd, name: &str, flags: OFlag, mode: Mode) -> Result<OwnedFd, nix::errno::Errno> {
    let fd = openat(Some(dir.as_raw_fd()), name, flags, mode)?;
    // SAFETY: a fresh descriptor from openat, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The names in an open folder, read through its descriptor (not a path).
fn names_in(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?.map(|entry| entry.map(|e| e.file_name())).collect()
}

/// Notes in `data_dir` (pincer's, never the agent's) which snapshot of
/// `group`'s folder this node last took or put in place.
pub fn remember(data_dir: &Path, group: &GroupName, taken_at_us: i64) -> io::Result<()> {
    let dir = data_dir.join("folders");
    crate::private::create_dir(&dir)?;
    std::fs::write(dir.join(group.as_str()), taken_at_us.to_string())
}

/// What [`remember`] noted for `group`, if anything.
pub fn remembered(data_dir: &Path, group: &GroupName) -> Option<i64> {
    std::fs::read_to_string(data_dir.join("folders").join(group.as_str())).ok()?.trim().parse().ok()
}

/// The snapshot as bytes for the store: per entry a kind byte (0 folder, 1
/// file, 2 executable file), the path's length (u32 LE) and bytes, and for
/// a file its length (u64 LE) and bytes.
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let (kind, path, bytes): (u8, &str, &[u8]) = match entry {
            Entry::Folder { path } => (0, path, &[]),
            Entry::File { path, executable, bytes } => (if *executable { 2 } else { 1 }, path, bytes),
        };
        out.push(kind);
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        if kind != 0 {
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// [`encode`]'s bytes back, checked: `None` when they are not a snapshot.
pub fn decode(mut bytes: &[u8]) -> Option<Vec<Entry>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = bytes.split_at_checked(n)?;
        *bytes = rest;
        Some(head)
    }
    let mut entries = Vec::new();
    while !bytes.is_empty() {
        let kind = take(&mut bytes, 1)?[0];
        let len = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().ok()?) as usize;
        let path = std::str::from_utf8(take(&mut bytes, len)?).ok()?.to_owned();
        if !fit_path(&path) {
            return None;
        }
        entries.push(match kind {
            0 => Entry::Folder { path },
            1 | 2 => {
                let len = usize::try_from(u64::from_le_bytes(take(&mut bytes, 8)?.try_into().ok()?)).ok()?;
                Entry::File { path, executable: kind == 2, bytes: take(&mut bytes, len)?.to_vec() }
            }
            _ => return None,
        });
    }
    Some(entries)
}

#[cfg(test)]
mod tests;
