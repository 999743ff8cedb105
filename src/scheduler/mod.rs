//! Scheduled prompts: an actor that fires due schedules into the router, logs
//! every run, and retries failed ones with backoff.
//!
//! Schedules live in the store, and other processes change them too (`pincer
//! tasks ...` while `pincer run` is up). So the actor keeps no copy: each time it
//! wakes it re-reads the active schedules, fires the due ones, and sleeps until
//! the earliest next run, at most `scheduler.poll_interval`. In-process changes
//! (the agent's tools) poke it through its [`SchedulerHandle`] to wake it at
//! once. Time is read from the clock and waited for only through `tokio::time`;
//! when a schedule runs next is the pure [`schedule::Trigger::next_after`].

pub mod limits;
pub mod manage;
mod run;
pub mod schedule;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SchedulerConfig;
use crate::outbox::Outbox;
use crate::router::Router;
use crate::store::Store;
use run::{RunDone, RunEnd};
use schedule::{Schedule, ScheduleId, ScheduleStatus, Trigger};

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
/// the handle before the router, which the scheduler needs, exists).
pub fn channel() -> (SchedulerHandle, SchedulerInbox) {
    let (tx, rx) = mpsc::channel(1);
    (SchedulerHandle { poke: tx }, SchedulerInbox(rx))
}

/// What the scheduler and its runs need.
pub struct SchedulerDeps {
    pub store: Store,
    pub router: Router,
    /// Where notices about failed runs go.
    pub outbox: Outbox,
    pub config: SchedulerConfig,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
}

/// How many finished runs may wait for the actor.
const DONE_QUEUE: usize = 64;
/// Retries never wait longer than this.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

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
        if let Err(e) = self.deps.store.schedule_started(s.id, now, next).await {
            tracing::error!(schedule = %s.id, %e, "cannot mark a schedule as started; not running it now");
            return;
        }
        tracing::info!(schedule = %s.id, group = %s.group, context = s.context.as_str(), "running a scheduled prompt");
        self.running.insert(s.id);
        let deps = self.deps.clone();
        let done = self.done_tx.clone();
        self.deps.tracker.spawn(async move {
            let finished = run::execute(&deps, s).await;
            // The actor is gone only when pincer stops; the run said so in its log.
            let _ = done.send(finished).await;
        });
    }

    async fn on_done(&mut self, done: RunDone) {
        self.running.remove(&done.id);
        let s = match self.deps.store.schedule(done.id).await {
            Ok(s) => s,
            Err(e) => return tracing::error!(schedule = %done.id, %e, "cannot read a schedule after its run"),
        };
        let result = match done.end {
            RunEnd::Ok => self.succeeded(&s).await,
            RunEnd::Failed(why) => self.failed(&s, &why).await,
            RunEnd::Stopped => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(schedule = %s.id, %e, "cannot update a schedule after its run");
        }
    }

    async fn succeeded(&self, s: &Schedule) -> Result<(), crate::store::StoreError> {
        self.deps.store.set_schedule_failures(s.id, 0).await?;
        if matches!(s.trigger, Trigger::Once(_)) && s.status == ScheduleStatus::Active {
            self.deps.store.set_schedule_state(s.id, ScheduleStatus::Completed, None).await?;
        }
        Ok(())
    }

    /// A failed run is retried with backoff, and the chat is told each time;
    /// after `max_retries` the schedule waits for its next regular run.
    async fn failed(&self, s: &Schedule, why: &str) -> Result<(), crate::store::StoreError> {
        let store = &self.deps.store;
        let failures = s.failures + 1;
        let why: String = why.chars().take(300).collect();
        let config = &self.deps.config;
        let text = if s.status != ScheduleStatus::Active {
            store.set_schedule_failures(s.id, 0).await?;
            format!("Scheduled task #{} failed ({why}). It is {} now, so it is not retried.", s.id, s.status.as_str())
        } else if failures <= config.max_retries {
            let delay = backoff(config.retry_delay, failures);
            let retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            // The loop sleeps until the earliest next run, so the retry needs no timer of its own.
            let next = s.next_run.map_or(retry_at, |regular| regular.min(retry_at));
            store.set_schedule_failures(s.id, failures).await?;
            store.set_schedule_state(s.id, ScheduleStatus::Active, Some(next)).await?;
            format!(
                "Scheduled task #{} failed ({why}). Retrying in {} (retry {failures} of {}).",
                s.id,
                humantime::format_duration(delay),
                config.max_retries
            )
        } else {
            store.set_schedule_failures(s.id, 0).await?;
            let then = if matches!(s.trigger, Trigger::Once(_)) {
                store.set_schedule_state(s.id, ScheduleStatus::Completed, None).await?;
                "It will not run again.".to_owned()
            } else {
                s.next_run.map_or_else(String::new, |at| format!("Its next regular run is at {}.", at.to_rfc3339()))
            };
            format!(
                "Scheduled task #{} failed {failures} times in a row ({why}); pincer gave up on this run. {then} \
                 `pincer tasks runs {}` shows the log.",
                s.id, s.id
            )
        };
        tracing::warn!(schedule = %s.id, group = %s.group, failures, "a scheduled run failed");
        self.deps.outbox.notice(&s.group, &text).await;
        Ok(())
    }
}

