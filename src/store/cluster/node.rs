//! This node's own row in `nodes` and its life as a node: registering an
//! incarnation, renewing it, leaving, a lapse that drops every lease, and
//! the drain's mark (no slot offered, so placement on every node leaves it
//! out and the group it lets go is claimed at once by the node placement
//! prefers among the others). The SQL is `membership.rs`'s; the node's
//! membership task (`node::membership`) runs these.

use super::membership::{LEAVE, REGISTER_NODE, RENEW_NODE};
use crate::cluster::node_id::NodeId;
use crate::store::handles::{ClusterStore, Leases};
use crate::store::StoreError;

/// Offers no slot any more: `$1` node id, `$2` incarnation. A renewal
/// leaves `slots` alone; a new incarnation (after a lapse) offers its own
/// again, so the drain marks it again.
const DRAINING: &str = "UPDATE nodes SET slots = 0 WHERE node_id = $1 AND incarnation = $2";

impl ClusterStore {
    /// This node's leases, as its parts ask about them.
    pub fn leases(&self) -> Leases {
        Leases::new(self.db.clone())
    }

    /// Makes this store a cluster node's before it registers: from now on
    /// every group write is fenced, and nothing runs until a lease is claimed.
    pub fn enter_cluster(&self, node: &NodeId) {
        self.db.fences.hold_as(node);
    }

    /// Registers this process as a new incarnation of `node`, with `slots`
    /// sessions and rows alive for `ttl_us`; from now on, this store's
    /// group writes are fenced. `None`: another process with this node id
    /// is alive (or left less than a ttl ago).
    pub async fn register(
        &self,
        node: &NodeId,
        slots: i64,
        ttl_us: i64,
        before: i64,
    ) -> Result<Option<i64>, StoreError> {
        let registering = sqlx::query_scalar(REGISTER_NODE)
            .bind(node.as_str())
            .bind(slots)
            .bind(ttl_us)
            .bind(before)
            .fetch_optional(&self.db.pool);
        let incarnation: Option<i64> = self.db.within("a registration", async { Ok(registering.await?) }).await?;
        if incarnation.is_some() {
            self.db.fences.hold_as(node);
        }
        Ok(incarnation)
    }

    /// Renews this incarnation's row: whether it was still alive.
    pub async fn renew(&self, node: &NodeId, incarnation: i64, ttl_us: i64, live: i64) -> Result<bool, StoreError> {
        let renewing = sqlx::query(RENEW_NODE)
            .bind(node.as_str())
            .bind(incarnation)
            .bind(ttl_us)
            .bind(live)
            .execute(&self.db.pool);
        let done = self.db.within("a renewal", async { Ok(renewing.await?) }).await?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends this incarnation at once (after its CLIs are gone).
    pub async fn leave(&self, node: &NodeId, incarnation: i64) -> Result<(), StoreError> {
        let leaving = sqlx::query(LEAVE).bind(node.as_str()).bind(incarnation).execute(&self.db.pool);
        self.db.within("leaving the cluster", async { Ok(leaving.await?) }).await?;
        Ok(())
    }

    /// The node's incarnation lapsed: every lease it held is gone (another
    /// node may claim them now), and its sessions hear so at once.
    pub fn drop_all(&self, node: &NodeId) {
        if self.db.fences.is_cluster_node() {
            for _ in self.db.fences.held() {
                crate::metrics::counters::counters().lease_lost("lapsed");
            }
            self.db.fences.hold_as(node);
        }
    }

    /// This node's CLIs must be dead by `until` unless it moves again.
    pub fn set_deadline(&self, until: tokio::time::Instant) {
        self.db.fences.set_deadline(until);
    }

    /// Marks this incarnation of `node` as draining (no slot offered): whether its row was there.
    pub async fn mark_draining(&self, node: &NodeId, incarnation: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(DRAINING).bind(node.as_str()).bind(incarnation).execute(&self.db.pool).await?;
        Ok(done.rows_affected() == 1)
    }
}
