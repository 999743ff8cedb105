//! The node's claim loop (issue 36): every tick, while this node is
//! registered, it reads the groups with work and the live nodes, lets
//! `cluster::round` decide, claims what it should (taking over what the
//! previous holder left in flight, `ClusterStore::claim_group`), wakes the
//! sessions of the groups it holds (their messages may have been stored by
//! another node), and lets go of groups whose sessions retired. It owns
//! its [`Rounds`], stops at the shutdown token, and touches the store's
//! `leases` rows and, through the router, the sessions.
//!
//! Each claim is given up after `PgBounds::claim_within`, so one slow claim
//! (a stuck server, a lost answer) cannot hold up the round; and each round
//! first looks for ghost leases (held by this incarnation in the store but
//! unknown here: a claim whose answer was lost) and adopts or releases them
//! as `cluster::ghost` decides.

use std::time::Duration;

use chrono::Utc;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::membership::NodeState;
use crate::cluster::{GhostAction, Ghosts, LeaseName, LeaseTiming, Me, NodeId, PgBounds, Rounds};
use crate::domain::GroupName;
use crate::outbox::Outbox;
use crate::router::Router;
use crate::scheduler::SchedulerHandle;
use crate::store::{ClusterStore, Takeover};

/// The longest pause between two rounds: messages another node stored for
/// a group this node holds wait at most about this long when its hint
/// (`node::hints`) is lost.
const TICK: Duration = Duration::from_millis(500);

/// A session that holds its slot for work: in a turn, owing answers, or
/// running background tasks.
fn busy(s: &crate::session::SessionStatus) -> bool {
    s.live && (s.in_turn || s.pending > 0 || s.running_tasks > 0)
}

/// What the claim loop works with.
pub struct ClaimLoop {
    pub cluster: ClusterStore,
    pub router: Router,
    pub outbox: Outbox,
    pub scheduler: SchedulerHandle,
    pub node: NodeId,
    pub timing: LeaseTiming,
    pub slots: u64,
    pub state: watch::Receiver<NodeState>,
    /// Told the live session count every round, for the node's renewals.
    pub live: watch::Sender<usize>,
    /// Woken when another node stored work (`node::hints`): a round now.
    pub nudge: std::sync::Arc<tokio::sync::Notify>,
    /// Cancelled when this node drains: it claims nothing more.
    pub draining: CancellationToken,
}

