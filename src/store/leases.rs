//! The leases this node holds, as every part of it asks about them: whether
//! it may run a group (always on one machine), what changed, until when its
//! CLIs may run; one lease claimed or let go (a gateway's, a drained
//! session's), and who could take it over. A node's own statements (its row, claim
//! rounds, takeovers, ghosts) are behind the cluster door (`cluster/`).
//! The fenced write every group write of a cluster node is: `fenced.rs`.

use sqlx::Row;

use super::cluster::fence::RELEASE_LEASE;
use super::cluster::membership::LIVE_NODES;
use super::cluster::{begin_claim, claim_row, kind, skipped_when_locked};
use super::db::Dialect;
use super::error::StoreError;
use super::handles::Leases;
use crate::cluster::fence::LeaseName;
use crate::cluster::node_id::NodeId;
use crate::cluster::NodeLoad;
use crate::domain::GroupName;

impl Leases {
    /// Claims `lease` if it is free or its holder's row expired; its new
    /// epoch. A lease row locked by a fenced write waits at most the claim's
    /// lock wait ([`begin_claim`]): then it is not claimed this time.
    pub async fn claim(&self, lease: &LeaseName, node: &NodeId, incarnation: i64) -> Result<Option<i64>, StoreError> {
        let claiming = async {
            let mut tx = begin_claim(&self.db).await?;
            let epoch = claim_row(&mut tx, lease, node, incarnation).await?;
            tx.commit().await?;
            Ok(epoch)
        };
        let epoch = self.db.within("a claim", claiming).await.or_else(skipped_when_locked)?;
        if let Some(epoch) = epoch {
            self.db.fences.claimed(lease, epoch);
            crate::metrics::counters::counters().lease_claimed(kind(lease));
        }
        Ok(epoch)
    }

    /// Lets `lease` go (a clean hand-off): free to claim at once.
    pub async fn release(&self, lease: &LeaseName) -> Result<(), StoreError> {
        if let Some(fence) = self.db.fences.of(lease)? {
            let (name, node, epoch) = fence.params();
            let releasing = sqlx::query(RELEASE_LEASE).bind(name).bind(node).bind(epoch).execute(&self.db.pool);
            self.db.within("a release", async { Ok(releasing.await?) }).await?;
            self.db.fences.forget(lease);
            crate::metrics::counters::counters().lease_released();
        }
        Ok(())
    }

    /// Whether this node may run `group` now: always on one machine; on a
    /// cluster node, while it holds the group's lease. No I/O.
    pub fn holds_group(&self, group: &GroupName) -> bool {
        self.db.fences.holds(&LeaseName::group(group))
    }

    /// Whether this node holds `lease` (a gateway's); always on one machine.
    pub fn holds(&self, lease: &LeaseName) -> bool {
        self.db.fences.holds(lease)
    }

    /// Whether this store is a cluster node's.
    pub fn is_cluster_node(&self) -> bool {
        self.db.fences.is_cluster_node()
    }

    /// The leases this node holds now.
    pub fn held(&self) -> Vec<LeaseName> {
        self.db.fences.held()
    }

    /// Until when this node's CLIs may run, to watch (their guards are told).
    pub fn deadline(&self) -> tokio::sync::watch::Receiver<Option<tokio::time::Instant>> {
        self.db.fences.deadline()
    }

    /// Changes whenever a lease is claimed, let go or lost.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.db.fences.changes()
    }

    /// The live nodes, for placement ([`LIVE_NODES`]).
    pub async fn live_nodes(&self) -> Result<Vec<NodeLoad>, StoreError> {
        self.postgres_only()?;
        let reading = sqlx::query(LIVE_NODES).fetch_all(&self.db.pool);
        let rows = self.db.within("the live nodes", async { Ok(reading.await?) }).await?;
        let mut nodes = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: String = row.try_get(0)?;
            let Ok(id) = NodeId::new(&id) else { continue };
            let live: i64 = row.try_get(1)?;
            let slots: i64 = row.try_get(2)?;
            nodes.push(NodeLoad { id, live: live.max(0).unsigned_abs(), slots: slots.max(0).unsigned_abs() });
        }
        Ok(nodes)
    }

    fn postgres_only(&self) -> Result<(), StoreError> {
        match self.db.dialect {
            Dialect::Postgres => Ok(()),
            Dialect::Sqlite => Err(StoreError::NotShared),
        }
    }
}
