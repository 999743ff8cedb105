//! The leases this node holds, as every part of it asks about them: whether
//! it may run a group (always on one machine), what changed, until when its
//! CLIs may run; one lease claimed or let go (a gateway's, a drained
//! session's), and who could take it over. And the fenced write every group
//! write of a cluster node is. A node's own statements (its row, claim
//! rounds, takeovers, ghosts) are behind the cluster door (`cluster/`).
//!
//! A fenced write is a transaction that first runs `store::cluster::fence::FENCE_CHECK`
//! (`FOR SHARE` on the lease's row with this node and the epoch it claimed):
//! with no row, the lease moved on, the write is rolled back and the caller
//! gets [`StoreError::Fenced`]. A takeover's `UPDATE` of that row waits for
//! every such transaction still open, so the new holder reads the group
//! only after the old holder's last write committed.

use sqlx::{AnyConnection, Row};

use super::cluster::fence::{FENCE_CHECK, RELEASE_LEASE};
use super::cluster::membership::LIVE_NODES;
use super::cluster::{begin_claim, claim_row, kind, skipped_when_locked};
use super::db::Dialect;
use super::error::StoreError;
use super::fences::Fences;
use super::handles::Leases;
use crate::cluster::fence::{Fence, LeaseName};
use crate::cluster::node_id::NodeId;
use crate::cluster::NodeLoad;
use crate::domain::GroupName;

/// Runs the fence check of `fence` on `conn`, inside the caller's
/// transaction; a lease that moved on is forgotten and refused.
pub(super) async fn check(conn: &mut AnyConnection, fences: &Fences, fence: &Fence) -> Result<(), StoreError> {
    let (name, node, epoch) = fence.params();
    let held: Option<i32> =
        sqlx::query_scalar(FENCE_CHECK).bind(name).bind(node).bind(epoch).fetch_optional(&mut *conn).await?;
    if held.is_none() {
        fences.forget(&fence.lease);
        crate::metrics::counters::counters().lease_lost("fenced");
        return Err(StoreError::Fenced(name.to_owned()));
    }
    Ok(())
}

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

/// Opens a transaction on `conn` for a write of `group`'s; on a cluster
/// node its lease is checked first ([`check`]), so nothing in it commits
/// once the group moved on.
pub(super) async fn begin_checked<'c, A>(
    conn: A,
    fences: &Fences,
    group: &GroupName,
) -> Result<sqlx::Transaction<'c, sqlx::Any>, StoreError>
where
    A: sqlx::Acquire<'c, Database = sqlx::Any>,
{
    let fence = fences.of(&LeaseName::group(group))?;
    let mut tx = conn.begin().await?;
    if let Some(fence) = &fence {
        check(&mut tx, fences, fence).await?;
    }
    Ok(tx)
}

/// Runs `query`, a write of `group`'s: alone, or, on a cluster node, in a
/// transaction that first checks the group's lease ([`begin_checked`]).
pub(super) async fn execute_for<'q>(
    db: &super::db::Db,
    group: &GroupName,
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> Result<sqlx::any::AnyQueryResult, StoreError> {
    if !db.fences.is_cluster_node() {
        return Ok(query.execute(&db.pool).await?);
    }
    let writing = async {
        let mut tx = begin_checked(&db.pool, &db.fences, group).await?;
        let done = query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(done)
    };
    db.within("a fenced write", writing).await
}

/// [`execute_for`] on the message path's connection (`hot`), for a write
/// that may return rows (`RETURNING`): the rows.
pub(super) async fn fetch_hot_for<'q>(
    db: &super::db::Db,
    group: &GroupName,
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
    if !db.fences.is_cluster_node() {
        let mut conn = db.hot.lock().await?;
        return Ok(query.fetch_all(&mut *conn).await?);
    }
    let writing = async {
        let mut conn = db.hot.lock().await?;
        let mut tx = begin_checked(&mut *conn, &db.fences, group).await?;
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    };
    db.within("a fenced write", writing).await
}

/// Opens a transaction for a write of `group`'s, its lease checked first on
/// a cluster node (the opening and the check bounded: [`super::db::Db::within`]).
pub(super) async fn begin_for(
    db: &super::db::Db,
    group: &GroupName,
) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
    db.within("a fenced write's lease check", begin_checked(&db.pool, &db.fences, group)).await
}

/// The cluster's statements as tests written before `Store::cluster()` call
/// them on `Leases`; new code goes through the door (`StoreError::NotShared`
/// on SQLite, as before).
#[cfg(test)]
impl Leases {
    fn door(&self) -> Result<super::handles::ClusterStore, StoreError> {
        self.postgres_only()?;
        Ok(super::handles::ClusterStore::new(self.db.clone()))
    }

    pub async fn register(
        &self,
        node: &NodeId,
        slots: i64,
        ttl_us: i64,
        before: i64,
    ) -> Result<Option<i64>, StoreError> {
        self.door()?.register(node, slots, ttl_us, before).await
    }

    pub async fn claim_group(
        &self,
        group: &GroupName,
        node: &NodeId,
        incarnation: i64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<super::Takeover>, StoreError> {
        self.door()?.claim_group(group, node, incarnation, now).await
    }

    pub fn enter_cluster(&self, node: &NodeId) -> Result<(), StoreError> {
        self.door()?.enter_cluster(node);
        Ok(())
    }

    pub async fn groups_with_work(&self) -> Result<Vec<(GroupName, crate::cluster::LeaseSeen)>, StoreError> {
        self.door()?.groups_with_work().await
    }
}
