//! Updates from Telegram: chat messages (to a group's agent, as context, or a
//! command), button presses (approval prompts, the status message's Stop), and
//! the bot's own membership. An engaging message gets the receipt reaction
//! once it is stored.
//!
//! A teloxide `Message` is turned into [`ChatMessage`] first; every decision
//! after that (which group, does it engage the agent) is made on our types.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use teloxide::prelude::*;
use teloxide::types::{ChatAction, ChatMemberUpdated, MessageEntityKind};
use teloxide::utils::command::BotCommands;

use super::commands::{self, Cmd};
use super::{approvals, outbound, stop, Shared, TelegramTarget};
use crate::channel::progress::StatusPort;
use crate::channel::text;
use crate::domain::activity::ProgressMode;
use crate::domain::{GroupName, Inbound, OutboundKind, Platform, Source};
use crate::router::RouteError;
use crate::store::GroupRecord;

type HandlerResult = anyhow::Result<()>;

/// How often "typing…" is sent again (Telegram shows it for about 5 s).
const TYPING_REPEAT: std::time::Duration = std::time::Duration::from_secs(4);

/// A text message as pincer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChatMessage {
    pub target: TelegramTarget,
    /// Telegram's id for the message, unique within its chat.
    pub message_id: i32,
    pub private: bool,
    pub sender_id: Option<i64>,
    pub sender_name: String,
    pub text: String,
    pub sent_at: SystemTime,
    /// "Name: first words" of the message this one answers.
    pub reply_to: Option<String>,
    pub replies_to_bot: bool,
    pub mentions_bot: bool,
    /// The photos and files it carries (fetched later, by the preparer).
    pub media: Vec<crate::domain::media::Attachment>,
    /// Telegram's key for an album: its parts arrive as messages sharing it.
    pub album: Option<String>,
}

/// How much of a replied-to message the agent is shown.
const REPLY_QUOTE_CHARS: usize = 80;

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
        // In a forum topic every message "replies" to the topic's creation
        // message; that is where it was written, not what it answers.
        let reply = msg.reply_to_message().filter(|r| r.forum_topic_created().is_none());
        let mentions_bot = msg.parse_entities().unwrap_or_default().iter().any(|e| match e.kind() {
            MessageEntityKind::Mention => e.text().trim_start_matches('@').eq_ignore_ascii_case(me.username()),
            MessageEntityKind::TextMention { user } => user.id == me.id,
            _ => false,
        });
        Some(ChatMessage {
            target: TelegramTarget { chat_id: msg.chat.id.0, topic_id },
            message_id: msg.id.0,
            private: msg.chat.is_private(),
            sender_id: msg.from.as_ref().map(|u| u.id.0 as i64),
            sender_name: msg.from.as_ref().map_or_else(|| "someone".to_owned(), |u| u.full_name()),
            text,
            sent_at: UNIX_EPOCH + Duration::from_secs(u64::try_from(msg.date.timestamp()).unwrap_or(0)),
            reply_to: reply.map(|r| {
                let who = r.from.as_ref().map_or_else(|| "someone".to_owned(), |u| u.full_name());
                let said: String = r.text().or(r.caption()).unwrap_or("…").chars().take(REPLY_QUOTE_CHARS).collect();
                format!("{who}: {said}")
            }),
            replies_to_bot: reply.and_then(|r| r.from.as_ref()).is_some_and(|u| u.id == me.id),
            mentions_bot,
            media,
            album: msg.media_group_id().map(|g| g.0.clone()),
        })
    }

    /// The message's id across Telegram, which the store keeps unique, so a
    /// message Telegram sends again (after a crash before its update was
    /// confirmed) is recognised instead of answered twice.
    pub fn external_id(&self) -> String {
        format!("{}/{}", self.target.chat_id, self.message_id)
    }
}

/// Whether a message wakes the group's agent: always in a private chat or a
/// group without a trigger; otherwise when it starts with the trigger
/// (case-insensitive, as a whole word), mentions the bot, or replies to it.
pub(super) fn engages(msg: &ChatMessage, group: &GroupRecord, assistant: &str) -> bool {
    if msg.private || !group.settings.requires_trigger || msg.mentions_bot || msg.replies_to_bot {
        return true;
    }
    let trigger = group.settings.trigger.clone().unwrap_or_else(|| format!("@{assistant}"));
    crate::channel::starts_with_word(msg.text.trim_start(), &trigger)
}

