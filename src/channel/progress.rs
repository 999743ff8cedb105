//! Live progress in a chat: a reaction on receipt, one status message per
//! slow turn edited in place, and a line while background work runs, built
//! from the [`Activity`] a group's session publishes.
//!
//! The platforms do the sending through [`StatusPort`]; what to send and
//! when (the quick-turn threshold, the edit throttle, coalescing, at most one
//! status message alive per chat, delete or summary at the end) is decided
//! here, so it is the same on every platform and tested under paused time.
//!
//! [`Progress`] runs it: one loop per group at most, following the group's
//! activity and driving the platform's [`StatusPort`]. Every status message
//! it posts is stored as it is shown and forgotten when deleted or finished,
//! so [`clean_up_left_behind`] at the next start finds those a stopped
//! pincer left saying "working".
//!
//! [`Activity`]: crate::domain::activity::Activity

pub mod plan;
mod port;
pub mod render;

pub use port::{ProgressSettings, StatusError, StatusPort};

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use self::plan::{Action, Plan, Purpose};
use super::Directory;
use crate::domain::activity::{Activity, ProgressMode};
use crate::domain::{ChatAddress, GroupName, Platform};
use crate::store::{StatusRecord, StoreError};

/// What a status message left behind by a stopped pincer is edited to.
pub const INTERRUPTED: &str = "Interrupted: pincer restarted.";

/// The running progress loops, by group, each with the number it was started under.
#[derive(Default)]
pub struct Progress {
    running: Arc<Mutex<HashMap<GroupName, (u64, AbortHandle)>>>,
    started: AtomicU64,
}

/// Where the status messages alive are kept: the store, through the
/// [`Directory`] (a trait so the driver's tests run under paused time, which
/// a SQLite pool's timeouts do not survive).
pub trait StatusRecords: Send + Sync + 'static {
    /// Remembers a status message as it is shown.
    fn remember(&self, record: &StatusRecord) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Forgets one deleted or finished.
    fn forget(&self, at: &ChatAddress, message_id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Those still remembered on a platform.
    fn remembered(&self, platform: Platform) -> impl Future<Output = Result<Vec<StatusRecord>, StoreError>> + Send;
}

impl StatusRecords for Directory {
    async fn remember(&self, record: &StatusRecord) -> Result<(), StoreError> {
        self.remember_status(record).await
    }
    async fn forget(&self, at: &ChatAddress, message_id: &str) -> Result<(), StoreError> {
        self.forget_status(at, message_id).await
    }
    async fn remembered(&self, platform: Platform) -> Result<Vec<StatusRecord>, StoreError> {
        self.status_messages(platform).await
    }
}

/// Where one loop shows its group's progress.
struct Target<P, R> {
    group: GroupName,
    port: Arc<P>,
    to: ChatAddress,
    records: R,
}

impl Progress {
    fn lock(
        running: &Mutex<HashMap<GroupName, (u64, AbortHandle)>>,
    ) -> MutexGuard<'_, HashMap<GroupName, (u64, AbortHandle)>> {
        running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows `group`'s activity in its chat `to` through `port` until nothing
    /// works and no status message is alive (or the activity's sender is
    /// gone). A loop already following the group goes on, and this call does
    /// nothing: start it whenever the group is handed a message.
    pub fn follow<P: StatusPort, R: StatusRecords>(
        &self,
        group: &GroupName,
        activity: watch::Receiver<Activity>,
        port: Arc<P>,
        to: ChatAddress,
        settings: ProgressSettings,
        records: R,
    ) {
        if settings.mode == ProgressMode::Off {
            return;
        }
        let mut running = Self::lock(&self.running);
        if running.get(group).is_some_and(|(_, task)| !task.is_finished()) {
            return;
        }
        let number = self.started.fetch_add(1, Ordering::Relaxed);
        let (map, key) = (self.running.clone(), group.clone());
        let target = Target { group: group.clone(), port, to, records };
        let task = tokio::spawn(async move {
            // Removed when the loop ends, or is aborted: only its own entry, a
            // later loop of the same group may have replaced it.
            let _leave = scopeguard::guard((), move |()| {
                let mut running = Self::lock(&map);
                if running.get(&key).is_some_and(|(n, _)| *n == number) {
                    running.remove(&key);
                }
            });
            show(activity, &target, &settings).await;
        });
        running.insert(group.clone(), (number, task.abort_handle()));
    }

    /// Stops every loop (at shutdown): the messages they leave are stored,
    /// for [`clean_up_left_behind`] at the next start.
    pub fn stop_all(&self) {
        let tasks: Vec<_> = Self::lock(&self.running).drain().collect();
        for (_, (_, task)) in tasks {
            task.abort();
        }
    }

