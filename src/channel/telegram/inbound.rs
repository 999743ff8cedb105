//! Updates from Telegram: chat messages (to a group's agent, as context, or a
//! command), button presses (approval prompts, the status message's Stop), and
//! the bot's own membership. An engaging message gets the receipt reaction
//! once it is stored.
//!
//! A teloxide `Message` is turned into [`ChatMessage`] (an intake
//! [`Arrival`] and where on Telegram it came from); which group, whether it
//! engages the agent, and storing it are `channel::intake`'s. A message not
//! taken is refused in the chat, since its update is confirmed all the same;
//! on a cluster node it is given back unconfirmed instead, for the next
//! gateway (`intake::Redelivery::ToTheNextGateway`).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use teloxide::prelude::*;
use teloxide::types::{ChatAction, ChatMemberUpdated, MessageEntityKind};
use teloxide::utils::command::BotCommands;

use super::commands::{self, Cmd};
use super::shared::Shared;
use super::target::TelegramTarget;
use super::{approvals, outbound, stop};
use crate::channel::intake::{self, Addressed, Arrival, Taken};
use crate::channel::progress::StatusPort;
use crate::channel::text;
use crate::domain::activity::ProgressMode;
use crate::domain::{GroupName, OutboundKind, Platform};
use crate::router::RouteError;
use crate::store::GroupRecord;

type HandlerResult = Result<(), super::TelegramError>;

/// How often "typing…" is sent again (Telegram shows it for about 5 s).
const TYPING_REPEAT: std::time::Duration = std::time::Duration::from_secs(4);

/// A message as pincer reads it: what intake takes, and where on Telegram
/// it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChatMessage {
    pub target: TelegramTarget,
    /// Telegram's id for the message, unique within its chat.
    pub message_id: i32,
    pub sender_id: Option<i64>,
    pub arrival: Arrival,
}

impl ChatMessage {
    /// `None` for messages with nothing for the agent (service messages).
    pub fn from_telegram(msg: &Message, me: &teloxide::types::Me) -> Option<ChatMessage> {
        let media = super::media::attachments(msg);
        let text = match msg.text().or(msg.caption()) {
            Some(text) => text.to_owned(),
            None => super::media::text_of(msg).or_else(|| (!media.is_empty()).then(String::new))?,
        };
        // Outside forums, Telegram also sets a thread id on plain replies.
        let topic_id = msg.is_topic_message.then(|| msg.thread_id.map(|t| i64::from(t.0 .0))).flatten();
        let target = TelegramTarget { chat_id: msg.chat.id.0, topic_id };
        // In a forum topic every message "replies" to the topic's creation
        // message; that is where it was written, not what it answers.
        let reply = msg.reply_to_message().filter(|r| r.forum_topic_created().is_none());
        let mentions_bot = msg.parse_entities().unwrap_or_default().iter().any(|e| match e.kind() {
            MessageEntityKind::Mention => e.text().trim_start_matches('@').eq_ignore_ascii_case(me.username()),
            MessageEntityKind::TextMention { user } => user.id == me.id,
            _ => false,
        });
        let name = |u: Option<&teloxide::types::User>| u.map_or_else(|| "someone".to_owned(), |u| u.full_name());
        let sender_id = msg.from.as_ref().map(|u| u.id.0 as i64);
        let arrival = Arrival {
            at: target.address(),
            // Unique across Telegram, so a message Telegram sends again (after
            // a crash before its update was confirmed) is not answered twice.
            external_id: format!("{}/{}", target.chat_id, msg.id.0),
            sender_id: sender_id.map(|id| id.to_string()),
            sender_name: name(msg.from.as_ref()),
            text,
            sent_at: UNIX_EPOCH + Duration::from_secs(u64::try_from(msg.date.timestamp()).unwrap_or(0)),
            reply_to: reply.map(|r| intake::quote(&name(r.from.as_ref()), r.text().or(r.caption()).unwrap_or("…"))),
            addressed: Addressed {
                mentions_bot,
                replies_to_bot: reply.and_then(|r| r.from.as_ref()).is_some_and(|u| u.id == me.id),
                replies_to: None,
            },
            private: msg.chat.is_private(),
            media,
            album: msg.media_group_id().map(|g| g.0.clone()),
        };
        Some(ChatMessage { target, message_id: msg.id.0, sender_id, arrival })
    }
}

