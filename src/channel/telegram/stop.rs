//! The Stop button on a status message: a press runs what `/stop` runs, for
//! the presser, and is answered in the button's own popup (a press when
//! nothing runs is answered there only, so an old button makes no noise).
//!
//! Its `callback_data` is the fixed word [`DATA`], which no approval button's
//! `ap:<id>:<choice>` can be. The group is found from the chat (and topic)
//! the pressed message is in, never from the data, which anyone can forge.

use teloxide::prelude::*;
use teloxide::types::MaybeInaccessibleMessage;

use super::target::TelegramTarget;
use crate::channel::{Ports, SessionCommand};
use crate::domain::GroupName;

/// The Stop button's `callback_data`.
pub const DATA: &str = "stop";

/// What the presser is told when the group has admins and they are not one.
pub(super) const NOT_ADMIN: &str = "Only this group's admins can stop the agent.";

/// Whether a button's data is the Stop button's.
pub(super) fn is_stop(data: &str) -> bool {
    data == DATA
}

/// Where the pressed message is: its chat, and its forum topic if it is in one.
fn pressed_in(message: &MaybeInaccessibleMessage) -> TelegramTarget {
    let topic = message
        .regular_message()
        .filter(|m| m.is_topic_message)
        .and_then(|m| m.thread_id)
        .map(|thread| i64::from(thread.0 .0));
    TelegramTarget { chat_id: message.chat().id.0, topic_id: topic }
}

/// What a press does, decided on plain facts: who may stop the agent is
/// `/stop`'s rule (a group with admins: only they; one without: anyone).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Refused,
    Stop { by_admin: bool },
}

pub(super) fn verdict(admins: &[String], presser: i64) -> Verdict {
    let by_admin = admins.contains(&presser.to_string());
    if !admins.is_empty() && !by_admin {
        Verdict::Refused
    } else {
        Verdict::Stop { by_admin }
    }
}

/// Handles a press of the Stop button; returns what the presser is told.
pub(super) async fn pressed(ports: &Ports, query: &CallbackQuery) -> String {
    let Some(message) = &query.message else {
        return "This button is no longer in use.".to_owned();
    };
    let at = pressed_in(message).address();
    let group = match ports.directory.group_for(&at).await {
        Ok(group) => group,
        Err(e) => {
            tracing::error!(chat = %at, %e, "cannot look up the group of a pressed Stop button");
            return "pincer cannot read its groups right now; try /stop in a moment.".to_owned();
        }
    };
    let presser = query.from.id.0 as i64;
    let Some(group) = group else {
        return "This chat has no agent to stop.".to_owned();
    };
    match verdict(&group.settings.admins, presser) {
        Verdict::Refused => {
            tracing::info!(group = %group.name, presser, "a non-admin pressed Stop; refused");
            NOT_ADMIN.to_owned()
        }
        // A button left on an old message: said to the presser alone, not the
        // chat. Only known where the group runs; elsewhere `/stop` is handed there.
        Verdict::Stop { .. } if ports.runs_here(&group.name) && idle(ports, &group.name).await => {
            "The agent is not in a turn right now.".to_owned()
        }
        Verdict::Stop { by_admin } => match ports.session_command(&group, SessionCommand::Stop, by_admin).await {
            Ok(()) => "Stopping the agent.".to_owned(),
            Err(e) => {
                tracing::error!(group = %group.name, %e, "the Stop button could not interrupt the agent");
                format!("Cannot stop the agent: {e}. Try /stop.")
            }
        },
    }
}

/// Whether the group's agent has nothing a stop would end (no turn, no
/// resend waiting). A session that cannot be reached is not idle: `/stop`'s
/// path then says what went wrong.
async fn idle(ports: &Ports, group: &GroupName) -> bool {
    match ports.router.session(group).await {
        Ok(session) => {
            let status = session.status();
            !status.interruptible() && status.resend_at.is_none()
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_is_exact_and_never_an_approvals() {
        assert!(is_stop(DATA));
        for other in ["", "stop ", "Stop", "stop:1", "ap:1:a"] {
            assert!(!is_stop(other), "{other}");
        }
        assert!(super::super::approvals::Press::parse(DATA).is_none());
        assert!(DATA.len() <= 64);
    }

    #[test]
    fn admins_stop_members_are_refused_and_a_group_without_admins_lets_anyone() {
        let admins = vec!["42".to_owned()];
        assert_eq!(verdict(&admins, 42), Verdict::Stop { by_admin: true });
        assert_eq!(verdict(&admins, 43), Verdict::Refused);
        assert_eq!(verdict(&[], 43), Verdict::Stop { by_admin: false });
    }
}
