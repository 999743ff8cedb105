//! "typing…" in a chat while its group's agent works on a turn started from
//! the chat. Platforms drop the indicator after a few seconds, so it is shown
//! again every `repeat` until the turn ends, then (where the platform has one)
//! turned off.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::domain::GroupName;
use crate::session::SessionHandle;

/// One indicator loop per group at most.
#[derive(Default)]
pub struct Typing(Mutex<HashMap<GroupName, JoinHandle<()>>>);

impl Typing {
    /// Shows "typing…" with `show(true)` every `repeat` until the group's
    /// session has no turn in progress, then calls `show(false)`. A failure
    /// ends the loop: the indicator is a courtesy.
    pub fn start<F, Fut>(&self, group: &GroupName, session: SessionHandle, repeat: Duration, show: F)
    where
        F: Fn(bool) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let mut running = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if running.get(group).is_some_and(|task| !task.is_finished()) {
            return;
        }
        running.insert(group.clone(), tokio::spawn(indicate(session, repeat, show)));
    }

    pub fn stop_all(&self) {
        for (_, task) in self.0.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            task.abort();
        }
    }
}

async fn indicate<F, Fut>(mut session: SessionHandle, repeat: Duration, show: F)
where
    F: Fn(bool) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    while session.turn_in_progress() {
        if let Err(e) = show(true).await {
            tracing::debug!(%e, "cannot show the typing indicator");
            return;
        }
        let repeat_at = tokio::time::Instant::now() + repeat;
        // Wake early when the turn ends, so the loop stops right away.
        while session.turn_in_progress() {
            tokio::select! {
                _ = tokio::time::sleep_until(repeat_at) => break,
                alive = session.changed() => if !alive { return },
            }
        }
    }
    let _ = show(false).await;
}
