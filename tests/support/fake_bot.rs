//! A fake Telegram Bot API server on loopback, spoken to by the real teloxide
//! client (`[telegram] api_url = <FakeBot::api_url()>`).
//!
//! Tests play the people in the chats ([`FakeBot::say`], [`FakeBot::press`],
//! [`FakeBot::set_member_status`]) and assert on what the bot did
//! ([`FakeBot::calls`], [`FakeBot::sent`]). Every request is recorded, whether
//! it succeeded or not, under Telegram's lowerCamel method name.
//!
//! It rejects what Telegram rejects, with the descriptions teloxide-core maps to
//! its `ApiError` variants, so a formatting or size bug in pincer fails here
//! instead of in production:
//! - `parse_mode: "HTML"` is parsed like Telegram's parser (tdlib's
//!   `parse_html`): only Telegram's tags, properly nested and closed; and,
//!   stricter than Telegram, a bare `<` or an `&` that starts no supported entity
//!   (`&lt; &gt; &amp; &quot;`, numeric) is an error too, as the Bot API docs
//!   require them escaped.
//! - Length is counted in UTF-16 units of the visible text after entity parsing
//!   and trimming, 4096 at most.
//! - `callback_data` is 1-64 bytes; editing to identical content is "message is
//!   not modified"; editing text without `reply_markup` drops the keyboard.
//!
//! Telegram's own quirks are reproduced because pincer must cope with them:
//! - In a forum, every message in a topic that replies to nothing carries
//!   `reply_to_message` = the topic's `forum_topic_created` service message.
//! - In a non-forum supergroup, a reply carries `message_thread_id` (the root of
//!   its reply chain) without `is_topic_message`.
//! - teloxide sends `POST /bot<TOKEN>/SendMessage` (PascalCase); Telegram and
//!   this fake match method names case-insensitively.
//! - `allowed_updates` sticks from one `getUpdates`/`setWebhook` to the next, and
//!   updates of other kinds are never delivered.
//! - While a webhook is set, queued updates are POSTed to it (with the
//!   `X-Telegram-Bot-Api-Secret-Token` header) instead of served to `getUpdates`.
//!
//! Network faults are injected on demand, for tests of retries and outages. A
//! faulted call has no effect (no message is created), is recorded with
//! `ok: false` and an `error` naming the fault, and wakes [`FakeBot::wait_for`].
//! What teloxide-core 0.13 (teloxide 0.17, `Bot::new`'s default client) makes
//! of each, which the timing of tests depends on:
//! - [`FakeBot::outage`] answers a 5xx status with the HTML page Telegram's
//!   nginx front gives (`<html>…502 Bad Gateway…`). On any 5xx status
//!   teloxide's `process_response` first sleeps `DELAY_ON_SERVER_ERROR`, 10 s,
//!   inside the request future, then fails to parse the page as JSON: the call
//!   ends after ≥ 10 s with `RequestError::InvalidJson { raw: "<html>…" }` (the
//!   status is lost). A 5xx with Telegram's JSON body ([`FakeBot::fail_next`]
//!   with [`FakeError::custom`]) sleeps as long and ends with
//!   `RequestError::Api(ApiError::Unknown(description))`. So a client that
//!   retries at once, one call at a time, makes one attempt per 10 s of outage
//!   (plus the last one, failed if the outage ended during its sleep).
//! - [`FakeBot::drop_connections`] and [`FakeBot::drop_next`] close the
//!   connection without an answer: `RequestError::Network` at once (hyper's
//!   "connection closed before message completed"; reqwest does not resend a
//!   request it had written).
//! - [`FakeBot::hang_next`] and [`FakeBot::hang_calls`] never answer until
//!   [`FakeBot::release_hangs`] or the fake is dropped, then close the
//!   connection. teloxide's default client gives up first, after its 17 s total
//!   timeout (`default_reqwest_settings`), with `RequestError::Network` (a
//!   timeout), and the fake never learns that it did.
//!
//! - [`FakeBot::slow_calls`] answers a call as usual, only after a delay (a
//!   slow uplink): past 17 s teloxide's default client has given up on it,
//!   and the call, no longer awaited, has no effect.
//!
//! Faults act between the bot and the API only: updates still reach a webhook.
//!
//! `sendDocument`, `sendPhoto` and `sendAudio` keep an uploaded file's name
//! and bytes ([`Sent::file`]); a photo that is no image, or over 10 MB, is
//! refused like Telegram does ("IMAGE_PROCESS_FAILED").
//!
//! `deleteMessage` deletes the bot's own messages only ("message can't be
//! deleted" otherwise, "message to delete not found" the second time); a
//! deleted message stays in [`FakeBot::sent`] marked [`Sent::deleted`], and
//! edits of it are "message to edit not found". `setMessageReaction` takes
//! one of Telegram's reaction emoji ("REACTION_INVALID" otherwise) on a
//! message that exists ([`FakeBot::reactions`]).
//!
//! Not modelled: `sendVideo`, `sendVoice` and `sendMediaGroup` (pincer sends one
//! file a message), inline mode, MarkdownV2 parsing (its text is
//! counted as is), HTTPS-only webhooks, rate limits (inject them with
//! [`FakeBot::fail_next`]), a call that takes effect but whose answer is lost.
#![allow(dead_code)]

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    pin::pin,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{
    body::Bytes,
    extract::{ConnectInfo, State},
    http::{header, HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
    Json, Router,
};
use serde_json::{json, Map, Value};
use tokio::sync::{oneshot, Notify};

use super::serve::Cutter;

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

/// The chat owner: creates the topics tests do not create, adds and removes the bot.
const OWNER_ID: i64 = 1;
const FIRST_UPDATE_ID: u32 = 500_000_001;
/// Telegram's default `allowed_updates` leaves these out.
const OPT_IN_UPDATES: [&str; 3] = ["chat_member", "message_reaction", "message_reaction_count"];
/// One of Telegram's six topic icon colours.
const TOPIC_ICON_COLOR: u32 = 7_322_096;

const NOT_MODIFIED: &str = "Bad Request: message is not modified: specified new message content and reply markup are \
                            exactly the same as a current content and reply markup of the message";
const BAD_QUERY_ID: &str = "Bad Request: query is too old and response timeout expired or query id is invalid";

/// Methods the fake knows by name, so a case-mangled path still records
/// Telegram's spelling.
const KNOWN_METHODS: &[&str] = &[
    "getMe",
    "getUpdates",
    "sendMessage",
    "editMessageText",
    "editMessageReplyMarkup",
    "sendChatAction",
    "answerCallbackQuery",
    "setMyCommands",
    "deleteMyCommands",
    "getMyCommands",
    "setWebhook",
    "deleteWebhook",
    "getWebhookInfo",
    "deleteMessage",
    "getChat",
    "getChatMember",
    "leaveChat",
    "sendPhoto",
    "sendDocument",
    "sendAudio",
    "setMessageReaction",
    "pinChatMessage",
    "logOut",
    "close",
];

const HTML_TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-emoji",
];

const CHAT_ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

/// The emoji Telegram takes as a reaction (teloxide-core's `ReactionType::Emoji` docs).
const REACTION_EMOJI: &[&str] = &[
    "👍",
    "👎",
    "❤",
    "🔥",
    "🥰",
    "👏",
    "😁",
    "🤔",
    "🤯",
    "😱",
    "🤬",
    "😢",
    "🎉",
    "🤩",
    "🤮",
    "💩",
    "🙏",
    "👌",
    "🕊",
    "🤡",
    "🥱",
    "🥴",
    "😍",
    "🐳",
    "❤‍🔥",
    "🌚",
    "🌭",
    "💯",
    "🤣",
    "⚡",
    "🍌",
    "🏆",
    "💔",
    "🤨",
    "😐",
    "🍓",
    "🍾",
    "💋",
    "🖕",
    "😈",
    "😴",
    "😭",
    "🤓",
    "👻",
    "👨‍💻",
    "👀",
    "🎃",
    "🙈",
    "😇",
    "😨",
    "🤝",
    "✍",
    "🤗",
    "🫡",
    "🎅",
    "🎄",
    "☃",
    "💅",
    "🤪",
    "🗿",
    "🆒",
    "💘",
    "🙉",
    "🦄",
    "😘",
    "💊",
    "🙊",
    "😎",
    "👾",
    "🤷‍♂",
    "🤷",
    "🤷‍♀",
    "😡",
];

/// Keys that give an inline button something to do besides showing its text.
const BUTTON_ACTIONS: &[&str] = &[
    "url",
    "callback_data",
    "web_app",
    "login_url",
    "switch_inline_query",
    "switch_inline_query_current_chat",
    "switch_inline_query_chosen_chat",
    "copy_text",
    "callback_game",
    "pay",
];

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

    fn is_forum(&self) -> bool {
        self.kind == ChatKind::Supergroup { forum: true }
    }

    fn to_json(&self) -> Value {
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
    fn guess(id: i64) -> TgChat {
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

    fn to_json(&self) -> Value {
        let mut user = json!({ "id": self.id, "is_bot": self.id == BOT_ID, "first_name": self.first_name });
        if let Some(username) = &self.username {
            user["username"] = json!(username);
        }
        user
    }
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

/// The most a bot may download through the Bot API (`getFile` refuses more).
pub const DOWNLOAD_LIMIT: u64 = 20 * 1024 * 1024;

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

/// A fault of the network or of Telegram's front, set by [`FakeBot::outage`],
/// [`FakeBot::drop_connections`], [`FakeBot::hang_next`] and the like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NetFault {
    /// Answered with this 5xx status and the proxy's HTML page.
    Status(u16),
    /// The connection is closed without an answer.
    Drop,
    /// Not answered until released, then the connection is closed.
    Hang,
}

impl NetFault {
    /// The `error` of the recorded call.
    fn describe(self) -> String {
        match self {
            NetFault::Status(code) => format!("fault: {code}"),
            NetFault::Drop => "fault: connection dropped".to_owned(),
            NetFault::Hang => "fault: hung".to_owned(),
        }
    }
}

/// Which calls a [`NetFault`] hits, and for how long.
#[derive(Debug)]
struct FaultRule {
    fault: NetFault,
    /// Lowercased method names; empty: every method.
    methods: Vec<String>,
    /// The end of a window; `None`: until the calls are used up or it is ended.
    until: Option<Instant>,
    /// How many calls it still hits; `None`: every call in the window.
    calls_left: Option<u32>,
}

impl FaultRule {
    fn window(fault: NetFault, methods: &[&str], window: Duration) -> FaultRule {
        let methods = methods.iter().map(|m| m.to_ascii_lowercase()).collect();
        FaultRule { fault, methods, until: Some(Instant::now() + window), calls_left: None }
    }

    fn next_call(fault: NetFault, method: &str) -> FaultRule {
        FaultRule { fault, methods: vec![method.to_ascii_lowercase()], until: None, calls_left: Some(1) }
    }

    fn is_over(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now >= until) || self.calls_left == Some(0)
    }

    fn hits(&self, method: &str) -> bool {
        self.methods.is_empty() || self.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
    }
}

