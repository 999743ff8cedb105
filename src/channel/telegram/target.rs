//! Where and through what the Telegram adapter talks: a chat (or forum
//! topic) as the Bot API takes it, the rate-limited bot, and the bot for
//! files. Touches nothing but teloxide.

use std::sync::OnceLock;

use teloxide::adaptors::Throttle;
use teloxide::prelude::*;

use crate::channel::delivery;
use crate::domain::{ChatAddress, Platform};

/// The bot as pincer uses it: every request goes through the rate limiter.
pub(super) type TgBot = Throttle<Bot>;

/// `bot` for uploading and downloading files: the same token and Bot API,
/// over a client with teloxide's settings but no 17 s limit on the whole
/// request (only [`delivery::files::TRANSFER_CAP`], a backstop): the caller
/// bounds each transfer by the file's size. One client for the process, so
/// its connections are reused.
pub(super) fn files_bot(bot: &Bot) -> Bot {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        teloxide::net::default_reqwest_settings().timeout(delivery::files::TRANSFER_CAP).build().unwrap_or_else(|e| {
            tracing::warn!(%e, "cannot build the Telegram client for files; they share the bot's 17 s limit");
            bot.client().clone()
        })
    });
    Bot::with_client(bot.token(), client.clone()).set_api_url(bot.api_url())
}

/// A Telegram chat, or one forum topic of it: a [`ChatAddress`] as the Bot API takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct TelegramTarget {
    pub chat_id: i64,
    pub topic_id: Option<i64>,
}

impl TelegramTarget {
    pub fn address(self) -> ChatAddress {
        ChatAddress::telegram(self.chat_id, self.topic_id)
    }

    /// `None` for another platform's address, or ids that are not Telegram's.
    pub fn from_address(at: &ChatAddress) -> Option<TelegramTarget> {
        if at.platform != Platform::Telegram {
            return None;
        }
        let topic_id = match &at.thread {
            Some(thread) => Some(thread.parse().ok()?),
            None => None,
        };
        Some(TelegramTarget { chat_id: at.chat.parse().ok()?, topic_id })
    }

    /// The forum topic it posts into, as the Bot API takes it. A topic id
    /// never exceeds a message id, so one that does not fit is no topic.
    pub fn thread(self) -> Option<teloxide::types::ThreadId> {
        let topic = i32::try_from(self.topic_id?).ok()?;
        Some(teloxide::types::ThreadId(teloxide::types::MessageId(topic)))
    }
}
