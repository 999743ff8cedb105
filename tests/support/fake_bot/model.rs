//! The fake Bot API's vocabulary for tests: the chats, users and messages
//! they play, and the records of what the bot did. Plain data; touches nothing.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The bot's user id, as `getMe` reports it.
pub const BOT_ID: i64 = 7_000_000_001;

/// The bot's @username, without the `@`.
pub const BOT_USERNAME: &str = "pincer_test_bot";

pub const BOT_FIRST_NAME: &str = "Andy";

/// Telegram's limit on a message's text, in UTF-16 code units after entity parsing.
pub const MAX_TEXT_UTF16: usize = 4096;

/// Telegram's limit on a caption, in UTF-16 code units.
pub const MAX_CAPTION_UTF16: usize = 1024;

/// Telegram's limit on an inline button's `callback_data`, in bytes.
pub const MAX_CALLBACK_DATA: usize = 64;

/// How long [`FakeBot::wait_for`] waits before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The most a bot may download through the Bot API (`getFile` refuses more).
pub const DOWNLOAD_LIMIT: u64 = 20 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatKind {
    Private,
    Group,
    Supergroup { forum: bool },
}

/// A chat the tests talk in. For a private chat, `id` is the user's id and
/// `title` their first name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TgChat {
    pub id: i64,
    pub kind: ChatKind,
    pub title: String,
}

impl TgChat {
    pub fn private(user: &TgUser) -> TgChat {
        TgChat { id: user.id, kind: ChatKind::Private, title: user.first_name.clone() }
    }

    pub fn group(id: i64, title: &str) -> TgChat {
        TgChat { id, kind: ChatKind::Group, title: title.to_owned() }
    }

    pub fn supergroup(id: i64, title: &str) -> TgChat {
        TgChat { id, kind: ChatKind::Supergroup { forum: false }, title: title.to_owned() }
    }

    pub fn forum(id: i64, title: &str) -> TgChat {
        TgChat { id, kind: ChatKind::Supergroup { forum: true }, title: title.to_owned() }
    }

    pub(super) fn is_forum(&self) -> bool {
        self.kind == ChatKind::Supergroup { forum: true }
    }

    pub(super) fn to_json(&self) -> Value {
        match self.kind {
            ChatKind::Private => json!({ "id": self.id, "type": "private", "first_name": self.title }),
            ChatKind::Group => json!({ "id": self.id, "type": "group", "title": self.title }),
            ChatKind::Supergroup { forum } => {
                let mut chat = json!({ "id": self.id, "type": "supergroup", "title": self.title });
                if forum {
                    chat["is_forum"] = json!(true);
                }
                chat
            }
        }
    }

