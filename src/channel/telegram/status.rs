//! Telegram's [`StatusPort`]: the status message of a slow turn (plain text,
//! with a Stop button when asked), its edits and deletion, and the receipt
//! reaction on a person's message.
//!
//! These calls bypass the `Throttle` adaptor the outbox uses: it would queue
//! a status edit behind the replies and, on `RetryAfter`, wait and send it
//! anyway, while a status edit must be dropped rather than held (replies go
//! first). So a 429 comes back as [`StatusError::RateLimited`] for the
//! presenter to back off, and every call is bounded by [`STATUS_TIMEOUT`].

use std::future::Future;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup, MessageId, ReactionType};
use teloxide::{ApiError, RequestError};

use super::stop;
use super::target::TelegramTarget;
use crate::channel::progress::{StatusError, StatusPort};
use crate::domain::ChatAddress;

/// How long one status call may take before it is given up: the status is a
/// courtesy, and the next state will be shown anyway.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Telegram's limit on a message's text, in UTF-16 units; a status longer
/// than this is cut, never split (there is one status message).
const TEXT_LIMIT_UTF16: usize = 4096;

/// The status messages of Telegram chats, over the bot without its rate limiter.
#[derive(Clone)]
pub struct TelegramStatus {
    bot: Bot,
}

impl TelegramStatus {
    /// Over `bot` as [`crate::channel::telegram::Telegram::client`] builds it (not throttled).
    pub fn new(bot: Bot) -> TelegramStatus {
        TelegramStatus { bot }
    }
}

/// The inline keyboard with the one Stop button.
fn stop_keyboard() -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new(vec![vec![InlineKeyboardButton::callback("Stop", stop::DATA)]])
}

fn target(to: &ChatAddress) -> Result<TelegramTarget, StatusError> {
    TelegramTarget::from_address(to).ok_or_else(|| StatusError::Failed(format!("{to} is not a Telegram chat")))
}

/// A message id pincer handed out; one that is not a number is no message of
/// Telegram's, so nothing can be done with it any more.
fn message_id(id: &str) -> Result<MessageId, StatusError> {
    id.parse().map(MessageId).map_err(|_| StatusError::Gone(format!("{id:?} is not a Telegram message id")))
}

/// Cuts `text` to Telegram's limit, on a character boundary, marking the cut.
fn fit(text: &str) -> String {
    if text.encode_utf16().count() <= TEXT_LIMIT_UTF16 {
        return text.to_owned();
    }
    let mut units = 0;
    let mut cut = String::new();
    for c in text.chars() {
        units += c.len_utf16();
        if units > TEXT_LIMIT_UTF16 - 1 {
            break;
        }
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// Runs one call within [`STATUS_TIMEOUT`]; the outer error is the timeout.
async fn within<T>(
    call: impl Future<Output = Result<T, RequestError>>,
) -> Result<Result<T, RequestError>, StatusError> {
    tokio::time::timeout(STATUS_TIMEOUT, call).await.map_err(|_| {
        StatusError::Failed(format!("no answer from Telegram within {}", humantime::format_duration(STATUS_TIMEOUT)))
    })
}

/// What a failed status call means to the presenter.
fn classify(e: RequestError) -> StatusError {
    match e {
        RequestError::RetryAfter(after) => StatusError::RateLimited { retry_after: Some(after.duration()) },
        RequestError::Api(
            ApiError::MessageToEditNotFound | ApiError::MessageCantBeEdited | ApiError::MessageIdInvalid,
        ) => StatusError::Gone(e.to_string()),
        RequestError::Api(ApiError::Unknown(ref text)) if text.contains("REACTION_INVALID") => StatusError::Failed(
            format!("{e}: Telegram accepts only its own reaction emoji (👀 👍 🔥 🎉 🤔 …); set [progress] reaction to one of them, or to \"\" for none"),
        ),
        other => StatusError::Failed(other.to_string()),
    }
}

impl StatusPort for TelegramStatus {
    async fn post(&self, to: &ChatAddress, text: &str, stop: bool) -> Result<String, StatusError> {
        let target = target(to)?;
        // Plain text: no parse mode, so nothing the agent's words hold can break it.
        let mut request = self.bot.send_message(ChatId(target.chat_id), fit(text));
        if let Some(thread) = target.thread() {
            request = request.message_thread_id(thread);
        }
        if stop {
            request = request.reply_markup(stop_keyboard());
        }
        let sent = within(request.send()).await?.map_err(classify)?;
        Ok(sent.id.0.to_string())
    }

    async fn edit(&self, to: &ChatAddress, id: &str, text: &str, stop: bool) -> Result<(), StatusError> {
        let target = target(to)?;
        // Without a reply_markup an edit drops the keyboard.
        let mut request = self.bot.edit_message_text(ChatId(target.chat_id), message_id(id)?, fit(text));
        if stop {
            request = request.reply_markup(stop_keyboard());
        }
        match within(request.send()).await? {
            // "Not modified": the same state again; nothing to do.
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn delete(&self, to: &ChatAddress, id: &str) -> Result<(), StatusError> {
        let target = target(to)?;
        // Not a message of Telegram's: there is nothing to delete.
        let Ok(id) = message_id(id) else { return Ok(()) };
        match within(self.bot.delete_message(ChatId(target.chat_id), id).send()).await? {
            // Someone deleted it already: what was asked is done.
            Ok(_) | Err(RequestError::Api(ApiError::MessageToDeleteNotFound)) => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    async fn react(&self, to: &ChatAddress, message_id: &str, emoji: &str) -> Result<(), StatusError> {
        let target = target(to)?;
        let id = message_id
            .parse()
            .map(MessageId)
            .map_err(|_| StatusError::Failed(format!("{message_id:?} is not a Telegram message id")))?;
        let reaction: Vec<ReactionType> = match emoji {
            // An empty list takes the bot's reaction off.
            "" => Vec::new(),
            emoji => vec![ReactionType::Emoji { emoji: emoji.to_owned() }],
        };
        let request = self.bot.set_message_reaction(ChatId(target.chat_id), id).reaction(reaction);
        within(request.send()).await?.map(|_| ()).map_err(classify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_a_lost_message_and_anything_else_are_told_apart() {
        let after = RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(7));
        assert_eq!(classify(after), StatusError::RateLimited { retry_after: Some(Duration::from_secs(7)) });
        for gone in [ApiError::MessageToEditNotFound, ApiError::MessageCantBeEdited, ApiError::MessageIdInvalid] {
            assert!(matches!(classify(RequestError::Api(gone)), StatusError::Gone(_)));
        }
        assert!(matches!(classify(RequestError::Api(ApiError::BotKicked)), StatusError::Failed(_)));
        let invalid = classify(RequestError::Api(ApiError::Unknown("Bad Request: REACTION_INVALID".into())));
        assert!(invalid.to_string().contains("[progress] reaction"), "{invalid}");
    }

    #[test]
    fn a_long_status_is_cut_to_the_limit_on_a_character() {
        assert_eq!(fit("short"), "short");
        let long = "🦀".repeat(3000);
        let cut = fit(&long);
        assert!(cut.encode_utf16().count() <= TEXT_LIMIT_UTF16);
        assert!(cut.ends_with("🦀…"));
    }

    #[test]
    fn ids_that_are_not_telegrams_are_gone() {
        assert_eq!(message_id("12").unwrap(), MessageId(12));
        assert!(matches!(message_id("3EB0ABC"), Err(StatusError::Gone(_))));
    }
}
