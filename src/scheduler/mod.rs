//! Scheduled prompts: an actor that fires due schedules into the groups'
//! sessions (through its [`Submit`](submit::Submit) port), logs every run, and retries failed
//! ones with backoff.
//!
//! Schedules live in the store, and other processes change them too (`pincer
//! tasks ...` while `pincer run` is up). So the actor keeps no copy: each time it
//! wakes it re-reads the active schedules, fires the due ones, and sleeps until
//! the earliest next run, at most `scheduler.poll_interval`. In-process changes
//! (the agent's tools) poke it through its [`SchedulerHandle`] to wake it at
//! once. Time is read from the clock and waited for only through `tokio::time`;
//! when a schedule runs next is the pure [`Trigger::next_after`](crate::domain::schedule::Trigger::next_after).

mod deps;
pub mod limits;
pub mod manage;
mod outcome;
mod run;
pub mod submit;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::domain::schedule::{Schedule, ScheduleId};
use crate::domain::GroupName;
pub use deps::SchedulerDeps;
use run::{RunDone, RunEnd};

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

/// How many finished runs may wait for the actor.
const DONE_QUEUE: usize = 64;

/// Starts the scheduler actor on the deps' tracker.
pub fn spawn(inbox: SchedulerInbox, deps: SchedulerDeps) {
    let (done_tx, done_rx) = mpsc::channel(DONE_QUEUE);
    let deps = Arc::new(deps);
    let actor = Scheduler {
        deps: deps.clone(),
        inbox: inbox.0,
        running: HashSet::new(),
        told_budget: HashMap::new(),
        done_tx,
        done_rx,
    };
    deps.tracker.spawn(actor.run());
}

struct Scheduler {
    deps: Arc<SchedulerDeps>,
    inbox: mpsc::Receiver<()>,
    /// Schedules with a run in flight: never fired twice at once.
    running: HashSet<ScheduleId>,
    /// Groups whose due runs wait for their budget, and the end of the
    /// period their chat was told about (told once per period).
    told_budget: HashMap<GroupName, i64>,
    done_tx: mpsc::Sender<RunDone>,
    done_rx: mpsc::Receiver<RunDone>,
}

impl Scheduler {
    async fn run(mut self) {
        tracing::info!(poll = ?self.deps.config.poll_interval, "scheduler started");
        // What a stopped pincer left running was recovered before this started
        // (`store/recovery.rs`), so none of this scheduler's runs is taken for a leftover.
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
        let schedules = match self.deps.schedules.active_schedules().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(%e, "cannot read the schedules; trying again at the next poll");
                return poll;
            }
        };
        let now = Utc::now();
        let mut wake = poll;
        let mut waiting = HashSet::new();
        for s in schedules {
            // On a cluster node, the group's owner fires it (and claims it first).
            if self.running.contains(&s.id) || !self.deps.leases.holds_group(&s.group) {
                continue;
            }
            if s.is_due(now) {
                // A run waits while its group's budget is reached: it stays
                // due, and fires at the first look after the budget opens.
                if let Some(opens) = self.budget_closed(&s).await {
                    waiting.insert(s.group.clone());
                    wake = wake.min(instant_at(opens, now));
                    continue;
                }
                self.fire(s, now).await;
            } else if let Some(at) = s.next_run {
                wake = wake.min(instant_at(at, now));
            }
        }
        self.told_budget.retain(|group, _| waiting.contains(group));
        wake
    }

    /// When `s`'s group may run again, if its budget is reached now; its
    /// chat is told once per period that its scheduled runs wait.
    async fn budget_closed(&mut self, s: &Schedule) -> Option<DateTime<Utc>> {
        let deps = &self.deps;
        let reached = match deps.groups.group(s.group.as_str()).await {
            Ok(group) => {
                let budget = group.settings.budget.over(deps.live.budget());
                deps.budgets.budget_reached(&s.group, &budget, std::time::SystemTime::now(), deps.zone).await
            }
            Err(e) => Err(e),
        };
        let reached = match reached {
            Ok(reached) => reached?,
            Err(e) => {
                // The store that cannot read the budget cannot log the run either: that is reported there.
                tracing::warn!(schedule = %s.id, group = %s.group, %e, "cannot read the group's budget; running as due");
                return None;
            }
        };
        let until_us = reached.until_us();
        // A second past the turn of the period, so the next look is inside the new one.
        let opens = DateTime::from_timestamp_micros(until_us)? + chrono::Duration::seconds(1);
        if self.told_budget.insert(s.group.clone(), until_us) != Some(until_us) {
            let at = opens.with_timezone(&deps.zone).format("%Y-%m-%d %H:%M");
            // Once per group and period, so it names the first task found due.
            let notice = format!(
                "⏸ This group's scheduled tasks wait while its budget is reached (task #{} is due). They run at \
                 {at} ({}) when the budget opens again, or as soon as an admin raises it (/budget).",
                s.id, deps.zone
            );
            tracing::info!(schedule = %s.id, group = %s.group, ?reached, "a scheduled run waits for its group's budget");
            deps.outbox.notice(&s.group, &notice).await;
        }
        Some(opens)
    }

    async fn fire(&mut self, s: Schedule, now: DateTime<Utc>) {
        // The next run counts from now, so runs missed while pincer was down
        // are made up once, not one by one; and never sooner than the minimum.
        let next = limits::next_run(&s.trigger, now, self.deps.config.min_interval);
        let run = match self.deps.schedules.fire_schedule(s.id, &s.group, now, next).await {
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
            RunEnd::Ok => self.deps.schedules.schedule_succeeded(done.id, &done.group).await,
            RunEnd::Failed(why) => self.failed(done.id, &why).await,
            RunEnd::Stopped => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(schedule = %done.id, %e, "cannot update a schedule after its run");
        }
    }

    /// A failed run is retried with backoff ([`outcome::after_failure`]);
    /// the chat is told once per streak of failures, at its first.
    async fn failed(&self, id: ScheduleId, why: &str) -> Result<(), crate::store::StoreError> {
        let (s, after) = outcome::record_failure(&self.deps.schedules, &self.deps.config, id, why, Utc::now()).await?;
        tracing::warn!(schedule = %id, group = %s.group, in_a_row = s.failures.saturating_add(1), "a scheduled run failed");
        if let Some(notice) = &after.notice {
            self.deps.outbox.notice(&s.group, notice).await;
        }
        Ok(())
    }
}

/// The monotonic instant of wall-clock time `at`.
fn instant_at(at: DateTime<Utc>, now: DateTime<Utc>) -> Instant {
    Instant::now() + (at - now).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests;
