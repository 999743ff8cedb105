//! A session's process lifecycle, decided without I/O: which CLI session the
//! next process resumes (or that it starts fresh), which process is current
//! (its generation), and what an exit means (a quiet end, a restart after a
//! backoff, or giving up after `max_restarts` crashes in a row).
//!
//! A process that cannot start at all is [`StartHold`]'s: the messages that
//! needed it wait (the chat told once), and the start is tried again later.
//!
//! Invariants: the generation grows by one per started process, so anything
//! addressed to an earlier process is recognised as stale; crashes count only
//! while messages wait, and reset with every good result; a restart never
//! waits longer than [`MAX_CRASH_BACKOFF`]; a failed start is told to the
//! chat once until a start succeeds or it fails for another reason.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::pending::PendingMessage;
use crate::retry::{Backoff, RetryPolicy};

/// The first restart after a crash waits this long; each crash in a row doubles it.
pub(super) const FIRST_CRASH_BACKOFF: Duration = Duration::from_millis(250);

/// The longest wait before a restart, however many crashes came in a row
/// (`max_restarts` has no upper bound).
pub(super) const MAX_CRASH_BACKOFF: Duration = Duration::from_secs(60);

/// Crash restarts follow the shared retry rule, without jitter: one group's
/// restarts are its own, and the chat and the README state these times.
const CRASH_RETRY: RetryPolicy = RetryPolicy::new(FIRST_CRASH_BACKOFF, MAX_CRASH_BACKOFF).without_jitter();

/// How long to wait before restarting after the `crashes`-th crash in a row
/// (counted from 1): a little more on each, never more than [`MAX_CRASH_BACKOFF`].
pub(super) fn crash_backoff(crashes: u32) -> Duration {
    CRASH_RETRY.pause(crashes, None)
}

/// What to do after the process's stdout closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterExit {
    /// Pincer is stopping: nothing.
    Stopping,
    /// The stored session was gone: the chat hears of the fresh start, and a
    /// process starts at once when messages wait (`restart`).
    Fresh { restart: bool },
    /// Nothing waited for an answer: only recorded (and told when running
    /// background work was lost with it).
    Ended { tasks_lost: bool },
    /// A crash with messages waiting: restart after `backoff`.
    Restart { backoff: Duration },
    /// The `crashes`-th crash in a row, past `max_restarts`: give up on the messages.
    GiveUp { crashes: u32 },
}

/// A start that failed is tried again after this, then after twice as
/// long each time, never more than [`MAX_START_BACKOFF`] apart.
pub(super) const FIRST_START_BACKOFF: Duration = Duration::from_secs(5);
pub(super) const MAX_START_BACKOFF: Duration = Duration::from_secs(5 * 60);

/// Without jitter: the chat is told when the next try comes.
const START_RETRY: RetryPolicy = RetryPolicy::new(FIRST_START_BACKOFF, MAX_START_BACKOFF).without_jitter();

/// The messages waiting for a CLI that could not start, and when it is
/// tried again. While it holds, no start is tried and the group's queue is
/// not taken: later messages wait in the store.
#[derive(Debug)]
pub(super) struct StartHold {
    messages: Vec<PendingMessage>,
    backoff: Backoff,
    /// The next try, by the wall clock (for `/status`) and the monotonic one.
    retry: Option<(SystemTime, Instant)>,
    /// Why the last start failed, as the chat was told (until one succeeds).
    told: Option<String>,
}

impl Default for StartHold {
    fn default() -> Self {
        StartHold { messages: Vec::new(), backoff: Backoff::new(START_RETRY), retry: None, told: None }
    }
}

impl StartHold {
    /// A start failed, or is not tried yet: no process until the retry.
    pub(super) fn holding(&self) -> bool {
        self.retry.is_some()
    }

    /// When the next start is due (monotonic).
    pub(super) fn due(&self) -> Option<Instant> {
        self.retry.map(|(_, at)| at)
    }

    /// When the next start is tried, by the wall clock.
    pub(super) fn retry_at(&self) -> Option<SystemTime> {
        self.retry.map(|(at, _)| at)
    }

    /// More messages that need the process wait for it too.
    pub(super) fn wait(&mut self, messages: impl IntoIterator<Item = PendingMessage>) {
        self.messages.extend(messages);
    }

