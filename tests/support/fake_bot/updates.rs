//! The users' side: messages, topics, button presses and membership changes
//! queued as updates, and their delivery by long poll (`getUpdates`) or to a
//! webhook. Touches the state, the model and the text's entities.

use std::{
    pin::pin,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::http::header;
use serde_json::{json, Map, Value};

use super::answer::{Outcome, TgError};
use super::html::detect_entities;
use super::model::{ChatKind, Incoming, TgChat, TgUser, PATIENCE};
use super::params::{int_value, json_value, string_list};
use super::state::{now, owner, place_in_thread, topic_root, FakeBot, Inner, Membership, Shared, OWNER_ID};

/// Telegram's default `allowed_updates` leaves these out.
pub(super) const OPT_IN_UPDATES: [&str; 3] = ["chat_member", "message_reaction", "message_reaction_count"];

impl FakeBot {
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
}

impl Inner {
    pub(super) fn queue(&mut self, kind: &str, payload: Value) -> u32 {
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
    pub(super) fn incoming_message(&mut self, incoming: &Incoming) -> Value {
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
    pub(super) fn drop_unwanted_updates(&mut self) {
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
}

/// A long poll: holds the request until an update is there or `timeout` passes.
pub(super) async fn get_updates(shared: &Shared, p: &Value) -> Outcome {
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
pub(super) async fn deliver_to_webhook(shared: Arc<Shared>) {
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
