//! The bot's commands. They are registered with `setMyCommands`, so Telegram
//! offers them in the chat's command menu.

use std::time::SystemTime;

use teloxide::utils::command::BotCommands;

use super::inbound::ChatMessage;
use super::{outbound, Shared};
use crate::domain::OutboundKind;
use crate::router::GroupStatus;
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
    let router = &shared.ports.router;
    let admins = &group.settings.admins;
    let is_admin = chat.sender_id.is_some_and(|id| admins.contains(&id.to_string()));
    let text = match cmd {
        Cmd::Stop | Cmd::New if !admins.is_empty() && !is_admin => {
            "Only this group's admins can stop the agent or start a fresh session.".to_owned()
        }
        Cmd::Status => describe(&router.status(&group.name).await?),
        Cmd::Stop => {
            let busy = router.session(&group.name).await?.status().in_turn;
            router.interrupt(&group.name).await?;
            if busy { "Interrupting the agent's turn." } else { "The agent is not in a turn right now." }.to_owned()
        }
        Cmd::New => {
            // The session confirms when the fresh start is done.
            router.new_session(&group.name).await?;
            return Ok(());
        }
        Cmd::Chatid => return chat_id(shared, chat).await,
        Cmd::Help => Cmd::descriptions().to_string(),
    };
    shared.ports.outbox.say(&group.name, OutboundKind::Answer, &text).await;
    Ok(())
}

/// `/status` text.
fn describe(group: &GroupStatus) -> String {
    let status = &group.session;
    let session = match (status.live, status.live_since, &status.session_id) {
        (true, Some(since), _) => format!("live since {} ({} ago)", clock(since), ago(since)),
        (true, None, _) => "live".to_owned(),
        (false, _, Some(_)) => "not running; the next message resumes the conversation".to_owned(),
        (false, _, None) => "none yet; the next message starts one".to_owned(),
    };
    let turn = if status.in_turn { "working on a turn" } else { "idle" };
    let pending = match status.pending {
        0 => String::new(),
        n => format!(", {n} message(s) waiting for an answer"),
    };
    let replies = match group.waiting_replies {
        0 => String::new(),
        n => format!("\nReplies waiting to reach this chat: {n}"),
    };
    format!(
        "Session: {session}\nAgent: {turn}{pending}\nBackground tasks running: {}{replies}\nCost so far: ${:.4}",
        status.running_tasks, group.cost_usd
    )
}

fn clock(t: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(t).to_string();
    stamp.get(11..16).map_or(stamp.clone(), |hm| format!("{hm} UTC"))
}

fn ago(t: SystemTime) -> String {
    let secs = SystemTime::now().duration_since(t).map_or(0, |d| d.as_secs());
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionStatus;

    #[test]
    fn commands_parse_with_and_without_the_bot_name() {
        assert_eq!(Cmd::parse("/status", "pincer_bot").ok(), Some(Cmd::Status));
        assert_eq!(Cmd::parse("/stop@pincer_bot", "pincer_bot").ok(), Some(Cmd::Stop));
        assert!(Cmd::parse("/stop@other_bot", "pincer_bot").is_err(), "another bot's command is not ours");
        assert!(Cmd::parse("stop", "pincer_bot").is_err());
    }

    #[test]
    fn status_says_what_runs_and_the_cost() {
        let status = SessionStatus {
            live: true,
            live_since: Some(SystemTime::now()),
            session_id: Some("s".into()),
            pending: 1,
            in_turn: true,
            running_tasks: 2,
        };
        let text = describe(&GroupStatus { session: status, cost_usd: 0.01234, waiting_replies: 3 });
        assert!(text.contains("live since"), "{text}");
        assert!(text.contains("working on a turn, 1 message(s) waiting"), "{text}");
        assert!(text.contains("Background tasks running: 2"), "{text}");
        assert!(text.contains("$0.0123"), "{text}");
        assert!(text.contains("Replies waiting to reach this chat: 3"), "{text}");
        let session = SessionStatus { session_id: Some("s".into()), ..SessionStatus::default() };
        let idle = describe(&GroupStatus { session, cost_usd: 0.0, waiting_replies: 0 });
        assert!(!idle.contains("Replies waiting"), "{idle}");
        assert!(idle.contains("resumes the conversation"), "{idle}");
    }
}