    /// A chat pincer sends to before the tests introduced it: Telegram's id
    /// ranges tell the kind.
    pub(super) fn guess(id: i64) -> TgChat {
        let kind = if id > 0 {
            ChatKind::Private
        } else if id <= -1_000_000_000_000 {
            ChatKind::Supergroup { forum: false }
        } else {
            ChatKind::Group
        };
        TgChat { id, kind, title: format!("Chat {id}") }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TgUser {
    pub id: i64,
    pub first_name: String,
    pub username: Option<String>,
}

impl TgUser {
    pub fn new(id: i64, first_name: &str) -> TgUser {
        TgUser { id, first_name: first_name.to_owned(), username: None }
    }

    /// The bot itself, e.g. as the creator of a topic.
    pub fn bot() -> TgUser {
        TgUser { id: BOT_ID, first_name: BOT_FIRST_NAME.to_owned(), username: Some(BOT_USERNAME.to_owned()) }
    }

    pub(super) fn to_json(&self) -> Value {
        let mut user = json!({ "id": self.id, "is_bot": self.id == BOT_ID, "first_name": self.first_name });
        if let Some(username) = &self.username {
            user["username"] = json!(username);
        }
        user
    }
}

/// A message a user posts. `reply_to` is a message id in the same chat, one
/// the bot sent or one a user posted; `topic` is a forum topic's thread id.
#[derive(Clone, Debug)]
pub struct Incoming {
    pub chat: TgChat,
    pub from: TgUser,
    pub text: String,
    pub topic: Option<i64>,
    pub reply_to: Option<i64>,
    /// What the message carries besides text (`"photo"`, `"voice"`, …, as
    /// Telegram's Message JSON has them); with it, `text` is the caption.
    pub media: Option<Value>,
    /// Telegram's `media_group_id`: the parts of one album share it.
    pub album: Option<String>,
}

impl Incoming {
    pub fn new(chat: &TgChat, from: &TgUser, text: &str) -> Incoming {
        Incoming {
            chat: chat.clone(),
            from: from.clone(),
            text: text.to_owned(),
            topic: None,
            reply_to: None,
            media: None,
            album: None,
        }
    }

    /// A photo (in the sizes Telegram makes of it: here the file itself and
    /// a made-up thumbnail), with `caption`.
    pub fn photo(chat: &TgChat, from: &TgUser, caption: &str, file: &FileRef, width: u32, height: u32) -> Incoming {
        let thumb = json!({ "file_id": format!("{}-thumb", file.id), "file_unique_id": "thumb", "file_size": 100,
                            "width": 90, "height": 90 });
        let full = json!({ "file_id": file.id, "file_unique_id": file.id, "file_size": file.size,
                           "width": width, "height": height });
        Incoming { media: Some(json!({ "photo": [thumb, full] })), ..Incoming::new(chat, from, caption) }
    }

    /// A file sent as a document.
    pub fn document(chat: &TgChat, from: &TgUser, caption: &str, file: &FileRef, name: &str, mime: &str) -> Incoming {
        let document = json!({ "file_id": file.id, "file_unique_id": file.id, "file_size": file.size,
                               "file_name": name, "mime_type": mime });
        Incoming { media: Some(json!({ "document": document })), ..Incoming::new(chat, from, caption) }
    }

    /// A voice note of `seconds`.
    pub fn voice(chat: &TgChat, from: &TgUser, file: &FileRef, seconds: u32) -> Incoming {
        let voice = json!({ "file_id": file.id, "file_unique_id": file.id, "file_size": file.size,
                            "duration": seconds, "mime_type": "audio/ogg" });
        Incoming { media: Some(json!({ "voice": voice })), ..Incoming::new(chat, from, "") }
    }

    /// Part of the album `key`.
    pub fn in_album(self, key: &str) -> Incoming {
        Incoming { album: Some(key.to_owned()), ..self }
    }
}

/// A file the fake holds for download ([`FakeBot::upload`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRef {
    pub id: String,
    pub size: u64,
}

/// One request the bot made.
#[derive(Clone, Debug)]
pub struct Call {
    /// Telegram's spelling: `sendMessage`, `getUpdates`, …
    pub method: String,
    /// The JSON body (query and form parameters folded in as strings).
    pub params: Value,
    pub ok: bool,
    /// The `description` of a failed call.
    pub error: Option<String>,
    /// When the answer was given (for a long poll: when it returned; for a
    /// hung call: when it came in).
    pub at: Instant,
}

/// A message the bot sent, as it stands now (after edits).
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    pub message_id: i64,
    pub chat_id: i64,
    /// The `message_thread_id` the bot asked for.
    pub thread_id: Option<i64>,
    /// What the chat shows: tags stripped, entities decoded, trimmed.
    pub text: String,
    /// The text as the bot sent it (HTML source for `parse_mode: "HTML"`).
    pub raw_text: String,
    pub parse_mode: Option<String>,
    /// The `reply_markup` of the last send or edit; `None` once an edit dropped it.
    pub reply_markup: Option<Value>,
    /// How many successful edits the message had.
    pub edits: u32,
    /// The file of a `sendDocument`, `sendPhoto` or `sendAudio` (its text is the caption).
    pub file: Option<SentFile>,
    /// Deleted with `deleteMessage` (its last text is kept here).
    pub deleted: bool,
}

impl Sent {
    /// The `callback_data` of every inline button the message has now, row by row.
    pub fn button_data(&self) -> Vec<String> {
        let markup = self.reply_markup.clone().unwrap_or_default();
        let rows = markup["inline_keyboard"].as_array().cloned().unwrap_or_default();
        rows.iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|b| b["callback_data"].as_str().unwrap().to_owned()))
            .collect()
    }
}

/// A file the bot uploaded with `sendDocument`, `sendPhoto` or `sendAudio`.
#[derive(Clone, Debug, PartialEq)]
pub struct SentFile {
    /// `document`, `photo` or `audio`: the method it came with.
    pub kind: &'static str,
    pub file_name: String,
    pub bytes: Vec<u8>,
}

impl SentFile {
    /// The bytes as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// The webhook the bot registered with `setWebhook`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    pub secret_token: Option<String>,
}

/// A fault to answer the next call of a method with ([`FakeBot::fail_next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FakeError {
    /// 429 with `parameters.retry_after`: teloxide's `RequestError::RetryAfter`.
    RetryAfter(u32),
    /// Any error. A 5xx code makes teloxide sleep 10 s before it reports it.
    Custom { code: u16, description: String },
}

impl FakeError {
    pub fn custom(code: u16, description: &str) -> FakeError {
        FakeError::Custom { code, description: description.to_owned() }
    }
}