/// The webhook the bot registered with `setWebhook`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    pub secret_token: Option<String>,
}

/// An error answer, in Telegram's terms.
#[derive(Debug)]
struct TgError {
    code: u16,
    description: String,
    retry_after: Option<u32>,
}

fn bad(what: &str) -> TgError {
    TgError { code: 400, description: format!("Bad Request: {what}"), retry_after: None }
}

fn forbidden(what: &str) -> TgError {
    TgError { code: 403, description: format!("Forbidden: {what}"), retry_after: None }
}

impl From<FakeError> for TgError {
    fn from(e: FakeError) -> TgError {
        match e {
            FakeError::RetryAfter(secs) => TgError {
                code: 429,
                description: format!("Too Many Requests: retry after {secs}"),
                retry_after: Some(secs),
            },
            FakeError::Custom { code, description } => TgError { code, description, retry_after: None },
        }
    }
}

type Outcome = Result<Value, TgError>;

/// The bot's standing in a chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Membership {
    Member,
    Administrator,
    Left,
    Kicked,
}

impl Membership {
    fn parse(status: &str) -> Option<Membership> {
        Some(match status {
            "member" => Membership::Member,
            "administrator" => Membership::Administrator,
            "left" => Membership::Left,
            "kicked" => Membership::Kicked,
            _ => return None,
        })
    }

    fn to_json(self) -> Value {
        let bot = TgUser::bot().to_json();
        match self {
            Membership::Member => json!({ "user": bot, "status": "member" }),
            Membership::Left => json!({ "user": bot, "status": "left" }),
            Membership::Kicked => json!({ "user": bot, "status": "kicked", "until_date": 0 }),
            Membership::Administrator => json!({
                "user": bot,
                "status": "administrator",
                "can_be_edited": false,
                "is_anonymous": false,
                "can_manage_chat": true,
                "can_change_info": false,
                "can_delete_messages": true,
                "can_manage_video_chats": false,
                "can_invite_users": true,
                "can_restrict_members": false,
                "can_promote_members": false,
                "can_pin_messages": true,
                "can_manage_topics": false,
            }),
        }
    }

    /// Telegram's refusal for a bot that is not in `chat` (any more).
    fn refusal(self, chat: &TgChat) -> Option<TgError> {
        let kicked = match self {
            Membership::Member | Membership::Administrator => return None,
            Membership::Kicked => true,
            Membership::Left => false,
        };
        // Only some of these map to a named ApiError (BotBlocked,
        // BotKickedFromSupergroup); the group ones are ApiError::Unknown, as with
        // the real API.
        Some(forbidden(match (chat.kind, kicked) {
            (ChatKind::Private, _) => "bot was blocked by the user",
            (ChatKind::Group, true) => "bot was kicked from the group chat",
            (ChatKind::Group, false) => "bot is not a member of the group chat",
            (ChatKind::Supergroup { .. }, true) => "bot was kicked from the supergroup chat",
            (ChatKind::Supergroup { .. }, false) => "bot is not a member of the supergroup chat",
        }))
    }
}

/// What the fake remembers of a message the bot sent, beyond its JSON.
struct SentMeta {
    chat_id: i64,
    message_id: i64,
    thread_id: Option<i64>,
    raw_text: String,
    parse_mode: Option<String>,
    reply_markup: Option<Value>,
    edits: u32,
    file: Option<SentFile>,
    deleted: bool,
}

struct Inner {
    next_update_id: u32,
    /// Updates not yet confirmed by a `getUpdates` offset or a webhook 2xx.
    pending: VecDeque<Value>,
    /// Every update ever queued, by id, and how many times it was handed to
    /// the bot (in a `getUpdates` answer or a webhook POST).
    queued: HashMap<u64, (Value, usize)>,
    /// The last `allowed_updates` given; `None` or empty: Telegram's default.
    allowed_updates: Option<Vec<String>>,
    chats: HashMap<i64, TgChat>,
    last_message_id: HashMap<i64, i64>,
    /// Every message on either side, as Telegram's Message JSON.
    messages: HashMap<(i64, i64), Value>,
    /// Messages deleted (they stay in `messages`, for the tests to read).
    deleted: std::collections::HashSet<(i64, i64)>,
    /// The bot's reaction on a message, by chat and message id.
    reactions: HashMap<(i64, i64), Vec<String>>,
    sent: Vec<SentMeta>,
    calls: Vec<Call>,
    membership: HashMap<i64, Membership>,
    /// One-shot faults by lowercased method name.
    faults: HashMap<String, VecDeque<FakeError>>,
    /// Network faults, the oldest first; the first that hits a call applies.
    net_faults: Vec<FaultRule>,
    /// Lowercased methods answered only after this delay ([`FakeBot::slow_calls`]).
    slow: HashMap<String, Duration>,
    /// Bumped by every release, so a hung call knows it may end.
    releases: u64,
    /// Callback query ids, and whether they were answered.
    callbacks: HashMap<String, bool>,
    next_callback: u64,
    webhook: Option<Webhook>,
    /// Files users sent, by file id: what `getFile` and downloads serve.
    files: HashMap<String, Vec<u8>>,
    /// Downloads served, by file path.
    downloads: Vec<String>,
    /// Bumped by every `getUpdates`, so an older long poll knows it was overtaken.
    poll_generation: u64,
    closed: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    /// A new update, poller, webhook or shutdown: wakes long polls and the webhook sender.
    updates: Notify,
    /// A call was recorded or the chats changed: wakes `wait_for`.
    activity: Notify,
    /// Hung calls were released or the fake dropped: wakes hung calls.
    released: Notify,
}

impl Shared {
    /// A test that panicked while holding the lock must not take the server down with it.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(&self, method: &str, params: Value, outcome: &Outcome) {
        self.push_call(method, params, outcome.as_ref().err().map(|e| e.description.clone()));
    }

    fn record_fault(&self, method: &str, params: Value, fault: NetFault) {
        self.push_call(method, params, Some(fault.describe()));
    }

    fn push_call(&self, method: &str, params: Value, error: Option<String>) {
        let call = Call { method: method.to_owned(), params, ok: error.is_none(), error, at: Instant::now() };
        self.lock().calls.push(call);
        self.activity.notify_waiters();
    }
}

/// A running fake Bot API; stops serving when dropped.
pub struct FakeBot {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Dropping it shuts the server down.
    _shutdown: oneshot::Sender<()>,
}

