//! The hang watch, decided without I/O: when a turn counts as hung, and what
//! pincer does once it stopped one (tell the chat, send the messages again,
//! or give up on them after a second hang in a row).
//!
//! Invariants: only a turn that owes a result can hang (background tasks
//! alone never do), never while a person is asked for an approval, and never
//! twice at once; two hangs in a row without a good result between give up
//! instead of looping.

use std::time::Duration;

use tokio::time::Instant;

/// How long a hung turn gets to end after pincer's interrupt before the
/// process is stopped (at most `shutdown_grace`).
pub(super) const HANG_GRACE: Duration = Duration::from_secs(5);

/// What to do after a hung turn's process was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterHang {
    /// Nothing waited: the chat hears of the restart only.
    Told,
    /// Write the waiting messages again to a process that resumes the session.
    Resend,
    /// The second hang in a row: give up on the waiting messages.
    GiveUp,
}

#[derive(Debug, Default)]
pub(super) struct HangWatch {
    /// Hung turns since the last good result.
    hangs: u32,
    /// Pincer is stopping a hung turn: its interrupted result is stored, but
    /// its messages stay pending for the restart.
    stopping: bool,
}

impl HangWatch {
    /// When the turn counts as hung: `turn_timeout` after the process's last
    /// line, while a result is owed and nobody is asked for an approval.
    pub(super) fn deadline(
        &self,
        quiet_since: Instant,
        awaiting_result: bool,
        asking_people: bool,
        turn_timeout: Duration,
    ) -> Option<Instant> {
        if !awaiting_result || asking_people || self.stopping {
            return None;
        }
        quiet_since.checked_add(turn_timeout)
    }

    /// Pincer interrupts the hung turn and stops its process.
    pub(super) fn stopping_hung(&mut self) {
        self.stopping = true;
    }

    /// Whether an interrupted result is the hung turn's (only stored then).
    pub(super) fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The hung process is gone; `waiting`: messages still wait for an answer.
    pub(super) fn stopped(&mut self, waiting: bool) -> AfterHang {
        self.stopping = false;
        self.hangs += 1;
        if !waiting {
            AfterHang::Told
        } else if self.hangs > 1 {
            self.hangs = 0;
            AfterHang::GiveUp
        } else {
            AfterHang::Resend
        }
    }

    /// A good result: hangs start over.
    pub(super) fn answered(&mut self) {
        self.hangs = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(600);

    #[test]
    fn only_a_turn_that_owes_a_result_and_asks_nobody_can_hang() {
        let (watch, quiet) = (HangWatch::default(), Instant::now());
        assert_eq!(watch.deadline(quiet, true, false, TIMEOUT), Some(quiet + TIMEOUT));
        assert_eq!(watch.deadline(quiet, false, false, TIMEOUT), None, "background work alone");
        assert_eq!(watch.deadline(quiet, true, true, TIMEOUT), None, "an admin is deciding");
    }

    #[test]
    fn a_hang_being_stopped_is_not_watched_again() {
        let (mut watch, quiet) = (HangWatch::default(), Instant::now());
        watch.stopping_hung();
        assert!(watch.is_stopping());
        assert_eq!(watch.deadline(quiet, true, false, TIMEOUT), None);
        assert_eq!(watch.stopped(true), AfterHang::Resend);
        assert!(!watch.is_stopping());
    }

    #[test]
    fn the_second_hang_in_a_row_gives_up_and_a_good_result_forgives() {
        let mut watch = HangWatch::default();
        assert_eq!(watch.stopped(true), AfterHang::Resend);
        assert_eq!(watch.stopped(true), AfterHang::GiveUp);
        assert_eq!(watch.stopped(true), AfterHang::Resend, "giving up starts over");
        watch.answered();
        assert_eq!(watch.stopped(false), AfterHang::Told);
        assert_eq!(watch.stopped(true), AfterHang::GiveUp, "a hang with nothing waiting still counts");
    }
}
