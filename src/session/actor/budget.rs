//! The group's queue held: while its budget is reached (the group is quiet
//! and told once per period), or while its CLI cannot start (the messages
//! that needed it wait for the next try, see `recovery`). After each result
//! the budget is looked at again: reached with nothing left to answer, the
//! process is stopped, so no work the CLI would start by itself (a
//! background task's follow-up turn) runs past it.

use std::time::SystemTime;

use super::SessionActor;
use crate::session::budget::Look;
use crate::session::QueueHold;

impl SessionActor {
    /// Whether the queue may be taken now.
    pub(super) async fn queue_open(&mut self) -> bool {
        self.owned() && !self.draining() && !self.start.holding() && self.budget_open().await
    }

    /// Why the queue is held now, if it is (for the published status).
    pub(super) fn queue_hold(&self) -> Option<QueueHold> {
        if let Some(retry_at) = self.start.retry_at() {
            return Some(QueueHold::CannotStart { retry_at });
        }
        self.budget.held_until().map(|until| QueueHold::Budget { until })
    }

    /// Whether the group's budget lets it take queued messages now; the
    /// chat is told once per period when it does not.
    pub(super) async fn budget_open(&mut self) -> bool {
        match self.look_at_budget().await {
            Look::Open => true,
            Look::Closed { tell } => {
                if let Some(text) = tell {
                    self.notice(&text).await;
                }
                false
            }
        }
    }

    async fn look_at_budget(&mut self) -> Look {
        let budget = self.policy.budget.over(self.deps.live.budget());
        let (store, group, zone, now) = (&self.deps.budgets, &self.group, self.zone, SystemTime::now());
        let reached = || store.budget_reached(group, &budget, now, zone);
        self.budget.look(budget.is_set(), reached, now, group, zone).await
    }

    /// After a result (once per result read): when the budget is now
    /// reached and nothing is left to answer, the process is stopped, its
    /// background work with it; the chat is told (once per period, and
    /// whenever background work was stopped).
    pub(super) async fn after_results(&mut self) {
        if !self.budget.results_since(self.turn.results_read()) {
            return;
        }
        if self.live.is_none() || !self.turn.pending.is_empty() {
            return;
        }
        let tell = match self.look_at_budget().await {
            Look::Open => return,
            Look::Closed { tell } => tell,
        };
        let background = self.turn.tasks_running();
        self.stop_live("budget_reached").await;
        let stopped = "Background work that was still running was stopped with it.";
        match (tell, background) {
            (Some(text), true) => self.notice(format!("{text} {stopped}")).await,
            (Some(text), false) => self.notice(text).await,
            (None, true) => {
                self.notice(format!("The agent has reached its budget. {stopped} Messages wait until it opens again."))
                    .await
            }
            (None, false) => {}
        }
    }

    /// When a postponed resend goes out: once the budget opens again.
    pub(super) fn budget_opens(&self) -> Option<(SystemTime, tokio::time::Instant)> {
        Some((self.budget.held_until()?, self.budget.reopen_at()?))
    }
}
