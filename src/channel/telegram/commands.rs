//! The bot's commands. They are registered with `setMyCommands`, so Telegram
//! offers them in the chat's command menu.

use teloxide::utils::command::BotCommands;

use super::outbound;
use super::shared::Shared;
use super::target::TelegramTarget;
use crate::channel::group_commands::{BudgetAction, TasksAction};
use crate::channel::SessionCommand;
use crate::store::GroupRecord;

#[derive(BotCommands, Clone, Debug, PartialEq, Eq)]
#[command(rename_rule = "lowercase", description = "pincer runs a Claude Code agent for this chat:")]
pub(super) enum Cmd {
    #[command(description = "is the agent's session live, what runs in it, what it cost")]
    Status,
    #[command(description = "interrupt the agent's current turn")]
    Stop,
    #[command(description = "start a fresh session (the old one stays in pincer's history)")]
    New,
    #[command(description = "this group's scheduled tasks; admins: /tasks run|pause|resume ID")]
    Tasks(String),
    #[command(description = "what this group spent; admins: /budget daily|monthly USD, /budget turns N")]
    Budget(String),
    #[command(description = "show this chat's id (and topic), to register it with pincer")]
    Chatid,
    #[command(description = "what the commands do")]
    Help,
}

/// `/chatid`: answered in any chat, registered or not, since it is how a chat
/// gets registered. The one message not sent through the outbox: a chat
/// without a group has none, and the answer is worth nothing later.
pub(super) async fn chat_id(
    shared: &Shared,
    target: TelegramTarget,
    sender_id: Option<i64>,
) -> Result<(), super::TelegramError> {
    let topic = target.topic_id.map_or_else(String::new, |t| format!(" --topic {t}"));
    let you = sender_id.map_or_else(String::new, |id| format!("\nYour user id: {id} (for --admin {id})"));
    let text = format!(
        "Chat id: {}{}\nRegister it with: pincer groups add NAME --telegram {}{topic}{you}",
        target.chat_id,
        target.topic_id.map_or_else(String::new, |t| format!(", topic {t}")),
        target.chat_id,
    );
    if let Err(e) = outbound::post(&shared.bot, target, &text, None).await {
        tracing::warn!(chat_id = target.chat_id, %e, "cannot answer /chatid");
    }
    Ok(())
}

/// Runs a command sent by `sender_id` (one of the group's admins when
/// `by_admin`) in a registered group's chat `target`.
pub(super) async fn run(
    shared: &Shared,
    group: &GroupRecord,
    target: TelegramTarget,
    sender_id: Option<i64>,
    by_admin: bool,
    cmd: Cmd,
) -> Result<(), super::TelegramError> {
    let session = match cmd {
        Cmd::Status => SessionCommand::Status,
        Cmd::Stop => SessionCommand::Stop,
        Cmd::New => SessionCommand::New,
        Cmd::Tasks(args) => TasksAction::parse(&args).map_or_else(SessionCommand::Usage, SessionCommand::Tasks),
        Cmd::Budget(args) => BudgetAction::parse(&args).map_or_else(SessionCommand::Usage, SessionCommand::Budget),
        Cmd::Chatid => return chat_id(shared, target, sender_id).await,
        Cmd::Help => SessionCommand::Usage(crate::channel::help::TELEGRAM),
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
        assert_eq!(Cmd::parse("/tasks", "pincer_bot").ok(), Some(Cmd::Tasks(String::new())));
        assert_eq!(Cmd::parse("/budget@pincer_bot daily 5", "pincer_bot").ok(), Some(Cmd::Budget("daily 5".into())));
    }

    #[test]
    fn the_help_is_what_the_command_list_describes() {
        assert_eq!(crate::channel::help::TELEGRAM, Cmd::descriptions().to_string());
    }
}
