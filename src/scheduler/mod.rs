//! Scheduled prompts: an actor that fires due schedules into the groups'
//! sessions (through its [`Submit`] port), logs every run, and retries failed
//! ones with backoff.
//!
//! Schedules live in the store, and other processes change them too (`pincer
//! tasks ...` while `pincer run` is up). So the actor keeps no copy: each time it
//! wakes it re-reads the active schedules, fires the due ones, and sleeps until
//! the earliest next run, at most `scheduler.poll_interval`. In-process changes
//! (the agent's tools) poke it through its [`SchedulerHandle`] to wake it at
//! once. Time is read from the clock and waited for only through `tokio::time`;
//! when a schedule runs next is the pure [`Trigger::next_after`](crate::domain::schedule::Trigger::next_after).

pub mod limits;
pub mod manage;
mod outcome;
mod run;
pub mod submit;

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SchedulerConfig;
use crate::domain::schedule::{Schedule, ScheduleId};
use crate::outbox::Outbox;
use crate::store::Store;
use run::{RunDone, RunEnd};
use submit::Submit;

/// Pokes the scheduler: "schedules changed, look again".
#[derive(Clone, Debug)]
pub struct SchedulerHandle {
    poke: mpsc::Sender<()>,
}

impl SchedulerHandle {
    /// Never blocks: one poke waiting is as good as many.
    pub fn poke(&self) {
        let _ = self.poke.try_send(());
    }
}

/// The scheduler's end of the poke channel, until the scheduler is started.
pub struct SchedulerInbox(mpsc::Receiver<()>);

/// A handle and the inbox of a scheduler that is started later (the tools need
/// the handle before the router, which the scheduler submits to, exists).
pub fn channel() -> (SchedulerHandle, SchedulerInbox) {
    let (tx, rx) = mpsc::channel(1);
    (SchedulerHandle { poke: tx }, SchedulerInbox(rx))
}

/// What the scheduler and its runs need.
pub struct SchedulerDeps {
    pub store: Store,
    /// Where runs hand their prompts: the router, in pincer.
    pub submit: Arc<dyn Submit>,
    /// Where notices about failed runs go.
    pub outbox: Outbox,
    pub config: SchedulerConfig,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
}

/// How many finished runs may wait for the actor.
const DONE_QUEUE: usize = 64;

/// Starts the scheduler actor on the deps' tracker.
pub fn spawn(inbox: SchedulerInbox, deps: SchedulerDeps) {
    let (done_tx, done_rx) = mpsc::channel(DONE_QUEUE);
    let deps = Arc::new(deps);
    let actor = Scheduler { deps: deps.clone(), inbox: inbox.0, running: HashSet::new(), done_tx, done_rx };
    deps.tracker.spawn(actor.run());
}

struct Scheduler {
    deps: Arc<SchedulerDeps>,
    inbox: mpsc::Receiver<()>,
    /// Schedules with a run in flight: never fired twice at once.
    running: HashSet<ScheduleId>,
    done_tx: mpsc::Sender<RunDone>,
    done_rx: mpsc::Receiver<RunDone>,
}

impl Scheduler {
    async fn run(mut self) {
        tracing::info!(poll = ?self.deps.config.poll_interval, "scheduler started");
        if let Err(e) = recover(&self.deps.store, Utc::now()).await {
            tracing::error!(%e, "cannot check for runs a previous pincer left unfinished");
        }
        loop {
            let wake = self.fire_due().await;
            tokio::select! {
                biased;
                _ = self.deps.shutdown.cancelled() => break,
                Some(done) = self.done_rx.recv() => self.on_done(done).await,
                Some(()) = self.inbox.recv() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Fires every due schedule and returns when to look again.
    async fn fire_due(&mut self) -> Instant {
        let poll = Instant::now() + self.deps.config.poll_interval;
        let schedules = match self.deps.store.active_schedules().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(%e, "cannot read the schedules; trying again at the next poll");
                return poll;
            }
        };
        let now = Utc::now();
        let mut wake = poll;
        for s in schedules {
            if self.running.contains(&s.id) {
                continue;
            }
            if s.is_due(now) {
                self.fire(s, now).await;
            } else if let Some(at) = s.next_run {
                wake = wake.min(instant_at(at, now));
            }
        }
        wake
    }

    async fn fire(&mut self, s: Schedule, now: DateTime<Utc>) {
        // The next run counts from now, so runs missed while pincer was down
        // are made up once, not one by one; and never sooner than the minimum.
        let next = limits::next_run(&s.trigger, now, self.deps.config.min_interval);
        let run = match self.deps.store.fire_schedule(s.id, now, next).await {
            Ok(Some(run)) => run,
            Ok(None) => {
                return tracing::info!(schedule = %s.id, "a schedule changed as it came due; not running it now")
            }
            Err(e) => {
                return tracing::error!(schedule = %s.id, %e, "cannot mark a schedule as started; not running it now")
            }
        };
        tracing::info!(schedule = %s.id, group = %s.group, context = s.context.as_str(), "running a scheduled prompt");
        self.running.insert(s.id);
        let deps = self.deps.clone();
        let done = self.done_tx.clone();
        self.deps.tracker.spawn(async move {
            let finished = run::execute(&deps, s, run).await;
            // The actor is gone only when pincer stops; the run said so in its log.
            let _ = done.send(finished).await;
        });
    }

    async fn on_done(&mut self, done: RunDone) {
        self.running.remove(&done.id);
        let result = match done.end {
            RunEnd::Ok => self.deps.store.schedule_succeeded(done.id).await,
            RunEnd::Failed(why) => self.failed(done.id, &why).await,
            RunEnd::Stopped => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(schedule = %done.id, %e, "cannot update a schedule after its run");
        }
    }

    /// A failed run is retried with backoff ([`outcome::after_failure`]), and
    /// the chat is told each time.
    async fn failed(&self, id: ScheduleId, why: &str) -> Result<(), crate::store::StoreError> {
        let (s, after) = outcome::record_failure(&self.deps.store, &self.deps.config, id, why, Utc::now()).await?;
        tracing::warn!(schedule = %id, group = %s.group, in_a_row = s.failures.saturating_add(1), "a scheduled run failed");
        self.deps.outbox.notice(&s.group, &after.notice).await;
        Ok(())
    }
}

/// Runs a killed pincer left unfinished are logged as failed, and their
/// schedules (if still active) run again now: a run is never lost silently.
async fn recover(store: &Store, now: DateTime<Utc>) -> Result<(), crate::store::StoreError> {
    for id in store.abandon_unfinished_runs(now).await? {
        tracing::warn!(schedule = %id, "a run was cut off when pincer last stopped; running it again if still active");
    }
    Ok(())
}

/// The monotonic instant of wall-clock time `at`.
fn instant_at(at: DateTime<Utc>, now: DateTime<Utc>) -> Instant {
    Instant::now() + (at - now).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests;