    /// A start failed for `reason`: `messages` wait with the others until
    /// the next try. Returns the pause before it when the chat must be told
    /// (the first failure, or one for another reason than the last).
    pub(super) fn failed(
        &mut self,
        messages: impl IntoIterator<Item = PendingMessage>,
        reason: &str,
        (now, mono_now): (SystemTime, Instant),
    ) -> Option<Duration> {
        self.wait(messages);
        let pause = self.backoff.failed(None);
        self.retry = Some((now + pause, mono_now + pause));
        let new = self.told.as_deref() != Some(reason);
        self.told = Some(reason.to_owned());
        new.then_some(pause)
    }

    /// The retry is due: the waiting messages, to be written to a new process.
    pub(super) fn take(&mut self) -> Vec<PendingMessage> {
        self.retry = None;
        std::mem::take(&mut self.messages)
    }

    /// A process started: the next failure starts over, and is told.
    pub(super) fn started(&mut self) {
        self.backoff.succeeded();
        self.told = None;
    }
}

#[derive(Debug, Default)]
pub(super) struct Lifecycle {
    /// The CLI session the next process resumes.
    session_id: Option<String>,
    /// The stored session could not be resumed: the next process starts fresh.
    start_fresh: bool,
    /// Processes started so far: the current one's generation.
    generation: u64,
    /// Crashes since the last good result.
    crashes: u32,
}

impl Lifecycle {
    pub(super) fn new(session_id: Option<String>) -> Lifecycle {
        Lifecycle { session_id, ..Lifecycle::default() }
    }

    pub(super) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// What the next process resumes: nothing after the stored session vanished.
    pub(super) fn resume(&self) -> Option<String> {
        if self.start_fresh {
            None
        } else {
            self.session_id.clone()
        }
    }

    /// A process started; returns its generation.
    pub(super) fn started(&mut self) -> u64 {
        self.start_fresh = false;
        self.generation += 1;
        self.generation
    }

    /// Adopts a session id (the CLI's, or none for `/new`); true when it changed.
    pub(super) fn adopt(&mut self, session_id: Option<String>) -> bool {
        let changed = session_id != self.session_id;
        self.session_id = session_id;
        changed
    }

    /// The CLI says the resumed session does not exist: forget it.
    pub(super) fn session_vanished(&mut self) {
        self.session_id = None;
        self.start_fresh = true;
    }

    /// A good result: the crash count starts over.
    pub(super) fn answered(&mut self) {
        self.crashes = 0;
    }

