//! The mount allowlist: the only source of extra host folders a group's agent
//! sees (at `/workspace/extra/<name>`), read from a file outside every group
//! folder so an agent cannot grant itself more.
//!
//! ```toml
//! deny = ["id_rsa"]          # added to the built-in deny list
//!
//! [[mount]]
//! group = "family"
//! host = "/srv/photos"       # absolute, no `..`, no symlinks
//! name = "photos"            # default: the folder's name
//! writable = false           # default: read-only
//! ```
//!
//! Every entry is checked when pincer starts: the path must be its own
//! realpath (so no symlink leads elsewhere), must not hold or be inside a
//! deny-listed name, and must not overlap pincer's data or the group folders.
//! The folder found then is the one mounted: at each launch [`reopen`] walks
//! the path again one component at a time, refusing any symlink, and checks
//! that it reaches the same folder (device and inode). A writable mount that
//! holds another mount's path cannot swap a component for a symlink or
//! another folder. bwrap then binds that descriptor (`--bind-fd`), so the path
//! is not resolved again; a bwrap without `--bind-fd`, and Docker, get the
//! checked path (a swap between the check and their own lookup is not caught).

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// Names never mounted, nor any folder that directly holds one.
pub const DEFAULT_DENY: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".env",
    ".netrc",
    ".docker",
    ".kube",
    ".config",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "credentials",
    "id_rsa",
    "id_ed25519",
];

/// One checked extra mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The realpath on the host.
    pub host: PathBuf,
    /// The folder name under `/workspace/extra`.
    pub name: String,
    pub writable: bool,
    /// What `host` was when the allowlist was loaded.
    pub identity: Identity,
}

/// A file's device and inode: the same folder, whatever its path says now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// Checked mounts per group.
#[derive(Clone, Debug, Default)]
pub struct MountTable(BTreeMap<String, Vec<Mount>>);

impl MountTable {
    pub fn for_group(&self, group: &str) -> &[Mount] {
        self.0.get(group).map_or(&[], Vec::as_slice)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    mount: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    group: String,
    host: PathBuf,
    name: Option<String>,
    #[serde(default)]
    writable: bool,
}

/// The allowlist or one of its entries was refused.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot read the mount allowlist {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the mount allowlist {path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("the mount allowlist {0} lies inside the groups folder, where an agent could edit it: move it out (sandbox.mounts_file)")]
    InsideGroups(PathBuf),
    #[error("mount `{host}` for group `{group}` refused: {why}. Fix it in the mount allowlist")]
    Refused { group: String, host: PathBuf, why: String },
    #[error(
        "mount `{host}` changed since pincer started ({why}), so it is not mounted and the group does not start: \
         put the folder back, or fix the mount allowlist and restart pincer"
    )]
    Changed { host: PathBuf, why: String },
}

/// Folders no extra mount may touch: pincer's data (database, homes, the CLI)
/// and the group folders (another group's files).
#[derive(Clone, Debug)]
pub struct Protected(pub Vec<PathBuf>);

/// Reads and checks the allowlist at `path`.
pub fn load(path: &Path, protected: &Protected, groups_dir: &Path) -> Result<MountTable, MountError> {
    let real = std::fs::canonicalize(path).map_err(|source| MountError::Read { path: path.to_owned(), source })?;
    if let Ok(groups) = std::fs::canonicalize(groups_dir) {
        if real.starts_with(groups) {
            return Err(MountError::InsideGroups(path.to_owned()));
        }
    }
    let text = std::fs::read_to_string(&real).map_err(|source| MountError::Read { path: path.to_owned(), source })?;
    parse(&text, protected).map_err(|e| match e {
        MountError::Parse { message, .. } => MountError::Parse { path: path.to_owned(), message },
        other => other,
    })
}

/// Parses and checks allowlist text.
pub fn parse(text: &str, protected: &Protected) -> Result<MountTable, MountError> {
    let file: File =
        toml_parse(text).map_err(|message| MountError::Parse { path: PathBuf::from("<allowlist>"), message })?;
    let deny: Vec<&str> = DEFAULT_DENY.iter().copied().chain(file.deny.iter().map(String::as_str)).collect();
    let mut table = BTreeMap::<String, Vec<Mount>>::new();
    for entry in file.mount {
        let refuse = |why: String| MountError::Refused { group: entry.group.clone(), host: entry.host.clone(), why };
        let mount = check(&entry, &deny, protected).map_err(refuse)?;
        let mounts = table.entry(entry.group.clone()).or_default();
        if mounts.iter().any(|m| m.name == mount.name) {
            return Err(refuse(format!("another mount of this group is already named `{}`", mount.name)));
        }
        mounts.push(mount);
    }
    Ok(MountTable(table))
}