/// Runs a killed pincer left unfinished are logged as failed, and their
/// schedules (if still active) run again now: a run is never lost silently.
async fn recover(store: &Store, now: DateTime<Utc>) -> Result<(), crate::store::StoreError> {
    for id in store.abandon_unfinished_runs().await? {
        let s = store.schedule(id).await?;
        tracing::warn!(schedule = %id, group = %s.group, "a run was cut off when pincer last stopped; running it again");
        if s.status == ScheduleStatus::Active {
            store.set_schedule_state(id, ScheduleStatus::Active, Some(now)).await?;
        }
    }
    Ok(())
}

/// `delay`, doubled for every further failure in a row, at most an hour.
fn backoff(delay: Duration, failures: u32) -> Duration {
    delay.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1))).min(MAX_BACKOFF)
}

/// The monotonic instant of wall-clock time `at`.
fn instant_at(at: DateTime<Utc>, now: DateTime<Utc>) -> Instant {
    Instant::now() + (at - now).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_cut_off_by_a_crash_is_logged_as_failed_and_due_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("pincer.db")).await.unwrap();
        let group: crate::domain::GroupName = "g".parse().unwrap();
        store.add_group(&group, &crate::store::GroupSettings::default()).await.unwrap();
        let at = Utc::now() + chrono::Duration::hours(1);
        let new = crate::store::NewSchedule {
            group,
            prompt: "p".into(),
            trigger: Trigger::Once(at),
            context: schedule::ContextMode::Group,
        };
        let s = store.add_schedule(&new, Some(at)).await.unwrap();
        // As `fire` leaves a once while it runs: started, nothing next.
        store.schedule_started(s.id, Utc::now(), None).await.unwrap();
        store.start_run(&s, Utc::now()).await.unwrap();

        let now = Utc::now();
        recover(&store, now).await.unwrap();
        let runs = store.runs(s.id).await.unwrap();
        assert_eq!(runs[0].outcome, "error");
        assert!(runs[0].text.as_deref().unwrap().contains("killed or crashed"));
        let s = store.schedule(s.id).await.unwrap();
        assert!(s.is_due(now), "{s:?}");
        recover(&store, now).await.unwrap();
        assert_eq!(store.runs(s.id).await.unwrap().len(), 1, "recovered once");
    }

    #[test]
    fn retries_back_off_and_stay_bounded() {
        let base = Duration::from_secs(60);
        assert_eq!(backoff(base, 1), Duration::from_secs(60));
        assert_eq!(backoff(base, 3), Duration::from_secs(240));
        assert_eq!(backoff(base, 40), MAX_BACKOFF);
    }
}