impl FakeBot {
    /// Binds 127.0.0.1 on a free port and serves from a spawned task (needs a
    /// tokio runtime).
    pub async fn start() -> FakeBot {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                next_update_id: FIRST_UPDATE_ID,
                pending: VecDeque::new(),
                queued: HashMap::new(),
                allowed_updates: None,
                chats: HashMap::new(),
                last_message_id: HashMap::new(),
                messages: HashMap::new(),
                deleted: Default::default(),
                reactions: HashMap::new(),
                sent: Vec::new(),
                calls: Vec::new(),
                membership: HashMap::new(),
                faults: HashMap::new(),
                net_faults: Vec::new(),
                slow: HashMap::new(),
                releases: 0,
                callbacks: HashMap::new(),
                next_callback: 1,
                webhook: None,
                files: HashMap::new(),
                downloads: Vec::new(),
                poll_generation: 0,
                closed: false,
            }),
            updates: Notify::new(),
            activity: Notify::new(),
            released: Notify::new(),
        });
        // Every path goes to one handler: the token and method are path
        // segments, and the method name is matched case-insensitively.
        let app = Router::new().fallback(handle).with_state(shared.clone());
        // Cuttable, so a call can lose its connection instead of being answered.
        let (addr, shutdown) = super::serve::serve_loopback_cuttable(app, "fake Bot API").await;
        tokio::spawn(deliver_to_webhook(shared.clone()));
        FakeBot { addr, shared, _shutdown: shutdown }
    }

    /// `http://127.0.0.1:PORT`, for `[telegram] api_url`. teloxide appends
    /// `/bot<TOKEN>/<Method>` as path segments, so no trailing slash is needed
    /// (one after a path prefix would even double it).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes a chat known without anyone talking in it, so sends to it get the
    /// right chat JSON and refusals. Chats seen in [`Self::say`] are known.
    pub fn add_chat(&self, chat: &TgChat) {
        self.shared.lock().chats.insert(chat.id, chat.clone());
    }

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

    /// Queues a text message from `from` in `chat`; returns its message id.
    pub fn say(&self, chat: &TgChat, from: &TgUser, text: &str) -> i64 {
        self.say_with(Incoming::new(chat, from, text))
    }

    /// Queues a message (in a topic, or replying to another); returns its message id.
    pub fn say_with(&self, incoming: Incoming) -> i64 {
        let id = {
            let mut inner = self.shared.lock();
            let message = inner.incoming_message(&incoming);
            let id = message["message_id"].as_i64().unwrap_or_default();
            inner.queue("message", message);
            id
        };
        self.shared.updates.notify_waiters();
        id
    }

    /// Turns `chat` into the supergroup `to`, as Telegram does when a group
    /// grows: queues the old chat's `migrate_to_chat_id` service message;
    /// returns its update id.
    pub fn migrate(&self, chat: &TgChat, to: &TgChat) -> u64 {
        let id = {
            let mut inner = self.shared.lock();
            inner.chats.insert(to.id, to.clone());
            let message_id = inner.next_message_id(chat.id);
            let message = json!({
                "message_id": message_id,
                "from": TgUser::new(OWNER_ID, "Owner").to_json(),
                "chat": chat.to_json(),
                "date": now(),
                "migrate_to_chat_id": to.id,
            });
            inner.queue("message", message)
        };
        self.shared.updates.notify_waiters();
        u64::from(id)
    }

    /// The update [`Self::say_with`] would queue, without queueing it, for a
    /// test that hands it to [`FakeBot::post_webhook`] itself. The message is
    /// stored, so later messages can reply to it.
    pub fn message_update(&self, incoming: Incoming) -> Value {
        let mut inner = self.shared.lock();
        let message = inner.incoming_message(&incoming);
        let update_id = inner.next_update_id;
        inner.next_update_id += 1;
        json!({ "update_id": update_id, "message": message })
    }

    /// Creates a forum topic as `creator` did in the app: queues the
    /// `forum_topic_created` service message; returns the topic's thread id.
    /// Topics that messages use without this are created silently.
    pub fn create_topic(&self, chat: &TgChat, creator: &TgUser, name: &str) -> i64 {
        assert!(chat.is_forum(), "fake Bot API: chat {} is not a forum", chat.id);
        let id = {
            let mut inner = self.shared.lock();
            inner.chats.insert(chat.id, chat.clone());
            let id = inner.next_message_id(chat.id);
            let root = topic_root(chat, id, creator, name);
            inner.messages.insert((chat.id, id), root.clone());
            inner.queue("message", root);
            id
        };
        self.shared.updates.notify_waiters();
        id
    }

    /// Queues a press of an inline button of message `message_id` (one the bot
    /// sent) by `from`; returns the callback query id. `data` is not checked
    /// against the message's buttons, so stale or forged data can be tested.
    pub fn press(&self, chat: &TgChat, from: &TgUser, message_id: i64, data: &str) -> String {
        let id = {
            let mut inner = self.shared.lock();
            let message = inner
                .messages
                .get(&(chat.id, message_id))
                .cloned()
                .unwrap_or_else(|| panic!("fake Bot API: press on message {message_id}, not in chat {}", chat.id));
            let id = format!("{}", 4_200_000_000_000_000_000u64 + inner.next_callback);
            inner.next_callback += 1;
            inner.callbacks.insert(id.clone(), false);
            let query = json!({
                "id": id,
                "from": from.to_json(),
                "message": message,
                "chat_instance": format!("{}", chat.id.unsigned_abs() ^ 0x5eed),
                "data": data,
            });
            inner.queue("callback_query", query);
            id
        };
        self.shared.updates.notify_waiters();
        id
    }

    /// Queues a `my_chat_member` update for the bot in `chat` ("member",
    /// "administrator", "left", "kicked") and applies it: once "left" or
    /// "kicked", sends to the chat are refused; back to "member" they work again.
    /// In a private chat "kicked" is the user blocking the bot.
    pub fn set_member_status(&self, chat: &TgChat, status: &str) {
        let new = Membership::parse(status).unwrap_or_else(|| {
            panic!("fake Bot API: unknown member status {status:?} (member, administrator, left, kicked)")
        });
        {
            let mut inner = self.shared.lock();
            inner.chats.insert(chat.id, chat.clone());
            let old = inner.membership.insert(chat.id, new).unwrap_or(Membership::Member);
            let by = match chat.kind {
                ChatKind::Private => TgUser::new(chat.id, &chat.title),
                _ => owner(),
            };
            let change = json!({
                "chat": chat.to_json(),
                "from": by.to_json(),
                "date": now(),
                "old_chat_member": old.to_json(),
                "new_chat_member": new.to_json(),
            });
            inner.queue("my_chat_member", change);
        }
        self.shared.updates.notify_waiters();
        self.shared.activity.notify_waiters();
    }

    /// From now on, calls aimed at the chat are refused with Forbidden ("bot was
    /// kicked from the … chat", or "blocked by the user" in a private chat),
    /// without telling the bot through an update.
    pub fn block(&self, chat_id: i64) {
        self.shared.lock().membership.insert(chat_id, Membership::Kicked);
    }

    /// Undoes [`Self::block`] silently.
    pub fn unblock(&self, chat_id: i64) {
        self.shared.lock().membership.insert(chat_id, Membership::Member);
    }

    /// The next call of `method` (any case) fails with `error`, before any other
    /// check but the network faults. Several stack up, first in first out.
    pub fn fail_next(&self, method: &str, error: FakeError) {
        self.shared.lock().faults.entry(method.to_ascii_lowercase()).or_default().push_back(error);
    }

    /// For `window`, every call of `methods` (any case; none: every method,
    /// `getUpdates` included) is answered with HTTP `status` (a 5xx) and the
    /// HTML page Telegram's proxy gives. See the module doc for teloxide's 10 s
    /// sleep on a 5xx. Ended early by [`Self::end_faults`].
    pub fn outage(&self, methods: &[&str], status: u16, window: Duration) {
        assert!((500..=599).contains(&status), "fake Bot API: an outage answers 5xx, not {status}");
        self.add_fault(FaultRule::window(NetFault::Status(status), methods, window));
    }

    /// For `window`, every call of `methods` (none: every method) has its
    /// connection closed without an answer: `RequestError::Network` in teloxide.
    pub fn drop_connections(&self, methods: &[&str], window: Duration) {
        self.add_fault(FaultRule::window(NetFault::Drop, methods, window));
    }

    /// The next call of `method` (any case) has its connection closed without
    /// an answer. Several stack up, one call each.
    pub fn drop_next(&self, method: &str) {
        self.add_fault(FaultRule::next_call(NetFault::Drop, method));
    }

    /// The next call of `method` (any case) is taken in and never answered,
    /// until [`Self::release_hangs`] or the fake is dropped; it has no effect.
    /// Recorded as it comes in, so [`Self::wait_for`] sees it hang.
    pub fn hang_next(&self, method: &str) {
        self.add_fault(FaultRule::next_call(NetFault::Hang, method));
    }

    /// For `window`, every call of `methods` (none: every method) hangs as
    /// with [`Self::hang_next`].
    pub fn hang_calls(&self, methods: &[&str], window: Duration) {
        self.add_fault(FaultRule::window(NetFault::Hang, methods, window));
    }

    /// Every later call of `methods` is answered as usual, but only after
    /// `delay`, as over a slow uplink; until [`Self::end_faults`]. A call
    /// whose client gives up first has no effect.
    pub fn slow_calls(&self, methods: &[&str], delay: Duration) {
        let mut inner = self.shared.lock();
        for method in methods {
            inner.slow.insert(method.to_ascii_lowercase(), delay);
        }
    }

    /// Ends the calls hanging now by closing their connections (they stay
    /// without effect), and cancels the hangs still to come, so later calls
    /// get through.
    pub fn release_hangs(&self) {
        {
            let mut inner = self.shared.lock();
            inner.net_faults.retain(|rule| rule.fault != NetFault::Hang);
            inner.releases += 1;
        }
        self.shared.released.notify_waiters();
    }

    /// Ends every fault: outages, dropped connections, hangs (released as by
    /// [`Self::release_hangs`]) and the [`Self::fail_next`] ones not used yet.
    pub fn end_faults(&self) {
        {
            let mut inner = self.shared.lock();
            inner.net_faults.clear();
            inner.slow.clear();
            inner.faults.clear();
            inner.releases += 1;
        }
        self.shared.released.notify_waiters();
    }

    fn add_fault(&self, rule: FaultRule) {
        self.shared.lock().net_faults.push(rule);
    }

    /// Every request so far, in the order they were answered.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// The calls of one method (Telegram's spelling).
    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        self.shared.lock().calls.iter().filter(|c| c.method == method).cloned().collect()
    }

    /// The messages the bot sent to the chat, oldest first, as they stand now.
    pub fn sent(&self, chat_id: i64) -> Vec<Sent> {
        let inner = self.shared.lock();
        inner.sent.iter().filter(|s| s.chat_id == chat_id).map(|meta| inner.sent_view(meta)).collect()
    }

    /// How many messages the bot sent, to every chat: cheap enough to poll
    /// while a load bench sends thousands.
    pub fn sent_count(&self) -> usize {
        self.shared.lock().sent.len()
    }

    /// The emoji the bot's reaction on a message holds now (none: empty).
    pub fn reactions(&self, chat_id: i64, message_id: i64) -> Vec<String> {
        self.shared.lock().reactions.get(&(chat_id, message_id)).cloned().unwrap_or_default()
    }

    /// Any stored message (either side) as Telegram's Message JSON.
    pub fn message(&self, chat_id: i64, message_id: i64) -> Option<Value> {
        self.shared.lock().messages.get(&(chat_id, message_id)).cloned()
    }

    /// The webhook the bot set, if any.
    pub fn webhook(&self) -> Option<Webhook> {
        self.shared.lock().webhook.clone()
    }

    /// Updates queued but not yet confirmed by the bot.
    pub fn pending_updates(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// The id of the update that brought message `message_id` of `chat_id`.
    pub fn update_of(&self, chat_id: i64, message_id: i64) -> Option<u64> {
        let inner = self.shared.lock();
        let mut found = inner.queued.iter().filter(|(_, (update, _))| {
            update["message"]["chat"]["id"].as_i64() == Some(chat_id)
                && update["message"]["message_id"].as_i64() == Some(message_id)
        });
        found.next().map(|(id, _)| *id)
    }

    /// Whether update `id` is still waiting for the bot to confirm it.
    pub fn is_unconfirmed(&self, id: u64) -> bool {
        self.shared.lock().pending.iter().any(|u| u["update_id"].as_u64() == Some(id))
    }

    /// How many times update `id` was handed to the bot (in a `getUpdates`
    /// answer or a webhook POST).
    pub fn times_handed_out(&self, id: u64) -> usize {
        self.shared.lock().queued.get(&id).map_or(0, |(_, answers)| *answers)
    }

    /// Queues update `id` again, as it was: what Telegram does with an update
    /// that a bot which has since died had not confirmed.
    pub fn send_again(&self, id: u64) {
        {
            let mut inner = self.shared.lock();
            let update = inner.queued.get(&id).map(|(update, _)| update.clone()).expect("an update queued before");
            inner.pending.push_back(update);
        }
        self.shared.updates.notify_waiters();
    }

    /// Waits until `f` holds, re-checking whenever a call is recorded; panics
    /// after [`PATIENCE`] naming `what` and listing the calls.
    pub async fn wait_for<F: Fn(&FakeBot) -> bool>(&self, what: &str, f: F) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut woken = pin!(self.shared.activity.notified());
            woken.as_mut().enable();
            if f(self) {
                return;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                panic!("fake Bot API: waited {PATIENCE:?} for {what}; calls so far:\n{}", self.dump_calls());
            }
            // Also re-check now and then: `f` may look at more than the calls.
            let nap = (deadline - now).min(Duration::from_millis(250));
            let _ = tokio::time::timeout(nap, woken).await;
        }
    }

    /// Waits until at least `n` messages were sent to the chat; returns them all.
    pub async fn wait_sent(&self, chat_id: i64, n: usize) -> Vec<Sent> {
        self.wait_for(&format!("{n} message(s) sent to chat {chat_id}"), |bot| bot.sent(chat_id).len() >= n).await;
        self.sent(chat_id)
    }

    /// POSTs `update` to a webhook as Telegram does (JSON, with the secret
    /// header); returns the HTTP status. Retries while nothing listens yet, for
    /// up to [`PATIENCE`], as a listener may still be starting.
    pub async fn post_webhook(url: &str, secret: Option<&str>, update: Value) -> u16 {
        let client = teloxide::net::default_reqwest_settings().build().expect("an HTTP client");
        let body = update.to_string();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut request =
                client.post(url).header(header::CONTENT_TYPE.as_str(), "application/json").body(body.clone());
            if let Some(secret) = secret {
                request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
            }
            match request.send().await {
                Ok(response) => return response.status().as_u16(),
                Err(e) if e.is_connect() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("fake Bot API: cannot POST the update to {url}: {e}"),
            }
        }
    }

    /// The calls, one a line, with the polls summed up: they are many and dull.
    fn dump_calls(&self) -> String {
        let calls = self.calls();
        let polls = calls.iter().filter(|c| c.method == "getUpdates").count();
        let mut lines: Vec<String> = calls
            .iter()
            .filter(|c| c.method != "getUpdates")
            .map(|c| {
                let outcome = c.error.as_deref().map_or_else(|| "ok".to_owned(), |e| format!("ERR {e}"));
                let mut params = c.params.to_string();
                if params.len() > 300 {
                    let cut = (0..=300).rev().find(|&i| params.is_char_boundary(i)).unwrap_or(0);
                    params.truncate(cut);
                    params.push('…');
                }
                format!("  {} [{outcome}] {params}", c.method)
            })
            .collect();
        lines.push(format!("  (and {polls} getUpdates)"));
        lines.join("\n")
    }
}

