//! "typing…" in a chat while its group's agent works on a turn started from
//! the chat. Platforms drop the indicator after a few seconds, so it is shown
//! again every `repeat` until the turn ends, then (where the platform has one)
//! turned off.
//!
//! One indicator loop per group at most, and only while it runs: a loop
//! removes its own entry when it ends, so the map holds the groups working
//! now, not every group that ever worked.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::domain::GroupName;
use crate::session::SessionHandle;

/// What the indicator follows: whether a turn is in progress, and when that may have changed.
pub trait Turn: Send + 'static {
    fn in_progress(&self) -> bool;
    /// Waits for a change; false once nothing will change any more.
    fn changed(&mut self) -> impl Future<Output = bool> + Send;
}

impl Turn for SessionHandle {
    fn in_progress(&self) -> bool {
        self.turn_in_progress()
    }
    async fn changed(&mut self) -> bool {
        SessionHandle::changed(self).await
    }
}

/// The running indicator loops, by group, each with the number it was started under.
#[derive(Default)]
pub struct Typing {
    running: Arc<Mutex<HashMap<GroupName, (u64, AbortHandle)>>>,
    started: AtomicU64,
}

impl Typing {
    fn lock(
        running: &Mutex<HashMap<GroupName, (u64, AbortHandle)>>,
    ) -> MutexGuard<'_, HashMap<GroupName, (u64, AbortHandle)>> {
        running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows "typing…" with `show(true)` every `repeat` until the group's
    /// turn is no longer in progress, then calls `show(false)`. A failure
    /// ends the loop: the indicator is a courtesy.
    pub fn start<T, F, Fut>(&self, group: &GroupName, turn: T, repeat: Duration, show: F)
    where
        T: Turn,
        F: Fn(bool) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let mut running = Self::lock(&self.running);
        if running.get(group).is_some_and(|(_, task)| !task.is_finished()) {
            return;
        }
        let number = self.started.fetch_add(1, Ordering::Relaxed);
        let (map, key) = (self.running.clone(), group.clone());
        let task = tokio::spawn(async move {
            // Removed when the loop ends, or is aborted: only its own entry, a
            // later loop of the same group may have replaced it.
            let _leave = scopeguard::guard((), move |()| {
                let mut running = Self::lock(&map);
                if running.get(&key).is_some_and(|(n, _)| *n == number) {
                    running.remove(&key);
                }
            });
            indicate(turn, repeat, show).await;
        });
        running.insert(group.clone(), (number, task.abort_handle()));
    }

    pub fn stop_all(&self) {
        // Aborted outside the lock, which each loop takes as it ends.
        let tasks: Vec<_> = Self::lock(&self.running).drain().collect();
        for (_, (_, task)) in tasks {
            task.abort();
        }
    }

    /// How many loops run now.
    #[cfg(test)]
    fn len(&self) -> usize {
        Self::lock(&self.running).len()
    }
}

async fn indicate<T, F, Fut>(mut turn: T, repeat: Duration, show: F)
where
    T: Turn,
    F: Fn(bool) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    while turn.in_progress() {
        if let Err(e) = show(true).await {
            tracing::debug!(%e, "cannot show the typing indicator");
            return;
        }
        let repeat_at = tokio::time::Instant::now() + repeat;
        // Wake early when the turn ends, so the loop stops right away.
        while turn.in_progress() {
            tokio::select! {
                _ = tokio::time::sleep_until(repeat_at) => break,
                alive = turn.changed() => if !alive { return },
            }
        }
    }
    let _ = show(false).await;
}

#[cfg(test)]
mod tests;
