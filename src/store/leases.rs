//! The cluster's rows (PostgreSQL only): this node's registration, the
//! leases it claims and lets go, and the fences its writes check. The SQL is
//! `cluster::{membership, fence}`'s; what to claim and when is decided there
//! too. Here it runs, and the leases this node holds are remembered for the
//! writes that must check them ([`Fences`]).
//!
//! A fenced write is a transaction that first runs `store::cluster::fence::FENCE_CHECK`
//! (`FOR SHARE` on the lease's row with this node and the epoch it claimed):
//! with no row, the lease moved on, the write is rolled back and the caller
//! gets [`StoreError::Fenced`]. A takeover's `UPDATE` of that row waits for
//! every such transaction still open, so the new holder reads the group
//! only after the old holder's last write committed.

use sqlx::{AnyConnection, Row};

use super::cluster::fence::{CLAIM_LEASE, FENCE_CHECK, GROUPS_WITH_WORK, RELEASE_LEASE};
use super::cluster::membership::{LEAVE, LIVE_NODES, REGISTER_NODE, RENEW_NODE};
use super::db::Dialect;
use super::error::StoreError;
use super::fences::Fences;
use super::handles::Leases;
use crate::cluster::fence::{Fence, LeaseName};
use crate::cluster::node_id::NodeId;
use crate::cluster::{LeaseSeen, NodeLoad};
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
        self.postgres_only()?;
        let incarnation: Option<i64> = sqlx::query_scalar(REGISTER_NODE)
            .bind(node.as_str())
            .bind(slots)
            .bind(ttl_us)
            .bind(before)
            .fetch_optional(&self.db.pool)
            .await?;
        if incarnation.is_some() {
            self.db.fences.hold_as(node);
        }
        Ok(incarnation)
    }

    /// Renews this incarnation's row: whether it was still alive.
    pub async fn renew(&self, node: &NodeId, incarnation: i64, ttl_us: i64, live: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(RENEW_NODE)
            .bind(node.as_str())
            .bind(incarnation)
            .bind(ttl_us)
            .bind(live)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends this incarnation at once (after its CLIs are gone).
    pub async fn leave(&self, node: &NodeId, incarnation: i64) -> Result<(), StoreError> {
        sqlx::query(LEAVE).bind(node.as_str()).bind(incarnation).execute(&self.db.pool).await?;
        Ok(())
    }

    /// Claims `lease` if it is free or its holder's row expired; its new epoch.
    pub async fn claim(&self, lease: &LeaseName, node: &NodeId, incarnation: i64) -> Result<Option<i64>, StoreError> {
        let epoch: Option<i64> = sqlx::query_scalar(CLAIM_LEASE)
            .bind(lease.as_str())
            .bind(node.as_str())
            .bind(incarnation)
            .fetch_optional(&self.db.pool)
            .await?;
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
            sqlx::query(RELEASE_LEASE).bind(name).bind(node).bind(epoch).execute(&self.db.pool).await?;
            self.db.fences.forget(lease);
            crate::metrics::counters::counters().lease_released();
        }
        Ok(())
    }

    /// Makes this store a cluster node's before it registers: from now on
    /// every group write is fenced, and nothing runs until a lease is claimed.
    pub fn enter_cluster(&self, node: &NodeId) -> Result<(), StoreError> {
        self.postgres_only()?;
        self.db.fences.hold_as(node);
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

    /// This node's CLIs must be dead by `until` unless it moves again.
    pub fn set_deadline(&self, until: tokio::time::Instant) {
        self.db.fences.set_deadline(until);
    }

    /// Until when this node's CLIs may run, to watch (their guards are told).
    pub fn deadline(&self) -> tokio::sync::watch::Receiver<Option<tokio::time::Instant>> {
        self.db.fences.deadline()
    }

    /// Changes whenever a lease is claimed, let go or lost.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.db.fences.changes()
    }

    /// The groups with work and their leases ([`GROUPS_WITH_WORK`]).
    pub async fn groups_with_work(&self) -> Result<Vec<(GroupName, LeaseSeen)>, StoreError> {
        self.postgres_only()?;
        let rows = sqlx::query(GROUPS_WITH_WORK).fetch_all(&self.db.pool).await?;
        let mut work = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = row.try_get(0)?;
            let Ok(group) = name.parse::<GroupName>() else {
                tracing::warn!(%name, "a group name in the store is not valid; leaving its work alone");
                continue;
            };
            work.push((group, lease_seen(row)?));
        }
        Ok(work)
    }

    /// The live nodes, for placement ([`LIVE_NODES`]).
    pub async fn live_nodes(&self) -> Result<Vec<NodeLoad>, StoreError> {
        self.postgres_only()?;
        let rows = sqlx::query(LIVE_NODES).fetch_all(&self.db.pool).await?;
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

/// The metrics' kind of a lease: a gateway's or a group's.
pub(super) fn kind(lease: &LeaseName) -> &'static str {
    if lease.as_str().starts_with("gw:") {
        "gateway"
    } else {
        "group"
    }
}

/// A row of [`GROUPS_WITH_WORK`] as a lease seen.
fn lease_seen(row: &sqlx::any::AnyRow) -> Result<LeaseSeen, StoreError> {
    let node: Option<String> = row.try_get(1)?;
    let incarnation: Option<i64> = row.try_get(2)?;
    let epoch: Option<i64> = row.try_get(3)?;
    let expired: i64 = row.try_get(4)?;
    Ok(match (node.and_then(|n| NodeId::new(&n).ok()), incarnation) {
        (Some(node), Some(incarnation)) => {
            LeaseSeen::Held { node, incarnation, epoch: epoch.unwrap_or(0), holder_expired: expired != 0 }
        }
        _ => LeaseSeen::Free,
    })
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
    let mut tx = begin_checked(&db.pool, &db.fences, group).await?;
    let done = query.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`execute_for`] on the message path's connection (`hot`), for a write
/// that may return rows (`RETURNING`): the rows.
pub(super) async fn fetch_hot_for<'q>(
    db: &super::db::Db,
    group: &GroupName,
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
    let mut conn = db.hot.lock().await?;
    if !db.fences.is_cluster_node() {
        return Ok(query.fetch_all(&mut *conn).await?);
    }
    let mut tx = begin_checked(&mut *conn, &db.fences, group).await?;
    let rows = query.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Opens a transaction for a write of `group`'s, its lease checked first on a cluster node.
pub(super) async fn begin_for(
    db: &super::db::Db,
    group: &GroupName,
) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
    begin_checked(&db.pool, &db.fences, group).await
}
