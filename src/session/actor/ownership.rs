//! The group's lease on a cluster node (issue 36): a session runs its CLI
//! and takes its queue only while this node holds the group's lease. When
//! the lease goes (a fenced write found it moved on, or the node's deadline
//! lapsed), the CLI is killed at once, without a grace: another node may
//! already run the group. What was in flight stays in the store as it is;
//! the new owner answers it. When the lease comes (back), the session
//! re-reads the group, since another node may have moved its session on.
//! On one machine the lease is always held and none of this happens.

use std::time::Duration;

use super::SessionActor;
use crate::session::intake::Puller;
use crate::session::TurnOutcome;

impl SessionActor {
    /// Whether this node may run the group now.
    pub(super) fn owned(&self) -> bool {
        self.deps.leases.holds_group(&self.group)
    }

    /// What the node holds changed: drop the group or take it up.
    pub(super) async fn on_ownership(&mut self) {
        let owned = self.owned();
        if owned == self.was_owned {
            return;
        }
        self.was_owned = owned;
        if owned {
            self.gained().await;
        } else {
            self.lost().await;
        }
    }

    /// Claimed (again): the group as the store has it now, and the whole queue.
    async fn gained(&mut self) {
        tracing::info!(group = %self.group, "this node runs the group now");
        match self.deps.groups.group(self.group.as_str()).await {
            Ok(record) => {
                self.life.adopt(record.session_id);
            }
            Err(e) => tracing::warn!(group = %self.group, %e, "cannot re-read the group; resuming what was known"),
        }
        self.reload_settings().await;
        if !self.isolated {
            self.puller = Puller::default();
        }
    }

    /// Tells the live CLI's guard the node's deadline: it kills the CLI by
    /// itself then, even if pincer is frozen and cannot.
    pub(super) fn tell_guard(&mut self) {
        let until = *self.deadline.borrow_and_update();
        if let (Some(until), Some(live)) = (until, self.live.as_mut()) {
            live.child.kill_after(until.saturating_duration_since(tokio::time::Instant::now()));
        }
    }

    /// The lease is gone: kill the CLI now and forget what it held.
    async fn lost(&mut self) {
        // A drain let it go itself, with nothing left running.
        if !self.handed_over {
            tracing::warn!(group = %self.group, "this node lost the group's lease: stopping its CLI at once");
            crate::metrics::counters::counters().session_event(self.group.as_str(), "lease_lost");
        }
        if let Some(mut live) = self.live.take() {
            live.child.stop(Duration::ZERO).await;
        }
        self.forget_process_state();
        let mut ids: Vec<_> = self.turn.pending.drain_ids();
        ids.extend(self.start.take().iter().map(|m| m.id));
        if let Some(held) = self.hold.take() {
            ids.extend(held.messages.iter().map(|m| m.id));
        }
        // A scheduled run waiting on one of them fails now, not at its timeout;
        // the message itself is the new owner's to answer.
        let outcome = TurnOutcome {
            is_error: true,
            text: "the group moved to another pincer node before its turn ended".into(),
            cost_usd: None,
        };
        self.tell_watchers(&ids, outcome);
    }
}
