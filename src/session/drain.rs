//! What a session does with its group while its cluster node drains
//! (`pincer drain`, SIGTERM): it takes nothing new from the queue, lets the
//! turn in flight finish (for up to `drain_turn_timeout`), gives background
//! tasks a bounded wait (`drain_tasks_wait`), then hands the group over (its
//! CLI closed, transcript and folder stored, lease let go). Pure: the actor
//! feeds it what its CLI still owes and the time, and does what it says.

use std::time::Duration;

use tokio::time::Instant;

/// What the group still has in its CLI when the drain looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owed {
    /// A result is owed: a message was written to the CLI and not answered
    /// yet (or a turn runs).
    pub turn: bool,
    /// Background tasks run in the CLI.
    pub tasks: bool,
}

/// What to do with the group now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Let the turn finish; look again by `until` at the latest.
    FinishTurn { until: Instant },
    /// The turn is done; let the background tasks run until `until`.
    WaitTasks { until: Instant },
    /// Nothing is owed: hand the group over now.
    HandOver,
    /// The wait is over with something still owed: hand over anyway
    /// (`turn`: an unanswered message, which the next owner answers after a
    /// notice; else only background tasks, which end with the CLI).
    TimedOut { turn: bool },
}

impl Step {
    /// When the actor must look again without any other event.
    pub fn look_again(&self) -> Option<Instant> {
        match self {
            Step::FinishTurn { until } | Step::WaitTasks { until } => Some(*until),
            Step::HandOver | Step::TimedOut { .. } => None,
        }
    }

    /// Whether the group goes now.
    pub fn hands_over(&self) -> bool {
        matches!(self, Step::HandOver | Step::TimedOut { .. })
    }
}

/// One group's drain, from the moment the session heard of it.
#[derive(Clone, Debug)]
pub struct Drain {
    turn_until: Instant,
    tasks_wait: Duration,
    /// When the turn was seen done with tasks still running.
    tasks_since: Option<Instant>,
}

impl Drain {
    /// A drain heard at `now`: the turn in flight may run for `turn_timeout`,
    /// background tasks `tasks_wait` after the turn is done.
    pub fn new(now: Instant, turn_timeout: Duration, tasks_wait: Duration) -> Drain {
        Drain { turn_until: now + turn_timeout, tasks_wait, tasks_since: None }
    }

    /// What to do, given what is `owed` at `now`.
    pub fn step(&mut self, owed: Owed, now: Instant) -> Step {
        if owed.turn {
            return if now >= self.turn_until {
                Step::TimedOut { turn: true }
            } else {
                Step::FinishTurn { until: self.turn_until }
            };
        }
        if !owed.tasks {
            return Step::HandOver;
        }
        let until = *self.tasks_since.get_or_insert(now) + self.tasks_wait;
        if now >= until {
            Step::TimedOut { turn: false }
        } else {
            Step::WaitTasks { until }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TURN: Duration = Duration::from_secs(120);
    const TASKS: Duration = Duration::from_secs(30);

    fn owed(turn: bool, tasks: bool) -> Owed {
        Owed { turn, tasks }
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_owing_nothing_is_handed_over_at_once() {
        let mut drain = Drain::new(Instant::now(), TURN, TASKS);
        assert_eq!(drain.step(Owed::default(), Instant::now()), Step::HandOver);
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_in_flight_finishes_then_the_group_goes() {
        let start = Instant::now();
        let mut drain = Drain::new(start, TURN, TASKS);
        let step = drain.step(owed(true, false), start);
        assert_eq!(step, Step::FinishTurn { until: start + TURN });
        assert!(!step.hands_over());
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(drain.step(owed(false, false), Instant::now()), Step::HandOver, "answered: it goes");
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_past_its_timeout_is_handed_over_owing_its_answer() {
        let start = Instant::now();
        let mut drain = Drain::new(start, TURN, TASKS);
        tokio::time::advance(TURN - Duration::from_millis(1)).await;
        assert!(matches!(drain.step(owed(true, true), Instant::now()), Step::FinishTurn { .. }));
        tokio::time::advance(Duration::from_millis(1)).await;
        let step = drain.step(owed(true, true), Instant::now());
        assert_eq!(step, Step::TimedOut { turn: true });
        assert!(step.hands_over() && step.look_again().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn background_tasks_get_their_wait_from_the_turns_end_not_the_drains_start() {
        let start = Instant::now();
        let mut drain = Drain::new(start, TURN, TASKS);
        tokio::time::advance(Duration::from_secs(60)).await;
        let turn_done = Instant::now();
        assert_eq!(drain.step(owed(false, true), turn_done), Step::WaitTasks { until: turn_done + TASKS });
        tokio::time::advance(TASKS / 2).await;
        assert_eq!(
            drain.step(owed(false, true), Instant::now()),
            Step::WaitTasks { until: turn_done + TASKS },
            "the wait does not start over at each look"
        );
        tokio::time::advance(TASKS / 2).await;
        assert_eq!(drain.step(owed(false, true), Instant::now()), Step::TimedOut { turn: false });
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_that_end_within_their_wait_hand_the_group_over_cleanly() {
        let mut drain = Drain::new(Instant::now(), TURN, TASKS);
        assert!(matches!(drain.step(owed(false, true), Instant::now()), Step::WaitTasks { .. }));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(drain.step(owed(false, false), Instant::now()), Step::HandOver);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_turn_while_tasks_wait_is_bounded_by_the_turn_timeout() {
        let start = Instant::now();
        let mut drain = Drain::new(start, TURN, TASKS);
        drain.step(owed(false, true), start);
        tokio::time::advance(Duration::from_secs(5)).await;
        // A task's notification started a turn of its own.
        assert_eq!(drain.step(owed(true, true), Instant::now()), Step::FinishTurn { until: start + TURN });
    }
}
