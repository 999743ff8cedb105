//! A session of a draining cluster node (`pincer drain`, SIGTERM): from the
//! moment it hears of the drain it takes nothing new from the group's queue
//! (what arrives waits there for the next owner), and after each event asks
//! `session::drain` whether the group may go. When it may, the CLI is closed
//! as at an idle close (its transcript and the group's folder stored), and
//! only then is the group's lease let go, so the next owner claims it at its
//! next round and resumes the whole conversation, with nothing to answer twice.

use tokio::time::Instant;

use super::SessionActor;
use crate::cluster::LeaseName;
use crate::session::drain::{Drain, Owed, Step};

impl SessionActor {
    /// This node drains: the group goes at its next turn boundary.
    pub(super) fn on_drain(&mut self) {
        if self.drain.is_some() {
            return;
        }
        let cluster = &self.deps.config.cluster;
        self.drain = Some(Drain::new(Instant::now(), cluster.drain_turn_timeout, cluster.drain_tasks_wait));
        tracing::info!(group = %self.group, "this node drains: the group is handed over at its next turn boundary");
    }

    /// Whether this session takes nothing new: its node drains (heard
    /// before the drain's event, so an actor started meanwhile takes nothing).
    pub(super) fn draining(&self) -> bool {
        self.drain.is_some() || (!self.isolated && self.deps.drain.is_cancelled())
    }

    /// Hands the group over once the drain says so; else notes when to look again.
    pub(super) async fn drain_step(&mut self) {
        if self.handed_over || !self.owned() {
            self.drain_due = None;
            return;
        }
        let owed = Owed { turn: self.turn.awaiting_result(), tasks: self.turn.tasks_running() };
        let Some(drain) = self.drain.as_mut() else { return };
        let step = drain.step(owed, Instant::now());
        self.drain_due = step.look_again();
        if !step.hands_over() {
            return;
        }
        if let Step::TimedOut { turn } = step {
            let what = if turn { "its turn had not ended" } else { "its background tasks still ran" };
            tracing::warn!(group = %self.group, "the drain's wait is over and {what}; handing the group over now");
        }
        self.stop_live("drained").await;
        self.handed_over = true;
        // Only now, with the CLI's last writes (result, transcript, folder) committed.
        match self.deps.leases.release(&LeaseName::group(&self.group)).await {
            Ok(()) => tracing::info!(group = %self.group, "handed the group over: another node claims it next"),
            Err(e) => {
                tracing::warn!(group = %self.group, %e, "cannot let the group's lease go; it moves when this node leaves")
            }
        }
    }
}
