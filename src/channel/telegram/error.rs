//! What can go wrong in the Telegram adapter, as its callers see it: a
//! setting that can never work (pincer stops at start), the Bot API not
//! answering (the adapter tries again), or one update's handler failing
//! (logged; the update counts as handled). Touches nothing.

use teloxide::RequestError;

use crate::router::RouteError;
use crate::store::StoreError;

/// What can go wrong in the Telegram adapter.
#[derive(Debug, thiserror::Error)]
pub enum TelegramError {
    #[error("[telegram] token is not set: set it (PINCER_TELEGRAM__TOKEN; @BotFather gives it)")]
    NoToken,
    #[error("[telegram] {setting} is not a URL: {why}")]
    NotUrl { setting: String, why: String },
    #[error(
        "cannot reach Telegram with the configured bot token: {0}. Check [telegram] token \
         (PINCER_TELEGRAM__TOKEN; @BotFather gives it) and api_url, and that this machine can reach the Bot API"
    )]
    Unreachable(RequestError),
    #[error("cannot register the bot's commands with setMyCommands: {0}")]
    Commands(RequestError),
    #[error("the Telegram webhook server failed: {0}")]
    Webhook(std::io::Error),
    /// A call of the Bot API while handling an update.
    #[error(transparent)]
    Api(#[from] RequestError),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Store(#[from] StoreError),
}
