//! What the current process owes and runs, decided without I/O: the messages
//! written and not yet answered ([`Pending`]), whether a turn runs, the
//! background tasks running in it, and the short window in which a follow-up
//! turn for a finished task is expected.
//!
//! Invariants: the session is idle only when nothing is pending, no turn
//! runs, no task runs and no follow-up is expected (for at most
//! [`FOLLOW_UP_WINDOW`]); what belonged to a process goes with it, but its
//! pending messages stay for the next one.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::pending::Pending;
use crate::claude::protocol::TaskEvent;

/// How long a follow-up turn is expected after a background task ends. It
/// normally starts within milliseconds; the bound keeps a CLI that never starts
/// one from holding the session busy forever.
pub(super) const FOLLOW_UP_WINDOW: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub(super) struct Turn {
    /// Messages written (or about to be) that no result answered yet.
    pub(super) pending: Pending,
    /// Between a turn's `init` and its `result`.
    in_turn: bool,
    /// Tasks running in the current process.
    tasks: HashSet<String>,
    /// A background task just ended, so the CLI is about to start a follow-up
    /// turn for it; until then (or this deadline) the session is not idle.
    follow_up_until: Option<Instant>,
    /// Results read so far (a hung turn's interrupt waits for the next one).
    results_read: u64,
}

impl Turn {
    /// Work that keeps the session from being idle, the follow-up expectation aside.
    pub(super) fn working(&self) -> bool {
        !self.pending.is_empty() || self.in_turn || !self.tasks.is_empty()
    }

    /// A result is owed: a message waits for one, or a turn runs.
    pub(super) fn awaiting_result(&self) -> bool {
        self.in_turn || !self.pending.is_empty()
    }

    /// In a turn, or a follow-up turn is about to start.
    pub(super) fn in_turn(&self, now: Instant) -> bool {
        self.in_turn || self.follow_up_until.is_some_and(|until| now < until)
    }

    pub(super) fn running_tasks(&self) -> usize {
        self.tasks.len()
    }

    pub(super) fn results_read(&self) -> u64 {
        self.results_read
    }

    /// When an idle process may close: `idle_at` (its idle timeout, or now
    /// when a group waits for a slot), but not while work runs, nor before a
    /// follow-up turn had its chance to start.
    pub(super) fn idle_deadline(&self, idle_at: Instant) -> Option<Instant> {
        if self.working() {
            return None;
        }
        Some(self.follow_up_until.map_or(idle_at, |until| idle_at.max(until)))
    }

    /// A turn started (`system/init`).
    pub(super) fn started(&mut self) {
        self.in_turn = true;
    }

    /// A result was read: the turn is over (its messages are settled by the caller).
    pub(super) fn result_read(&mut self) {
        self.results_read += 1;
    }

    /// The result is handled: no turn runs, no follow-up is expected.
    pub(super) fn ended(&mut self) {
        self.in_turn = false;
        self.follow_up_until = None;
    }

    /// Tracks which tasks run. With stdin open the CLI starts a follow-up turn
    /// for a task that completed or failed (not for one it stopped): between
    /// that frame and the turn's `init`, the session must not look idle.
    pub(super) fn on_task(&mut self, event: &TaskEvent, now: Instant) {
        match event {
            TaskEvent::Started(t) => {
                self.tasks.insert(t.task_id.clone());
            }
            TaskEvent::Notification(t) => self.task_status(&t.task_id, t.status.as_ref(), now),
            TaskEvent::Updated(t) => self.task_status(&t.task_id, t.status.as_ref(), now),
            TaskEvent::BackgroundChanged(running) => {
                self.tasks = running.iter().map(|t| t.task_id.clone()).collect();
            }
            TaskEvent::Progress(_) => {}
        }
    }

    fn task_status(&mut self, id: &str, status: Option<&crate::claude::protocol::TaskStatus>, now: Instant) {
        let Some(status) = status.filter(|s| s.is_terminal()) else {
            return;
        };
        let was_running = self.tasks.remove(id);
        if was_running && status.starts_follow_up() {
            self.follow_up_until = Some(now + FOLLOW_UP_WINDOW);
        }
    }

