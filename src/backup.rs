//! `pincer backup DIR`: a consistent copy of what pincer keeps, taken while
//! it runs: the store and the WhatsApp device store through SQLite's
//! `VACUUM INTO` (a read transaction: writers go on), the CLI homes (the
//! agents' conversations, for `--resume`) and the groups' folders, with a
//! `manifest.json` naming every file with its size and SHA-256.
//!
//! The homes and folders are the agents' to write, while the backup walks
//! them: any entry may be a link, a FIFO or a socket, or become one between
//! a look and a use. So the walk never uses a path twice: like
//! `media::folder` for `send_file`, it opens each entry from its parent
//! folder's descriptor with `openat(O_NOFOLLOW | O_NONBLOCK)`, asks the
//! opened descriptor what it is (`fstat`), copies only regular files, and
//! goes into folders by descriptor. A link is copied as a link (what it
//! points to is never read, so a group's link to `/etc` stays a link);
//! FIFOs, sockets, devices, entries that changed or vanished mid-walk and
//! unreadable ones are left out and named in the manifest's `skipped`.
//! Restoring is copying back while pincer is stopped (README, "Backups").

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::store::StoreError;

/// Folders inside folders the walk goes into at most (each level holds two
/// descriptors open); deeper ones are left out and named.
const MAX_DEPTH: usize = 100;

/// What `manifest.json` says.
#[derive(Debug, Serialize)]
pub struct Manifest {
    pub pincer_version: &'static str,
    /// When the backup was taken (RFC 3339).
    pub taken_at: String,
    /// Where each part came from.
    pub data_dir: String,
    pub groups_dir: String,
    pub files: Vec<FileEntry>,
    /// Symlinks copied as links: path → target.
    pub links: Vec<(String, String)>,
    /// What was left out, as "path (why)": FIFOs, sockets, devices, entries
    /// that changed or vanished during the walk, unreadable ones.
    pub skipped: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct FileEntry {
    /// Relative to the backup directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// Why a backup stopped. An entry of the homes or folders that cannot be
/// read does not stop it (the manifest names it); only these do.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} is not empty: give a new or empty directory for the backup")]
    NotEmpty(String),
    #[error(
        "the store is in PostgreSQL ([store] url): back it up with `pg_dump`, and copy groups_dir and data_dir \
         as files; `pincer backup` takes the SQLite store"
    )]
    SharedStore,
    #[error("no pincer store at {0}: nothing to back up")]
    NoStore(String),
    #[error("the backup path {0} is not UTF-8: give a plain directory name")]
    NotUtf8(String),
    #[error("cannot copy {from}")]
    Database {
        from: String,
        #[source]
        source: StoreError,
    },
    /// Reading pincer's own folders or writing the backup failed: `what`
    /// says which file; the backup is incomplete and should be taken again.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the backup's copying task stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

/// An `Io` error saying `what` failed.
fn io<E: Into<std::io::Error>>(what: impl std::fmt::Display) -> impl FnOnce(E) -> BackupError {
    move |source| BackupError::Io { what: what.to_string(), source: source.into() }
}

/// Takes the backup into `dir` (created; must be empty if it exists).
pub async fn run(config: &Config, dir: &Path) -> Result<Manifest, BackupError> {
    if dir.exists() && std::fs::read_dir(dir).map_err(io(dir.display()))?.next().is_some() {
        return Err(BackupError::NotEmpty(dir.display().to_string()));
    }
    if config.store.url.is_some() {
        return Err(BackupError::SharedStore);
    }
    crate::private::create_dir(dir).map_err(io(format_args!("cannot create {}", dir.display())))?;
    let database = config.database_path();
    if !database.exists() {
        return Err(BackupError::NoStore(database.display().to_string()));
    }
    let mut databases = vec![PathBuf::from("data/pincer.db")];
    vacuum_into(&database, &dir.join(&databases[0])).await?;
    let device = config.whatsapp_db_path();
    if device.exists() {
        // `whatsapp_db_path` is a file in the data directory: it has a name.
        databases.push(Path::new("data").join(device.file_name().unwrap_or(OsStr::new("whatsapp.db"))));
        vacuum_into(&device, &dir.join(&databases[1])).await?;
    }
    let mut manifest = Manifest {
        pincer_version: env!("CARGO_PKG_VERSION"),
        taken_at: crate::domain::printable_time(std::time::SystemTime::now()).to_string(),
        data_dir: config.data_dir.display().to_string(),
        groups_dir: config.groups_dir.display().to_string(),
        files: Vec::new(),
        links: Vec::new(),
        skipped: Vec::new(),
    };
    let (homes, groups) = (config.data_dir.join("homes"), config.groups_dir.clone());
    let target = dir.to_owned();
    let manifest = tokio::task::spawn_blocking(move || -> Result<Manifest, BackupError> {
        for database in &databases {
            let (bytes, sha256) = digest(&target.join(database))?;
            manifest.files.push(FileEntry { path: database.display().to_string(), bytes, sha256 });
        }
        if homes.is_dir() {
            copy_tree(&homes, &target, Path::new("data/homes"), &mut manifest)?;
        }
        if groups.is_dir() {
            copy_tree(&groups, &target, Path::new("groups"), &mut manifest)?;
        }
        manifest.files.sort_by(|a, b| a.path.cmp(&b.path));
        let json = serde_json::to_string_pretty(&manifest).map_err(io("cannot write manifest.json"))?;
        std::fs::write(target.join("manifest.json"), json).map_err(io(cannot_write(Path::new("manifest.json"))))?;
        Ok(manifest)
    })
    .await??;
    Ok(manifest)
}

