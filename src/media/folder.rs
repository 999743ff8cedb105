//! Files in a group's folder, where the agent writes too: pincer saving a
//! chat's attachment into `inbox/<date>/` ([`save_in_inbox`]), and opening a
//! file the agent asks to send ([`open_to_send`]). The agent can put a link
//! anywhere in its folder, and swap a folder for a link between a check and a
//! use, so neither trusts a path: both walk it one component at a time from
//! the group's folder with `openat(O_NOFOLLOW)`, refusing any link and any
//! `..`, and use the descriptor they opened, never the path again.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};

/// The folder attachments are saved in, inside a group's folder.
pub const INBOX: &str = "inbox";
/// Where the group's folder is inside a sandbox (`sandbox::bwrap::WORKSPACE`).
const SANDBOX_FOLDER: &str = "/workspace/group";
/// Names tried when a file of that name is already there: `name`, `2-name`, …
const SAME_NAME_TRIES: u32 = 100;

/// Why a file could not be saved or opened; the text is for the agent or the log.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FolderError {
    #[error("{0} is outside the group's folder: give a path inside it (relative, or under {SANDBOX_FOLDER})")]
    Outside(String),
    #[error("{0} is a link: send the file itself, not a link to it")]
    Link(String),
    #[error("{0} does not exist in the group's folder")]
    Missing(String),
    #[error("{0} is not a regular file")]
    NotAFile(String),
    #[error("{what}: {errno}")]
    Io { what: String, errno: Errno },
}

/// Saves `bytes` as `inbox/<day>/<name>` in `group_dir` (another name when
/// that one is taken) and returns the path relative to the folder.
/// `day` and `name` must already be safe single names
/// (`domain::media::safe_file_name`); `inbox` or the day's folder being a
/// link or a file is refused, so pincer never writes outside the folder.
pub fn save_in_inbox(group_dir: &Path, day: &str, name: &str, bytes: &[u8]) -> Result<PathBuf, FolderError> {
    for part in [day, name] {
        if !is_single_name(part) {
            return Err(FolderError::Outside(part.to_owned()));
        }
    }
    let group = open_dir(None, group_dir, &group_dir.display().to_string())?;
    let inbox = make_dir(&group, INBOX)?;
    let dated = make_dir(&inbox, day)?;
    let mode = Mode::from_bits_truncate(0o644);
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    for n in 1..=SAME_NAME_TRIES {
        let candidate = if n == 1 { name.to_owned() } else { format!("{n}-{name}") };
        match openat(Some(dated.as_raw_fd()), candidate.as_str(), flags, mode) {
            Ok(fd) => {
                // SAFETY: a fresh descriptor from openat, owned by nothing else.
                let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                let relative = Path::new(INBOX).join(day).join(&candidate);
                file.write_all(bytes)
                    .map_err(|e| FolderError::Io { what: relative.display().to_string(), errno: errno_of(&e) })?;
                return Ok(relative);
            }
            // Taken (or a link there): the next name.
            Err(Errno::EEXIST) => continue,
            Err(errno) => return Err(FolderError::Io { what: format!("{INBOX}/{day}/{candidate}"), errno }),
        }
    }
    Err(FolderError::Io { what: format!("{INBOX}/{day}/{name}"), errno: Errno::EEXIST })
}

/// What [`prune_inbox`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub files: usize,
    pub bytes: u64,
}

/// Keeps the group's `inbox/` within `max_bytes`: deletes its oldest files
/// (by day folder, then by time written) until the rest fit, and day folders
/// left empty. Only regular files directly in a day folder count and go:
/// links, folders and anything else the agent put there are left alone, and
/// nothing outside `inbox/` is touched.
pub fn prune_inbox(group_dir: &Path, max_bytes: u64) -> Result<Pruned, FolderError> {
    let group = open_dir(None, group_dir, &group_dir.display().to_string())?;
    let inbox = match open_dir(Some(&group), Path::new(INBOX), INBOX) {
        Ok(inbox) => inbox,
        Err(FolderError::Missing(_)) => return Ok(Pruned::default()),
        Err(e) => return Err(e),
    };
    // (day, written, name, bytes) of every file, with each day's folder.
    let mut files = Vec::new();
    let mut days = Vec::new();
    for day in names_in(&inbox)? {
        let Ok(dir) = open_dir(Some(&inbox), Path::new(&day), &day) else { continue };
        for name in names_in(&dir)? {
            let stat = nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW);
            let Ok(stat) = stat else { continue };
            if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG {
                files.push((day.clone(), stat.st_mtime, name, u64::try_from(stat.st_size).unwrap_or(0), days.len()));
            }
        }
        days.push((day, dir));
    }
    let mut total: u64 = files.iter().map(|f| f.3).sum();
    files.sort();
    let mut pruned = Pruned::default();
    for (day, _, name, bytes, dir) in files {
        if total <= max_bytes {
            break;
        }
        let at = days[dir].1.as_raw_fd();
        match nix::unistd::unlinkat(Some(at), name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) => {
                total = total.saturating_sub(bytes);
                pruned.files += 1;
                pruned.bytes += bytes;
            }
            Err(errno) => tracing::warn!(%errno, file = %format!("{INBOX}/{day}/{name}"), "cannot prune an inbox file"),
        }
    }
    for (day, _) in &days {
        // Only an empty folder goes; one with anything left in it stays.
        let _ = nix::unistd::unlinkat(Some(inbox.as_raw_fd()), day.as_str(), nix::unistd::UnlinkatFlags::RemoveDir);
    }
    Ok(pruned)
}

