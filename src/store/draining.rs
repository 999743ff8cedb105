//! A draining cluster node's row (PostgreSQL only): it offers no slot, so
//! placement on every node leaves it out and the group it lets go is
//! claimed at once by the node placement prefers among the others.

use super::error::StoreError;
use super::handles::Leases;
use crate::cluster::node_id::NodeId;

/// Offers no slot any more: `$1` node id, `$2` incarnation. A renewal
/// leaves `slots` alone; a new incarnation (after a lapse) offers its own
/// again, so the drain marks it again.
const DRAINING: &str = "UPDATE nodes SET slots = 0 WHERE node_id = $1 AND incarnation = $2";

impl Leases {
    /// Marks this incarnation of `node` as draining (no slot offered): whether its row was there.
    pub async fn mark_draining(&self, node: &NodeId, incarnation: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(DRAINING).bind(node.as_str()).bind(incarnation).execute(&self.db.pool).await?;
        Ok(done.rows_affected() == 1)
    }
}