impl Drop for FakeBot {
    fn drop(&mut self) {
        // Long polls and the webhook sender end now, so graceful shutdown does
        // not wait out a poll timeout.
        self.shared.lock().closed = true;
        self.shared.updates.notify_waiters();
        // Hung calls too, as a server that goes away closes their connections.
        self.shared.released.notify_waiters();
    }
}

impl Inner {
    /// The network fault that hits this call of `method`, if any, used up.
    fn take_net_fault(&mut self, method: &str) -> Option<NetFault> {
        let now = Instant::now();
        self.net_faults.retain(|rule| !rule.is_over(now));
        let rule = self.net_faults.iter_mut().find(|rule| rule.hits(method))?;
        if let Some(left) = &mut rule.calls_left {
            *left -= 1;
        }
        Some(rule.fault)
    }

    fn chat(&self, id: i64) -> TgChat {
        self.chats.get(&id).cloned().unwrap_or_else(|| TgChat::guess(id))
    }

    /// Message ids count up per chat, past ids taken by topics.
    fn next_message_id(&mut self, chat_id: i64) -> i64 {
        let mut id = self.last_message_id.get(&chat_id).copied().unwrap_or(0) + 1;
        while self.messages.contains_key(&(chat_id, id)) {
            id += 1;
        }
        self.last_message_id.insert(chat_id, id);
        id
    }

    /// The topic's `forum_topic_created` message; one the tests did not create
    /// with [`FakeBot::create_topic`] was created by the chat's owner, not by
    /// whoever posts first, so a topic message does not look like a reply to its
    /// own sender.
    fn topic_root(&mut self, chat: &TgChat, topic: i64) -> Value {
        if let Some(root) = self.messages.get(&(chat.id, topic)) {
            return root.clone();
        }
        let root = topic_root(chat, topic, &owner(), &format!("Topic {topic}"));
        self.messages.insert((chat.id, topic), root.clone());
        // Messages in a topic come after the message that created it.
        let last = self.last_message_id.entry(chat.id).or_insert(0);
        *last = (*last).max(topic);
        root
    }

    fn queue(&mut self, kind: &str, payload: Value) -> u32 {
        let id = self.next_update_id;
        self.next_update_id += 1;
        let mut update = Map::new();
        update.insert("update_id".into(), json!(id));
        update.insert(kind.into(), payload);
        self.queued.insert(u64::from(id), (Value::Object(update.clone()), 0));
        self.pending.push_back(Value::Object(update));
        id
    }

    /// Builds and stores the message a user posts, as Telegram would deliver it.
    fn incoming_message(&mut self, incoming: &Incoming) -> Value {
        let chat = &incoming.chat;
        self.chats.insert(chat.id, chat.clone());
        let replied = incoming.reply_to.map(|id| {
            self.messages
                .get(&(chat.id, id))
                .cloned()
                .unwrap_or_else(|| panic!("fake Bot API: reply_to {id}: no such message in chat {}", chat.id))
        });
        // A reply to a topic message stays in that topic.
        let topic = incoming.topic.or_else(|| {
            replied.as_ref().filter(|r| r["is_topic_message"] == true).and_then(|r| r["message_thread_id"].as_i64())
        });
        let root = match topic {
            Some(topic) if chat.is_forum() => Some(self.topic_root(chat, topic)),
            _ => None,
        };
        let id = self.next_message_id(chat.id);
        let mut message = json!({
            "message_id": id,
            "from": incoming.from.to_json(),
            "chat": chat.to_json(),
            "date": now(),
        });
        // With media, the text is a caption (and may be absent).
        let (text_key, entities_key) =
            if incoming.media.is_some() { ("caption", "caption_entities") } else { ("text", "entities") };
        if incoming.media.is_none() || !incoming.text.is_empty() {
            message[text_key] = json!(incoming.text);
        }
        if let Some(Value::Object(media)) = &incoming.media {
            for (k, v) in media {
                message[k.as_str()] = v.clone();
            }
        }
        if let Some(album) = &incoming.album {
            message["media_group_id"] = json!(album);
        }
        let entities = detect_entities(&incoming.text);
        if !entities.is_empty() {
            message[entities_key] = Value::Array(entities);
        }
        place_in_thread(&mut message, chat, topic, root, replied);
        self.messages.insert((chat.id, id), message.clone());
        message
    }

    /// Updates of kinds the bot did not ask for are never delivered.
    fn drop_unwanted_updates(&mut self) {
        let allowed = self.allowed_updates.clone().filter(|a| !a.is_empty());
        self.pending.retain(|update| {
            let kind = update.as_object().and_then(|u| u.keys().find(|k| *k != "update_id")).cloned();
            let Some(kind) = kind else { return false };
            match &allowed {
                Some(allowed) => allowed.contains(&kind),
                None => !OPT_IN_UPDATES.contains(&kind.as_str()),
            }
        });
    }

    /// Checks the `chat_id` parameter and that the bot may still act in the chat.
    fn target_chat(&self, p: &Value) -> Result<TgChat, TgError> {
        let id = match p.get("chat_id") {
            None | Some(Value::Null) => return Err(bad("chat_id is empty")),
            Some(v) => int_value(v).ok_or_else(|| bad("chat not found"))?,
        };
        let chat = self.chat(id);
        match self.membership.get(&id).and_then(|m| m.refusal(&chat)) {
            Some(refusal) => Err(refusal),
            None => Ok(chat),
        }
    }

    fn sent_view(&self, meta: &SentMeta) -> Sent {
        let message = self.messages.get(&(meta.chat_id, meta.message_id));
        // A document's text is its caption.
        let text = message.and_then(|m| m["text"].as_str().or(m["caption"].as_str())).unwrap_or_default().to_owned();
        Sent {
            message_id: meta.message_id,
            chat_id: meta.chat_id,
            thread_id: meta.thread_id,
            text,
            raw_text: meta.raw_text.clone(),
            parse_mode: meta.parse_mode.clone(),
            reply_markup: meta.reply_markup.clone(),
            edits: meta.edits,
            file: meta.file.clone(),
            deleted: meta.deleted,
        }
    }

