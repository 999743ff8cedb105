//! Files the agent sends to its chat (`send_file`): the file it named is
//! opened inside its group's folder ([`super::folder::open_to_send`]: no link,
//! no `..`, nothing outside), copied into pincer's data dir at once, and
//! sent from that copy. The agent may change or delete its own file the
//! moment the tool returns, and a restart still delivers what it sent.
//!
//! How a file goes to the chat (photo, audio, document) is read from the
//! copy's bytes, never from its name: the agent names its files as it likes.
//! Copies live in `<data_dir>/outgoing/<group>/`; a copy leaves when its
//! message was delivered or given up ([`forget`]), and [`Outgoing::sweep`]
//! removes any left behind by a pincer that stopped in between.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::folder::{open_to_send, FolderError};
use crate::domain::media::{human_bytes, safe_file_name, send_limit, FileKind, OutboundFile};
use crate::domain::{GroupName, Platform};

/// The folder of the copies, inside the data dir.
pub const OUTGOING: &str = "outgoing";

/// The most a group's copies waiting to be sent may hold: an agent that
/// sends file after file to a chat that is down fills no disk.
pub const WAITING_CAP: u64 = 512 * 1024 * 1024;

/// Telegram's rule for a photo: width plus height at most this…
const PHOTO_SIDES: u32 = 10_000;
/// …and the long side at most this many times the short one. An image
/// outside it goes as a document, which any platform takes.
const PHOTO_RATIO: u32 = 20;

/// Why a file was not sent; the text goes back to the agent.
#[derive(Debug, thiserror::Error)]
pub enum SendFileError {
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error("{name} is empty: there is nothing to send")]
    Empty { name: String },
    #[error("{name} is {}, more than the {} a {kind} may be on {platform}: send a smaller file (compress or split it)", human_bytes(*size), human_bytes(*limit))]
    TooLarge { name: String, size: u64, limit: u64, kind: &'static str, platform: Platform },
    #[error("pincer cannot keep a copy of {name} to send: {why}")]
    Copy { name: String, why: String },
    #[error("{files} file(s) of this group ({}) still wait to reach the chat, and {name} would pass the {} pincer keeps waiting: send it once they are delivered", human_bytes(*waiting), human_bytes(*cap))]
    Backlog { name: String, files: usize, waiting: u64, cap: u64 },
}

/// Where copies of sent files are kept, and where groups' folders are.
#[derive(Clone, Debug)]
pub struct Outgoing {
    groups_dir: PathBuf,
    dir: PathBuf,
    /// [`WAITING_CAP`], smaller in tests.
    cap: u64,
}

impl Outgoing {
    /// Copies go to `data_dir/outgoing`; the files are read from `groups_dir/<group>`.
    pub fn new(groups_dir: &Path, data_dir: &Path) -> Outgoing {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
        Outgoing { groups_dir: absolute(groups_dir), dir: absolute(data_dir).join(OUTGOING), cap: WAITING_CAP }
    }

    /// Takes the file `asked` from `group`'s folder for a chat on
    /// `platform`: a checked copy, and how it goes. Blocking (file I/O).
    pub fn take(&self, group: &GroupName, asked: &str, platform: Platform) -> Result<OutboundFile, SendFileError> {
        let (mut file, relative) = open_to_send(&self.groups_dir.join(group.as_str()), asked)?;
        let shown = relative.display().to_string();
        let largest = send_limit(platform, FileKind::Document);
        let size = file.metadata().map_err(|e| copy_error(&shown, &e))?.len();
        let too_large = |size| SendFileError::TooLarge {
            name: shown.clone(),
            size,
            limit: largest,
            kind: FileKind::Document.as_str(),
            platform,
        };
        if size > largest {
            return Err(too_large(size));
        }
        let (files, waiting) = self.waiting(group);
        if waiting.saturating_add(size) > self.cap {
            return Err(SendFileError::Backlog { name: shown, files, waiting, cap: self.cap });
        }
        let name = relative.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let name = safe_file_name(&name, "file");
        let (copy, path) = self.new_copy(group, &name).map_err(|e| copy_error(&shown, &e))?;
        let kept = keep(&mut file, copy, largest).map_err(|e| copy_error(&shown, &e));
        let (bytes, kind) = match kept {
            // The file grew between the look and the copy: judged by what was read.
            Ok((bytes, _)) if bytes > largest => Err(too_large(bytes)),
            Ok((0, _)) => Err(SendFileError::Empty { name: shown.clone() }),
            Ok((bytes, mut copy)) => Ok((bytes, kind_of(&mut copy, bytes, platform))),
            Err(e) => Err(e),
        }
        .inspect_err(|_| remove(&path))?;
        Ok(OutboundFile { path, name, kind, bytes, from: shown })
    }

    /// How many copies of `group`'s files wait to be sent, and their bytes.
    fn waiting(&self, group: &GroupName) -> (usize, u64) {
        let Ok(entries) = std::fs::read_dir(self.dir.join(group.as_str())) else { return (0, 0) };
        let sizes: Vec<u64> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .collect();
        (sizes.len(), sizes.iter().sum())
    }