/// What became of an update its handler is done with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Stored, refused in its chat, or nothing for pincer: confirm it.
    Handled,
    /// Not taken and not refused (this cluster node cannot store it): leave
    /// it unconfirmed, so Telegram brings it again, to this node's next poll
    /// or to the next gateway's.
    Released,
}

/// Hands a message to intake and acts on its answer; `/chatid` and a
/// group's move to a new chat id are Telegram's own. [`Outcome::Released`]
/// when it was not taken and not refused (a cluster node that cannot store
/// it): Telegram brings it again, to this node or to the next gateway.
pub(super) async fn on_message(msg: Message, shared: Arc<Shared>) -> Result<Outcome, super::TelegramError> {
    if let Some(to) = msg.migrate_to_chat_id() {
        chat_moved(&shared, msg.chat.id.0, to.0).await;
        return Ok(Outcome::Handled);
    }
    let Some(chat) = ChatMessage::from_telegram(&msg, &shared.me) else {
        return Ok(Outcome::Handled);
    };
    let command = Cmd::parse(&chat.arrival.text, shared.me.username()).ok();
    if command == Some(Cmd::Chatid) {
        return commands::chat_id(&shared, chat.target, chat.sender_id).await.map(|()| Outcome::Handled);
    }
    let ChatMessage { target, message_id, sender_id, arrival } = chat;
    match shared.intake.take(&shared.ports, arrival, command).await {
        Ok(Taken::Unregistered { first: true }) => tracing::warn!(
            chat_id = target.chat_id,
            topic = ?target.topic_id,
            title = msg.chat.title().unwrap_or(""),
            "a message from a Telegram chat that is not registered was ignored; register it with \
             `pincer groups add NAME --telegram {}`",
            target.chat_id
        ),
        Ok(Taken::Command { group, command, by_admin }) => {
            return commands::run(&shared, &group, target, sender_id, by_admin, command)
                .await
                .map(|()| Outcome::Handled)
        }
        Ok(Taken::Engaged { group }) => {
            return engaged(&shared, &group, target, message_id).await.map(|()| Outcome::Handled)
        }
        Ok(Taken::Unregistered { first: false } | Taken::Observed | Taken::Duplicate) => {}
        // The update is confirmed all the same: the chat is told instead.
        Err(refused) if refused.tell => refuse(&shared, refused.group.as_ref(), target, &refused.error).await,
        Err(refused) => {
            tracing::warn!(
                chat_id = target.chat_id,
                "a Telegram message could not be taken ({}); it is left unconfirmed, for Telegram to bring \
                 again to this node or the next gateway",
                refused.error
            );
            // Not at once: the next poll would bring it straight back.
            tokio::time::sleep(RELEASE_PAUSE).await;
            return Ok(Outcome::Released);
        }
    }
    Ok(Outcome::Handled)
}

/// How long a message this node could not take waits before it is given
/// back, so a store that fails at once is not tried in a loop.
const RELEASE_PAUSE: Duration = Duration::from_secs(1);

/// A group became a supergroup: same chat, new id.
async fn chat_moved(shared: &Shared, from: i64, to: i64) {
    tracing::info!(from, to, "a Telegram group moved to a new chat id");
    let moved = shared.ports.directory.chat_moved(Platform::Telegram, &from.to_string(), &to.to_string()).await;
    if let Err(e) = moved {
        // Telegram tells of the move once; the new chat is where anyone will look.
        tracing::error!(from, to, %e, "cannot record that a Telegram group moved");
        let text = text::move_not_recorded(&e, to);
        if let Err(e) = outbound::post(&shared.bot, TelegramTarget { chat_id: to, topic_id: None }, &text, None).await {
            tracing::warn!(to, %e, "cannot tell the moved chat that its move was not recorded");
        }
    }
}