    /// Answers every method but `getUpdates`.
    fn call(&mut self, method: &str, p: &Value) -> Outcome {
        match method {
            "getMe" => Ok(me()),
            "getFile" => {
                let id = p.get("file_id").and_then(string_value).unwrap_or_default();
                let Some(bytes) = self.files.get(&id) else {
                    return Err(bad("wrong file_id or the file is temporarily unavailable"));
                };
                // A claimed size (no bytes held) stands for the real one.
                let size = if bytes.is_empty() { u64::MAX } else { bytes.len() as u64 };
                if size > DOWNLOAD_LIMIT {
                    return Err(bad("file is too big"));
                }
                Ok(
                    json!({ "file_id": id, "file_unique_id": id, "file_size": size, "file_path": format!("files/{id}") }),
                )
            }
            "sendMessage" => self.send_message(p),
            "sendDocument" => self.send_file(p, "document"),
            "sendPhoto" => self.send_file(p, "photo"),
            "sendAudio" => self.send_file(p, "audio"),
            "editMessageText" => self.edit_message(p, true),
            "editMessageReplyMarkup" => self.edit_message(p, false),
            "deleteMessage" => self.delete_message(p),
            "setMessageReaction" => self.set_reaction(p),
            "sendChatAction" => {
                self.target_chat(p)?;
                match p.get("action").and_then(Value::as_str) {
                    Some(action) if CHAT_ACTIONS.contains(&action) => Ok(json!(true)),
                    _ => Err(bad("wrong parameter action in request")),
                }
            }
            "answerCallbackQuery" => {
                let id = p.get("callback_query_id").and_then(string_value).unwrap_or_default();
                match self.callbacks.get_mut(&id) {
                    Some(answered) if !*answered => {
                        *answered = true;
                        Ok(json!(true))
                    }
                    _ => Err(TgError { code: 400, description: BAD_QUERY_ID.to_owned(), retry_after: None }),
                }
            }
            "setMyCommands" => check_commands(p).map(|()| json!(true)),
            "deleteMyCommands" => Ok(json!(true)),
            "setWebhook" => {
                let url = p.get("url").and_then(string_value).unwrap_or_default();
                if let Some(allowed) = p.get("allowed_updates").and_then(json_value).and_then(|v| string_list(&v)) {
                    self.allowed_updates = Some(allowed);
                }
                if truthy(p.get("drop_pending_updates")) {
                    self.pending.clear();
                }
                self.webhook = if url.is_empty() {
                    None
                } else {
                    Some(Webhook { url, secret_token: p.get("secret_token").and_then(string_value) })
                };
                Ok(json!(true))
            }
            "deleteWebhook" => {
                if truthy(p.get("drop_pending_updates")) {
                    self.pending.clear();
                }
                self.webhook = None;
                Ok(json!(true))
            }
            "getWebhookInfo" => {
                let mut info = json!({
                    "url": self.webhook.as_ref().map_or("", |w| w.url.as_str()),
                    "has_custom_certificate": false,
                    "pending_update_count": self.pending.len(),
                });
                if let Some(allowed) = &self.allowed_updates {
                    info["allowed_updates"] = json!(allowed);
                }
                Ok(info)
            }
            _ => Err(TgError { code: 404, description: "Not Found: method not found".into(), retry_after: None }),
        }
    }

    fn send_message(&mut self, p: &Value) -> Outcome {
        let chat = self.target_chat(p)?;
        let raw_text = p.get("text").and_then(string_value).unwrap_or_default();
        let parse_mode = p.get("parse_mode").and_then(string_value).filter(|m| !m.is_empty());
        let formatted = format_text(&raw_text, parse_mode.as_deref(), p.get("entities"))?;
        if formatted.len_utf16() > MAX_TEXT_UTF16 {
            return Err(bad("message is too long"));
        }
        let markup = p.get("reply_markup").and_then(json_value).filter(|m| !m.is_null());
        let keyboard = inline_keyboard(markup.as_ref())?;
        let thread = p.get("message_thread_id").and_then(int_value);

        let reply = p.get("reply_parameters").and_then(json_value);
        let reply_id = reply
            .as_ref()
            .and_then(|r| r.get("message_id").and_then(int_value))
            .or_else(|| p.get("reply_to_message_id").and_then(int_value));
        let replied = match reply_id {
            Some(id) => match self.messages.get(&(chat.id, id)) {
                Some(m) => Some(m.clone()),
                None if truthy(reply.as_ref().and_then(|r| r.get("allow_sending_without_reply")))
                    || truthy(p.get("allow_sending_without_reply")) =>
                {
                    None
                }
                None => return Err(bad("message to be replied not found")),
            },
            None => None,
        };

        let topic = thread.filter(|_| chat.is_forum());
        let root = topic.map(|t| self.topic_root(&chat, t));
        let id = self.next_message_id(chat.id);
        let mut message = json!({
            "message_id": id,
            "from": TgUser::bot().to_json(),
            "chat": chat.to_json(),
            "date": now(),
            "text": formatted.text,
        });
        if !formatted.entities.is_empty() {
            message["entities"] = formatted.entities_json();
        }
        place_in_thread(&mut message, &chat, topic, root, replied);
        if let Some(keyboard) = keyboard {
            message["reply_markup"] = keyboard;
        }
        self.messages.insert((chat.id, id), message.clone());
        self.sent.push(SentMeta {
            chat_id: chat.id,
            message_id: id,
            thread_id: thread,
            raw_text,
            parse_mode,
            reply_markup: markup,
            edits: 0,
            file: None,
            deleted: false,
        });
        Ok(message)
    }

    /// `sendDocument`, `sendPhoto` or `sendAudio` (`kind`, also the file's
    /// parameter) with an uploaded file (a `file_id` or URL is refused:
    /// pincer only uploads). The caption is checked like Telegram's, 1024
    /// units at most; a photo like Telegram's, at most 10 MB, and an image.
    fn send_file(&mut self, p: &Value, kind: &'static str) -> Outcome {
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

    /// `editMessageText` (`text: true`) or `editMessageReplyMarkup`.
    fn edit_message(&mut self, p: &Value, text: bool) -> Outcome {
        if p.get("inline_message_id").is_some() {
            return Err(bad("MESSAGE_ID_INVALID"));
        }
        let chat = self.target_chat(p)?;
        let id = p.get("message_id").and_then(int_value).ok_or_else(|| bad("message identifier is not specified"))?;
        let raw_text = p.get("text").and_then(string_value).unwrap_or_default();
        let parse_mode = p.get("parse_mode").and_then(string_value).filter(|m| !m.is_empty());
        let formatted = if text {
            let formatted = format_text(&raw_text, parse_mode.as_deref(), p.get("entities"))?;
            if formatted.len_utf16() > MAX_TEXT_UTF16 {
                // Not "message is too long": edits have their own wording.
                return Err(bad("MESSAGE_TOO_LONG"));
            }
            Some(formatted)
        } else {
            None
        };
        // Leaving `reply_markup` out of an edit removes the keyboard.
        let markup = p.get("reply_markup").and_then(json_value).filter(|m| !m.is_null());
        let keyboard = inline_keyboard(markup.as_ref())?;

        let Some(message) = self.messages.get_mut(&(chat.id, id)).filter(|_| !self.deleted.contains(&(chat.id, id)))
        else {
            return Err(bad("message to edit not found"));
        };
        if message["from"]["id"] != BOT_ID {
            return Err(bad("message can't be edited"));
        }
        let mut edited = message.clone();
        if let Some(formatted) = &formatted {
            edited["text"] = json!(formatted.text);
            set_or_remove(&mut edited, "entities", (!formatted.entities.is_empty()).then(|| formatted.entities_json()));
        }
        set_or_remove(&mut edited, "reply_markup", keyboard);
        if edited == *message {
            return Err(TgError { code: 400, description: NOT_MODIFIED.to_owned(), retry_after: None });
        }
        edited["edit_date"] = json!(now());
        *message = edited.clone();
        if let Some(meta) = self.sent.iter_mut().find(|s| s.chat_id == chat.id && s.message_id == id) {
            if text {
                meta.raw_text = raw_text;
                meta.parse_mode = parse_mode;
            }
            meta.reply_markup = markup;
            meta.edits += 1;
        }
        Ok(edited)
    }
}

impl Inner {
    /// `deleteMessage`: the bot's own messages only.
    fn delete_message(&mut self, p: &Value) -> Outcome {
        let chat = self.target_chat(p)?;
        let id = p.get("message_id").and_then(int_value).ok_or_else(|| bad("message identifier is not specified"))?;
        let message = match self.messages.get(&(chat.id, id)) {
            Some(m) if !self.deleted.contains(&(chat.id, id)) => m,
            _ => return Err(bad("message to delete not found")),
        };
        if message["from"]["id"] != BOT_ID {
            return Err(bad("message can't be deleted"));
        }
        self.deleted.insert((chat.id, id));
        if let Some(meta) = self.sent.iter_mut().find(|s| s.chat_id == chat.id && s.message_id == id) {
            meta.deleted = true;
        }
        Ok(json!(true))
    }

