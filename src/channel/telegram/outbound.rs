//! Delivery to Telegram: what the sessions say goes to each group's chat (and
//! forum topic), rendered from Markdown and split to Telegram's limit, in
//! order within a group and concurrently across groups.
//!
//! A chat the bot has lost (blocked, kicked, deleted) marks its group inactive
//! instead of failing on every reply; the replies stay in the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardMarkup, MessageId, ParseMode};
use teloxide::{ApiError, RequestError};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::format::{self, Chunk};
use super::Shared;
use crate::domain::{GroupName, Outbound, OutboundKind};
use crate::store::{GroupRecord, TelegramTarget};

/// How many replies may wait for one group's delivery worker.
const GROUP_QUEUE: usize = 32;
/// Sends retried after a network error, with a growing pause.
const NETWORK_RETRIES: u32 = 4;

/// Hands each reply to its group's worker until the engine's outbox closes,
/// then waits for the workers to finish what they hold.
pub(super) async fn run(shared: Arc<Shared>, outbound: async_channel::Receiver<Outbound>) {
    let mut workers: HashMap<GroupName, mpsc::Sender<Outbound>> = HashMap::new();
    let tracker = TaskTracker::new();
    while let Ok(out) = outbound.recv().await {
        let worker = workers.entry(out.group.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(GROUP_QUEUE);
            tracker.spawn(group_worker(shared.clone(), rx));
            tx
        });
        if worker.send(out).await.is_err() {
            tracing::error!("a Telegram delivery worker stopped; a reply was stored but not sent");
        }
    }
    drop(workers);
    tracker.close();
    tracker.wait().await;
}

async fn group_worker(shared: Arc<Shared>, mut replies: mpsc::Receiver<Outbound>) {
    while let Some(out) = replies.recv().await {
        let group = match shared.store.group(out.group.as_str()).await {
            Ok(group) => group,
            Err(e) => {
                tracing::error!(group = %out.group, %e, "cannot look up the group of a reply");
                continue;
            }
        };
        let text = match out.kind {
            OutboundKind::Reply => out.text,
            OutboundKind::Error => format!("⚠️ {}", out.text),
            OutboundKind::Notice => format!("ℹ️ {}", out.text),
        };
        say(&shared, &group, &text).await;
    }
}

/// Sends `markdown` to a group's chat, if it has one the bot can still reach.
pub(super) async fn say(shared: &Shared, group: &GroupRecord, markdown: &str) {
    let Some(target) = group.settings.telegram else {
        tracing::debug!(group = %group.name, "the group has no Telegram chat; the reply stays in the store");
        return;
    };
    if !group.active {
        tracing::warn!(group = %group.name, reason = ?group.inactive_reason, "the group's chat is gone; the reply stays in the store");
        return;
    }
    match send(shared, target, markdown, None).await {
        Ok(_) => {}
        Err(RequestError::MigrateToChatId(to)) => {
            tracing::info!(group = %group.name, to = to.0, "the group's chat became a supergroup; following it");
            if let Err(e) = shared.store.move_telegram_chat(target.chat_id, to.0).await {
                tracing::error!(group = %group.name, %e, "cannot store the group's new chat id");
            }
            let moved = TelegramTarget { chat_id: to.0, ..target };
            if let Err(e) = send(shared, moved, markdown, None).await {
                lost_chat(shared, group, &e).await;
            }
        }
        Err(e) => lost_chat(shared, group, &e).await,
    }
}

/// Sends `markdown` to a chat (registered or not); failures are only logged.
pub(super) async fn say_to(shared: &Shared, target: TelegramTarget, markdown: &str) {
    if let Err(e) = send(shared, target, markdown, None).await {
        tracing::warn!(chat_id = target.chat_id, %e, "cannot answer in a Telegram chat");
    }
}

/// Sends `markdown` as one or more messages; `keyboard` goes on the last one.
/// Returns the id of the last message sent.
pub(super) async fn send(
    shared: &Shared,
    target: TelegramTarget,
    markdown: &str,
    keyboard: Option<InlineKeyboardMarkup>,
) -> Result<Option<MessageId>, RequestError> {
    let chunks = format::render(markdown);
    let count = chunks.len();
    let mut last = None;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let markup = if i + 1 == count { keyboard.clone() } else { None };
        last = Some(send_chunk(shared, target, &chunk, markup).await?);
    }
    Ok(last)
}

async fn send_chunk(
    shared: &Shared,
    target: TelegramTarget,
    chunk: &Chunk,
    keyboard: Option<InlineKeyboardMarkup>,
) -> Result<MessageId, RequestError> {
    let mut attempt = 0;
    let mut html = true;
    loop {
        let text = if html { &chunk.html } else { &chunk.plain };
        let mut request = shared.bot.send_message(ChatId(target.chat_id), text.clone());
        if html {
            request = request.parse_mode(ParseMode::Html);
        }
        if let Some(thread) = super::thread_of(target) {
            request = request.message_thread_id(thread);
        }
        if let Some(markup) = keyboard.clone() {
            request = request.reply_markup(markup);
        }
        match request.await {
            Ok(message) => return Ok(message.id),
            Err(RequestError::Api(ApiError::CantParseEntities(why))) if html => {
                // Our rendering should never be rejected; if it is, the words still matter more.
                tracing::warn!(chat_id = target.chat_id, %why, "Telegram rejected the formatting; sending plain text");
                html = false;
            }
            Err(RequestError::Network(e)) if attempt < NETWORK_RETRIES => {
                attempt += 1;
                tracing::warn!(chat_id = target.chat_id, %e, attempt, "sending to Telegram failed; retrying");
                tokio::time::sleep(Duration::from_millis(500) * 2u32.pow(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error means the bot can no longer post in the chat.
pub(super) fn chat_is_gone(e: &RequestError) -> bool {
    match e {
        RequestError::Api(api) => match api {
            ApiError::BotBlocked
            | ApiError::BotKicked
            | ApiError::BotKickedFromSupergroup
            | ApiError::BotKickedFromChannel
            | ApiError::ChatNotFound
            | ApiError::GroupDeactivated
            | ApiError::UserDeactivated
            | ApiError::NotEnoughRightsToPostMessages => true,
            ApiError::Unknown(text) => text.starts_with("Forbidden:"),
            _ => false,
        },
        _ => false,
    }
}

/// Handles a failed send: a lost chat deactivates its group, anything else is logged.
async fn lost_chat(shared: &Shared, group: &GroupRecord, e: &RequestError) {
    if chat_is_gone(e) {
        tracing::warn!(group = %group.name, %e, "the bot lost the group's Telegram chat; marking the group inactive");
        if let Err(e) = shared.store.set_group_active(&group.name, false, Some(&e.to_string())).await {
            tracing::error!(group = %group.name, %e, "cannot mark the group inactive");
        }
    } else {
        tracing::error!(group = %group.name, %e, "cannot send a reply to Telegram; it stays in the store");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_chats_are_told_apart_from_passing_trouble() {
        assert!(chat_is_gone(&RequestError::Api(ApiError::BotBlocked)));
        assert!(chat_is_gone(&RequestError::Api(ApiError::BotKickedFromSupergroup)));
        assert!(chat_is_gone(&RequestError::Api(ApiError::Unknown(
            "Forbidden: bot was kicked from the group chat".into()
        ))));
        assert!(!chat_is_gone(&RequestError::Api(ApiError::MessageIsTooLong)));
        assert!(!chat_is_gone(&RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(3))));
    }
}