/// A message the agent will answer: the receipt, the status message, and
/// "typing…" while the turn runs.
async fn engaged(shared: &Arc<Shared>, group: &GroupRecord, target: TelegramTarget, message_id: i32) -> HandlerResult {
    let progress = shared.ports.progress_for(group);
    let followed = shared.ports.follow(&group.name).await?;
    if progress.mode != ProgressMode::Off {
        receipt(shared, target, message_id, &progress.reaction);
        let (status, directory) = (shared.status.clone(), shared.ports.directory.clone());
        shared.progress.follow(&group.name, followed.activity(), status, target.address(), progress, directory);
    }
    let bot = shared.bot.clone();
    shared.typing.start(&group.name, followed, TYPING_REPEAT, move |on| {
        let bot = bot.clone();
        async move {
            // Telegram has no "stop typing": the indicator fades by itself.
            if !on {
                return Ok(());
            }
            let mut action = bot.send_chat_action(ChatId(target.chat_id), ChatAction::Typing);
            if let Some(thread) = target.thread() {
                action = action.message_thread_id(thread);
            }
            action.await.map(|_| ()).map_err(|e| e.to_string())
        }
    });
    Ok(())
}

/// Puts the receipt reaction on a message the agent will answer, from its
/// own task: intake never waits on it, and a failure only costs the emoji.
fn receipt(shared: &Arc<Shared>, target: TelegramTarget, message_id: i32, emoji: &str) {
    if emoji.is_empty() {
        return;
    }
    let (status, emoji, at, id) = (shared.status.clone(), emoji.to_owned(), target.address(), message_id.to_string());
    tokio::spawn(async move {
        if let Err(e) = status.react(&at, &id, &emoji).await {
            tracing::debug!(chat = %at, %e, "cannot put the receipt reaction on a Telegram message");
        }
    });
}

/// Tells the chat that a message was not taken, so its update can be
/// confirmed: through the group's outbox when it can be written; else
/// straight to the chat, once, since the store is what failed.
async fn refuse(shared: &Shared, group: Option<&GroupName>, target: TelegramTarget, e: &RouteError) {
    let text = text::not_taken(e);
    if let Some(group) = group {
        if shared.ports.outbox.try_say(group, OutboundKind::Notice, &text).await.is_ok() {
            return;
        }
    }
    if let Err(e) = outbound::post(&shared.bot, target, &text, None).await {
        tracing::warn!(chat_id = target.chat_id, %e, "cannot tell the chat that its message was not taken");
    }
}

pub(super) async fn on_callback(query: CallbackQuery, shared: Arc<Shared>) -> HandlerResult {
    let Some(data) = query.data.as_deref() else {
        return Ok(());
    };
    let reply = match approvals::Press::parse(data) {
        None if stop::is_stop(data) => stop::pressed(&shared.ports, &query).await,
        Some(press) => {
            let chat_id = query.message.as_ref().map(|m| m.chat().id.0);
            let by_id = query.from.id.0 as i64;
            shared.approvals.press(press, chat_id, by_id, &query.from.full_name())
        }
        None => "This button is no longer in use.".to_owned(),
    };
    shared.bot.answer_callback_query(query.id).text(reply).await?;
    Ok(())
}

/// The bot was removed from (or added back to) a chat.
pub(super) async fn on_membership(update: ChatMemberUpdated, shared: Arc<Shared>) -> HandlerResult {
    let member = &update.new_chat_member;
    if member.user.id != shared.me.id {
        return Ok(());
    }
    let present = member.is_present();
    let here = TelegramTarget { chat_id: update.chat.id.0, topic_id: None }.address();
    for group in shared.ports.directory.groups().await? {
        let bound_here =
            group.settings.chat.as_ref().is_some_and(|c| c.platform == here.platform && c.chat == here.chat);
        if bound_here && group.active != present {
            let reason =
                (!present).then(|| format!("the bot was removed from the chat by {}", update.from.full_name()));
            tracing::info!(group = %group.name, present, "the bot's membership in the group's chat changed");
            shared.ports.directory.set_reachable(&group.name, present, reason.as_deref()).await?;
        }
    }
    Ok(())
}