/// A consistent copy of a live SQLite database.
async fn vacuum_into(from: &Path, to: &Path) -> Result<(), BackupError> {
    if let Some(parent) = to.parent() {
        crate::private::create_dir(parent).map_err(io(format_args!("cannot create {}", parent.display())))?;
    }
    let target = to.to_str().ok_or_else(|| BackupError::NotUtf8(to.display().to_string()))?;
    crate::store::copy_sqlite(from, target)
        .await
        .map_err(|source| BackupError::Database { from: from.display().to_string(), source })
}

/// Copies the folder `from` (pincer's own, from the config) to
/// `backup/shown`, entering what it finds in the manifest.
fn copy_tree(from: &Path, backup: &Path, shown: &Path, manifest: &mut Manifest) -> Result<(), BackupError> {
    let to = backup.join(shown);
    crate::private::create_dir(&to).map_err(io(format_args!("cannot create {}", to.display())))?;
    let source =
        open(None, from.as_os_str(), OFlag::O_DIRECTORY).map_err(io(format_args!("cannot read {}", from.display())))?;
    let target = open(None, to.as_os_str(), OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW)
        .map_err(io(format_args!("cannot open {}", to.display())))?;
    copy_dir(&source, &target, shown, 0, manifest)
}

/// Copies every entry of the open folder `source` into the open folder
/// `target` (`shown` in the backup). Only writing the backup fails it; an
/// entry that cannot be read as it was listed is left out and named.
fn copy_dir(
    source: &OwnedFd,
    target: &OwnedFd,
    shown: &Path,
    depth: usize,
    manifest: &mut Manifest,
) -> Result<(), BackupError> {
    let names = match names_in(source) {
        Ok(names) => names,
        Err(e) => {
            manifest.skipped.push(format!("{} (cannot be listed: {e})", shown.display()));
            return Ok(());
        }
    };
    for name in names {
        let here = shown.join(&name);
        if let Some(why) = copy_entry(source, target, &name, &here, depth, manifest)? {
            manifest.skipped.push(format!("{} ({why})", here.display()));
        }
    }
    Ok(())
}

