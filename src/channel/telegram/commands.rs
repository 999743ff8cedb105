//! The bot's commands. They are registered with `setMyCommands`, so Telegram
//! offers them in the chat's command menu.

use teloxide::utils::command::BotCommands;

use super::inbound::ChatMessage;
use super::{outbound, Shared};
use crate::channel::SessionCommand;
use crate::domain::OutboundKind;
use crate::store::GroupRecord;

#[derive(BotCommands, Clone, Copy, Debug, PartialEq, Eq)]
#[command(rename_rule = "lowercase", description = "pincer runs a Claude Code agent for this chat:")]
pub(super) enum Cmd {
    #[command(description = "is the agent's session live, what runs in it, what it cost")]
    Status,
    #[command(description = "interrupt the agent's current turn")]
    Stop,
    #[command(description = "start a fresh session (the old one stays in pincer's history)")]
    New,
    #[command(description = "show this chat's id (and topic), to register it with pincer")]
    Chatid,
    #[command(description = "what the commands do")]
    Help,
}

/// `/chatid`: answered in any chat, registered or not, since it is how a chat
/// gets registered. The one message not sent through the outbox: a chat
/// without a group has none, and the answer is worth nothing later.
pub(super) async fn chat_id(shared: &Shared, chat: &ChatMessage) -> anyhow::Result<()> {
    let topic = chat.target.topic_id.map_or_else(String::new, |t| format!(" --topic {t}"));
    let you = chat.sender_id.map_or_else(String::new, |id| format!("\nYour user id: {id} (for --admin {id})"));
    let text = format!(
        "Chat id: {}{}\nRegister it with: pincer groups add NAME --telegram {}{topic}{you}",
        chat.target.chat_id,
        chat.target.topic_id.map_or_else(String::new, |t| format!(", topic {t}")),
        chat.target.chat_id,
    );
    if let Err(e) = outbound::post(&shared.bot, chat.target, &text, None).await {
        tracing::warn!(chat_id = chat.target.chat_id, %e, "cannot answer /chatid");
    }
    Ok(())
}

/// Runs a command in a registered group's chat.
pub(super) async fn run(shared: &Shared, group: &GroupRecord, chat: &ChatMessage, cmd: Cmd) -> anyhow::Result<()> {
    let by_admin = chat.sender_id.is_some_and(|id| group.settings.admins.contains(&id.to_string()));
    let session = match cmd {
        Cmd::Status => SessionCommand::Status,
        Cmd::Stop => SessionCommand::Stop,
        Cmd::New => SessionCommand::New,
        Cmd::Chatid => return chat_id(shared, chat).await,
        Cmd::Help => {
            let help = Cmd::descriptions().to_string();
            shared.ports.outbox.say(&group.name, OutboundKind::Answer, &help).await;
            return Ok(());
        }
    };
    Ok(shared.ports.session_command(group, session, by_admin).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_with_and_without_the_bot_name() {
        assert_eq!(Cmd::parse("/status", "pincer_bot").ok(), Some(Cmd::Status));
        assert_eq!(Cmd::parse("/stop@pincer_bot", "pincer_bot").ok(), Some(Cmd::Stop));
        assert!(Cmd::parse("/stop@other_bot", "pincer_bot").is_err(), "another bot's command is not ours");
        assert!(Cmd::parse("stop", "pincer_bot").is_err());
    }
}
