//! The Telegram channel (teloxide): registered chats in, the Telegram outbox
//! and approval prompts out. teloxide types stop here; across the boundary
//! this adapter speaks `ChatAddress`, `Inbound` and outbox rows.
//!
//! Three loops run while pincer serves Telegram:
//! - [`polling`] (or [`webhook`]) receives updates and hands each to
//!   [`updates`], one worker per chat, so chats never wait for each other;
//!   an update is confirmed to Telegram only once [`inbound`] handled it;
//! - `channel::delivery` drains the Telegram outbox through [`outbound`],
//!   one worker per chat;
//! - [`approvals`] shows tool calls that need an admin, with buttons.
//!
//! Progress goes around the rate limiter: [`TelegramStatus`] posts, edits and
//! deletes a slow turn's status message (with a Stop button, see [`stop`])
//! and puts the receipt reaction on an engaging message.
//!
//! Rate limits are teloxide's `Throttle` adaptor, which also waits out and
//! retries on `RetryAfter`.
//!
//! Files go up and come down through a bot of their own ([`files_bot`]):
//! teloxide's client gives every request 17 s in all, which a big file on a
//! slow link cannot meet; each file transfer is bounded by its size instead
//! (`delivery::files::transfer_timeout`).

mod approvals;
mod commands;
mod error;
pub mod format;
mod inbound;
mod media;
mod outbound;
mod polling;
mod shared;
mod status;
mod stop;
mod target;
mod updates;
mod webhook;

pub use error::TelegramError;
pub use media::Files;
pub use status::{TelegramStatus, STATUS_TIMEOUT};
pub use stop::DATA as STOP_BUTTON_DATA;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use teloxide::adaptors::throttle::Limits;
use teloxide::prelude::*;
use teloxide::utils::command::BotCommands;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::delivery::{self, OutboxLedger};
use super::intake::{Intake, Redelivery};
use super::{ApprovalAsk, Ports};
use crate::config::TelegramConfig;
use crate::domain::Platform;
use crate::retry::{Backoff, RetryPolicy};
use shared::Shared;
use target::files_bot;

/// A connected bot, ready to serve.
pub struct Telegram {
    shared: Arc<Shared>,
}

impl Telegram {
    /// The bot client for `config`; fails only on a setting that can never
    /// work (no token, an api_url that is not a URL), which stops pincer at start.
    pub fn client(config: &TelegramConfig) -> Result<Bot, TelegramError> {
        let token = config.token.as_ref().ok_or(TelegramError::NoToken)?;
        let mut bot = Bot::new(token.expose());
        if let Some(url) = &config.api_url {
            let not_url = |e: url::ParseError| TelegramError::NotUrl { setting: "api_url".into(), why: e.to_string() };
            bot = bot.set_api_url(url.parse().map_err(not_url)?);
        }
        Ok(bot)
    }