/// The names in an open folder (read through its descriptor, not a path).
fn names_in(dir: &OwnedFd) -> Result<Vec<String>, FolderError> {
    let shown = || format!("{INBOX}/…");
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|e| FolderError::Io { what: shown(), errno: errno_of(&e) })?;
    Ok(entries.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()).collect())
}

/// Opens the file the agent named to send: `asked` relative to its folder,
/// or absolute under the folder as the agent sees it (`/workspace/group/…`
/// in a sandbox, the host path unconfined). Returns the open file and its
/// path relative to the folder.
pub fn open_to_send(group_dir: &Path, asked: &str) -> Result<(File, PathBuf), FolderError> {
    let path = Path::new(asked);
    let relative = if path.is_absolute() {
        path.strip_prefix(SANDBOX_FOLDER)
            .or_else(|_| path.strip_prefix(group_dir))
            .map_err(|_| FolderError::Outside(asked.to_owned()))?
    } else {
        path
    };
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Err(FolderError::Outside(asked.to_owned())),
        }
    }
    let Some((file_name, dirs)) = parts.split_last() else {
        return Err(FolderError::NotAFile(asked.to_owned()));
    };
    let mut at = open_dir(None, group_dir, &group_dir.display().to_string())?;
    let mut walked = PathBuf::new();
    for dir in dirs {
        walked.push(dir);
        at = open_dir(Some(&at), Path::new(dir), &walked.display().to_string())?;
    }
    walked.push(file_name);
    let shown = walked.display().to_string();
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = openat(Some(at.as_raw_fd()), Path::new(file_name), flags, Mode::empty())
        .map_err(|errno| refused(errno, &shown))?;
    // SAFETY: a fresh descriptor from openat, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let stat = fstat(fd.as_raw_fd()).map_err(|errno| FolderError::Io { what: shown.clone(), errno })?;
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(FolderError::NotAFile(shown));
    }
    Ok((File::from(fd), walked))
}

/// A folder, opened without following a link at its last component (the
/// group's own folder is pincer's path, from the config).
fn open_dir(at: Option<&OwnedFd>, name: &Path, shown: &str) -> Result<OwnedFd, FolderError> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let fd = openat(at.map(AsRawFd::as_raw_fd), name, flags, Mode::empty()).map_err(|errno| match errno {
        // With O_DIRECTORY a link reads as "not a folder": say which it is.
        Errno::ENOTDIR if is_link(at, name) => FolderError::Link(shown.to_owned()),
        errno => refused(errno, shown),
    })?;
    // SAFETY: a fresh descriptor from openat, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `name` inside `at`, made if missing; a link or a file there is refused.
fn make_dir(at: &OwnedFd, name: &str) -> Result<OwnedFd, FolderError> {
    match mkdirat(Some(at.as_raw_fd()), name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => open_dir(Some(at), Path::new(name), name),
        Err(errno) => Err(FolderError::Io { what: name.to_owned(), errno }),
    }
}

/// What an `openat` refusal means to the agent.
fn refused(errno: Errno, shown: &str) -> FolderError {
    match errno {
        // O_NOFOLLOW on a link: ELOOP; O_DIRECTORY with O_NOFOLLOW on a link: ENOTDIR.
        Errno::ELOOP | Errno::EMLINK => FolderError::Link(shown.to_owned()),
        Errno::ENOTDIR => FolderError::NotAFile(shown.to_owned()),
        Errno::ENOENT => FolderError::Missing(shown.to_owned()),
        errno => FolderError::Io { what: shown.to_owned(), errno },
    }
}

fn is_link(at: Option<&OwnedFd>, name: &Path) -> bool {
    let stat = nix::sys::stat::fstatat(at.map(AsRawFd::as_raw_fd), name, AtFlags::AT_SYMLINK_NOFOLLOW);
    stat.is_ok_and(|s| SFlag::from_bits_truncate(s.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK)
}

fn is_single_name(part: &str) -> bool {
    !part.is_empty() && part != "." && part != ".." && !part.contains('/') && !part.contains('\0')
}

fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(0))
}

#[cfg(test)]
mod tests;
