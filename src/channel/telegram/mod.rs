//! The Telegram channel (teloxide): registered chats in, replies and approval
//! prompts out. teloxide types stop here; the core sees only domain types.
//!
//! Three loops run while pincer serves Telegram:
//! - teloxide's dispatcher (long polling or a webhook) hands each update to
//!   [`inbound`], one worker per chat, so chats never wait for each other;
//! - [`outbound`] delivers what the sessions say, one worker per group;
//! - [`approvals`] shows tool calls that need an admin, with buttons.
//!
//! Rate limits are teloxide's `Throttle` adaptor, which also waits out and
//! retries on `RetryAfter`.

mod approvals;
mod commands;
pub mod format;
mod inbound;
mod outbound;
mod typing;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use teloxide::adaptors::throttle::Limits;
use teloxide::adaptors::Throttle;
use teloxide::dispatching::{Dispatcher, UpdateFilterExt};
use teloxide::error_handlers::LoggingErrorHandler;
use teloxide::prelude::*;
use teloxide::update_listeners::{webhooks, Polling, UpdateListener};
use teloxide::utils::command::BotCommands;
use tokio_util::sync::CancellationToken;

use crate::app::Engine;
use crate::config::TelegramConfig;
use crate::domain::{ApprovalRequest, Outbound};
use crate::router::Router;
use crate::store::{Store, TelegramTarget};

/// The bot as pincer uses it: every request goes through the rate limiter.
type TgBot = Throttle<Bot>;

/// How many updates may wait for one chat's worker.
const CHAT_QUEUE: usize = 64;

/// What the handlers and delivery workers share. It holds no [`Router`]:
/// the engine's outbox closes only when every router is gone, and delivery
/// must keep running until then.
struct Shared {
    bot: TgBot,
    me: teloxide::types::Me,
    store: Store,
    assistant: String,
    approvals: approvals::Waiting,
    typing: typing::Typing,
    unknown_chats: inbound::UnknownChats,
}

/// A connected bot, ready to serve.
pub struct Telegram {
    shared: Arc<Shared>,
    router: Router,
    outbound: async_channel::Receiver<Outbound>,
    approvals: async_channel::Receiver<ApprovalRequest>,
}

impl Telegram {
    /// Checks the token with `getMe` and registers the bot's commands.
    pub async fn connect(config: &TelegramConfig, engine: &Engine, assistant: &str) -> anyhow::Result<Telegram> {
        let token = config.token.as_ref().context("[telegram] token is not set")?;
        let mut bot = Bot::new(token.expose());
        if let Some(url) = &config.api_url {
            bot = bot.set_api_url(url.parse().context("[telegram] api_url is not a URL")?);
        }
        let bot = bot.throttle(Limits::default());
        let me = bot.get_me().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot reach Telegram with the configured bot token: {e}. Check [telegram] token \
                 (PINCER_TELEGRAM__TOKEN; @BotFather gives it) and api_url, and that this machine can reach the Bot API."
            )
        })?;
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
        bot.set_my_commands(menu).await.context("cannot register the bot's commands with setMyCommands")?;
        let shared = Arc::new(Shared {
            bot,
            me,
            store: engine.store.clone(),
            assistant: assistant.to_owned(),
            approvals: approvals::Waiting::default(),
            typing: typing::Typing::default(),
            unknown_chats: inbound::UnknownChats::default(),
        });
        Ok(Telegram {
            shared,
            router: engine.router.clone(),
            outbound: engine.outbound.clone(),
            approvals: engine.approvals.clone(),
        })
    }

    /// The bot's @username.
    pub fn username(&self) -> &str {
        self.shared.me.username()
    }

    /// Serves until `shutdown`: updates in, replies and approvals out. After
    /// shutdown it stops taking updates, then delivers what the sessions still
    /// say while they close, until the engine's outbox closes.
    pub async fn serve(self, config: TelegramConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Telegram { shared, router, outbound, approvals } = self;
        let delivery = tokio::spawn(outbound::run(shared.clone(), outbound));
        let asking = tokio::spawn(approvals::run(shared.clone(), approvals, shutdown.clone()));

        let handler = dptree::entry()
            .branch(Update::filter_message().endpoint(inbound::on_message))
            .branch(Update::filter_callback_query().endpoint(inbound::on_callback))
            .branch(Update::filter_my_chat_member().endpoint(inbound::on_membership));
        let mut dispatcher = Dispatcher::builder(shared.bot.clone(), handler)
            .dependencies(dptree::deps![shared.clone(), router])
            .default_handler(|update| async move { tracing::trace!(?update, "ignored an update") })
            .error_handler(LoggingErrorHandler::with_custom_text("a Telegram update handler failed"))
            .worker_queue_size(CHAT_QUEUE)
            .build();
        let stopper = stop_on(dispatcher.shutdown_token(), shutdown.clone());
        let result = match &config.webhook_url {
            Some(url) => {
                let mut options = webhooks::Options::new(config.webhook_listen, url.parse()?);
                if let Some(secret) = &config.webhook_secret {
                    options = options.secret_token(secret.expose().to_owned());
                }
                let listener = webhooks::axum(shared.bot.clone(), options)
                    .await
                    .with_context(|| format!("cannot set the Telegram webhook to {url}"))?;
                tracing::info!(%url, listen = %config.webhook_listen, "receiving Telegram updates through the webhook");
                dispatch(&mut dispatcher, listener).await
            }
            None => {
                let listener =
                    Polling::builder(shared.bot.clone()).timeout(config.poll_timeout).delete_webhook().await.build();
                dispatch(&mut dispatcher, listener).await
            }
        };
        stopper.abort();
        // The dispatcher held routers; dropping it lets the outbox close once the sessions are done.
        drop(dispatcher);
        if !shutdown.is_cancelled() {
            tracing::error!("Telegram updates stopped unexpectedly; pincer keeps delivering replies");
        }
        let _ = delivery.await;
        asking.abort();
        shared.typing.stop_all();
        result
    }
}

/// The forum topic a target posts into, as the Bot API takes it. A topic id
/// never exceeds a message id, so one that does not fit is no topic.
fn thread_of(target: TelegramTarget) -> Option<teloxide::types::ThreadId> {
    let topic = i32::try_from(target.topic_id?).ok()?;
    Some(teloxide::types::ThreadId(teloxide::types::MessageId(topic)))
}

async fn dispatch<L>(
    dispatcher: &mut Dispatcher<TgBot, anyhow::Error, teloxide::dispatching::DefaultKey>,
    listener: L,
) -> anyhow::Result<()>
where
    L: UpdateListener + Send,
    L::Err: std::fmt::Debug + Send,
{
    let errors = LoggingErrorHandler::with_custom_text("receiving Telegram updates failed (retrying)");
    dispatcher.dispatch_with_listener(listener, errors).await;
    Ok(())
}

/// Asks the dispatcher to stop once `shutdown` is cancelled. The token refuses
/// while the dispatcher has not started yet, so it is asked again until it takes.
fn stop_on(token: teloxide::dispatching::ShutdownToken, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        shutdown.cancelled().await;
        while token.shutdown().is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}
