//! `pincer backup DIR`: a consistent copy of what pincer keeps, taken while
//! it runs: the store and the WhatsApp device store through SQLite's
//! `VACUUM INTO` (a read transaction: writers go on), the CLI homes (the
//! agents' conversations, for `--resume`) and the groups' folders, with a
//! `manifest.json` naming every file with its size and SHA-256.
//!
//! Folders are copied without following symlinks (a link is copied as a
//! link, never what it points to, so a group's link to `/etc` stays a link);
//! sockets, FIFOs and devices are skipped. Restoring is copying back while
//! pincer is stopped (README, "Backups").

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::Config;

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
    /// What was left out (sockets, FIFOs, devices), by path.
    pub skipped: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct FileEntry {
    /// Relative to the backup directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// Takes the backup into `dir` (created; must be empty if it exists).
pub async fn run(config: &Config, dir: &Path) -> anyhow::Result<Manifest> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        anyhow::bail!("{} is not empty: give a new or empty directory for the backup", dir.display());
    }
    crate::private::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let database = config.database_path();
    anyhow::ensure!(database.exists(), "no pincer store at {}: nothing to back up", database.display());
    vacuum_into(&database, &dir.join("data/pincer.db")).await?;
    let device = config.whatsapp_db_path();
    if device.exists() {
        let name = device.file_name().context("the WhatsApp device store has no file name")?;
        vacuum_into(&device, &dir.join("data").join(name)).await?;
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
    let manifest = tokio::task::spawn_blocking(move || -> anyhow::Result<Manifest> {
        if homes.is_dir() {
            copy_tree(&homes, &target.join("data/homes"), &target, &mut manifest)?;
        }
        if groups.is_dir() {
            copy_tree(&groups, &target.join("groups"), &target, &mut manifest)?;
        }
        list_files(&target, &target.join("data"), &mut manifest)?;
        manifest.files.sort_by(|a, b| a.path.cmp(&b.path));
        let json = serde_json::to_string_pretty(&manifest)?;
        std::fs::write(target.join("manifest.json"), json)?;
        Ok(manifest)
    })
    .await??;
    Ok(manifest)
}

/// A consistent copy of a live SQLite database.
async fn vacuum_into(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        crate::private::create_dir(parent)?;
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(from).read_only(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
    let target = to.to_str().context("the backup path is not UTF-8")?;
    sqlx::query("VACUUM INTO ?")
        .bind(target)
        .execute(&pool)
        .await
        .with_context(|| format!("cannot copy {}", from.display()))?;
    pool.close().await;
    Ok(())
}

/// Copies `from` into `to` without following links; regular files are
/// entered in the manifest when [`list_files`] runs over `to`'s root.
fn copy_tree(from: &Path, to: &Path, root: &Path, manifest: &mut Manifest) -> anyhow::Result<()> {
    crate::private::create_dir(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?; // never follows a link
        if kind.is_symlink() {
            let points_to = std::fs::read_link(&source)?;
            std::os::unix::fs::symlink(&points_to, &target)?;
            manifest.links.push((relative(root, &target), points_to.display().to_string()));
        } else if kind.is_dir() {
            copy_tree(&source, &target, root, manifest)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target).with_context(|| format!("cannot copy {}", source.display()))?;
        } else {
            manifest.skipped.push(source.display().to_string());
        }
    }
    Ok(())
}

/// Every regular file under `dir`, with its size and SHA-256, into the manifest.
fn list_files(root: &Path, dir: &Path, manifest: &mut Manifest) -> anyhow::Result<()> {
    let mut stack: Vec<PathBuf> = vec![dir.to_owned(), root.join("groups")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let path = entry.path();
                let (bytes, sha256) = digest(&path)?;
                manifest.files.push(FileEntry { path: relative(root, &path), bytes, sha256 });
            }
        }
    }
    Ok(())
}

fn digest(path: &Path) -> anyhow::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        hasher.update(&buf[..n]);
    }
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((bytes, hex))
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}
