//! Private files: what pincer keeps is its own user's alone.
//!
//! `data_dir` holds the chats (`pincer.db`), the linked WhatsApp device's keys
//! (`whatsapp.db`) and every group's CLI home with its full transcripts, so
//! none of it may be readable by another local user. Three layers see to
//! that: the binary sets its umask to 0o077 before anything else
//! ([`restrict_umask`]), so what pincer and its CLI children create is
//! private whatever the login's umask; the folders pincer makes are created
//! 0700 explicitly ([`create_dir`]), which also holds when pincer runs as a
//! library (the tests); and at every start the known paths are checked and
//! tightened ([`tighten`]), which fixes an install made before this version.
//!
//! Tightening only takes bits away (group and other), never changes owners:
//! a CLI home that an operator gave to a Docker container's uid keeps that
//! owner, who keeps full access.

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::{Config, LOCK_FILE};

/// The bits nobody but the owner may hold.
const NOT_OWNER: u32 = 0o077;

/// Makes every file and folder this process (and each child it starts)
/// creates from now on private to its user. The umask is process-wide:
/// call it before any other thread starts.
pub fn restrict_umask() {
    use nix::sys::stat::Mode;
    nix::sys::stat::umask(Mode::S_IRWXG | Mode::S_IRWXO);
}

/// Creates `path` and its missing parents 0700, whatever the umask.
pub fn create_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// A path whose mode lets others in, and the mode it gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loose {
    pub path: PathBuf,
    pub mode: u32,
    pub wanted: u32,
}

impl fmt::Display for Loose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:04o}→{:04o}", self.path.display(), self.mode, self.wanted)
    }
}

/// The mode `mode` should have instead, when group or others hold any bit of it.
pub fn tightened(mode: u32) -> Option<u32> {
    let mode = mode & 0o7777;
    (mode & NOT_OWNER != 0).then_some(mode & !NOT_OWNER)
}

/// The paths that must be private for `config`: `data_dir`, the lock, both
/// databases with their SQLite side files, the run folder, and the CLI homes.
pub fn paths(config: &Config) -> Vec<PathBuf> {
    let data = &config.data_dir;
    let mut out = vec![data.clone(), data.join(LOCK_FILE), data.join("run"), data.join("homes")];
    for db in [config.database_path(), config.whatsapp_db_path()] {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = db.clone().into_os_string();
            name.push(suffix);
            out.push(name.into());
        }
    }
    // Each group's CLI home; a symlink there is no home pincer made: left alone.
    if let Ok(homes) = std::fs::read_dir(data.join("homes")) {
        let mut found: Vec<PathBuf> =
            homes.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// Which of `paths` exist and let others in. `data_dir` itself may be a
/// symlink the operator made (its target is checked); any other symlink is
/// skipped, as a path that is missing.
pub fn survey(paths: &[PathBuf]) -> Vec<Loose> {
    let mut out = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let meta = if i == 0 { std::fs::metadata(path) } else { std::fs::symlink_metadata(path) };
        let Ok(meta) = meta else { continue };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if let Some(wanted) = tightened(mode) {
            out.push(Loose { path: path.clone(), mode, wanted });
        }
    }
    out
}

/// Tightens what [`survey`] finds for `config`, and says so in one log line.
/// A path that cannot be changed is logged and skipped: pincer still starts.
pub fn tighten(config: &Config) -> Vec<Loose> {
    let loose = survey(&paths(config));
    let mut changed = Vec::new();
    for l in loose {
        match std::fs::set_permissions(&l.path, std::fs::Permissions::from_mode(l.wanted)) {
            Ok(()) => changed.push(l),
            Err(e) => tracing::warn!(path = %l.path.display(), %e, "cannot make a private file private"),
        }
    }
    if !changed.is_empty() {
        let list: Vec<String> = changed.iter().map(Loose::to_string).collect();
        tracing::warn!("made pincer's files private to its user (other users could read them): {}", list.join(", "));
    }
    changed
}

/// `pincer doctor`'s line: whether the files are private now.
pub fn doctor_line(config: &Config) -> String {
    let loose = survey(&paths(config));
    if loose.is_empty() {
        return "file modes: private (data_dir 0700, databases 0600, CLI homes 0700)".to_owned();
    }
    let list: Vec<String> = loose.iter().map(Loose::to_string).collect();
    format!("file modes: NOT private: {} (`pincer run` tightens them at its start)", list.join(", "))
}

#[cfg(test)]
mod tests;
