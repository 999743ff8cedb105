//! A CLI session's transcript on this host (`<HOME>/.claude/projects/<cwd
//! slug>/<session id>.jsonl`, what `--resume` reads): where it is, the bytes
//! appended since an offset, and a stored copy written back before a resume.
//! Touches only that one file and the folders above it; a cluster node moves
//! the bytes through the store (`store::transcripts`).
//!
//! The home is the agent's: it can put links, FIFOs or huge files anywhere
//! in it. So nothing here follows a link or uses a path twice: each folder
//! is opened from its parent's descriptor with `O_NOFOLLOW`, the file with
//! `O_NOFOLLOW | O_NONBLOCK` and kept only when `fstat` says it is a regular
//! file, and what one capture reads is capped ([`CAPTURE_CAP`], [`SESSION_CAP`]).
//! Session ids come from the CLI's output and are checked ([`SessionId`])
//! before they name a file.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};

use crate::domain::files::FileView;

/// The most one capture stores (the bytes one turn appended); beyond it the
/// session's stored copy is dropped and the next owner starts fresh.
pub const CAPTURE_CAP: u64 = 8 << 20;

/// The most stored for one session; beyond it, as for [`CAPTURE_CAP`].
pub const SESSION_CAP: u64 = 64 << 20;

/// The CLI (2.1.332) keeps a slug up to this long; a longer one is cut and
/// given a hash of its own, which pincer does not compute.
const SLUG_MAX: usize = 200;

/// A session id fit to name a file: `[A-Za-z0-9-]{1,64}` (the CLI's are UUIDs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionId(String);

impl SessionId {
    pub fn parse(id: &str) -> Option<SessionId> {
        let fits = (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        fits.then(|| SessionId(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn file_name(&self) -> String {
        format!("{}.jsonl", self.0)
    }
}

/// The folder name the CLI gives a working directory under `projects`:
/// every UTF-16 unit that is not an ASCII letter or digit becomes `-` (as
/// its `replace(/[^a-zA-Z0-9]/g, "-")` does). `None` for a path that is
/// not UTF-8 or whose slug is longer than [`SLUG_MAX`].
pub fn slug(cwd: &Path) -> Option<String> {
    let text = cwd.to_str()?;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.extend(std::iter::repeat_n('-', c.len_utf16()));
        }
    }
    (out.len() <= SLUG_MAX).then_some(out)
}

/// Where a group's CLI keeps its transcripts on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The CLI's HOME, as a path on this host.
    home: PathBuf,
    /// The slug of the working directory as the CLI sees it.
    slug: String,
}

impl Place {
    /// The place of a process with `view`. Unconfined, the CLI sees the
    /// real path of its folder (links resolved), so that is what is slugged;
    /// in a sandbox, the folder it is bound at.
    pub fn of_view(view: &FileView) -> Option<Place> {
        let home = view.host_of(&view.home)?;
        let cwd = if view.unconfined { resolved(&view.workspace) } else { view.workspace.clone() };
        Some(Place { home, slug: slug(&cwd)? })
    }

    /// The transcript's path, for logs.
    pub fn shown(&self, session: &SessionId) -> PathBuf {
        self.home.join(".claude/projects").join(&self.slug).join(session.file_name())
    }
}

/// `path` with its links resolved, as far as it exists (a group's folder may
/// not be made yet: its parent's real path then).
fn resolved(path: &Path) -> PathBuf {
    match (std::fs::canonicalize(path), path.parent(), path.file_name()) {
        (Ok(real), _, _) => real,
        (Err(_), Some(parent), Some(name)) if parent != path => resolved(parent).join(name),
        _ => path.to_owned(),
    }
}

/// What a capture found after the stored offset.
#[derive(Debug, PartialEq, Eq)]
pub enum Appended {
    /// The complete lines appended since the offset (maybe none). A line
    /// still being written waits for the next capture.
    Lines(Vec<u8>),
    /// Past a cap, or the file is shorter than what is stored (rewritten):
    /// the stored copy cannot be kept whole.
    Unfit(Unfit),
    /// No such file (yet).
    Missing,
}

/// Why a transcript's stored copy is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfit {
    TurnTooBig,
    SessionTooBig,
    Shrunk,
}

impl Unfit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unfit::TurnTooBig => "one turn appended more than 8 MiB",
            Unfit::SessionTooBig => "the transcript is over 64 MiB",
            Unfit::Shrunk => "the transcript is shorter than what was stored",
        }
    }
}

/// What to read of a file of `len` bytes when `stored` are kept already:
/// the range, or why nothing more can be kept.
pub fn plan(stored: u64, len: u64) -> Result<std::ops::Range<u64>, Unfit> {
    if len < stored {
        return Err(Unfit::Shrunk);
    }
    if len > SESSION_CAP {
        return Err(Unfit::SessionTooBig);
    }
    if len - stored > CAPTURE_CAP {
        return Err(Unfit::TurnTooBig);
    }
    Ok(stored..len)
}