    /// What belonged to a process that is gone: its turn and its tasks.
    /// Returns whether tasks were running. Pending messages are kept.
    pub(super) fn forget_process(&mut self) -> bool {
        let tasks_lost = !self.tasks.is_empty();
        self.tasks.clear();
        self.ended();
        tasks_lost
    }

    pub(super) fn tasks_running(&self) -> bool {
        !self.tasks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claude::protocol::{BackgroundTask, TaskNotification, TaskStarted, TaskStatus, TaskUpdated};
    use crate::domain::InboundId;
    use crate::session::rights::Voice;

    fn started(id: &str) -> TaskEvent {
        TaskEvent::Started(TaskStarted { task_id: id.into(), ..TaskStarted::default() })
    }

    fn ended(id: &str, status: TaskStatus) -> TaskEvent {
        TaskEvent::Notification(TaskNotification { task_id: id.into(), status: Some(status), ..Default::default() })
    }

    #[test]
    fn a_completed_task_keeps_the_session_busy_until_the_follow_up_or_the_window_ends() {
        let (mut turn, now) = (Turn::default(), Instant::now());
        turn.on_task(&started("b1"), now);
        assert!(turn.working() && turn.idle_deadline(now).is_none());
        turn.on_task(&ended("b1", TaskStatus::Completed), now);
        assert!(!turn.working());
        assert!(turn.in_turn(now), "a follow-up turn is expected");
        assert_eq!(turn.idle_deadline(now), Some(now + FOLLOW_UP_WINDOW));
        assert!(!turn.in_turn(now + FOLLOW_UP_WINDOW), "not forever");
        turn.started();
        turn.result_read();
        turn.ended();
        assert_eq!(turn.idle_deadline(now), Some(now), "the follow-up came and ended");
    }

    #[test]
    fn a_stopped_or_unknown_task_expects_no_follow_up() {
        let (mut turn, now) = (Turn::default(), Instant::now());
        turn.on_task(&started("b1"), now);
        turn.on_task(&started("b2"), now);
        turn.on_task(&ended("b1", TaskStatus::Stopped), now);
        turn.on_task(&ended("b2", TaskStatus::Other("paused".into())), now);
        assert_eq!(turn.running_tasks(), 1, "a status that is not an end keeps the task");
        let update = TaskUpdated { task_id: "b2".into(), status: Some(TaskStatus::Killed), end_time_ms: None };
        turn.on_task(&TaskEvent::Updated(update), now);
        assert!(!turn.in_turn(now) && turn.idle_deadline(now) == Some(now));
        turn.on_task(&ended("never-started", TaskStatus::Completed), now);
        assert!(!turn.in_turn(now), "only a task that ran here is followed up");
    }

    #[test]
    fn the_background_list_replaces_the_running_set() {
        let (mut turn, now) = (Turn::default(), Instant::now());
        turn.on_task(&started("gone"), now);
        let listed = BackgroundTask { task_id: "b9".into(), ..BackgroundTask::default() };
        turn.on_task(&TaskEvent::BackgroundChanged(vec![listed]), now);
        assert_eq!(turn.running_tasks(), 1);
        turn.on_task(&TaskEvent::BackgroundChanged(Vec::new()), now);
        assert!(!turn.tasks_running());
    }

    #[test]
    fn a_gone_process_takes_its_turn_and_tasks_but_leaves_the_messages() {
        let (mut turn, now) = (Turn::default(), Instant::now());
        turn.pending.push(InboundId(1), "hi".into(), std::time::Instant::now(), Voice::Admin);
        turn.started();
        turn.on_task(&started("b1"), now);
        assert!(turn.forget_process(), "tasks were lost");
        assert!(!turn.in_turn(now) && !turn.tasks_running());
        assert!(turn.awaiting_result(), "the message still waits, for the next process");
    }
}