    /// How many loops run now.
    pub fn len(&self) -> usize {
        Self::lock(&self.running).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The loop: wakes on a new activity or the plan's next deadline, never on a tick.
async fn show<P: StatusPort, R: StatusRecords>(
    mut activity: watch::Receiver<Activity>,
    target: &Target<P, R>,
    settings: &ProgressSettings,
) {
    let mut plan = Plan::new(settings);
    let mut alive: Option<String> = None;
    let mut seen_work = false;
    let mut open = true;
    loop {
        let mut now = activity.borrow_and_update().clone();
        if !open {
            // The session is gone, and its turn and work with it.
            now = Activity { last_done: now.last_done, ..Activity::default() };
        }
        seen_work |= now.working();
        plan.observe(&now, Instant::now());
        while let Some(action) = plan.poll(Instant::now()) {
            apply(target, &mut plan, &mut alive, action).await;
        }
        // Started before the turn it is for: wait for that turn.
        if !open || (seen_work && !now.working() && plan.idle()) {
            return;
        }
        let deadline = plan.next_deadline(Instant::now());
        tokio::select! {
            changed = activity.changed() => open = changed.is_ok(),
            () = sleep_until(deadline) => {}
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs one action through the port and tells the plan when it did not happen.
async fn apply<P: StatusPort, R: StatusRecords>(
    t: &Target<P, R>,
    plan: &mut Plan,
    alive: &mut Option<String>,
    action: Action,
) {
    let done = match (&action, alive.clone()) {
        (Action::Post { text, stop }, _) => match t.port.post(&t.to, text, *stop).await {
            Ok(id) => {
                let turn = match plan.shown() {
                    Some(Purpose::Turn(n)) => Some(n),
                    _ => None,
                };
                let record = StatusRecord { at: t.to.clone(), message_id: id.clone(), group: t.group.clone(), turn };
                logged("remember", t.records.remember(&record).await);
                *alive = Some(id);
                Ok(())
            }
            Err(e) => Err(e),
        },
        (Action::Edit { text, stop }, Some(id)) => {
            let edited = t.port.edit(&t.to, &id, text, *stop).await;
            if matches!(edited, Err(StatusError::Gone(_))) {
                forget(t, alive, &id).await;
            }
            edited
        }
        (Action::Finish { text }, Some(id)) => {
            let edited = t.port.edit(&t.to, &id, text, false).await;
            end(t, alive, &id, edited).await
        }
        (Action::Delete, Some(id)) => {
            let deleted = t.port.delete(&t.to, &id).await;
            end(t, alive, &id, deleted).await
        }
        (_, None) => Ok(()),
    };
    if let Err(e) = done {
        tracing::debug!(group = %t.group, %e, ?action, "a status message was not updated");
        plan.failed(&action, &e, Instant::now());
    }
}

/// The message is no longer pincer's to change: forgotten unless it may still
/// say "working" (a delete or final edit that failed), which the next start
/// cleans up.
async fn end<P: StatusPort, R: StatusRecords>(
    t: &Target<P, R>,
    alive: &mut Option<String>,
    id: &str,
    outcome: Result<(), StatusError>,
) -> Result<(), StatusError> {
    match outcome {
        Ok(()) | Err(StatusError::Gone(_)) => forget(t, alive, id).await,
        Err(e) => {
            tracing::info!(group = %t.group, %e, "a finished status message stays in the chat until the next start");
            *alive = None;
        }
    }
    Ok(())
}

async fn forget<P: StatusPort, R: StatusRecords>(t: &Target<P, R>, alive: &mut Option<String>, id: &str) {
    *alive = None;
    logged("forget", t.records.forget(&t.to, id).await);
}

fn logged(what: &str, result: Result<(), StoreError>) {
    if let Err(e) = result {
        tracing::warn!(%e, "cannot {what} a status message");
    }
}

/// At a start, edits each status message a stopped pincer left on
/// `platform` to [`INTERRUPTED`] (removing its Stop control) and forgets it;
/// returns how many it found. One that cannot be edited for now (rate
/// limited) is kept for the next start; any other failure is logged and the
/// message forgotten (it is gone, or pincer can no longer change it).
pub async fn clean_up_left_behind<P: StatusPort, R: StatusRecords>(
    port: &P,
    records: &R,
    platform: Platform,
) -> Result<usize, StoreError> {
    let left = records.remembered(platform).await?;
    for r in &left {
        match port.edit(&r.at, &r.message_id, INTERRUPTED, false).await {
            Err(e @ StatusError::RateLimited { .. }) => {
                tracing::info!(group = %r.group, %e, "a status message left behind waits for the next start");
                continue;
            }
            Err(e) => tracing::info!(group = %r.group, %e, "cannot mark a status message left behind"),
            Ok(()) => {}
        }
        records.forget(&r.at, &r.message_id).await?;
    }
    Ok(left.len())
}

/// [`clean_up_left_behind`] from its own task, so a start never waits on a
/// platform. It reads the records at once, long before this run can post a
/// status message of its own (a turn must run `after` first), so it only
/// ever finds those a stopped pincer left.
pub fn spawn_clean_up<P: StatusPort, R: StatusRecords>(port: Arc<P>, records: R, platform: Platform) {
    tokio::spawn(async move {
        match clean_up_left_behind(&*port, &records, platform).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(%platform, n, "status messages a stopped pincer left were marked interrupted"),
            Err(e) => tracing::warn!(%platform, %e, "cannot clean up the status messages a stopped pincer left"),
        }
    });
}

#[cfg(test)]
mod tests;
