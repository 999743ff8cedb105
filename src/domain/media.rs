//! Media in and out: what a chat message carries besides its text (photos,
//! voice notes, files, places), what became of each piece once pincer
//! prepared it for the agent, and what a file for a chat is.
//!
//! Everything a platform says about a file (its name, type, size) is
//! untrusted: [`Attachment`]s are bounded when built ([`Attachment::bounded`])
//! and rendered escaped; a file name is never used as a path before
//! [`safe_file_name`] made it one component.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What kind of thing a chat message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// A photo (compressed by the platform).
    Photo,
    /// An image sent as a file (uncompressed).
    Image,
    /// A sticker: named in a short note, not shown as an image.
    Sticker,
    /// A voice note.
    Voice,
    /// A music or audio file.
    Audio,
    Video,
    /// Any other file: a PDF, a spreadsheet, an archive.
    Document,
}

impl MediaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Photo => "photo",
            MediaKind::Image => "image",
            MediaKind::Sticker => "sticker",
            MediaKind::Voice => "voice",
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
            MediaKind::Document => "document",
        }
    }

    /// What a file sent as a file (a document) is, by the MIME type it
    /// came with: an image the model can be shown, audio, video, or else a
    /// document.
    pub fn of_file(mime: Option<&str>) -> MediaKind {
        match mime {
            Some("image/jpeg" | "image/png" | "image/gif" | "image/webp") => MediaKind::Image,
            Some(m) if m.starts_with("audio/") => MediaKind::Audio,
            Some(m) if m.starts_with("video/") => MediaKind::Video,
            _ => MediaKind::Document,
        }
    }

    /// Whether the model may see it as an image (after preparation).
    pub fn is_image(self) -> bool {
        matches!(self, MediaKind::Photo | MediaKind::Image)
    }

    /// Whether a transcription engine is asked for its words.
    pub fn is_speech(self) -> bool {
        matches!(self, MediaKind::Voice | MediaKind::Audio)
    }
}

/// One file a chat message carries, as its platform announced it, and (once
/// prepared) what pincer made of it. Stored as JSON with the message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: MediaKind,
    /// How the platform's adapter fetches it again (a Telegram `file_id`, a
    /// WhatsApp media descriptor): opaque outside that adapter, never shown
    /// to the agent.
    pub fetch: String,
    /// The name it was sent with, if any (untrusted, bounded).
    pub file_name: Option<String>,
    /// The MIME type the platform says it has (untrusted, bounded).
    pub mime: Option<String>,
    /// Size in bytes, as announced.
    pub size: Option<u64>,
    /// Length of a voice note, audio or video.
    #[serde(default, with = "humantime_serde")]
    pub duration: Option<Duration>,
    /// Pixels, as announced.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// What became of it; `Waiting` until prepared.
    #[serde(default)]
    pub outcome: Outcome,
}

/// What preparing an attachment came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Outcome {
    /// Not prepared yet (or a message only observed: never fetched).
    #[default]
    Waiting,
    /// Saved in the group's folder at `path` (relative to it, `inbox/…`).
    Saved {
        path: String,
        bytes: u64,
        /// A voice note's or audio's words, when an engine gave them.
        transcript: Option<String>,
        /// Why there is no transcript although one was wanted (the engine failed).
        transcript_note: Option<String>,
        /// Shown to the model as an image (an image block goes with the message).
        shown: bool,
        /// Why an image is not shown (corrupt, too many pixels, unknown format).
        image_note: Option<String>,
    },
    /// Not downloaded: larger than the platform lets a bot fetch.
    TooLarge { limit: u64 },
    /// The download failed (after retries): why, in a few words.
    Failed { why: String },
}

/// Bounds on what a platform may tell us about a file.
pub const NAME_CHARS: usize = 120;
pub const MIME_CHARS: usize = 100;
/// How many attachments one message (an album) may carry.
pub const MAX_ATTACHMENTS: usize = 10;

impl Attachment {
    /// An attachment with its announced facts bounded: a name longer than
    /// [`NAME_CHARS`] or a MIME type longer than [`MIME_CHARS`] is cut.
    pub fn bounded(kind: MediaKind, fetch: impl Into<String>) -> Attachment {
        Attachment {
            kind,
            fetch: fetch.into(),
            file_name: None,
            mime: None,
            size: None,
            duration: None,
            width: None,
            height: None,
            outcome: Outcome::Waiting,
        }
    }

    pub fn with_name(mut self, name: Option<&str>) -> Attachment {
        self.file_name = name.map(|n| n.chars().filter(|c| !c.is_control()).take(NAME_CHARS).collect());
        self
    }

    pub fn with_mime(mut self, mime: Option<&str>) -> Attachment {
        self.mime = mime.map(|m| m.chars().filter(|c| c.is_ascii_graphic()).take(MIME_CHARS).collect());
        self
    }
}