    /// `setMessageReaction`: one of Telegram's emoji, or none to take it off.
    fn set_reaction(&mut self, p: &Value) -> Outcome {
        let chat = self.target_chat(p)?;
        let id = p.get("message_id").and_then(int_value).ok_or_else(|| bad("message identifier is not specified"))?;
        if !self.messages.contains_key(&(chat.id, id)) || self.deleted.contains(&(chat.id, id)) {
            return Err(bad("MESSAGE_ID_INVALID"));
        }
        let given = p.get("reaction").and_then(json_value).unwrap_or(json!([]));
        let Some(given) = given.as_array() else { return Err(bad("can't parse reaction types JSON object")) };
        if given.len() > 1 {
            return Err(bad("REACTIONS_TOO_MANY"));
        }
        let mut emoji = Vec::new();
        for reaction in given {
            match (reaction["type"].as_str(), reaction["emoji"].as_str()) {
                (Some("emoji"), Some(e)) if REACTION_EMOJI.contains(&e) => emoji.push(e.to_owned()),
                _ => return Err(bad("REACTION_INVALID")),
            }
        }
        self.reactions.insert((chat.id, id), emoji);
        Ok(json!(true))
    }
}

/// Sets thread, topic flag and `reply_to_message` the way Telegram does.
fn place_in_thread(
    message: &mut Value,
    chat: &TgChat,
    topic: Option<i64>,
    root: Option<Value>,
    replied: Option<Value>,
) {
    // Telegram embeds the replied-to message without its own reply.
    let replied = replied.map(|mut r| {
        if let Some(r) = r.as_object_mut() {
            r.remove("reply_to_message");
        }
        r
    });
    match chat.kind {
        ChatKind::Supergroup { forum: true } => {
            if let Some(topic) = topic {
                message["message_thread_id"] = json!(topic);
                message["is_topic_message"] = json!(true);
            }
            if let Some(reply) = replied.or(root) {
                message["reply_to_message"] = reply;
            }
        }
        ChatKind::Supergroup { forum: false } => {
            // Outside forums a reply joins the thread of its chain's root.
            let thread = replied.as_ref().map(|r| r["message_thread_id"].as_i64().or(r["message_id"].as_i64()));
            if let Some(thread) = thread.flatten().or(topic) {
                message["message_thread_id"] = json!(thread);
            }
            if let Some(reply) = replied {
                message["reply_to_message"] = reply;
            }
        }
        ChatKind::Group | ChatKind::Private => {
            if let Some(reply) = replied {
                message["reply_to_message"] = reply;
            }
        }
    }
}

fn topic_root(chat: &TgChat, topic: i64, creator: &TgUser, name: &str) -> Value {
    json!({
        "message_id": topic,
        "from": creator.to_json(),
        "chat": chat.to_json(),
        "date": now(),
        "message_thread_id": topic,
        "is_topic_message": true,
        "forum_topic_created": { "name": name, "icon_color": TOPIC_ICON_COLOR },
    })
}

fn set_or_remove(message: &mut Value, key: &str, value: Option<Value>) {
    if let Some(object) = message.as_object_mut() {
        match value {
            Some(value) => {
                object.insert(key.to_owned(), value);
            }
            None => {
                object.remove(key);
            }
        }
    }
}

/// The chat owner who creates topics and adds or removes the bot.
fn owner() -> TgUser {
    TgUser::new(OWNER_ID, "Owner")
}

fn me() -> Value {
    json!({
        "id": BOT_ID,
        "is_bot": true,
        "first_name": BOT_FIRST_NAME,
        "username": BOT_USERNAME,
        "can_join_groups": true,
        "can_read_all_group_messages": true,
        "supports_inline_queries": false,
        "can_connect_to_business": false,
        "has_main_web_app": false,
    })
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// A number, or a string holding one (form and query parameters are strings).
fn int_value(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn string_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An object or array parameter; form and query parameters carry them as JSON text.
fn json_value(v: &Value) -> Option<Value> {
    match v {
        Value::String(s) => serde_json::from_str(s).ok(),
        other => Some(other.clone()),
    }
}

fn truthy(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true))) || matches!(v, Some(Value::String(s)) if s == "true")
}

fn string_list(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|items| items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect())
}

/// Telegram's lowerCamel name for a path's method segment.
fn normalize_method(raw: &str) -> String {
    KNOWN_METHODS.iter().find(|m| m.eq_ignore_ascii_case(raw)).map_or_else(
        || {
            let mut chars = raw.chars();
            chars.next().map_or_else(String::new, |first| first.to_ascii_lowercase().to_string() + chars.as_str())
        },
        |m| (*m).to_owned(),
    )
}

/// `(token, method)` from `/…/bot<TOKEN>/<method>`; a prefix before `bot` is allowed.
fn split_path(path: &str) -> Option<(&str, &str)> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [.., bot, method] => bot.strip_prefix("bot").map(|token| (token, *method)),
        _ => None,
    }
}

/// The parameters of a request: JSON body, form body and query string.
fn parse_params(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Result<Value, TgError> {
    let mut params = Map::new();
    let mut add_pairs = |bytes: &[u8]| {
        for (k, v) in url::form_urlencoded::parse(bytes) {
            params.insert(k.into_owned(), Value::String(v.into_owned()));
        }
    };
    if let Some(query) = query {
        add_pairs(query.as_bytes());
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if body.iter().all(u8::is_ascii_whitespace) {
        // No body: the query string is all.
    } else if content_type.starts_with("application/x-www-form-urlencoded") {
        add_pairs(body);
    } else if content_type.starts_with("multipart/form-data") {
        // teloxide sends every payload that could carry a file this way, setWebhook included.
        let fields = parse_multipart(content_type, body).ok_or_else(|| bad("can't parse multipart/form-data"))?;
        params.extend(fields);
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(object)) => params.extend(object),
            Ok(_) => return Err(bad("parameters must be a JSON object")),
            Err(e) => return Err(bad(&format!("can't parse JSON object: {e}"))),
        }
    }
    Ok(Value::Object(params))
}

/// The fields of a multipart/form-data body: strings, and for a file an
/// object with its `file_name` and its bytes as `hex` (exact, whatever they are).
fn parse_multipart(content_type: &str, body: &[u8]) -> Option<Vec<(String, Value)>> {
    let boundary = content_type.split(';').find_map(|p| p.trim().strip_prefix("boundary="))?.trim_matches('"');
    let delimiter = format!("--{boundary}").into_bytes();
    let mut fields = Vec::new();
    for part in split_bytes(body, &delimiter).into_iter().skip(1) {
        if part.starts_with(b"--") {
            break;
        }
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let at = find_bytes(part, b"\r\n\r\n")?;
        let (head, value) = (String::from_utf8_lossy(&part[..at]), &part[at + 4..]);
        let value = value.strip_suffix(b"\r\n").unwrap_or(value);
        let disposition = head.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))?;
        let name = disposition.split(';').find_map(|p| p.trim().strip_prefix("name="))?.trim_matches('"');
        let file_name = disposition.split(';').find_map(|p| p.trim().strip_prefix("filename="));
        let value = match file_name {
            Some(file_name) => json!({ "file_name": file_name.trim_matches('"'), "hex": hex(value) }),
            None => Value::String(String::from_utf8_lossy(value).into_owned()),
        };
        fields.push((name.to_owned(), value));
    }
    Some(fields)
}

/// Whether `bytes` start like a JPEG, PNG, GIF or WebP.
fn is_image(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xFF, 0xD8, 0xFF])
        || bytes.starts_with(b"\x89PNG")
        || bytes.starts_with(b"GIF8")
        || (bytes.len() > 12 && &bytes[8..12] == b"WEBP")
}

fn find_bytes(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `body` cut at every `delimiter` (the pieces between them).
fn split_bytes<'a>(mut body: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    while let Some(at) = find_bytes(body, delimiter) {
        pieces.push(&body[..at]);
        body = &body[at + delimiter.len()..];
    }
    pieces.push(body);
    pieces
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).filter_map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()).collect()
}

fn respond(outcome: &Outcome) -> Response {
    match outcome {
        Ok(result) => Json(json!({ "ok": true, "result": result })).into_response(),
        Err(e) => {
            let mut body = json!({ "ok": false, "error_code": e.code, "description": e.description });
            if let Some(secs) = e.retry_after {
                body["parameters"] = json!({ "retry_after": secs });
            }
            let status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::BAD_REQUEST);
            (status, Json(body)).into_response()
        }
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(cutter): ConnectInfo<Cutter>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(path) = uri.path().strip_prefix("/file/bot").and_then(|rest| rest.split_once('/')).map(|(_, p)| p) {
        return download(&shared, path);
    }
    let Some((token, raw_method)) = split_path(uri.path()) else {
        // What Telegram answers for a path that is no method call at all.
        let outcome = Err(TgError { code: 404, description: "Not Found".into(), retry_after: None });
        shared.record(uri.path(), Value::Null, &outcome);
        return respond(&outcome);
    };
    let method = normalize_method(raw_method);
    let params = match parse_params(&headers, uri.query(), &body) {
        Ok(params) => params,
        Err(e) => {
            let outcome = Err(e);
            shared.record(&method, Value::Null, &outcome);
            return respond(&outcome);
        }
    };
    let slow = shared.lock().slow.get(&method.to_ascii_lowercase()).copied();
    if let Some(delay) = slow {
        // Dropped with the connection when the client gives up first.
        tokio::time::sleep(delay).await;
    }
    // Read in one go with the fault, so a release in between is not missed.
    let (fault, releases) = {
        let mut inner = shared.lock();
        (inner.take_net_fault(&method), inner.releases)
    };
    if let Some(fault) = fault {
        return inject(&shared, fault, &method, params, releases, &cutter).await;
    }
    let outcome =
        if !token.split_once(':').is_some_and(|(id, _)| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())) {
            Err(TgError { code: 401, description: "Unauthorized".into(), retry_after: None })
        } else {
            let fault = shared.lock().faults.get_mut(&method.to_ascii_lowercase()).and_then(VecDeque::pop_front);
            match fault {
                Some(fault) => Err(fault.into()),
                None if method == "getUpdates" => get_updates(&shared, &params).await,
                None => {
                    let outcome = shared.lock().call(&method, &params);
                    // A webhook set now must get the updates queued before it.
                    if method == "setWebhook" {
                        shared.updates.notify_waiters();
                    }
                    outcome
                }
            }
        };
    shared.record(&method, params, &outcome);
    respond(&outcome)
}

/// A file's bytes at `/file/bot<token>/<file_path>`, as Telegram's file
/// server serves them (teloxide sends the path's slashes as `%2F`).
fn download(shared: &Shared, path: &str) -> Response {
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

/// Answers a call hit by a network fault, before it could have any effect.
async fn inject(
    shared: &Shared,
    fault: NetFault,
    method: &str,
    params: Value,
    releases: u64,
    cutter: &Cutter,
) -> Response {
    // Recorded first: a hung call would otherwise never show.
    shared.record_fault(method, params, fault);
    match fault {
        NetFault::Status(code) => proxy_page(code),
        NetFault::Drop => cut(cutter),
        NetFault::Hang => {
            wait_for_release(shared, releases).await;
            cut(cutter)
        }
    }
}

/// What Telegram's nginx front answers when the Bot API behind it is down.
fn proxy_page(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
    let title = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("Error"));
    let page = format!(
        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n\
         <hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"
    );
    (status, [(header::CONTENT_TYPE, "text/html"), (header::SERVER, "nginx/1.18.0")], page).into_response()
}

