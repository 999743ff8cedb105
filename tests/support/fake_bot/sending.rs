//! The bot's side: the methods it calls to send, edit, delete and react,
//! with Telegram's checks of text, keyboards and commands. Files are in
//! `files`. Touches the state, the text parsing and the parameters.

use serde_json::{json, Value};

use super::answer::{bad, Outcome, TgError};
use super::html::format_text;
use super::model::{TgUser, Webhook, BOT_ID, MAX_CALLBACK_DATA, MAX_TEXT_UTF16};
use super::params::{int_value, json_value, string_list, string_value, truthy};
use super::state::{me, now, place_in_thread, Inner, SentMeta};

pub(super) const NOT_MODIFIED: &str =
    "Bad Request: message is not modified: specified new message content and reply markup are \
                            exactly the same as a current content and reply markup of the message";

pub(super) const BAD_QUERY_ID: &str =
    "Bad Request: query is too old and response timeout expired or query id is invalid";

pub(super) const CHAT_ACTIONS: &[&str] = &[
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
pub(super) const REACTION_EMOJI: &[&str] = &[
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
pub(super) const BUTTON_ACTIONS: &[&str] = &[
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

impl Inner {
    /// Answers every method but `getUpdates`.
    pub(super) fn call(&mut self, method: &str, p: &Value) -> Outcome {
        match method {
            "getMe" => Ok(me()),
            "getFile" => self.get_file(p),
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

    pub(super) fn send_message(&mut self, p: &Value) -> Outcome {
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

    /// `editMessageText` (`text: true`) or `editMessageReplyMarkup`.
    pub(super) fn edit_message(&mut self, p: &Value, text: bool) -> Outcome {
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

    /// `deleteMessage`: the bot's own messages only.
    pub(super) fn delete_message(&mut self, p: &Value) -> Outcome {
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
    pub(super) fn set_reaction(&mut self, p: &Value) -> Outcome {
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

pub(super) fn set_or_remove(message: &mut Value, key: &str, value: Option<Value>) {
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

/// `setMyCommands`: 1-32 chars of a-z, 0-9 and _, a 1-256 char description. A
/// leading `/` is dropped, as Telegram does: teloxide's `BotCommands::bot_commands()`
/// sends `/status`.
pub(super) fn check_commands(p: &Value) -> Result<(), TgError> {
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
pub(super) fn inline_keyboard(markup: Option<&Value>) -> Result<Option<Value>, TgError> {
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