fn toml_parse(text: &str) -> Result<File, String> {
    use figment::providers::{Format, Toml};
    figment::Figment::from(Toml::string(text)).extract().map_err(|e| e.to_string())
}

fn check(entry: &Entry, deny: &[&str], protected: &Protected) -> Result<Mount, String> {
    let host = &entry.host;
    if !host.is_absolute() {
        return Err("the host path must be absolute".into());
    }
    if host.to_str().is_none_or(|h| h.contains(',')) {
        return Err("the host path must be UTF-8 without commas (Docker's --mount syntax)".into());
    }
    if host.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        return Err("the host path must not contain `..` or `.`".into());
    }
    let real = std::fs::canonicalize(host).map_err(|e| format!("cannot resolve it: {e}"))?;
    if real != *host {
        return Err(format!("it goes through a symlink (its real path is {}); name the real path", real.display()));
    }
    if let Some(bad) = host.components().filter_map(|c| c.as_os_str().to_str()).find(|c| deny.contains(c)) {
        return Err(format!("`{bad}` is on the deny list"));
    }
    if real.is_dir() {
        let entries = std::fs::read_dir(&real).map_err(|e| format!("cannot list it: {e}"))?;
        for child in entries.flatten() {
            if let Some(name) = child.file_name().to_str().filter(|n| deny.contains(n)) {
                return Err(format!("it holds `{name}`, which is on the deny list"));
            }
        }
    }
    for p in &protected.0 {
        let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if real.starts_with(&p) || p.starts_with(&real) {
            return Err(format!("it overlaps {}, which the agent must not see", p.display()));
        }
    }
    let name = match &entry.name {
        Some(name) => name.clone(),
        None => real.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned(),
    };
    let valid = !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid {
        return Err(format!("`{name}` is not a usable mount name (letters, digits, `-`, `_`, `.`)"));
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("cannot read it: {e}"))?;
    let identity = Identity { dev: meta.dev(), ino: meta.ino() };
    Ok(Mount { host: real, name, writable: entry.writable, identity })
}

/// Opens `mount`'s folder (`O_PATH`) by walking its path from `/` without
/// following any symlink, and checks it is the folder the allowlist named
/// when it was loaded.
pub fn reopen(mount: &Mount) -> Result<OwnedFd, MountError> {
    let changed = |why: String| MountError::Changed { host: mount.host.clone(), why };
    let fd = open_without_symlinks(&mount.host).map_err(changed)?;
    let stat = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| changed(format!("cannot read it: {e}")))?;
    let now = Identity { dev: stat.st_dev, ino: stat.st_ino };
    if now != mount.identity {
        return Err(changed("it is another file or folder now".to_owned()));
    }
    Ok(fd)
}

fn open_without_symlinks(path: &Path) -> Result<OwnedFd, String> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    let open = |dir: Option<&OwnedFd>, name: &Path, flags: OFlag| -> Result<OwnedFd, String> {
        let fd = openat(dir.map(AsRawFd::as_raw_fd), name, flags | OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| format!("cannot open {}: {e}", name.display()))?;
        // SAFETY: a fresh descriptor from openat, owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let mut at = open(None, Path::new("/"), OFlag::O_DIRECTORY)?;
    let mut walked = PathBuf::from("/");
    for part in path.components() {
        let Component::Normal(part) = part else { continue };
        walked.push(part);
        // O_NOFOLLOW with O_PATH opens a symlink itself, which fstat then shows.
        let next = open(Some(&at), Path::new(part), OFlag::O_NOFOLLOW)?;
        let stat = fstat(next.as_raw_fd()).map_err(|e| format!("cannot read {}: {e}", walked.display()))?;
        if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK {
            return Err(format!("{} is a symlink now", walked.display()));
        }
        at = next;
    }
    Ok(at)
}

#[cfg(test)]
mod tests;