/// Closes the call's connection; the response returned is never written.
fn cut(cutter: &Cutter) -> Response {
    cutter.cut();
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// Waits until hangs are released after `releases`, or the fake is dropped.
async fn wait_for_release(shared: &Shared, releases: u64) {
    loop {
        let mut woken = pin!(shared.released.notified());
        woken.as_mut().enable();
        {
            let inner = shared.lock();
            if inner.closed || inner.releases != releases {
                return;
            }
        }
        woken.await;
    }
}

/// A long poll: holds the request until an update is there or `timeout` passes.
async fn get_updates(shared: &Shared, p: &Value) -> Outcome {
    let timeout = p.get("timeout").and_then(int_value).unwrap_or(0).clamp(0, 3600) as u64;
    // Telegram takes 1-100 and treats anything else as its default, 100.
    let limit = p.get("limit").and_then(int_value).filter(|l| (1..=100).contains(l)).unwrap_or(100) as usize;
    let generation = {
        let mut inner = shared.lock();
        if inner.webhook.is_some() {
            return Err(TgError {
                code: 409,
                description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to \
                              delete the webhook first"
                    .into(),
                retry_after: None,
            });
        }
        if let Some(allowed) = p.get("allowed_updates").and_then(json_value).and_then(|v| string_list(&v)) {
            inner.allowed_updates = Some(allowed);
        }
        match p.get("offset").and_then(int_value).unwrap_or(0) {
            offset if offset > 0 => {
                inner.pending.retain(|u| u["update_id"].as_i64().is_some_and(|id| id >= offset));
            }
            offset if offset < 0 => {
                let keep = offset.unsigned_abs() as usize;
                while inner.pending.len() > keep {
                    inner.pending.pop_front();
                }
            }
            _ => {}
        }
        inner.poll_generation += 1;
        inner.poll_generation
    };
    // An older poll still waiting must learn it was overtaken.
    shared.updates.notify_waiters();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let mut woken = pin!(shared.updates.notified());
        woken.as_mut().enable();
        {
            let mut inner = shared.lock();
            if inner.poll_generation != generation {
                return Err(TgError {
                    code: 409,
                    description: "Conflict: terminated by other getUpdates request; make sure that only one bot \
                                  instance is running"
                        .into(),
                    retry_after: None,
                });
            }
            if inner.webhook.is_none() {
                inner.drop_unwanted_updates();
            }
            let batch: Vec<Value> = inner.pending.iter().take(limit).cloned().collect();
            if !batch.is_empty() || inner.closed || tokio::time::Instant::now() >= deadline {
                for id in batch.iter().filter_map(|u| u["update_id"].as_u64()) {
                    if let Some((_, answers)) = inner.queued.get_mut(&id) {
                        *answers += 1;
                    }
                }
                return Ok(Value::Array(batch));
            }
        }
        let _ = tokio::time::timeout_at(deadline, woken).await;
    }
}

/// While a webhook is set, POSTs the pending updates to it one at a time, in
/// order, dropping each once the bot answered 2xx, as Telegram does.
async fn deliver_to_webhook(shared: Arc<Shared>) {
    let Ok(client) = teloxide::net::default_reqwest_settings().build() else {
        eprintln!("fake Bot API: no HTTP client for webhook delivery");
        return;
    };
    loop {
        let mut woken = pin!(shared.updates.notified());
        woken.as_mut().enable();
        let job = {
            let mut inner = shared.lock();
            if inner.closed {
                return;
            }
            match inner.webhook.clone() {
                Some(webhook) => {
                    inner.drop_unwanted_updates();
                    let update = inner.pending.front().cloned();
                    if let Some(handed) = update.as_ref().and_then(|u| inner.queued.get_mut(&u["update_id"].as_u64()?))
                    {
                        handed.1 += 1;
                    }
                    update.map(|update| (webhook, update))
                }
                None => None,
            }
        };
        let Some((webhook, update)) = job else {
            woken.await;
            continue;
        };
        let mut request = client
            .post(webhook.url.as_str())
            .header(header::CONTENT_TYPE.as_str(), "application/json")
            .body(update.to_string());
        if let Some(secret) = &webhook.secret_token {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret.as_str());
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => {
                let mut inner = shared.lock();
                if inner.pending.front().is_some_and(|u| u["update_id"] == update["update_id"]) {
                    inner.pending.pop_front();
                }
            }
            // Telegram retries too; a listener may still be starting.
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// `setMyCommands`: 1-32 chars of a-z, 0-9 and _, a 1-256 char description. A
/// leading `/` is dropped, as Telegram does: teloxide's `BotCommands::bot_commands()`
/// sends `/status`.
fn check_commands(p: &Value) -> Result<(), TgError> {
    let commands = p.get("commands").and_then(json_value);
    let Some(commands) = commands.as_ref().and_then(Value::as_array) else {
        return Err(bad("commands must be an Array"));
    };
    if commands.len() > 100 {
        return Err(bad("BOT_COMMANDS_TOO_MUCH"));
    }
    for command in commands {
        let name = command["command"].as_str().unwrap_or_default();
        let name = name.strip_prefix('/').unwrap_or(name);
        let name_ok = (1..=32).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let description = command["description"].as_str().unwrap_or_default().chars().count();
        if !name_ok || !(1..=256).contains(&description) {
            return Err(bad("BOT_COMMAND_INVALID"));
        }
    }
    Ok(())
}

/// Validates `reply_markup`; returns the inline keyboard the sent Message
/// carries (Telegram echoes inline keyboards only).
fn inline_keyboard(markup: Option<&Value>) -> Result<Option<Value>, TgError> {
    let Some(rows) = markup.and_then(|m| m.get("inline_keyboard")) else {
        return Ok(None);
    };
    let Some(rows) = rows.as_array() else {
        return Err(bad("can't parse inline keyboard: field \"inline_keyboard\" must be an Array"));
    };
    for row in rows {
        let Some(buttons) = row.as_array() else {
            return Err(bad("can't parse inline keyboard: keyboard row must be an Array"));
        };
        for button in buttons {
            if !button.get("text").is_some_and(Value::is_string) {
                return Err(bad("can't parse inline keyboard button: Text must be a String"));
            }
            if let Some(data) = button.get("callback_data") {
                let len = data.as_str().map_or(0, str::len);
                if !(1..=MAX_CALLBACK_DATA).contains(&len) {
                    return Err(bad("BUTTON_DATA_INVALID"));
                }
            } else if let Some(link) = button.get("url") {
                let ok = link
                    .as_str()
                    .and_then(|l| url::Url::parse(l).ok())
                    .is_some_and(|u| matches!(u.scheme(), "http" | "https" | "tg"));
                if !ok {
                    return Err(bad("BUTTON_URL_INVALID"));
                }
            } else if !BUTTON_ACTIONS.iter().any(|key| button.get(key).is_some()) {
                return Err(bad(
                    "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard",
                ));
            }
        }
    }
    let rows: Vec<&Value> = rows.iter().filter(|r| r.as_array().is_some_and(|b| !b.is_empty())).collect();
    // An empty keyboard is no keyboard.
    Ok((!rows.is_empty()).then(|| json!({ "inline_keyboard": rows })))
}

/// One entity of a text, in UTF-16 units; `json` holds `type` and its extras.
#[derive(Clone, Debug)]
struct Entity {
    offset: usize,
    length: usize,
    json: Value,
}

/// A message text as Telegram stores it: visible text and entities.
struct Formatted {
    text: String,
    entities: Vec<Entity>,
}

impl Formatted {
    fn len_utf16(&self) -> usize {
        utf16_len(&self.text)
    }

    fn entities_json(&self) -> Value {
        let entities = self
            .entities
            .iter()
            .map(|e| {
                let mut json = e.json.clone();
                json["offset"] = json!(e.offset);
                json["length"] = json!(e.length);
                json
            })
            .collect();
        Value::Array(entities)
    }
}

/// Parses a text the way Telegram does for `parse_mode`, trims it, and
/// refuses an empty result.
fn format_text(raw: &str, parse_mode: Option<&str>, entities: Option<&Value>) -> Result<Formatted, TgError> {
    let (text, entities) = match parse_mode {
        None => (raw.to_owned(), given_entities(entities)),
        Some(mode) if mode.eq_ignore_ascii_case("html") => {
            parse_html(raw).map_err(|why| bad(&format!("can't parse entities: {why}")))?
        }
        // Not modelled: counted as sent.
        Some(mode) if mode.eq_ignore_ascii_case("markdownv2") || mode.eq_ignore_ascii_case("markdown") => {
            (raw.to_owned(), Vec::new())
        }
        Some(_) => return Err(bad("unsupported parse_mode")),
    };
    let formatted = trim(text, entities);
    if formatted.text.is_empty() {
        return Err(bad("message text is empty"));
    }
    Ok(formatted)
}

/// The `entities` parameter, taken on trust.
fn given_entities(entities: Option<&Value>) -> Vec<Entity> {
    let entities = entities.and_then(json_value).and_then(|v| v.as_array().cloned()).unwrap_or_default();
    entities
        .into_iter()
        .filter_map(|mut e| {
            let offset = e.get("offset").and_then(Value::as_u64)? as usize;
            let length = e.get("length").and_then(Value::as_u64)? as usize;
            if let Some(object) = e.as_object_mut() {
                object.remove("offset");
                object.remove("length");
            }
            Some(Entity { offset, length, json: e })
        })
        .collect()
}

/// Telegram strips leading and trailing whitespace, moving entities along.
fn trim(text: String, entities: Vec<Entity>) -> Formatted {
    let start = text.len() - text.trim_start().len();
    let lead = utf16_len(&text[..start]);
    let trimmed = text.trim().to_owned();
    let len = utf16_len(&trimmed);
    let entities = entities
        .into_iter()
        .filter_map(|e| {
            let from = e.offset.max(lead) - lead;
            let to = (e.offset + e.length).min(lead + len).saturating_sub(lead);
            (to > from).then_some(Entity { offset: from, length: to - from, json: e.json })
        })
        .collect();
    Formatted { text: trimmed, entities }
}

/// A tag still open while parsing HTML.
struct OpenTag {
    name: String,
    /// Where its text starts, in UTF-16 units.
    start: usize,
    attrs: HashMap<String, String>,
    /// A `<pre>` takes its language from a `<code class="language-…">` inside.
    language: Option<String>,
    /// How many tags opened before it.
    order: usize,
}

/// Telegram's HTML parse mode (after tdlib's `parse_html`): the visible text
/// and its entities, or the reason Telegram gives after "can't parse entities: ".
fn parse_html(src: &str) -> Result<(String, Vec<Entity>), String> {
    let bytes = src.as_bytes();
    let mut text = String::new();
    let mut len16 = 0usize;
    let mut open: Vec<OpenTag> = Vec::new();
    // With the order their tags opened in, so nested tags over the same text list outer first.
    let mut entities: Vec<(usize, Entity)> = Vec::new();
    let mut opened = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'&' => {
                let (c, next) = decode_entity(src, i).ok_or_else(|| {
                    format!("Unsupported HTML entity at byte offset {i}: escape a bare \"&\" as \"&amp;\"")
                })?;
                text.push(c);
                len16 += c.len_utf16();
                i = next;
            }
            b'<' if bytes.get(i + 1) == Some(&b'/') => {
                let begin = i;
                i += 2;
                let name_start = i;
                while i < bytes.len() && bytes[i] != b'>' && !bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                let name = src[name_start..i].to_ascii_lowercase();
                while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] != b'>' {
                    return Err(format!("Unclosed end tag at byte offset {begin}"));
                }
                i += 1;
                let Some(tag) = open.pop() else {
                    return Err(format!("Unexpected end tag at byte offset {begin}"));
                };
                if tag.name != name {
                    return Err(format!(
                        "Unmatched end tag at byte offset {begin}, expected \"</{}>\", found \"</{name}>\"",
                        tag.name
                    ));
                }
                let order = tag.order;
                if let Some(entity) = close_tag(tag, len16, open.last_mut()) {
                    entities.push((order, entity));
                }
            }
            b'<' => {
                let (mut tag, next) = open_tag(src, i, len16)?;
                tag.order = opened;
                opened += 1;
                open.push(tag);
                i = next;
            }
            _ => {
                let Some(c) = src[i..].chars().next() else { break };
                text.push(c);
                len16 += c.len_utf16();
                i += c.len_utf8();
            }
        }
    }
    if let Some(tag) = open.last() {
        return Err(format!("Can't find end tag corresponding to start tag \"{}\"", tag.name));
    }
    entities.sort_by(|(a_order, a), (b_order, b)| {
        a.offset.cmp(&b.offset).then(b.length.cmp(&a.length)).then(a_order.cmp(b_order))
    });
    Ok((text, entities.into_iter().map(|(_, e)| e).collect()))
}