/// Copies the entry `name`; `Some(why)` when it is left out.
fn copy_entry(
    source: &OwnedFd,
    target: &OwnedFd,
    name: &OsStr,
    shown: &Path,
    depth: usize,
    manifest: &mut Manifest,
) -> Result<Option<String>, BackupError> {
    // A first look, to open neither a device nor a FIFO at all; what counts
    // is what the opened descriptor says.
    let seen = match fstatat(Some(source.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => kind(&stat),
        Err(errno) => return Ok(Some(unreadable(errno))),
    };
    match seen {
        SFlag::S_IFLNK => copy_link(source, target, name, shown, manifest),
        SFlag::S_IFDIR => copy_folder(source, target, name, shown, depth, manifest),
        SFlag::S_IFREG => copy_file(source, target, name, shown, manifest),
        other => Ok(Some(what(other).to_owned())),
    }
}

/// A link is copied as the link, never followed.
fn copy_link(
    source: &OwnedFd,
    target: &OwnedFd,
    name: &OsStr,
    shown: &Path,
    manifest: &mut Manifest,
) -> Result<Option<String>, BackupError> {
    let points_to = match readlinkat(Some(source.as_raw_fd()), name) {
        Ok(points_to) => points_to,
        // No longer a link.
        Err(Errno::EINVAL) => return Ok(Some(changed())),
        Err(errno) => return Ok(Some(unreadable(errno))),
    };
    nix::unistd::symlinkat(points_to.as_os_str(), Some(target.as_raw_fd()), name).map_err(io(cannot_write(shown)))?;
    manifest.links.push((shown.display().to_string(), PathBuf::from(points_to).display().to_string()));
    Ok(None)
}

/// A folder, opened without following a link, and copied entry by entry.
fn copy_folder(
    source: &OwnedFd,
    target: &OwnedFd,
    name: &OsStr,
    shown: &Path,
    depth: usize,
    manifest: &mut Manifest,
) -> Result<Option<String>, BackupError> {
    if depth >= MAX_DEPTH {
        return Ok(Some(format!("more than {MAX_DEPTH} folders deep")));
    }
    let folder = match open(Some(source), name, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW) {
        Ok(folder) => folder,
        // A link, a FIFO or a file now: O_DIRECTORY | O_NOFOLLOW refuses it.
        Err(Errno::ENOTDIR | Errno::ELOOP) => return Ok(Some(changed())),
        Err(errno) => return Ok(Some(unreadable(errno))),
    };
    mkdirat(Some(target.as_raw_fd()), name, Mode::S_IRWXU).map_err(io(cannot_write(shown)))?;
    let copy = open(Some(target), name, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).map_err(io(cannot_write(shown)))?;
    copy_dir(&folder, &copy, shown, depth + 1, manifest)?;
    Ok(None)
}

/// A regular file, as its opened descriptor says, copied and hashed.
fn copy_file(
    source: &OwnedFd,
    target: &OwnedFd,
    name: &OsStr,
    shown: &Path,
    manifest: &mut Manifest,
) -> Result<Option<String>, BackupError> {
    let file = match open(Some(source), name, OFlag::O_NOFOLLOW) {
        Ok(file) => file,
        Err(Errno::ELOOP) => return Ok(Some(changed())),
        Err(errno) => return Ok(Some(unreadable(errno))),
    };
    let stat = match fstat(file.as_raw_fd()) {
        Ok(stat) => stat,
        Err(errno) => return Ok(Some(unreadable(errno))),
    };
    if kind(&stat) != SFlag::S_IFREG {
        return Ok(Some(format!("{}, once opened", what(kind(&stat)))));
    }
    // Owner-only, like everything pincer makes; the owner's execute bit kept.
    let mode = Mode::from_bits_truncate(0o600 | (stat.st_mode & 0o100));
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(Some(target.as_raw_fd()), name, flags, mode).map_err(std::io::Error::from);
    // SAFETY: a fresh descriptor from openat, owned by nothing else.
    let mut copy = File::from(unsafe { OwnedFd::from_raw_fd(fd.map_err(io(cannot_write(shown)))?) });
    match copy_and_digest(&mut File::from(file), &mut copy).map_err(io(cannot_write(shown)))? {
        Ok((bytes, sha256)) => {
            manifest.files.push(FileEntry { path: shown.display().to_string(), bytes, sha256 });
            Ok(None)
        }
        Err(errno) => {
            drop(copy);
            let _ = nix::unistd::unlinkat(Some(target.as_raw_fd()), name, nix::unistd::UnlinkatFlags::NoRemoveDir);
            Ok(Some(unreadable(errno)))
        }
    }
}

/// The error of a write into the backup, naming the entry.
fn cannot_write(shown: &Path) -> String {
    format!("cannot write {} into the backup", shown.display())
}

/// Copies `from` to `to`, hashing as it goes: the outer error is writing
/// (the backup fails), the inner one reading (the file is left out).
fn copy_and_digest(from: &mut File, to: &mut File) -> std::io::Result<Result<(u64, String), Errno>> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Ok(Err(Errno::from_raw(e.raw_os_error().unwrap_or(0)))),
        };
        to.write_all(&buf[..n])?;
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(Ok((bytes, hex(hasher))))
}

/// `name` opened read-only from the folder `at` (or as a path), never
/// blocking (a FIFO opens at once) and never becoming a controlling tty.
fn open(at: Option<&OwnedFd>, name: &OsStr, flags: OFlag) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let fd = openat(at.map(AsRawFd::as_raw_fd), name, flags, Mode::empty())?;
    // SAFETY: a fresh descriptor from openat, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The names in an open folder, read through its descriptor (not a path).
fn names_in(dir: &OwnedFd) -> std::io::Result<Vec<OsString>> {
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?.map(|entry| entry.map(|e| e.file_name())).collect()
}

fn kind(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// A kind of entry that is not copied, as the manifest names it.
fn what(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        SFlag::S_IFLNK => "a link",
        SFlag::S_IFDIR => "a folder",
        _ => "not a file",
    }
}

fn changed() -> String {
    "changed while the backup read it".to_owned()
}

fn unreadable(errno: Errno) -> String {
    match errno {
        Errno::ENOENT => "gone while the backup read it".to_owned(),
        errno => format!("cannot be read: {errno}"),
    }
}

/// The size and SHA-256 of a file the backup wrote itself.
fn digest(path: &Path) -> Result<(u64, String), BackupError> {
    let what = format!("cannot read {}", path.display());
    let mut file = File::open(path).map_err(io(&what))?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher).map_err(io(what))?;
    Ok((bytes, hex(hasher)))
}

fn hex(hasher: Sha256) -> String {
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