    /// Connects, trying again with backoff (and saying so in the log and the
    /// channel's health, which `pincer doctor` shows) while the Bot API cannot
    /// be reached or refuses the token. `None` when `shutdown` comes first.
    /// `on_a_cluster`: this node serves the bot as its cluster's gateway,
    /// so a message it cannot store is left for the next gateway
    /// ([`Redelivery::ToTheNextGateway`]) rather than refused in its chat.
    pub async fn connect_until_up(
        bot: Bot,
        ports: Ports,
        assistant: &str,
        on_a_cluster: bool,
        retry: RetryPolicy,
        shutdown: &CancellationToken,
    ) -> Option<Telegram> {
        let mut backoff = Backoff::new(retry);
        loop {
            match Self::connect(bot.clone(), ports.clone(), assistant, on_a_cluster).await {
                Ok(channel) => {
                    let health = ports.directory.set_health(Platform::Telegram, "connected", None, None).await;
                    if let Err(e) = health {
                        tracing::error!(%e, "cannot store Telegram's connection state");
                    }
                    return Some(channel);
                }
                Err(e) => {
                    let pause = backoff.failed(None);
                    tracing::error!(
                        "{e:#}; trying again in {} (replies wait in the outbox meanwhile)",
                        humantime::format_duration(pause)
                    );
                    let detail = format!("{e:#}");
                    let _ = ports.directory.set_health(Platform::Telegram, "unreachable", Some(&detail), None).await;
                    if !crate::retry::nap(pause, shutdown).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Checks the token with `getMe` and registers the bot's commands.
    pub async fn connect(
        bot: Bot,
        ports: Ports,
        assistant: &str,
        on_a_cluster: bool,
    ) -> Result<Telegram, TelegramError> {
        let redelivery = if on_a_cluster { Redelivery::ToTheNextGateway } else { Redelivery::Never };
        let bot = bot.throttle(Limits::default());
        let me = bot.get_me().await.map_err(TelegramError::Unreachable)?;
        if !me.can_read_all_group_messages {
            tracing::warn!(
                bot = %me.username(),
                "the bot's privacy mode is on: in groups it only sees messages addressed to it, so the agent gets \
                 no context from the rest of the chat. Turn it off with @BotFather → /setprivacy → Disable."
            );
        }
        // teloxide spells the names with their slash; the Bot API documents them without.
        let menu = commands::Cmd::bot_commands()
            .into_iter()
            .map(|c| teloxide::types::BotCommand::new(c.command.trim_start_matches('/'), c.description));
        bot.set_my_commands(menu).await.map_err(TelegramError::Commands)?;
        let status = Arc::new(TelegramStatus::new(bot.inner().clone()));
        let shared = Arc::new(Shared {
            bot,
            me,
            ports,
            intake: Intake::new(assistant, redelivery),
            approvals: Arc::default(),
            typing: crate::channel::typing::Typing::default(),
            status,
            progress: crate::channel::progress::Progress::default(),
            receiving: AtomicBool::new(true),
        });
        Ok(Telegram { shared })
    }

    /// The status port for the presenter: the same bot, outside its rate
    /// limiter. Take it before [`Self::serve`].
    pub fn status(&self) -> Arc<TelegramStatus> {
        self.shared.status.clone()
    }

    /// The bot's @username.
    pub fn username(&self) -> &str {
        self.shared.me.username()
    }

    /// Serves until `shutdown`: updates in, the outbox and approvals out.
    /// Updates stop at `shutdown`; delivery goes on until `stop_delivery`, so
    /// what the sessions say while they close still goes out.
    pub async fn serve(
        self,
        config: TelegramConfig,
        asks: mpsc::Receiver<ApprovalAsk>,
        retry: RetryPolicy,
        shutdown: CancellationToken,
        stop_delivery: CancellationToken,
    ) -> Result<(), TelegramError> {
        let Telegram { shared } = self;
        let files = files_bot(shared.bot.inner()).throttle(Limits::default());
        let sender = Arc::new(outbound::Sender { bot: shared.bot.clone(), files });
        let ledger = OutboxLedger { outbox: shared.ports.outbox.clone(), directory: shared.ports.directory.clone() };
        let delivery = tokio::spawn(delivery::run(sender, ledger, retry, stop_delivery));
        let asking = tokio::spawn(approvals::run(shared.bot.clone(), shared.approvals.clone(), asks, shutdown.clone()));
        let (status, directory) = (shared.status.clone(), shared.ports.directory.clone());
        crate::channel::progress::spawn_clean_up(status, directory, Platform::Telegram);

        let workers = updates::Workers::new(shared.clone());
        let result = match &config.webhook_url {
            Some(url) => webhook::run(&shared, &workers, &config, url, retry, &shutdown).await,
            None => {
                polling::run(&shared, &workers, config.poll_timeout, retry, &shutdown).await;
                Ok(())
            }
        };
        match &result {
            Err(e) => tracing::error!("cannot receive Telegram updates: {e:#}; pincer keeps delivering replies"),
            Ok(()) if !shutdown.is_cancelled() => {
                tracing::error!("Telegram updates stopped unexpectedly; pincer keeps delivering replies")
            }
            Ok(()) => {}
        }
        let _ = delivery.await;
        asking.abort();
        shared.typing.stop_all();
        shared.progress.stop_all();
        result
    }
}
