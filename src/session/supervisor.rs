//! Runs a group's session actor and starts it again when it ends while pincer
//! is not stopping (a panic, or a loop that returned unexpectedly): the end is
//! logged and recorded with why, and the new actor takes the same command
//! channel and status sender, so every `SessionHandle` keeps working.
//!
//! Invariants: an actor ends for good only when pincer stops or nobody can
//! send it anything (every handle dropped); restarts back off (doubling from
//! [`FIRST_BACKOFF`], capped at [`MAX_BACKOFF`]) and the backoff starts over
//! after an actor ran [`HEALTHY`] without ending.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::actor::SessionActor;
use super::intake::Intake;
use super::{Command, SessionDeps, SessionStatus};
use crate::domain::activity::Activity;
use crate::retry::RetryPolicy;
use crate::store::GroupRecord;

/// The first restart of an ended actor waits this long; each in a row doubles it.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before restarting an actor.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// An actor that ran this long before ending was healthy: the backoff starts over.
pub(super) const HEALTHY: Duration = Duration::from_secs(10 * 60);

/// Actor restarts follow the shared retry rule, without jitter (one group's own).
const RESTART_RETRY: RetryPolicy = RetryPolicy::new(FIRST_BACKOFF, MAX_BACKOFF).without_jitter();

/// How long to wait before the `ends`-th restart in a row (counted from 1).
pub(super) fn restart_backoff(ends: u32) -> Duration {
    RESTART_RETRY.pause(ends, None)
}

/// Ends in a row, forgiven after a healthy run.
#[derive(Debug, Default)]
pub(super) struct Restarts {
    ends: u32,
}

impl Restarts {
    /// An actor ended after running `ran`: how long to wait before the next.
    pub(super) fn ended(&mut self, ran: Duration) -> Duration {
        if ran >= HEALTHY {
            self.ends = 0;
        }
        self.ends = self.ends.saturating_add(1);
        restart_backoff(self.ends)
    }
}

/// What one group's actors share across restarts.
pub(super) struct Supervised {
    pub(super) group: GroupRecord,
    pub(super) deps: Arc<SessionDeps>,
    pub(super) commands: async_channel::Receiver<Command>,
    pub(super) status: Arc<watch::Sender<SessionStatus>>,
    pub(super) activity: Arc<watch::Sender<Activity>>,
    pub(super) queued: Arc<AtomicUsize>,
    /// A throwaway session: it starts fresh every time and stores no session id.
    pub(super) isolated: bool,
    /// The group's queue and its watchers, which outlive any one actor.
    pub(super) intake: Arc<Intake>,
}

impl Supervised {
    fn actor(&self, group: &GroupRecord) -> SessionActor {
        let actor = SessionActor::new(
            group,
            self.deps.clone(),
            self.commands.clone(),
            self.status.clone(),
            self.activity.clone(),
            self.queued.clone(),
            self.intake.clone(),
        );
        if self.isolated {
            actor.isolated()
        } else {
            actor
        }
    }

    /// Runs actors until pincer stops or every handle is gone.
    pub(super) async fn run(self) {
        let mut restarts = Restarts::default();
        let mut group = self.group.clone();
        loop {
            let started = Instant::now();
            let ended = AssertUnwindSafe(self.actor(&group).run()).catch_unwind().await;
            // Stopping, nobody left to send to it, or retired for lack of work
            // (the router starts a fresh one when the group needs it).
            if self.deps.shutdown.is_cancelled() || self.commands.is_closed() || self.intake.is_retired() {
                return;
            }
            let why = match ended {
                Ok(()) => "its loop returned".to_owned(),
                Err(panic) => format!("it panicked: {}", panic_message(panic.as_ref())),
            };
            let backoff = restarts.ended(started.elapsed());
            tracing::error!(group = %group.name, %why, ?backoff, "the session actor ended unexpectedly; starting it again");
            self.record_restart(&group, &why).await;
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.deps.shutdown.cancelled() => return,
            }
            if !self.isolated {
                group = self.requeue_and_reload(group).await;
            }
        }
    }

    /// The ended actor's status, activity, metric and stored event.
    async fn record_restart(&self, group: &GroupRecord, why: &str) {
        // Nothing runs for the group until the new actor publishes its own.
        self.status.send_replace(SessionStatus { session_id: group.session_id.clone(), ..SessionStatus::default() });
        // Its process went with it, and everything that ran there.
        self.activity.send_if_modified(|activity| super::activity::process_ended(activity, Instant::now()));
        let kind = if self.isolated { "isolated_actor_restarted" } else { "actor_restarted" };
        crate::metrics::counters::counters().session_event(group.name.as_str(), kind);
        if let Err(e) =
            self.deps.journal.record_session_event(&group.name, kind, group.session_id.as_deref(), Some(why)).await
        {
            tracing::error!(group = %group.name, %e, "cannot store a session event");
        }
    }

    /// What the ended actor had written goes back in the queue, where the new
    /// actor takes it first (scheduled prompts are not among them: an
    /// isolated run's look the same in the store; a lost one's run times out
    /// and is retried); and the group as the ended actor left it stored.
    async fn requeue_and_reload(&self, group: GroupRecord) -> GroupRecord {
        match self.deps.queue.requeue_sent(&group.name).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(group = %group.name, messages = n, "queued again what the ended actor had written"),
            Err(e) => {
                tracing::error!(group = %group.name, %e, "cannot queue again what the ended actor had written; the next start does")
            }
        }
        // The session id and settings the ended actor stored since.
        match self.deps.groups.group(group.name.as_str()).await {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(group = %group.name, %e, "cannot re-read the group; restarting with what was known");
                group
            }
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(text) = panic.downcast_ref::<&str>() {
        text
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_doubling_up_to_a_cap() {
        let waits: Vec<u64> = (1..=8).map(|n| restart_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(restart_backoff(u32::MAX), MAX_BACKOFF, "no overflow");
    }

    #[test]
    fn a_healthy_run_forgives_earlier_ends() {
        let mut restarts = Restarts::default();
        let quick = Duration::from_secs(1);
        assert_eq!([restarts.ended(quick), restarts.ended(quick)], [FIRST_BACKOFF, FIRST_BACKOFF * 2]);
        assert_eq!(restarts.ended(HEALTHY), FIRST_BACKOFF);
    }

    #[test]
    fn the_panic_message_is_read_from_either_payload() {
        assert_eq!(panic_message(&"boom"), "boom");
        assert_eq!(panic_message(&String::from("bang")), "bang");
        assert_eq!(panic_message(&42), "(no message)");
    }
}
