//! A cluster node's drain (`pincer drain`, SIGTERM; issue 45): before its
//! stop, the node hands every group and gateway it holds to the others at
//! turn boundaries. It stops claiming at once and offers no slot any more
//! (`ClusterStore::mark_draining`, so placement elsewhere leaves it out); each
//! session lets its turn finish and hands its group over itself
//! (`session::drain`); a gateway goes once another node can take it
//! (`gateway`). This loop lets go of held groups without a session,
//! counts what is left for `pincer drain`, and returns once the node holds
//! nothing (or its bound passed: what is left then moves when it leaves).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::membership::NodeState;
use crate::cluster::{LeaseName, NodeId};
use crate::control::wire::DrainProgress;
use crate::domain::GroupName;
use crate::router::Router;
use crate::store::{ClusterStore, Leases};

/// How often the drain looks at what the node still holds.
const LOOK: Duration = Duration::from_millis(100);

/// What the drain runs with.
pub struct NodeDrain {
    pub cluster: ClusterStore,
    pub leases: Leases,
    pub node: NodeId,
    pub state: watch::Receiver<NodeState>,
    pub router: Router,
    /// Cancelled to start: the claim loop and the gateways hear it.
    pub draining: CancellationToken,
    /// Cancelled to start: the sessions hear it.
    pub sessions: CancellationToken,
    pub progress: watch::Sender<DrainProgress>,
}

impl NodeDrain {
    /// Drains; returns once the node holds nothing or after `limit`.
    pub async fn run(mut self, limit: Duration) {
        self.draining.cancel();
        self.sessions.cancel();
        tracing::info!(node = %self.node, "draining: handing this node's groups and gateways to the others");
        let (started, until) = (Instant::now(), Instant::now() + limit);
        let mut marked = None;
        let mut changes = self.leases.changes();
        loop {
            self.mark(&mut marked).await;
            let left = self.look().await;
            let done = left.groups == 0 && (left.gateways == 0 || !self.others_alive().await);
            let now = DrainProgress { done, ..left };
            self.progress.send_if_modified(|was| {
                *was != now && {
                    *was = now;
                    true
                }
            });
            if done {
                tracing::info!(node = %self.node, took = ?started.elapsed(), "drained: this node holds no group");
                return;
            }
            if Instant::now() >= until {
                tracing::warn!(node = %self.node, groups = left.groups, "the drain's bound passed; what is left moves when this node leaves");
                self.progress.send_replace(DrainProgress { done: true, ..left });
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(LOOK) => {}
                Ok(()) = changes.changed() => {}
                Ok(()) = self.state.changed() => {}
            }
        }
    }

    /// Offers no slot from this incarnation on (again after a lapse).
    async fn mark(&self, marked: &mut Option<i64>) {
        let NodeState::Registered { incarnation, .. } = *self.state.borrow() else { return };
        if *marked == Some(incarnation) {
            return;
        }
        match self.cluster.mark_draining(&self.node, incarnation).await {
            Ok(_) => *marked = Some(incarnation),
            Err(e) => tracing::warn!(%e, "cannot mark this node as draining; trying again"),
        }
    }

    /// What the node still holds; groups without a session are let go here.
    async fn look(&self) -> DrainProgress {
        let statuses = self.router.statuses();
        let mut left = DrainProgress::default();
        for lease in self.leases.held() {
            let Ok(group) = lease.as_str().parse::<GroupName>() else {
                left.gateways += 1;
                continue;
            };
            if !self.router.runs(&group) {
                if let Err(e) = self.leases.release(&LeaseName::group(&group)).await {
                    tracing::warn!(%group, %e, "cannot let go of a quiet group while draining");
                }
                continue;
            }
            left.groups += 1;
            if statuses.iter().any(|(g, s)| g == &group && s.busy()) {
                left.turns += 1;
            }
        }
        left
    }

    /// Whether another node that takes work is alive (else a gateway stays until this node leaves).
    async fn others_alive(&self) -> bool {
        others_alive(&self.leases, &self.node).await
    }
}

/// Whether a node other than `me` is alive and offers slots, by the store.
pub async fn others_alive(leases: &Leases, me: &NodeId) -> bool {
    match leases.live_nodes().await {
        Ok(nodes) => nodes.iter().any(|n| &n.id != me && n.slots > 0),
        Err(e) => {
            tracing::debug!(%e, "cannot read the live nodes");
            false
        }
    }
}

/// `pincer drain`'s way in (`control::server::Drain`): asks the running
/// node to drain and stop, and watches how far it is.
pub struct DrainPort {
    pub asked: CancellationToken,
    pub progress: watch::Receiver<DrainProgress>,
}

impl crate::control::server::Drain for DrainPort {
    fn start(&self) -> watch::Receiver<DrainProgress> {
        self.asked.cancel();
        self.progress.clone()
    }
}
