//! Files both ways: what users send (held for `getFile` and download) and
//! what the bot uploads (`sendDocument`, `sendPhoto`, `sendAudio`). Touches
//! the state, the text parsing and the parameters.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{json, Value};

use super::answer::{bad, Outcome};
use super::html::format_text;
use super::model::{FileRef, SentFile, TgUser, DOWNLOAD_LIMIT, MAX_CAPTION_UTF16};
use super::params::{int_value, string_value, unhex};
use super::state::{now, place_in_thread, FakeBot, Inner, SentMeta, Shared};

impl FakeBot {
    /// Holds `bytes` as a file a user sent, for a message to carry.
    pub fn upload(&self, bytes: Vec<u8>) -> FileRef {
        let mut inner = self.shared.lock();
        let id = format!("file-{}", inner.files.len() + 1);
        let size = bytes.len() as u64;
        inner.files.insert(id.clone(), bytes);
        FileRef { id, size }
    }

    /// A file the fake holds under an id without its bytes, claiming `size`
    /// (a file too large to download needs no bytes to be refused).
    pub fn upload_claimed(&self, size: u64) -> FileRef {
        let mut inner = self.shared.lock();
        let id = format!("file-{}", inner.files.len() + 1);
        inner.files.insert(id.clone(), Vec::new());
        FileRef { id, size }
    }

    /// The file paths downloaded so far.
    pub fn downloads(&self) -> Vec<String> {
        self.shared.lock().downloads.clone()
    }
}

impl Inner {
    /// `getFile`: where a file a user sent can be downloaded, if it may be.
    pub(super) fn get_file(&self, p: &Value) -> Outcome {
        let id = p.get("file_id").and_then(string_value).unwrap_or_default();
        let Some(bytes) = self.files.get(&id) else {
            return Err(bad("wrong file_id or the file is temporarily unavailable"));
        };
        // A claimed size (no bytes held) stands for the real one.
        let size = if bytes.is_empty() { u64::MAX } else { bytes.len() as u64 };
        if size > DOWNLOAD_LIMIT {
            return Err(bad("file is too big"));
        }
        Ok(json!({ "file_id": id, "file_unique_id": id, "file_size": size, "file_path": format!("files/{id}") }))
    }

    /// `sendDocument`, `sendPhoto` or `sendAudio` (`kind`, also the file's
    /// parameter) with an uploaded file (a `file_id` or URL is refused:
    /// pincer only uploads). The caption is checked like Telegram's, 1024
    /// units at most; a photo like Telegram's, at most 10 MB, and an image.
    pub(super) fn send_file(&mut self, p: &Value, kind: &'static str) -> Outcome {
        let chat = self.target_chat(p)?;
        // teloxide uploads the file as a part of its own, named by `attach://NAME`.
        let file = match p.get(kind) {
            Some(Value::String(s)) => s.strip_prefix("attach://").and_then(|name| p.get(name)),
            other => other,
        };
        let file = file.filter(|d| d.is_object()).ok_or_else(|| bad(&format!("there is no {kind} in the request")))?;
        let sent_file = SentFile {
            kind,
            file_name: file["file_name"].as_str().unwrap_or_default().to_owned(),
            bytes: unhex(file["hex"].as_str().unwrap_or_default()),
        };
        if sent_file.bytes.is_empty() {
            return Err(bad("file must be non-empty"));
        }
        if kind == "photo" && (sent_file.bytes.len() > 10 * 1024 * 1024 || !is_image(&sent_file.bytes)) {
            return Err(bad("IMAGE_PROCESS_FAILED"));
        }
        let raw_text = p.get("caption").and_then(string_value).unwrap_or_default();
        let parse_mode = p.get("parse_mode").and_then(string_value).filter(|m| !m.is_empty());
        // A caption may be left out; one that is given is parsed like a message's text.
        let caption = match raw_text.is_empty() {
            true => String::new(),
            false => {
                let formatted = format_text(&raw_text, parse_mode.as_deref(), p.get("caption_entities"))?;
                if formatted.len_utf16() > MAX_CAPTION_UTF16 {
                    return Err(bad("message caption is too long"));
                }
                formatted.text
            }
        };
        let thread = p.get("message_thread_id").and_then(int_value);
        let topic = thread.filter(|_| chat.is_forum());
        let root = topic.map(|t| self.topic_root(&chat, t));
        let id = self.next_message_id(chat.id);
        let file_id = format!("{kind}-{}-{id}", chat.id);
        let size = sent_file.bytes.len();
        let media = match kind {
            // Telegram answers a photo with its sizes; one is enough here.
            "photo" => {
                json!([{ "file_id": file_id, "file_unique_id": file_id, "width": 1, "height": 1, "file_size": size }])
            }
            _ => {
                json!({ "file_id": file_id, "file_unique_id": file_id, "file_name": sent_file.file_name, "file_size": size })
            }
        };
        let mut message = json!({
            "message_id": id,
            "from": TgUser::bot().to_json(),
            "chat": chat.to_json(),
            "date": now(),
        });
        message[kind] = media;
        if kind == "audio" {
            message["audio"]["duration"] = json!(1);
        }
        if !caption.is_empty() {
            message["caption"] = json!(caption);
        }
        place_in_thread(&mut message, &chat, topic, root, None);
        self.messages.insert((chat.id, id), message.clone());
        self.sent.push(SentMeta {
            chat_id: chat.id,
            message_id: id,
            thread_id: thread,
            raw_text,
            parse_mode,
            reply_markup: None,
            edits: 0,
            file: Some(sent_file),
            deleted: false,
        });
        Ok(message)
    }
}

/// A file's bytes at `/file/bot<token>/<file_path>`, as Telegram's file
/// server serves them (teloxide sends the path's slashes as `%2F`).
pub(super) fn download(shared: &Shared, path: &str) -> Response {
    let path = path.replace("%2F", "/").replace("%2f", "/");
    let path = path.as_str();
    let mut inner = shared.lock();
    inner.downloads.push(path.to_owned());
    let bytes = path.strip_prefix("files/").and_then(|id| inner.files.get(id)).cloned();
    drop(inner);
    shared.activity.notify_waiters();
    match bytes {
        Some(bytes) => (StatusCode::OK, bytes).into_response(),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// Whether `bytes` start like a JPEG, PNG, GIF or WebP.
pub(super) fn is_image(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xFF, 0xD8, 0xFF])
        || bytes.starts_with(b"\x89PNG")
        || bytes.starts_with(b"GIF8")
        || (bytes.len() > 12 && &bytes[8..12] == b"WEBP")
}