/// Parses the start tag at `begin` (a `<`); returns it and the index after its `>`.
fn open_tag(src: &str, begin: usize, len16: usize) -> Result<(OpenTag, usize), String> {
    let bytes = src.as_bytes();
    let unclosed = || format!("Unclosed start tag at byte offset {begin}");
    let mut i = begin + 1;
    while i < bytes.len() && bytes[i] != b'>' && !bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    if i >= bytes.len() {
        return Err(unclosed());
    }
    let name = src[begin + 1..i].to_ascii_lowercase();
    if !HTML_TAGS.contains(&name.as_str()) {
        return Err(format!("Unsupported start tag \"{name}\" at byte offset {begin}"));
    }
    let mut attrs = HashMap::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        match bytes.get(i) {
            None => return Err(unclosed()),
            Some(b'>') => {
                i += 1;
                break;
            }
            Some(_) => {}
        }
        let attr_start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'-' || bytes[i] == b'_') {
            i += 1;
        }
        if i == attr_start {
            return Err(format!("Empty attribute name in the tag \"{name}\" at byte offset {begin}"));
        }
        let attr = src[attr_start..i].to_ascii_lowercase();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            attrs.insert(attr, String::new());
            continue;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let raw = match bytes.get(i) {
            None => return Err(unclosed()),
            Some(&quote) if quote == b'"' || quote == b'\'' => {
                let value_start = i + 1;
                let Some(len) = bytes[value_start..].iter().position(|&b| b == quote) else {
                    return Err(format!("Unclosed end of attribute value at byte offset {value_start}"));
                };
                i = value_start + len + 1;
                &src[value_start..value_start + len]
            }
            Some(_) => {
                let value_start = i;
                while i < bytes.len() && bytes[i] != b'>' && !bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                &src[value_start..i]
            }
        };
        attrs.insert(attr, decode_attribute(raw, begin)?);
    }
    match name.as_str() {
        "span" if attrs.get("class").map(String::as_str) != Some("tg-spoiler") => {
            return Err(format!("Tag \"span\" must have class \"tg-spoiler\" at byte offset {begin}"));
        }
        "tg-emoji"
            if !attrs.get("emoji-id").is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())) =>
        {
            return Err(format!("Invalid custom emoji identifier specified at byte offset {begin}"));
        }
        _ => {}
    }
    Ok((OpenTag { name, start: len16, attrs, language: None, order: 0 }, i))
}

/// The entity a closed tag makes, if any (Telegram drops empty ones).
fn close_tag(tag: OpenTag, end: usize, parent: Option<&mut OpenTag>) -> Option<Entity> {
    if tag.name == "code" {
        if let Some(pre) = parent.filter(|p| p.name == "pre") {
            // `<pre><code class="language-x">` is one pre entity with a language.
            pre.language = tag.attrs.get("class").and_then(|c| c.strip_prefix("language-")).map(str::to_owned);
            return None;
        }
    }
    let length = end - tag.start;
    if length == 0 {
        return None;
    }
    let json = match tag.name.as_str() {
        "b" | "strong" => json!({ "type": "bold" }),
        "i" | "em" => json!({ "type": "italic" }),
        "u" | "ins" => json!({ "type": "underline" }),
        "s" | "strike" | "del" => json!({ "type": "strikethrough" }),
        "span" | "tg-spoiler" => json!({ "type": "spoiler" }),
        "code" => json!({ "type": "code" }),
        "pre" => match &tag.language {
            Some(language) => json!({ "type": "pre", "language": language }),
            None => json!({ "type": "pre" }),
        },
        "blockquote" if tag.attrs.contains_key("expandable") => json!({ "type": "expandable_blockquote" }),
        "blockquote" => json!({ "type": "blockquote" }),
        "tg-emoji" => json!({ "type": "custom_emoji", "custom_emoji_id": tag.attrs.get("emoji-id") }),
        // A link Telegram cannot parse is left as plain text.
        "a" => {
            let url = url::Url::parse(tag.attrs.get("href")?).ok()?;
            json!({ "type": "text_link", "url": url.as_str() })
        }
        _ => return None,
    };
    Some(Entity { offset: tag.start, length, json })
}

/// Decodes the entity at `at` (an `&`): `&lt; &gt; &amp; &quot;` and numeric
/// ones, the only ones Telegram supports. Returns the char and the index after `;`.
fn decode_entity(src: &str, at: usize) -> Option<(char, usize)> {
    let rest = src.get(at + 1..)?;
    let end = rest.bytes().take(12).position(|b| b == b';')?;
    let name = &rest[..end];
    let c = match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => {
            let number = name.strip_prefix('#')?;
            let code = match number.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(code).filter(|&c| c != '\0')?
        }
    };
    Some((c, at + 1 + end + 1))
}

/// An attribute value with its entities decoded.
fn decode_attribute(raw: &str, tag_at: usize) -> Result<String, String> {
    let mut value = String::new();
    let mut i = 0;
    while i < raw.len() {
        if raw.as_bytes()[i] == b'&' {
            let (c, next) = decode_entity(raw, i)
                .ok_or_else(|| format!("Unsupported HTML entity in an attribute of the tag at byte offset {tag_at}"))?;
            value.push(c);
            i = next;
        } else {
            let Some(c) = raw[i..].chars().next() else { break };
            value.push(c);
            i += c.len_utf8();
        }
    }
    Ok(value)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The byte index after the run of `[A-Za-z0-9_]` starting at `from`.
fn ascii_word_end(text: &str, from: usize) -> usize {
    from + text
        .as_bytes()
        .get(from..)
        .map_or(0, |rest| rest.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count())
}

/// The entities a Telegram client attaches to what a user types: bot commands
/// and @mentions (tdlib's `match_bot_commands`/`match_mentions`), in UTF-16 units.
fn detect_entities(text: &str) -> Vec<Value> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut spans: Vec<(usize, usize, &str)> = Vec::new();
    for (k, &(at, c)) in chars.iter().enumerate() {
        let prev = k.checked_sub(1).map(|p| chars[p].1);
        if c == '/' {
            if prev.is_some_and(|p| is_word_char(p) || matches!(p, '/' | '<' | '>')) {
                continue;
            }
            let name_end = ascii_word_end(text, at + 1);
            if !(1..=64).contains(&(name_end - at - 1)) {
                continue;
            }
            let mut end = name_end;
            if text[end..].starts_with('@') {
                let bot_end = ascii_word_end(text, end + 1);
                if !(3..=32).contains(&(bot_end - end - 1)) {
                    continue;
                }
                end = bot_end;
            }
            if text[end..].chars().next().is_some_and(|n| is_word_char(n) || matches!(n, '/' | '<' | '>')) {
                continue;
            }
            spans.push((at, end, "bot_command"));
        } else if c == '@' {
            if prev.is_some_and(is_word_char) {
                continue;
            }
            let end = ascii_word_end(text, at + 1);
            if !(2..=32).contains(&(end - at - 1)) || text[end..].chars().next().is_some_and(is_word_char) {
                continue;
            }
            // The bot's name in "/cmd@bot" belongs to the command.
            if spans.iter().any(|&(s, e, _)| s <= at && at < e) {
                continue;
            }
            spans.push((at, end, "mention"));
        }
    }
    spans
        .into_iter()
        .map(|(start, end, kind)| {
            json!({ "type": kind, "offset": utf16_len(&text[..start]), "length": utf16_len(&text[start..end]) })
        })
        .collect()
}