/// An image as the model is shown it: already decoded, scaled and encoded
/// by pincer (never the bytes as sent), stored with its message.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelImage {
    /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`.
    pub media_type: String,
    pub data: Vec<u8>,
}

/// Its type and size, never its bytes (a log line or a failed test stays readable).
impl std::fmt::Debug for ModelImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelImage").field("media_type", &self.media_type).field("bytes", &self.data.len()).finish()
    }
}

/// A place, a contact or a poll: shown to the agent as text, never fetched.
pub fn place_text(name: Option<&str>, latitude: f64, longitude: f64) -> String {
    match name {
        Some(name) => format!("[location: {name} at {latitude:.6}, {longitude:.6}]"),
        None => format!("[location: {latitude:.6}, {longitude:.6}]"),
    }
}

/// The lines the agent reads about a message's attachments, one each, after
/// its text (escaped by the caller like the text). Pincer's words, with the
/// platform's facts (names, types) kept to one bounded line.
pub fn describe(media: &[Attachment]) -> String {
    media.iter().map(Attachment::describe).collect::<Vec<_>>().join("\n")
}

impl Attachment {
    /// One line: what it is, where it was saved, and what the agent can do with it.
    pub fn describe(&self) -> String {
        let mut what = self.kind.as_str().to_owned();
        if let Some(d) = self.duration {
            let s = d.as_secs();
            what.push_str(&format!(" {}:{:02}", s / 60, s % 60));
        }
        if let Some(name) = &self.file_name {
            what.push_str(&format!(" \"{}\"", crate::domain::one_line(name, NAME_CHARS)));
        }
        if let Some(mime) = &self.mime {
            what.push_str(&format!(", {mime}"));
        }
        if let Some(size) = self.size {
            what.push_str(&format!(", {}", human_bytes(size)));
        }
        match &self.outcome {
            Outcome::Waiting => format!("[{what}: not fetched]"),
            Outcome::TooLarge { limit } => {
                format!("[{what}: not downloaded, larger than the {} a bot may fetch]", human_bytes(*limit))
            }
            Outcome::Failed { why } => format!("[{what}: the download failed ({})]", crate::domain::one_line(why, 200)),
            Outcome::Saved { path, transcript, transcript_note, shown, image_note, .. } => {
                let mut line = format!("[{what}, saved as {path}");
                if *shown {
                    line.push_str(", shown to you below");
                }
                if let Some(note) = image_note {
                    line.push_str(&format!(", not shown to you: {note}"));
                } else if self.kind.is_image() && !shown {
                    // Context that came with a later message: the file is there to open.
                    line.push_str(", open the file to see it");
                }
                if let Some(note) = transcript_note {
                    line.push_str(&format!(", no transcript: {note}"));
                } else if self.kind.is_speech() && transcript.is_none() {
                    line.push_str(", no transcript (none configured)");
                }
                line.push(']');
                if let Some(t) = transcript {
                    line.push_str(&format!(" transcript: {t}"));
                }
                line
            }
        }
    }
}

/// `n` bytes for people: "812 B", "23.4 KB", "2.3 MB", "1.1 GB" (in 1024s, as platforms count).
pub fn human_bytes(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if f < K {
        format!("{n} B")
    } else if f < K * K {
        format!("{:.1} KB", f / K)
    } else if f < K * K * K {
        format!("{:.1} MB", f / (K * K))
    } else {
        format!("{:.1} GB", f / (K * K * K))
    }
}

/// How a file the agent sends goes to a chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Shown inline as a photo (Telegram `sendPhoto`).
    Photo,
    Audio,
    /// Anything else, and an image too large to be a photo.
    Document,
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Photo => "photo",
            FileKind::Audio => "audio",
            FileKind::Document => "document",
        }
    }

    pub fn parse(s: &str) -> Option<FileKind> {
        [FileKind::Photo, FileKind::Audio, FileKind::Document].into_iter().find(|k| k.as_str() == s)
    }
}

/// A file on its way to a chat: pincer's own copy (in the data dir, made
/// when the agent asked, so the agent may change or delete its file), with
/// the outbox row's text as its caption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundFile {
    /// Pincer's copy, absolute.
    pub path: std::path::PathBuf,
    /// The name the chat shows (already a [`safe_file_name`]).
    pub name: String,
    pub kind: FileKind,
    pub bytes: u64,
    /// Where it was in the group's folder (relative, as pincer resolved it):
    /// shown to people, never used as a path.
    pub from: String,
}

/// The largest file of `kind` pincer sends to a chat on `platform`, in
/// bytes: what the platform takes from a bot or linked device (Telegram's
/// Bot API: photos 10 MB, other files 50 MB; WhatsApp: media 16 MB,
/// documents 100 MB). `send_file` refuses a larger file before it is queued.
pub fn send_limit(platform: crate::domain::Platform, kind: FileKind) -> u64 {
    use crate::domain::Platform;
    const MB: u64 = 1024 * 1024;
    match (platform, kind) {
        (Platform::Telegram, FileKind::Photo) => 10 * MB,
        (Platform::Telegram, _) => 50 * MB,
        (Platform::WhatsApp, FileKind::Document) => 100 * MB,
        (Platform::WhatsApp, _) => 16 * MB,
        (Platform::Console, _) => 100 * MB,
    }
}

/// The largest file pincer downloads from a chat on `platform`: what a bot
/// may fetch from Telegram's Bot API (20 MB), what WhatsApp sends at most
/// (a 100 MB document), and as much from the terminal.
pub fn fetch_limit(platform: crate::domain::Platform) -> u64 {
    use crate::domain::Platform;
    const MB: u64 = 1024 * 1024;
    match platform {
        Platform::Telegram => 20 * MB,
        Platform::WhatsApp | Platform::Console => 100 * MB,
    }
}

/// How long a file name pincer writes may be, in bytes.
pub const SAFE_NAME_BYTES: usize = 100;

/// `name` as one safe path component: no separators, no `..`, no control
/// characters, no leading dot, at most [`SAFE_NAME_BYTES`] bytes (cut on a
/// character boundary, the extension kept when it is short). Never empty:
/// `fallback` when nothing is left.
pub fn safe_file_name(name: &str, fallback: &str) -> String {
    let cleaned: String =
        name.chars().map(|c| if c == '/' || c == '\\' || c.is_control() || c == ':' { '_' } else { c }).collect();
    let cleaned = cleaned.trim().trim_start_matches('.').trim();
    let cleaned = if cleaned.is_empty() || cleaned.chars().all(|c| c == '.' || c == '_') {
        fallback.to_owned()
    } else {
        cleaned.to_owned()
    };
    if cleaned.len() <= SAFE_NAME_BYTES {
        return cleaned;
    }
    let (stem, ext) = match cleaned.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && ext.len() <= 10 => (stem, Some(ext)),
        _ => (cleaned.as_str(), None),
    };
    let room = SAFE_NAME_BYTES - ext.map_or(0, |e| e.len() + 1);
    let mut cut = room.min(stem.len());
    while !stem.is_char_boundary(cut) {
        cut -= 1;
    }
    match ext {
        Some(ext) => format!("{}.{ext}", &stem[..cut]),
        None => stem[..cut].to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_becomes_one_safe_component() {
        assert_eq!(safe_file_name("../../etc/passwd", "file"), "_.._etc_passwd");
        assert_eq!(safe_file_name("..", "file"), "file");
        assert_eq!(safe_file_name(".hidden", "file"), "hidden");
        assert_eq!(safe_file_name("a\nb\u{0}c.pdf", "file"), "a_b_c.pdf");
        assert_eq!(safe_file_name("  ", "photo.jpg"), "photo.jpg");
        assert_eq!(safe_file_name("C:\\x.txt", "f"), "C__x.txt");
        let long = format!("{}.pdf", "é".repeat(200));
        let safe = safe_file_name(&long, "f");
        assert!(safe.len() <= SAFE_NAME_BYTES && safe.ends_with(".pdf"), "{safe}");
        let no_ext = "x".repeat(300);
        assert_eq!(safe_file_name(&no_ext, "f").len(), SAFE_NAME_BYTES);
    }

    #[test]
    fn announced_facts_are_bounded() {
        let a = Attachment::bounded(MediaKind::Document, "id")
            .with_name(Some(&format!("{}\u{7}", "n".repeat(500))))
            .with_mime(Some("application/pdf\r\nX-Evil: 1"));
        assert_eq!(a.file_name.as_deref().map(str::len), Some(NAME_CHARS));
        assert_eq!(a.mime.as_deref(), Some("application/pdfX-Evil:1"));
    }

    #[test]
    fn an_attachment_round_trips_through_json() {
        let mut a = Attachment::bounded(MediaKind::Voice, "f1");
        a.duration = Some(Duration::from_secs(42));
        a.outcome = Outcome::Saved {
            path: "inbox/2026-11-24/1-voice.ogg".into(),
            bytes: 12,
            transcript: Some("hello".into()),
            transcript_note: None,
            shown: false,
            image_note: None,
        };
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Attachment>(&json).unwrap(), a);
        let old: Attachment = serde_json::from_str(
            r#"{"kind":"photo","fetch":"x","file_name":null,"mime":null,"size":null,"width":null,"height":null}"#,
        )
        .unwrap();
        assert_eq!(old.outcome, Outcome::Waiting);
    }
}