/// The complete lines of `session`'s transcript after byte `stored`. Blocking.
pub fn read_appended(place: &Place, session: &SessionId, stored: u64) -> io::Result<Appended> {
    let Some((mut file, len)) = open_transcript(place, session)? else { return Ok(Appended::Missing) };
    let range = match plan(stored, len) {
        Ok(range) => range,
        Err(unfit) => return Ok(Appended::Unfit(unfit)),
    };
    let mut bytes = read_range(&mut file, range)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
    bytes.truncate(complete);
    Ok(Appended::Lines(bytes))
}

/// How long `session`'s transcript is here (0 when missing). Blocking.
pub fn local_len(place: &Place, session: &SessionId) -> io::Result<u64> {
    Ok(open_transcript(place, session)?.map_or(0, |(_, len)| len))
}

/// Whether this host's copy of `session` holds `bytes` at byte `at`: it
/// continues the stored copy whose last chunk they are. Blocking.
pub fn holds(place: &Place, session: &SessionId, at: u64, bytes: &[u8]) -> io::Result<bool> {
    let Some((mut file, len)) = open_transcript(place, session)? else { return Ok(false) };
    let end = at + bytes.len() as u64;
    Ok(len >= end && read_range(&mut file, at..end)? == bytes)
}

/// `session`'s transcript, opened for reading, with its length; `None` when missing.
fn open_transcript(place: &Place, session: &SessionId) -> io::Result<Option<(File, u64)>> {
    let Some(dir) = open_folders(place, false)? else { return Ok(None) };
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = match open_at(&dir, &session.file_name(), flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = regular_len(&file)?;
    Ok(Some((file, len)))
}

/// The bytes of `range`; never more, even if the file grows meanwhile.
fn read_range(file: &mut File, range: std::ops::Range<u64>) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(range.start))?;
    let mut bytes = Vec::with_capacity(usize::try_from(range.end - range.start).unwrap_or(0));
    file.take(range.end - range.start).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes `bytes` as `session`'s transcript, replacing what is there (a
/// link or a shorter copy) in one rename; missing folders are made private.
/// Blocking.
pub fn restore(place: &Place, session: &SessionId, bytes: &[u8]) -> io::Result<()> {
    let Some(dir) = open_folders(place, true)? else {
        return Err(io::Error::other("the CLI's home is missing"));
    };
    let name = session.file_name();
    let temp = format!(".{name}.pincer");
    let _ = nix::unistd::unlinkat(Some(dir.as_raw_fd()), temp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut file = File::from(open_at(&dir, &temp, flags, Mode::S_IRUSR | Mode::S_IWUSR)?);
    file.write_all(bytes)?;
    file.sync_all()?;
    give_to_owner(&dir, &file)?;
    renameat(Some(dir.as_raw_fd()), temp.as_str(), Some(dir.as_raw_fd()), name.as_str())?;
    Ok(())
}

/// `projects/<slug>` under the home's `.claude`, opened without following
/// any link; made (0700) when `make`, else `None` when one is missing.
fn open_folders(place: &Place, make: bool) -> io::Result<Option<OwnedFd>> {
    let folder = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if make {
        crate::private::create_dir(&place.home)?;
    }
    let mut dir = match nix::fcntl::open(&place.home, folder, Mode::empty()) {
        Ok(fd) => unsafe_owned(fd),
        Err(Errno::ENOENT) if !make => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    for part in [".claude", "projects", place.slug.as_str()] {
        if make {
            match mkdirat(Some(dir.as_raw_fd()), part, Mode::S_IRWXU) {
                Ok(()) => give_to_owner(&dir, &open_at(&dir, part, folder, Mode::empty())?)?,
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        dir = match open_at(&dir, part, folder, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if !make => return Ok(None),
            Err(e) => return Err(io::Error::new(io::Error::from(e).kind(), format!("{part}: {e}"))),
        };
    }
    Ok(Some(dir))
}

/// What pincer makes in a home belongs to the home's owner: when pincer
/// runs as root, a Docker container's user must be able to read it.
fn give_to_owner(home_part: &OwnedFd, made: &impl AsRawFd) -> io::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let owner = fstat(home_part.as_raw_fd())?;
    let (uid, gid) = (nix::unistd::Uid::from_raw(owner.st_uid), nix::unistd::Gid::from_raw(owner.st_gid));
    nix::unistd::fchown(made.as_raw_fd(), Some(uid), Some(gid))?;
    Ok(())
}

/// The length of an opened file that must be a regular one (not a FIFO, a
/// device or a folder the agent put there).
fn regular_len(file: &File) -> io::Result<u64> {
    let stat = fstat(file.as_raw_fd())?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(io::Error::other("the transcript is not a regular file"));
    }
    Ok(u64::try_from(stat.st_size).unwrap_or(0))
}

fn open_at(dir: &OwnedFd, name: &str, flags: OFlag, mode: Mode) -> Result<OwnedFd, Errno> {
    openat(Some(dir.as_raw_fd()), name, flags, mode).map(unsafe_owned)
}

fn unsafe_owned(fd: std::os::fd::RawFd) -> OwnedFd {
    // SAFETY: a fresh descriptor from open/openat, owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[cfg(test)]
mod tests;
