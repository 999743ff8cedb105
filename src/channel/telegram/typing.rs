//! The typing indicator: while a group's agent works on a turn started from
//! the chat, the chat shows "typing…". Telegram clears it after about five
//! seconds, so it is sent again every few seconds until the turn ends.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::types::ChatAction;
use tokio::task::JoinHandle;

use super::{TelegramTarget, TgBot};
use crate::domain::GroupName;
use crate::session::SessionHandle;

/// How often the action is repeated (Telegram shows it for ~5 s).
const REPEAT: Duration = Duration::from_secs(4);

/// One indicator loop per group at most.
#[derive(Default)]
pub(super) struct Typing(Mutex<HashMap<GroupName, JoinHandle<()>>>);

impl Typing {
    /// Shows "typing…" in the group's chat until its session has no turn in progress.
    pub fn start(&self, bot: &TgBot, group: &GroupName, target: TelegramTarget, session: SessionHandle) {
        let mut running = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if running.get(group).is_some_and(|task| !task.is_finished()) {
            return;
        }
        running.insert(group.clone(), tokio::spawn(indicate(bot.clone(), target, session)));
    }

    pub fn stop_all(&self) {
        for (_, task) in self.0.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            task.abort();
        }
    }
}

async fn indicate(bot: TgBot, target: TelegramTarget, mut session: SessionHandle) {
    while session.turn_in_progress() {
        let mut action = bot.send_chat_action(ChatId(target.chat_id), ChatAction::Typing);
        if let Some(thread) = target.thread() {
            action = action.message_thread_id(thread);
        }
        if let Err(e) = action.await {
            tracing::debug!(chat_id = target.chat_id, %e, "cannot show the typing indicator");
            return;
        }
        let repeat_at = tokio::time::Instant::now() + REPEAT;
        // Wake early when the turn ends, so the loop stops right away.
        while session.turn_in_progress() {
            tokio::select! {
                _ = tokio::time::sleep_until(repeat_at) => break,
                alive = session.changed() => if !alive { return },
            }
        }
    }
}