impl ClaimLoop {
    /// Runs rounds until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut rounds = Rounds::default();
        let mut ghosts = Ghosts::default();
        let mut next = Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
                _ = self.nudge.notified() => {}
                Ok(()) = self.state.changed() => {}
            }
            let state = *self.state.borrow_and_update();
            next = Instant::now() + TICK;
            let NodeState::Registered { incarnation, .. } = state else {
                continue;
            };
            self.settle_ghosts(&mut ghosts, incarnation).await;
            if let Some(look_again) = self.round(&mut rounds, incarnation).await {
                next = next.min(look_again);
            }
            self.let_go_of_retired().await;
        }
    }

    /// One round; when to look again for a group waiting out its grace.
    async fn round(&self, rounds: &mut Rounds, incarnation: i64) -> Option<Instant> {
        let leases = self.cluster.leases();
        let (work, nodes) = match tokio::try_join!(self.cluster.groups_with_work(), leases.live_nodes()) {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(%e, "cannot read the groups with work; trying again");
                return None;
            }
        };
        // Busy sessions are the load: an idle one gives its slot to a group
        // claimed here at once (its actor waits for a slot, and idle
        // sessions close for a waiting group), as on one machine.
        let busy = self.router.statuses().iter().filter(|(_, s)| busy(s)).count();
        self.live.send_replace(busy);
        let me = Me { id: self.node.clone(), incarnation, live: busy as u64, slots: self.slots };
        let mut plan = rounds.plan(&me, &work, &nodes, self.timing.grace(), Instant::now());
        if self.draining.is_cancelled() {
            // Its own groups are still woken: a session started now hears the
            // drain and hands its group over at once.
            plan.claim.clear();
        }
        for group in &plan.claim {
            self.claim(group, incarnation).await;
        }
        for group in &plan.wake {
            self.wake(group).await;
        }
        if !plan.claim.is_empty() || !plan.wake.is_empty() {
            // A message with media another node stored for a group of this
            // node's waits for this node's preparer (it prepares only the
            // groups it holds).
            self.router.prepare_waiting();
        }
        plan.look_again
    }

    /// Adopts or releases the leases the store shows held by this
    /// incarnation that this node does not know it holds (`cluster::ghost`).
    async fn settle_ghosts(&self, ghosts: &mut Ghosts, incarnation: i64) {
        let (stored, generation) = match self.cluster.held_in_store(&self.node, incarnation).await {
            Ok(read) => read,
            Err(e) => return tracing::warn!(%e, "cannot read this node's leases; trying again"),
        };
        // Decided before the loop: the closure must not live across its awaits.
        let actions = ghosts.decide(&stored, |lease| self.cluster.known_epoch(lease), Instant::now());
        for action in actions {
            match action {
                GhostAction::Adopt { lease, epoch } => {
                    if self.cluster.adopt(&lease, epoch, generation) {
                        tracing::warn!(lease = %lease.as_str(), epoch, "adopted a lease this node held without \
                            knowing it (its claim's answer was lost): it runs here now");
                    }
                }
                GhostAction::Release { lease, epoch } => {
                    match self.cluster.release_at(&lease, &self.node, epoch).await {
                        Ok(()) => tracing::warn!(lease = %lease.as_str(), epoch, "let go of a lease this node held \
                        without knowing it (its claim's answer was lost): it is claimed again as usual"),
                        Err(e) => tracing::warn!(lease = %lease.as_str(), %e, "cannot let go of a ghost lease"),
                    }
                }
            }
        }
    }

    async fn claim(&self, group: &GroupName, incarnation: i64) {
        let within = PgBounds::new(self.timing).claim_within();
        let claiming = self.cluster.claim_group(group, &self.node, incarnation, Utc::now());
        let takeover = match tokio::time::timeout(within, claiming).await {
            Ok(Ok(Some(takeover))) => takeover,
            Ok(Ok(None)) => return tracing::debug!(%group, "another node claimed the group first (or it is locked)"),
            Ok(Err(e)) => return tracing::warn!(%group, %e, "cannot claim the group; trying again"),
            Err(_) => return tracing::warn!(%group, ?within, "a claim took too long; trying again next round"),
        };
        let Takeover { epoch, requeued, runs_cut_off } = takeover;
        tracing::info!(%group, epoch, requeued, runs_cut_off, node = %self.node, "claimed the group");
        if requeued > 0 {
            let text = format!(
                "pincer moved this group to another machine before answering {requeued} message(s) here; answering now."
            );
            self.outbox.notice(group, &text).await;
        }
        if runs_cut_off > 0 {
            self.scheduler.poke();
        }
        self.wake(group).await;
        // Due schedules wait for the group's owner: this node now.
        self.scheduler.poke();
    }

    async fn wake(&self, group: &GroupName) {
        if let Err(e) = self.router.wake_group(group).await {
            tracing::warn!(%group, %e, "cannot wake the group's session");
        }
    }

    /// Groups this node holds whose sessions retired: let go, so the next
    /// message goes wherever placement says then.
    async fn let_go_of_retired(&self) {
        for lease in self.cluster.leases().held() {
            let Ok(group) = lease.as_str().parse::<GroupName>() else { continue };
            if self.router.runs(&group) {
                continue;
            }
            match self.cluster.leases().release(&LeaseName::group(&group)).await {
                Ok(()) => tracing::debug!(%group, "let go of a quiet group"),
                Err(e) => tracing::warn!(%group, %e, "cannot let go of a quiet group"),
            }
        }
    }
}
