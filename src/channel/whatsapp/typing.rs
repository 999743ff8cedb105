//! "typing…" in a WhatsApp group while its agent works on a turn started
//! from the chat. WhatsApp drops a composing state after a while, so it is
//! sent again every few seconds, and `paused` ends it when the turn does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::client::WaClient;
use crate::domain::GroupName;
use crate::session::SessionHandle;

/// How often the composing state is sent again.
const REPEAT: Duration = Duration::from_secs(10);

/// One indicator loop per group at most.
#[derive(Default)]
pub(super) struct Typing(Mutex<HashMap<GroupName, JoinHandle<()>>>);

impl Typing {
    /// Shows "typing…" in `chat` until the group's session has no turn in progress.
    pub fn start<C: WaClient>(&self, client: Arc<C>, group: &GroupName, chat: &str, session: SessionHandle) {
        let mut running = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if running.get(group).is_some_and(|task| !task.is_finished()) {
            return;
        }
        running.insert(group.clone(), tokio::spawn(indicate(client, chat.to_owned(), session)));
    }

    pub fn stop_all(&self) {
        for (_, task) in self.0.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            task.abort();
        }
    }
}

async fn indicate<C: WaClient>(client: Arc<C>, chat: String, mut session: SessionHandle) {
    while session.turn_in_progress() {
        if let Err(e) = client.composing(&chat, true).await {
            tracing::debug!(%chat, %e, "cannot show the typing indicator");
            return;
        }
        let repeat_at = tokio::time::Instant::now() + REPEAT;
        while session.turn_in_progress() {
            tokio::select! {
                _ = tokio::time::sleep_until(repeat_at) => break,
                alive = session.changed() => if !alive { return },
            }
        }
    }
    let _ = client.composing(&chat, false).await;
}
