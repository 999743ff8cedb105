//! Sending to Telegram: outbox messages rendered from Markdown and split to
//! Telegram's limit ([`Sender`] is this platform's [`Deliver`]), and the
//! direct posts that are not outbox messages (approval prompts, `/chatid` in
//! a chat that has no group).
//!
//! Every Bot API error is sorted here into what delivery does next: try again
//! (network, 5xx, `RetryAfter`), pause the group (the bot lost the chat),
//! follow the chat (a group became a supergroup), or give the message up.

use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardMarkup, MessageId, ParseMode};
use teloxide::{ApiError, RequestError};

use super::format::{self, Chunk};
use super::{TelegramTarget, TgBot};
use crate::channel::{Deliver, DeliveryError};
use crate::domain::{ChatAddress, OutboundKind, Platform};

/// Delivers the Telegram outbox.
pub(super) struct Sender {
    pub bot: TgBot,
}

impl Deliver for Sender {
    type Part = Chunk;
    const PLATFORM: Platform = Platform::Telegram;

    fn parts(&self, kind: OutboundKind, text: &str, _file: Option<&crate::domain::media::OutboundFile>) -> Vec<Chunk> {
        format::render(&decorate(kind, text))
    }

    async fn send(&self, to: &ChatAddress, part: &Chunk) -> Result<(), DeliveryError> {
        let Some(target) = TelegramTarget::from_address(to) else {
            return Err(DeliveryError::Rejected(format!("{to} is not a Telegram chat id")));
        };
        match send_chunk(&self.bot, target, part, None).await {
            Ok(_) => Ok(()),
            Err(e) => Err(classify(e, target)),
        }
    }
}

/// How a kind of message looks in the chat.
fn decorate(kind: OutboundKind, text: &str) -> String {
    match kind {
        OutboundKind::Reply | OutboundKind::Answer => text.to_owned(),
        OutboundKind::Error => format!("⚠️ {text}"),
        OutboundKind::Notice => format!("ℹ️ {text}"),
    }
}

/// What delivery does about a failed send.
fn classify(e: RequestError, target: TelegramTarget) -> DeliveryError {
    match e {
        RequestError::MigrateToChatId(to) => DeliveryError::Moved(TelegramTarget { chat_id: to.0, ..target }.address()),
        RequestError::RetryAfter(after) => {
            DeliveryError::Transient { why: e.to_string(), retry_after: Some(after.duration()) }
        }
        RequestError::Network(_) | RequestError::Io(_) => DeliveryError::transient(e.to_string()),
        ref gone if chat_is_gone(gone) => DeliveryError::ChatGone(e.to_string()),
        // teloxide reports an answer it cannot parse (a proxy's HTML error
        // page for a 502) as InvalidJson: a passing failure, not ours.
        RequestError::InvalidJson { .. } => DeliveryError::transient(e.to_string()),
        RequestError::Api(ApiError::Unknown(ref text)) if is_server_side(text) => {
            DeliveryError::transient(e.to_string())
        }
        other => DeliveryError::Rejected(other.to_string()),
    }
}

/// Error descriptions of Telegram's own trouble (it answers 5xx with JSON too).
fn is_server_side(description: &str) -> bool {
    ["Internal Server Error", "Bad Gateway", "Service Unavailable", "Gateway Timeout"]
        .iter()
        .any(|s| description.contains(s))
}

/// Posts `markdown` now, outside the outbox (a prompt with buttons; a chat
/// with no group). Returns the id of the last message sent.
pub(super) async fn post(
    bot: &TgBot,
    target: TelegramTarget,
    markdown: &str,
    keyboard: Option<InlineKeyboardMarkup>,
) -> Result<Option<MessageId>, RequestError> {
    let chunks = format::render(markdown);
    let count = chunks.len();
    let mut last = None;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let markup = if i + 1 == count { keyboard.clone() } else { None };
        last = Some(send_chunk(bot, target, &chunk, markup).await?);
    }
    Ok(last)
}

/// Sends one chunk, once; as plain text if Telegram rejects our HTML.
pub(super) async fn send_chunk(
    bot: &TgBot,
    target: TelegramTarget,
    chunk: &Chunk,
    keyboard: Option<InlineKeyboardMarkup>,
) -> Result<MessageId, RequestError> {
    let mut html = true;
    loop {
        let text = if html { &chunk.html } else { &chunk.plain };
        let mut request = bot.send_message(ChatId(target.chat_id), text.clone());
        if html {
            request = request.parse_mode(ParseMode::Html);
        }
        if let Some(thread) = target.thread() {
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
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error means the bot can no longer post in the chat.
fn chat_is_gone(e: &RequestError) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    const AT: TelegramTarget = TelegramTarget { chat_id: -5, topic_id: Some(7) };

    fn kind(e: RequestError) -> &'static str {
        match classify(e, AT) {
            DeliveryError::Transient { .. } => "transient",
            DeliveryError::ChatGone(_) => "gone",
            DeliveryError::Moved(_) => "moved",
            DeliveryError::Rejected(_) => "rejected",
        }
    }

    #[test]
    fn lost_chats_are_told_apart_from_passing_trouble() {
        assert_eq!(kind(RequestError::Api(ApiError::BotBlocked)), "gone");
        assert_eq!(kind(RequestError::Api(ApiError::BotKickedFromSupergroup)), "gone");
        assert_eq!(
            kind(RequestError::Api(ApiError::Unknown("Forbidden: bot was kicked from the group chat".into()))),
            "gone"
        );
        assert_eq!(kind(RequestError::Api(ApiError::MessageIsTooLong)), "rejected");
        assert_eq!(kind(RequestError::Api(ApiError::Unknown("Bad Gateway".into()))), "transient");
        assert_eq!(kind(RequestError::Io(std::io::Error::other("reset").into())), "transient");
        let after = RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(3));
        assert_eq!(
            classify(after, AT),
            DeliveryError::Transient {
                why: "Retry after 3s".into(),
                retry_after: Some(std::time::Duration::from_secs(3))
            }
        );
    }

    #[test]
    fn a_migrated_chat_keeps_its_topic() {
        let moved = classify(RequestError::MigrateToChatId(ChatId(-1_005)), AT);
        assert_eq!(moved, DeliveryError::Moved(ChatAddress::telegram(-1_005, Some(7))));
    }

    #[test]
    fn notices_and_errors_are_marked_and_replies_are_not() {
        assert_eq!(decorate(OutboundKind::Reply, "hi"), "hi");
        assert_eq!(decorate(OutboundKind::Answer, "Session: live"), "Session: live");
        assert_eq!(decorate(OutboundKind::Error, "x"), "⚠️ x");
        assert_eq!(decorate(OutboundKind::Notice, "x"), "ℹ️ x");
    }
}
