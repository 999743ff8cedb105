//! The wiring of a `pincer run` that is one node of a cluster (`[cluster]
//! enabled` with a shared `[store] url`; what a node is: `crate::node`):
//! before anything runs, its store's group writes are fenced; then it starts
//! the node's tasks (membership, claim loop, hints, and the drain when asked)
//! with the engine's parts (its outbox looked at every tick for replies
//! other nodes wrote, the chat commands handed to it, its tool approvals
//! for a gateway's chat through the store: `node::approvals`), and makes
//! its gateways. What each does is `crate::node`'s; here they only get
//! their parts and are spawned through `Services`. On one machine none of
//! this starts.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::services::Services;
use crate::channel::approvals::Askers;
use crate::cluster::{LeaseName, LeaseTiming, NodeId};
use crate::config::Config;
use crate::node::approvals::Bridge;
use crate::node::{
    look_at_outbox, ClaimLoop, CommandTaker, Gateway, Membership, MembershipConfig, NodeDrain, NodeState,
};

/// What a cluster node is started with (`[cluster]`, and what its claims need).
#[derive(Clone, Debug)]
pub struct NodeSection {
    pub node: NodeId,
    pub timing: LeaseTiming,
    /// `claude.max_live_sessions`: placement's capacity.
    pub slots: u64,
}

impl NodeSection {
    /// `None` on one machine (no `[cluster] enabled`, or no shared store).
    pub fn of(config: &Config) -> anyhow::Result<Option<NodeSection>> {
        if config.store.url.is_none() || !config.cluster.enabled {
            return Ok(None);
        }
        Ok(Some(NodeSection {
            node: config.cluster.node_id(),
            timing: config.cluster.timing()?,
            slots: config.claude.max_live_sessions as u64,
        }))
    }
}

/// The running node: its membership, which leaves only once this node's
/// CLIs are gone and its outbox flushed ([`ClusterNode::leave`]).
pub struct ClusterNode {
    membership: Membership,
    leave: CancellationToken,
    cluster: crate::store::ClusterStore,
    leases: crate::store::Leases,
    node: NodeId,
    approvals: Arc<Bridge>,
    /// Cancelled when the node drains: the claim loop claims nothing more,
    /// the gateways go to other nodes.
    draining: CancellationToken,
    /// How far the drain is, for `pincer drain`.
    progress: watch::Sender<crate::control::wire::DrainProgress>,
}

impl ClusterNode {
    /// Starts the node's parts: call it before any session or schedule runs.
    pub fn start(engine: &Engine, services: &Services, section: NodeSection) -> anyhow::Result<ClusterNode> {
        let NodeSection { node, timing, slots } = section;
        let nudge = std::sync::Arc::new(tokio::sync::Notify::new());
        let cluster = engine.store.cluster().context("a cluster node needs a PostgreSQL `[store] url`")?;
        cluster.enter_cluster(&node);
        let leases = cluster.leases();
        let (live_tx, live) = watch::channel(0);
        let leave = CancellationToken::new();
        let draining = CancellationToken::new();
        let membership_config =
            MembershipConfig { node: node.clone(), timing, slots: i64::try_from(slots).unwrap_or(i64::MAX) };
        let membership = Membership::start(cluster.clone(), membership_config, live, leave.clone());
        let claims = ClaimLoop {
            cluster: cluster.clone(),
            router: engine.router.clone(),
            outbox: engine.outbox.clone(),
            scheduler: engine.scheduler.clone(),
            node: node.clone(),
            timing,
            slots,
            state: membership.state(),
            live: live_tx,
            nudge: nudge.clone(),
            draining: draining.clone(),
        };
        services.intake(|stop| claims.run(stop));
        let (approvals_hint, hinted) = watch::channel(0);
        let ports = (engine.directory.clone(), engine.outbox.clone());
        let (approvals, asking) = Bridge::new(engine.store.approvals(), node.clone(), ports, hinted);
        services.intake(|stop| asking.run(stop));
        let (outbox, hints) = (engine.outbox.clone(), cluster.clone());
        let (store, ports) = (&engine.store, engine.ports());
        let (taker, heard) = CommandTaker::new(store.commands(), store.leases(), ports, nudge);
        services.intake(|stop| taker.run(stop));
        services.intake(|stop| crate::node::listen_for_hints(hints, heard, outbox, approvals_hint, stop));
        let outbox = engine.outbox.clone();
        services.intake(|stop| look_at_outbox(outbox, stop));
        tracing::info!(%node, lease_ttl = ?timing.lease_ttl(), "this pincer is a cluster node");
        let (progress, _) = watch::channel(Default::default());
        Ok(ClusterNode { membership, leave, cluster, leases, node, approvals, draining, progress })
    }

    /// The node's state, to watch (`/readyz`).
    pub fn state(&self) -> watch::Receiver<NodeState> {
        self.membership.state()
    }

    /// A gateway of this node, served while it holds `lease`.
    pub fn gateway(&self, lease: LeaseName) -> Gateway {
        let approvals = self.approvals.shower(&lease);
        Gateway {
            leases: self.leases.clone(),
            lease,
            node: self.node.clone(),
            state: self.state(),
            approvals,
            draining: self.draining.clone(),
        }
    }

    /// How far the drain is (all zero before it starts).
    pub fn drain_progress(&self) -> watch::Receiver<crate::control::wire::DrainProgress> {
        self.progress.subscribe()
    }

    /// Hands every group and gateway this node holds to the others
    /// (`node::drain`); returns once it holds nothing, or after `limit`.
    pub async fn drain(&self, engine: &Engine, limit: Duration) {
        let drain = NodeDrain {
            cluster: self.cluster.clone(),
            leases: self.leases.clone(),
            node: self.node.clone(),
            state: self.state(),
            router: engine.router.clone(),
            draining: self.draining.clone(),
            sessions: engine.drain.clone(),
            progress: self.progress.clone(),
        };
        drain.run(limit).await;
    }

    /// Leaves the cluster (once this node's CLIs are gone and its outbox
    /// flushed): its groups and gateways may be claimed at once.
    pub async fn leave(self) {
        self.leave.cancel();
        self.membership.stopped().await;
    }
}

/// The adapters that ask: on a cluster node, those of each platform it has a
/// gateway for are replaced by the store (call it once every gateway was made).
pub fn approvals_of(node: Option<&ClusterNode>, mut askers: Askers) -> Askers {
    if let Some(node) = node {
        node.approvals.divert(&mut askers);
    }
    askers
}