    /// Decides what a process's exit means. `waiting`: messages wait for an
    /// answer; `tasks_lost`: background work was running in it.
    pub(super) fn after_exit(
        &mut self,
        stopping: bool,
        waiting: bool,
        tasks_lost: bool,
        max_restarts: u32,
    ) -> AfterExit {
        if stopping {
            return AfterExit::Stopping;
        }
        if self.start_fresh {
            return AfterExit::Fresh { restart: waiting };
        }
        if !waiting {
            return AfterExit::Ended { tasks_lost };
        }
        self.crashes = self.crashes.saturating_add(1);
        if self.crashes > max_restarts {
            let crashes = self.crashes;
            self.crashes = 0;
            return AfterExit::GiveUp { crashes };
        }
        AfterExit::Restart { backoff: crash_backoff(self.crashes) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crash_backoff_doubles_from_a_quarter_second_up_to_its_cap() {
        let waits: Vec<Duration> = (1..=4).map(crash_backoff).collect();
        assert_eq!(waits, [250, 500, 1000, 2000].map(Duration::from_millis));
        assert_eq!(crash_backoff(9), MAX_CRASH_BACKOFF, "250 ms × 256 is past the cap");
    }

    #[test]
    fn any_number_of_crashes_in_a_row_gets_the_capped_backoff() {
        // `max_restarts` above 32 lets the count pass what 2^(n-1) fits in a u32.
        for crashes in [32, 33, 34, 1000, u32::MAX] {
            assert_eq!(crash_backoff(crashes), MAX_CRASH_BACKOFF, "after {crashes} crashes");
        }
        assert_eq!(crash_backoff(0), FIRST_CRASH_BACKOFF, "never called so, but no underflow either");
    }

    #[test]
    fn crashes_with_messages_waiting_restart_with_growing_backoff_then_give_up() {
        let mut life = Lifecycle::new(Some("s1".into()));
        let plans: Vec<AfterExit> = (0..4).map(|_| life.after_exit(false, true, false, 3)).collect();
        let ms = |n| AfterExit::Restart { backoff: Duration::from_millis(n) };
        assert_eq!(plans, [ms(250), ms(500), ms(1000), AfterExit::GiveUp { crashes: 4 }]);
        assert_eq!(life.after_exit(false, true, false, 3), ms(250), "giving up starts the count over");
    }

    #[test]
    fn a_good_result_resets_the_crash_count() {
        let mut life = Lifecycle::default();
        life.after_exit(false, true, false, 3);
        life.after_exit(false, true, false, 3);
        life.answered();
        assert_eq!(life.after_exit(false, true, false, 3), AfterExit::Restart { backoff: FIRST_CRASH_BACKOFF });
    }

    #[test]
    fn an_exit_without_waiting_messages_is_no_crash() {
        let mut life = Lifecycle::default();
        assert_eq!(life.after_exit(false, false, true, 0), AfterExit::Ended { tasks_lost: true });
        assert_eq!(life.after_exit(false, true, false, 1), AfterExit::Restart { backoff: FIRST_CRASH_BACKOFF });
        assert_eq!(life.after_exit(true, true, false, 1), AfterExit::Stopping, "stopping wins");
    }

    fn waiting(ids: &[i64]) -> Vec<PendingMessage> {
        let mut pending = crate::session::pending::Pending::default();
        for id in ids {
            let voice = crate::session::rights::Voice::Admin;
            pending.push(crate::domain::InboundId(*id), format!("m{id}"), std::time::Instant::now(), voice);
        }
        pending.answer()
    }

    #[test]
    fn a_failed_start_is_told_once_per_reason_and_tried_again_less_and_less_often() {
        let (mut hold, now, mono) = (StartHold::default(), SystemTime::now(), Instant::now());
        assert!(!hold.holding());
        assert_eq!(hold.failed(waiting(&[1]), "no bwrap", (now, mono)), Some(FIRST_START_BACKOFF), "told");
        assert!(hold.holding());
        assert_eq!((hold.due(), hold.retry_at()), (Some(mono + FIRST_START_BACKOFF), Some(now + FIRST_START_BACKOFF)));
        hold.wait(waiting(&[2, 3]));
        let ids: Vec<i64> = hold.take().iter().map(|m| m.id.0).collect();
        assert_eq!(ids, [1, 2, 3], "every waiting message, in order");
        assert!(!hold.holding() && hold.take().is_empty());

        assert_eq!(hold.failed(waiting(&[1]), "no bwrap", (now, mono)), None, "the same reason is not told again");
        assert_eq!(hold.due(), Some(mono + 2 * FIRST_START_BACKOFF), "twice as long");
        hold.take();
        assert!(hold.failed(waiting(&[1]), "no credential", (now, mono)).is_some(), "another reason is told");
        hold.take();
        for _ in 0..20 {
            hold.failed(Vec::new(), "no credential", (now, mono));
        }
        assert_eq!(hold.due(), Some(mono + MAX_START_BACKOFF), "never further apart than the cap");
        hold.take();
        hold.started();
        assert_eq!(
            hold.failed(waiting(&[4]), "no credential", (now, mono)),
            Some(FIRST_START_BACKOFF),
            "after a start: told, and from the first pause"
        );
    }

    #[test]
    fn a_vanished_session_starts_fresh_once_and_generations_grow() {
        let mut life = Lifecycle::new(Some("gone".into()));
        assert_eq!(life.resume().as_deref(), Some("gone"));
        assert_eq!(life.started(), 1);
        life.session_vanished();
        assert_eq!(life.resume(), None);
        assert_eq!(life.after_exit(false, true, false, 3), AfterExit::Fresh { restart: true });
        assert_eq!(life.started(), 2);
        assert!(life.adopt(Some("new".into())));
        assert!(!life.adopt(Some("new".into())), "the same id is no change");
        assert_eq!(life.resume().as_deref(), Some("new"), "fresh only once");
    }
}
