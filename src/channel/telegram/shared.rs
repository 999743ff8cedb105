//! What the Telegram update handlers hold in common: the bot, the ports,
//! intake, and the state of prompts, typing and status messages. May touch
//! the Directory (the connection's health).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::approvals;
use super::status::TelegramStatus;
use super::target::TgBot;
use crate::channel::intake::Intake;
use crate::channel::Ports;
use crate::domain::Platform;

/// What the update handlers and the approval loop share.
pub(super) struct Shared {
    pub bot: TgBot,
    pub me: teloxide::types::Me,
    pub ports: Ports,
    pub intake: Intake,
    pub approvals: Arc<approvals::Waiting>,
    pub typing: crate::channel::typing::Typing,
    /// Status messages and the receipt reaction, outside the rate limiter.
    pub status: Arc<TelegramStatus>,
    /// The groups' status messages being kept up to date.
    pub progress: crate::channel::progress::Progress,
    /// Whether updates arrive; false from a failed receive until the next success.
    pub receiving: AtomicBool,
}

impl Shared {
    /// Receiving failed (the Bot API is unreachable, or refuses the token):
    /// the poller tries again with backoff; this says so once, with what to do,
    /// and stores it for `pincer doctor`.
    pub async fn receive_failed(&self, error: String) {
        if self.receiving.swap(false, Ordering::SeqCst) {
            let hint = if ["Invalid bot token", "Unauthorized"].iter().any(|t| error.contains(t)) {
                "the bot token was refused (revoked?): get the current one from @BotFather, set [telegram] \
                 token, and restart pincer"
            } else {
                "pincer keeps trying; replies wait in the outbox meanwhile"
            };
            tracing::error!("cannot receive Telegram updates: {error}; {hint}");
            let detail = format!("{error}; {hint}");
            if let Err(e) = self.ports.directory.set_health(Platform::Telegram, "failing", Some(&detail), None).await {
                tracing::error!(%e, "cannot store Telegram's connection state");
            }
        } else {
            tracing::debug!("receiving Telegram updates failed again: {error}");
        }
    }

    /// A poll succeeded or an update arrived, so receiving works (again).
    pub async fn receiving_works(&self) {
        if !self.receiving.swap(true, Ordering::SeqCst) {
            tracing::info!("Telegram updates arrive again");
            if let Err(e) = self.ports.directory.set_health(Platform::Telegram, "connected", None, None).await {
                tracing::error!(%e, "cannot store Telegram's connection state");
            }
        }
    }
}