pub(super) async fn on_message(msg: Message, shared: Arc<Shared>) -> HandlerResult {
    let directory = &shared.ports.directory;
    if let Some(to) = msg.migrate_to_chat_id() {
        // A group became a supergroup: same chat, new id.
        tracing::info!(from = msg.chat.id.0, to = to.0, "a Telegram group moved to a new chat id");
        if let Err(e) = directory.chat_moved(Platform::Telegram, &msg.chat.id.0.to_string(), &to.0.to_string()).await {
            // Telegram tells of the move once; the new chat is where anyone will look.
            tracing::error!(from = msg.chat.id.0, to = to.0, %e, "cannot record that a Telegram group moved");
            let text = text::move_not_recorded(&e, to.0);
            if let Err(e) =
                outbound::post(&shared.bot, TelegramTarget { chat_id: to.0, topic_id: None }, &text, None).await
            {
                tracing::warn!(to = to.0, %e, "cannot tell the moved chat that its move was not recorded");
            }
        }
        return Ok(());
    }
    let Some(chat) = ChatMessage::from_telegram(&msg, &shared.me) else {
        return Ok(());
    };
    let command = Cmd::parse(&chat.text, shared.me.username()).ok();
    if command == Some(Cmd::Chatid) {
        return commands::chat_id(&shared, chat.target, chat.sender_id).await;
    }
    let found = match directory.group_for(&chat.target.address()).await {
        Ok(found) => found,
        Err(e) => {
            tracing::error!(chat_id = chat.target.chat_id, %e, "cannot look up the group of a Telegram message");
            refuse(&shared, None, chat.target, &e.into()).await;
            return Ok(());
        }
    };
    let Some(group) = found else {
        if shared.unknown_chats.first(&chat.target.chat_id) {
            tracing::warn!(
                chat_id = chat.target.chat_id,
                topic = ?chat.target.topic_id,
                title = msg.chat.title().unwrap_or(""),
                "a message from a Telegram chat that is not registered was ignored; register it with \
                 `pincer groups add NAME --telegram {}`",
                chat.target.chat_id
            );
        }
        return Ok(());
    };
    if !group.active {
        // The bot receives messages again, so it is back in the chat.
        tracing::info!(group = %group.name, "the group's Telegram chat is reachable again");
        // The message itself is still stored or refused below.
        if let Err(e) = directory.set_reachable(&group.name, true, None).await {
            tracing::warn!(group = %group.name, %e, "cannot record that the group's Telegram chat is reachable");
        }
    }
    if let Some(cmd) = command {
        return commands::run(&shared, &group, chat.target, chat.sender_id, cmd).await;
    }
    let mut inbound = Inbound::new(group.name.clone(), Source::Chat(Platform::Telegram), &chat.sender_name, &chat.text);
    inbound.sender_id = chat.sender_id.map(|id| id.to_string());
    inbound.sent_at = chat.sent_at;
    inbound.reply_to = chat.reply_to.clone();
    inbound.external_id = Some(chat.external_id());
    inbound.media = chat.media.clone();
    inbound.album = chat.album.clone();
    let router = &shared.ports.router;
    let engaged = engages(&chat, &group, &shared.assistant);
    let taken =
        if engaged { router.send(inbound).await.map(|_| ()) } else { router.observe(&inbound).await.map(|_| ()) };
    match taken {
        Ok(()) if engaged => {}
        Ok(()) => return Ok(()),
        Err(e) if e.is_duplicate() => {
            tracing::debug!(group = %group.name, id = %chat.external_id(), "a Telegram message came again; dropped");
            return Ok(());
        }
        Err(e) => {
            // A message kept only as context is refused too: confirmed
            // unstored, the agent would never see it.
            tracing::error!(group = %group.name, engaged, %e, "cannot take a message for the group; the chat is told");
            refuse(&shared, Some(&group.name), chat.target, &e).await;
            return Ok(());
        }
    }
    let progress = shared.ports.progress_for(&group);
    let session = router.session(&group.name).await?;
    if progress.mode != ProgressMode::Off {
        receipt(&shared, &chat, &progress.reaction);
        let (status, directory) = (shared.status.clone(), shared.ports.directory.clone());
        shared.progress.follow(&group.name, session.activity(), status, chat.target.address(), progress, directory);
    }
    let (bot, target) = (shared.bot.clone(), chat.target);
    shared.typing.start(&group.name, session, TYPING_REPEAT, move |on| {
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
fn receipt(shared: &Arc<Shared>, chat: &ChatMessage, emoji: &str) {
    if emoji.is_empty() {
        return;
    }
    let (status, emoji, at, id) =
        (shared.status.clone(), emoji.to_owned(), chat.target.address(), chat.message_id.to_string());
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
        None if stop::is_stop(data) => stop::pressed(&shared, &query).await,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GroupSettings;

    fn group(requires_trigger: bool, trigger: Option<&str>) -> GroupRecord {
        GroupRecord {
            name: "g".parse().unwrap(),
            created_at_us: 0,
            session_id: None,
            settings: GroupSettings {
                requires_trigger,
                trigger: trigger.map(str::to_owned),
                ..GroupSettings::default()
            },
            active: true,
            inactive_reason: None,
        }
    }

    fn msg(text: &str) -> ChatMessage {
        ChatMessage {
            target: TelegramTarget { chat_id: -1, topic_id: None },
            message_id: 1,
            private: false,
            sender_id: Some(1),
            sender_name: "Alice".into(),
            text: text.into(),
            sent_at: UNIX_EPOCH,
            reply_to: None,
            replies_to_bot: false,
            mentions_bot: false,
            media: Vec::new(),
            album: None,
        }
    }

    #[test]
    fn the_trigger_is_a_case_insensitive_leading_word() {
        let g = group(true, None);
        assert!(engages(&msg("@Andy hi"), &g, "Andy"));
        assert!(engages(&msg("  @andy, hi"), &g, "Andy"));
        assert!(engages(&msg("@ANDY"), &g, "Andy"));
        assert!(!engages(&msg("@Andyx hi"), &g, "Andy"));
        assert!(!engages(&msg("hi @Andy"), &g, "Andy"));
        assert!(!engages(&msg("lunch?"), &g, "Andy"));
        assert!(engages(&msg("hey bot, go"), &group(true, Some("hey bot")), "Andy"));
    }

    #[test]
    fn mentions_replies_private_chats_and_no_trigger_groups_engage() {
        let g = group(true, None);
        assert!(engages(&ChatMessage { mentions_bot: true, ..msg("what do you think @pincer_bot") }, &g, "Andy"));
        assert!(engages(&ChatMessage { replies_to_bot: true, ..msg("and then?") }, &g, "Andy"));
        assert!(engages(&ChatMessage { private: true, ..msg("hello") }, &g, "Andy"));
        assert!(engages(&msg("anything"), &group(false, None), "Andy"));
    }
}