    /// A new copy's file, `<nanos>-<name>` in the group's folder of copies.
    fn new_copy(&self, group: &GroupName, name: &str) -> std::io::Result<(File, PathBuf)> {
        let dir = self.dir.join(group.as_str());
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for n in 0..100 {
            let path = dir.join(format!("{stamp}-{n}-{name}"));
            match OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path) {
                Ok(file) => return Ok((file, path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free name for the copy"))
    }

    /// Removes every copy not in `keep` (the files of messages still
    /// queued): what a pincer stopped between a delivery and its [`forget`]
    /// left. Returns how many went. Blocking.
    pub fn sweep(&self, keep: &HashSet<PathBuf>) -> usize {
        let Ok(groups) = std::fs::read_dir(&self.dir) else { return 0 };
        let mut removed = 0;
        for group in groups.filter_map(Result::ok) {
            let Ok(files) = std::fs::read_dir(group.path()) else { continue };
            for file in files.filter_map(Result::ok) {
                let path = file.path();
                if !keep.contains(&path) && file.file_type().is_ok_and(|t| t.is_file()) {
                    remove(&path);
                    removed += 1;
                }
            }
        }
        removed
    }
}

/// The copy of a message's file is no longer needed (delivered, or given up).
pub fn forget(file: &OutboundFile) {
    remove(&file.path);
}

fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), %e, "cannot remove the copy of a sent file");
        }
    }
}

/// Copies at most `max + 1` bytes of `from` (so a file that grew is seen,
/// and never copied whole) and returns how many, with the copy rewound.
fn keep(from: &mut File, mut copy: File, max: u64) -> std::io::Result<(u64, File)> {
    let bytes = std::io::copy(&mut from.take(max + 1), &mut copy)?;
    copy.flush()?;
    copy.seek(SeekFrom::Start(0))?;
    Ok((bytes, copy))
}

fn copy_error(name: &str, e: &std::io::Error) -> SendFileError {
    SendFileError::Copy { name: name.to_owned(), why: e.to_string() }
}

/// How a file of `bytes` bytes goes to a chat on `platform`, read from its
/// first bytes (and an image's size from its header). An I/O error reading
/// it back makes it a document: the safe way to send anything.
fn kind_of(copy: &mut File, bytes: u64, platform: Platform) -> FileKind {
    let mut head = [0u8; 16];
    let read = copy.read(&mut head).unwrap_or(0);
    let kind = match sniff(&head[..read]) {
        // What every platform shows as a photo.
        Some("image/jpeg" | "image/png") => {
            let _ = copy.seek(SeekFrom::Start(0));
            let size = image::ImageReader::new(BufReader::new(&*copy))
                .with_guessed_format()
                .ok()
                .and_then(|r| r.into_dimensions().ok());
            match size {
                Some(size) if fits_a_photo(size) => FileKind::Photo,
                _ => FileKind::Document,
            }
        }
        // MP3 or M4A: what Telegram plays as music.
        Some(mime) if mime.starts_with("audio/") => FileKind::Audio,
        _ => FileKind::Document,
    };
    // A photo or audio too large to go as one goes as a document.
    if bytes > send_limit(platform, kind) {
        FileKind::Document
    } else {
        kind
    }
}

/// The type a file's first bytes say it has, when they say one pincer
/// knows (JPEG, PNG, PDF, M4A, MP3).
fn sniff(head: &[u8]) -> Option<&'static str> {
    let jpeg = head.starts_with(&[0xFF, 0xD8, 0xFF]);
    let mp3 = head.starts_with(b"ID3") || (head.len() >= 2 && head[0] == 0xFF && head[1] & 0xE0 == 0xE0 && !jpeg);
    let m4a = head.len() >= 12 && &head[4..8] == b"ftyp" && &head[8..12] == b"M4A ";
    if jpeg {
        Some("image/jpeg")
    } else if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"%PDF") {
        Some("application/pdf")
    } else if m4a {
        Some("audio/mp4")
    } else if mp3 {
        Some("audio/mpeg")
    } else {
        None
    }
}

/// The MIME type a chat is told a file has: from its first bytes where they
/// say, else from its name's extension, else `application/octet-stream`.
pub fn mime_of(bytes: &[u8], name: &str) -> &'static str {
    if let Some(mime) = sniff(&bytes[..bytes.len().min(16)]) {
        return mime;
    }
    let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "txt" | "md" | "log" => "text/plain",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "ogg" | "opus" => "audio/ogg",
        "mp4" => "video/mp4",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        _ => "application/octet-stream",
    }
}

fn fits_a_photo((width, height): (u32, u32)) -> bool {
    let (long, short) = (width.max(height), width.min(height));
    short > 0 && width.saturating_add(height) <= PHOTO_SIDES && long <= short.saturating_mul(PHOTO_RATIO)
}

#[cfg(test)]
mod tests;
