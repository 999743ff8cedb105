//! Files from the terminal (`pincer chat NAME --attach FILE`): the operator
//! names files on this host, and they go to the agent like a chat's
//! attachments, through the same preparer. Only console messages are
//! fetched this way (the preparer picks a message's fetcher by its source),
//! and the paths come from the operator (the command line, or a terminal
//! on the daemon's owner-only control socket), never from a chat or an agent.

use std::io::Read;
use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;

use super::outgoing::mime_of;
use super::{Capped, Fetch, FetchError};
use crate::domain::media::{Attachment, MediaKind};

/// A file to attach, checked: absolute, and a regular file now. Says what
/// is wrong in words for the terminal.
pub fn checked(path: &Path) -> Result<PathBuf, String> {
    let absolute = std::fs::canonicalize(path).map_err(|e| format!("cannot attach {}: {e}", path.display()))?;
    let meta = std::fs::metadata(&absolute).map_err(|e| format!("cannot attach {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("cannot attach {}: it is not a file", path.display()));
    }
    Ok(absolute)
}

/// The attachment for the file at `path` (absolute): its kind and type from
/// its first bytes and name, its size and name. Blocking (reads its head).
pub fn attachment(path: &Path) -> Result<Attachment, String> {
    let shown = path.display();
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let size = file.metadata().map_err(|e| format!("cannot attach {shown}: {e}"))?.len();
    let mut head = [0u8; 16];
    let read = file.read(&mut head).map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let mime = mime_of(&head[..read], name.as_deref().unwrap_or_default());
    let kind = MediaKind::of_file(Some(mime));
    let mut attachment =
        Attachment::bounded(kind, path.to_string_lossy()).with_name(name.as_deref()).with_mime(Some(mime));
    attachment.size = Some(size);
    Ok(attachment)
}

/// Reads attached files for the preparer.
pub struct LocalFiles;

impl Fetch for LocalFiles {
    fn fetch<'a>(&'a self, attachment: &'a Attachment, mut into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>> {
        Box::pin(async move {
            let path = PathBuf::from(&attachment.fetch);
            if !path.is_absolute() {
                return Err(FetchError::Gone(format!("{} is not a file pincer can read", attachment.fetch)));
            }
            tokio::task::spawn_blocking(move || {
                let mut file = std::fs::File::open(&path).map_err(|e| FetchError::Gone(e.to_string()))?;
                // The sink refuses the first byte past its limit: a file that grew stops there.
                match std::io::copy(&mut file, &mut into) {
                    Ok(_) => Ok(into),
                    Err(_) if into.overflow().happened() => Err(FetchError::TooLarge { limit: into.limit() }),
                    Err(e) => Err(FetchError::Transient(e.to_string())),
                }
            })
            .await
            .map_err(|e| FetchError::Transient(e.to_string()))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attached_file_is_named_typed_and_read_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("shot.png");
        std::fs::write(&png, b"\x89PNG\r\n\x1a\n and the rest").unwrap();
        let a = attachment(&checked(&png).unwrap()).unwrap();
        assert_eq!(
            (a.kind, a.mime.as_deref(), a.file_name.as_deref(), a.size),
            (MediaKind::Image, Some("image/png"), Some("shot.png"), Some(21))
        );
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "plain words").unwrap();
        assert_eq!(attachment(&notes).unwrap().kind, MediaKind::Document);
        assert!(checked(dir.path()).unwrap_err().contains("not a file"));
        assert!(checked(&dir.path().join("missing")).unwrap_err().contains("cannot attach"));

        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert_eq!(rt.block_on(LocalFiles.fetch(&a, Capped::new(100))).unwrap().len(), 21);
        assert_eq!(rt.block_on(LocalFiles.fetch(&a, Capped::new(20))).unwrap_err(), FetchError::TooLarge { limit: 20 });
        let relative = Attachment::bounded(MediaKind::Document, "notes.txt");
        assert!(matches!(rt.block_on(LocalFiles.fetch(&relative, Capped::new(100))), Err(FetchError::Gone(_))));
    }
}
