//! The cluster's rows (PostgreSQL only): this node's registration, the
//! leases it claims and lets go, and the fences its writes check. The SQL is
//! `cluster::{membership, fence}`'s; what to claim and when is decided there
//! too. Here it runs, and the leases this node holds are remembered for the
//! writes that must check them ([`Fences`]).
//!
//! A fenced write is a transaction that first runs `cluster::fence::FENCE_CHECK`
//! (`FOR SHARE` on the lease's row with this node and the epoch it claimed):
//! with no row, the lease moved on, the write is rolled back and the caller
//! gets [`StoreError::Fenced`]. A takeover's `UPDATE` of that row waits for
//! every such transaction still open, so the new holder reads the group
//! only after the old holder's last write committed.

use sqlx::{AnyConnection, Row};

use super::db::Dialect;
use super::error::StoreError;
use super::fences::Fences;
use super::handles::Leases;
use crate::cluster::fence::{Fence, LeaseName, CLAIM_LEASE, FENCE_CHECK, GROUPS_WITH_WORK, RELEASE_LEASE};
use crate::cluster::membership::{LEAVE, LIVE_NODES, REGISTER_NODE, RENEW_NODE};
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

/// The leases held by one incarnation of a node: `name`, `epoch`. `$1` node
/// id, `$2` incarnation. Cheap: `leases` has a row per group and gateway.
const HELD_BY: &str = "SELECT name, epoch FROM leases WHERE node_id = $1 AND incarnation = $2 ORDER BY name";

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

    /// The leases the store shows held by this node's incarnation
    /// `incarnation`, with their epochs (for `cluster::ghost`), and the
    /// generation of what this node holds in memory when it read them
    /// (for [`Leases::adopt`]).
    pub async fn held_in_store(
        &self,
        node: &NodeId,
        incarnation: i64,
    ) -> Result<(Vec<(LeaseName, i64)>, u64), StoreError> {
        self.postgres_only()?;
        let generation = self.db.fences.generation();
        let reading = sqlx::query(HELD_BY).bind(node.as_str()).bind(incarnation).fetch_all(&self.db.pool);
        let rows = self.db.within("this node's leases", async { Ok(reading.await?) }).await?;
        let mut held = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = row.try_get(0)?;
            let Some(lease) = lease_named(&name) else {
                tracing::warn!(%name, "a lease name in the store is not one pincer makes; leaving it alone");
                continue;
            };
            held.push((lease, row.try_get::<i64, _>(1)?));
        }
        Ok((held, generation))
    }

    /// The epoch this node holds `lease` at in memory, if it does.
    pub fn known_epoch(&self, lease: &LeaseName) -> Option<i64> {
        self.db.fences.of(lease).ok().flatten().map(|fence| fence.epoch)
    }

    /// Holds a ghost lease (`cluster::ghost`) at the `epoch` the store showed,
    /// unless what this node holds changed since `generation` (its
    /// incarnation lapsed meanwhile: the lease went with it). Whether it did.
    pub fn adopt(&self, lease: &LeaseName, epoch: i64, generation: u64) -> bool {
        let adopted = self.db.fences.adopt(lease, epoch, generation);
        if adopted {
            crate::metrics::counters::counters().lease_claimed(kind(lease));
        }
        adopted
    }

    /// Lets a ghost lease go at the `epoch` the store showed (a no-op if it
    /// moved on since).
    pub async fn release_at(&self, lease: &LeaseName, node: &NodeId, epoch: i64) -> Result<(), StoreError> {
        let releasing =
            sqlx::query(RELEASE_LEASE).bind(lease.as_str()).bind(node.as_str()).bind(epoch).execute(&self.db.pool);
        self.db.within("a release", async { Ok(releasing.await?) }).await?;
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
        let reading = sqlx::query(GROUPS_WITH_WORK).fetch_all(&self.db.pool);
        let rows = self.db.within("the groups with work", async { Ok(reading.await?) }).await?;
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

/// The metrics' kind of a lease: a gateway's or a group's.
pub(super) fn kind(lease: &LeaseName) -> &'static str {
    if lease.as_str().starts_with("gw:") {
        "gateway"
    } else {
        "group"
    }
}

/// The lease a stored name is: a group's, or a Telegram or WhatsApp gateway's.
fn lease_named(name: &str) -> Option<LeaseName> {
    if let Some(bot) = name.strip_prefix("gw:telegram:") {
        return bot.parse::<i64>().ok().map(LeaseName::telegram);
    }
    if let Some(number) = name.strip_prefix("gw:whatsapp:") {
        return Some(LeaseName::whatsapp(number)).filter(|_| number.bytes().all(|b| b.is_ascii_digit()));
    }
    name.parse::<GroupName>().ok().map(|group| LeaseName::group(&group))
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

/// Opens a claim's transaction: a lease row locked by someone else's open
/// transaction is waited for at most `PgBounds::claim_lock_wait`, then the
/// statement fails ([`skipped_when_locked`]) rather than hold up the claims
/// after it.
/// Claims `lease`'s row in a claim's transaction ([`begin_claim`]): its new
/// epoch, or `None` when a live holder keeps it.
pub(super) async fn claim_row(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    lease: &LeaseName,
    node: &NodeId,
    incarnation: i64,
) -> Result<Option<i64>, StoreError> {
    let epoch = sqlx::query_scalar(CLAIM_LEASE)
        .bind(lease.as_str())
        .bind(node.as_str())
        .bind(incarnation)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(epoch)
}

pub(super) async fn begin_claim(db: &super::db::Db) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
    let bounds = db.bounds.unwrap_or_default();
    let mut tx = db.pool.begin().await?;
    sqlx::query(SET_CLAIM_LOCK_WAIT).bind(bounds.claim_lock_wait_setting()).execute(&mut *tx).await?;
    Ok(tx)
}

/// Sets the transaction's `lock_timeout`; `$1` its value (`"300ms"`).
const SET_CLAIM_LOCK_WAIT: &str = "SELECT set_config('lock_timeout', $1, true)";

/// A claim refused by its lock wait (PostgreSQL's `lock_not_available`,
/// 55P03) is no claim this round: `Ok(None)`, as when another node holds it.
pub(super) fn skipped_when_locked<T>(e: StoreError) -> Result<Option<T>, StoreError> {
    match &e {
        StoreError::Sql(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => {
            tracing::debug!(%e, "a lease row is locked by a write in progress; not claimed this round");
            Ok(None)
        }
        _ => Err(e),
    }
}
