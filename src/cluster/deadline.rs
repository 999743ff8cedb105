//! Until when this node's CLIs may run: "one live CLI per group, ever".
//! Pure: touches nothing; the caller passes in the times.
//!
//! Another node may claim a group once this node's row expired by the
//! database's clock, which is `lease_ttl` after a renewal *ran* there. This
//! node cannot know when that was, only when it *sent* the renewal, which is
//! earlier. So the deadline is the send time of the latest renewal that
//! succeeded plus `lease_ttl − margin` (see [`super::timing::LeaseTiming::margin`]):
//! at that instant every CLI here must be dead. The times are monotonic
//! (tokio's `Instant`, which tests can pause), never wall-clock: a clock
//! step must not let a CLI outlive its lease.
//!
//! The deadline only moves forward: a success for an older send can only
//! give what its own send time allows. Before the first success nothing may
//! run. And once the deadline has passed, this incarnation is over for good:
//! a success that arrives after it (a frozen process, a commit stuck on a
//! slow disk) revives nothing, because while that update was not yet
//! visible another node may have seen the row expired and claimed. A
//! success answered before the deadline is safe: it committed before the
//! row could expire (the deadline is at least `margin` before that). A node
//! whose deadline lapsed drops every group and registers again, as a new
//! incarnation, before it claims anything.

use std::time::Duration;

use tokio::time::Instant;

/// A renewal on its way to the database, stamped when it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "pass it to Deadline::renewal_succeeded when the renewal succeeds"]
pub struct RenewalSent {
    at: Instant,
}

impl RenewalSent {
    pub fn at(&self) -> Instant {
        self.at
    }
}

/// This node's deadline, fed by its renewals.
#[derive(Debug, Clone)]
pub struct Deadline {
    alive_after_renewal: Duration,
    until: Option<Instant>,
    last_sent: Option<Instant>,
    lapsed: bool,
}

/// What a successful renewal did to the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewed {
    /// The CLIs may run until [`Deadline::until`].
    Alive,
    /// It came after the deadline: this incarnation is over; register again.
    Lapsed,
}

impl Deadline {
    /// `alive_after_renewal` is `lease_ttl − margin`
    /// ([`super::timing::LeaseTiming::alive_after_renewal`]).
    pub fn new(alive_after_renewal: Duration) -> Self {
        Self { alive_after_renewal, until: None, last_sent: None, lapsed: false }
    }

    /// Stamps a renewal as sent at `at`: call it right before the statement
    /// goes out, never after, or the deadline would be late.
    pub fn renewal_sent(&mut self, at: Instant) -> RenewalSent {
        self.last_sent = Some(self.last_sent.map_or(at, |last| last.max(at)));
        RenewalSent { at }
    }

    /// The renewal stamped `sent` succeeded (the database updated this
    /// incarnation's row), as the node learnt at `answered_at`: the CLIs may
    /// run until `sent + lease_ttl − margin`, unless an earlier answer already
    /// allowed longer, and unless the deadline had passed by `answered_at`.
    #[must_use = "a lapsed deadline means: drop every group and register again"]
    pub fn renewal_succeeded(&mut self, sent: RenewalSent, answered_at: Instant) -> Renewed {
        if self.lapsed || self.until.is_some_and(|until| answered_at >= until) {
            self.lapsed = true;
            return Renewed::Lapsed;
        }
        let until = sent.at + self.alive_after_renewal;
        self.until = Some(self.until.map_or(until, |before| before.max(until)));
        Renewed::Alive
    }

    /// The database found no live row of this incarnation to renew (it
    /// expired, or a newer incarnation replaced it): over for good, since
    /// another node may already have claimed its leases. Register again.
    pub fn renewal_refused(&mut self) {
        self.lapsed = true;
    }

    /// Whether the CLIs must be dead by `now`.
    pub fn expired(&self, now: Instant) -> bool {
        self.lapsed || self.until.is_none_or(|until| now >= until)
    }

    /// How long the CLIs may still run; zero once expired.
    pub fn left(&self, now: Instant) -> Duration {
        match self.until {
            Some(until) if !self.lapsed => until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// The instant the CLIs must be dead by, if any renewal succeeded.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    /// When the latest renewal was sent, for `pincer status` and logs.
    pub fn last_sent(&self) -> Option<Instant> {
        self.last_sent
    }

    /// What to hand a guard process so it kills its CLI by itself at the
    /// deadline even if pincer is frozen: "kill after this long", measured on
    /// the guard's own monotonic clock from when it receives it. A duration,
    /// not an instant, because two processes share no `Instant`; the guard
    /// starts counting a little after `now`, which is why its kill comes
    /// later by that delay, covered by the margin. `None`: expired, start no
    /// CLI (or kill it now).
    pub fn guard_kill_after(&self, now: Instant) -> Option<Duration> {
        if self.expired(now) {
            None
        } else {
            Some(self.left(now))
        }
    }
}

#[cfg(test)]
mod tests;
