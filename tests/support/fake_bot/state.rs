//! The fake's memory behind one lock: chats, messages, updates, calls and
//! faults, and the Telegram rules for placing a message in a chat and thread.
//! Holds [`FakeBot`]'s fields; the siblings add its methods. Touches the
//! model, the answers and the fault rules; no I/O.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

use super::answer::bad;
use super::answer::{forbidden, Outcome, TgError};
use super::model::{
    Call, ChatKind, FakeError, Sent, SentFile, TgChat, TgUser, Webhook, BOT_FIRST_NAME, BOT_ID, BOT_USERNAME,
};
use super::net_fault::{FaultRule, NetFault};
use super::params::int_value;

/// The chat owner: creates the topics tests do not create, adds and removes the bot.
pub(super) const OWNER_ID: i64 = 1;

pub(super) const FIRST_UPDATE_ID: u32 = 500_000_001;

/// One of Telegram's six topic icon colours.
pub(super) const TOPIC_ICON_COLOR: u32 = 7_322_096;

/// A running fake Bot API; stops serving when dropped.
pub struct FakeBot {
    pub(super) addr: SocketAddr,
    pub(super) shared: Arc<Shared>,
    /// Dropping it shuts the server down.
    pub(super) _shutdown: oneshot::Sender<()>,
}

pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    /// A new update, poller, webhook or shutdown: wakes long polls and the webhook sender.
    pub(super) updates: Notify,
    /// A call was recorded or the chats changed: wakes `wait_for`.
    pub(super) activity: Notify,
    /// Hung calls were released or the fake dropped: wakes hung calls.
    pub(super) released: Notify,
}

impl Shared {
    /// A fake with no chats, no updates and no faults yet.
    pub(super) fn new() -> Shared {
        Shared {
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
        }
    }

    /// A test that panicked while holding the lock must not take the server down with it.
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn record(&self, method: &str, params: Value, outcome: &Outcome) {
        self.push_call(method, params, outcome.as_ref().err().map(|e| e.description.clone()));
    }

    pub(super) fn record_fault(&self, method: &str, params: Value, fault: NetFault) {
        self.push_call(method, params, Some(fault.describe()));
    }

    pub(super) fn push_call(&self, method: &str, params: Value, error: Option<String>) {
        let call = Call { method: method.to_owned(), params, ok: error.is_none(), error, at: Instant::now() };
        self.lock().calls.push(call);
        self.activity.notify_waiters();
    }
}

pub(super) struct Inner {
    pub(super) next_update_id: u32,
    /// Updates not yet confirmed by a `getUpdates` offset or a webhook 2xx.
    pub(super) pending: VecDeque<Value>,
    /// Every update ever queued, by id, and how many times it was handed to
    /// the bot (in a `getUpdates` answer or a webhook POST).
    pub(super) queued: HashMap<u64, (Value, usize)>,
    /// The last `allowed_updates` given; `None` or empty: Telegram's default.
    pub(super) allowed_updates: Option<Vec<String>>,
    pub(super) chats: HashMap<i64, TgChat>,
    pub(super) last_message_id: HashMap<i64, i64>,
    /// Every message on either side, as Telegram's Message JSON.
    pub(super) messages: HashMap<(i64, i64), Value>,
    /// Messages deleted (they stay in `messages`, for the tests to read).
    pub(super) deleted: std::collections::HashSet<(i64, i64)>,
    /// The bot's reaction on a message, by chat and message id.
    pub(super) reactions: HashMap<(i64, i64), Vec<String>>,
    pub(super) sent: Vec<SentMeta>,
    pub(super) calls: Vec<Call>,
    pub(super) membership: HashMap<i64, Membership>,
    /// One-shot faults by lowercased method name.
    pub(super) faults: HashMap<String, VecDeque<FakeError>>,
    /// Network faults, the oldest first; the first that hits a call applies.
    pub(super) net_faults: Vec<FaultRule>,
    /// Lowercased methods answered only after this delay ([`FakeBot::slow_calls`]).
    pub(super) slow: HashMap<String, Duration>,
    /// Bumped by every release, so a hung call knows it may end.
    pub(super) releases: u64,
    /// Callback query ids, and whether they were answered.
    pub(super) callbacks: HashMap<String, bool>,
    pub(super) next_callback: u64,
    pub(super) webhook: Option<Webhook>,
    /// Files users sent, by file id: what `getFile` and downloads serve.
    pub(super) files: HashMap<String, Vec<u8>>,
    /// Downloads served, by file path.
    pub(super) downloads: Vec<String>,
    /// Bumped by every `getUpdates`, so an older long poll knows it was overtaken.
    pub(super) poll_generation: u64,
    pub(super) closed: bool,
}

/// What the fake remembers of a message the bot sent, beyond its JSON.
pub(super) struct SentMeta {
    pub(super) chat_id: i64,
    pub(super) message_id: i64,
    pub(super) thread_id: Option<i64>,
    pub(super) raw_text: String,
    pub(super) parse_mode: Option<String>,
    pub(super) reply_markup: Option<Value>,
    pub(super) edits: u32,
    pub(super) file: Option<SentFile>,
    pub(super) deleted: bool,
}

/// The bot's standing in a chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Membership {
    Member,
    Administrator,
    Left,
    Kicked,
}

impl Membership {
    pub(super) fn parse(status: &str) -> Option<Membership> {
        Some(match status {
            "member" => Membership::Member,
            "administrator" => Membership::Administrator,
            "left" => Membership::Left,
            "kicked" => Membership::Kicked,
            _ => return None,
        })
    }

    pub(super) fn to_json(self) -> Value {
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
    pub(super) fn refusal(self, chat: &TgChat) -> Option<TgError> {
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

impl Inner {
    pub(super) fn chat(&self, id: i64) -> TgChat {
        self.chats.get(&id).cloned().unwrap_or_else(|| TgChat::guess(id))
    }

    /// Message ids count up per chat, past ids taken by topics.
    pub(super) fn next_message_id(&mut self, chat_id: i64) -> i64 {
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
    pub(super) fn topic_root(&mut self, chat: &TgChat, topic: i64) -> Value {
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

    /// Checks the `chat_id` parameter and that the bot may still act in the chat.
    pub(super) fn target_chat(&self, p: &Value) -> Result<TgChat, TgError> {
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

    pub(super) fn sent_view(&self, meta: &SentMeta) -> Sent {
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
}

/// Sets thread, topic flag and `reply_to_message` the way Telegram does.
pub(super) fn place_in_thread(
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

pub(super) fn topic_root(chat: &TgChat, topic: i64, creator: &TgUser, name: &str) -> Value {
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

/// The chat owner who creates topics and adds or removes the bot.
pub(super) fn owner() -> TgUser {
    TgUser::new(OWNER_ID, "Owner")
}

pub(super) fn me() -> Value {
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

pub(super) fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
