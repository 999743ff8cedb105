//! A claim round's statements: the groups with work and their leases, the
//! leases the store shows held by this incarnation (ghosts: `cluster::ghost`)
//! adopted or let go, and the claim's own transaction (a bounded lock wait,
//! then `CLAIM_LEASE`), which `Leases::claim` and the takeover share.

use sqlx::Row;

use super::fence::{CLAIM_LEASE, GROUPS_WITH_WORK, RELEASE_LEASE};
use crate::cluster::fence::LeaseName;
use crate::cluster::node_id::NodeId;
use crate::cluster::LeaseSeen;
use crate::domain::GroupName;
use crate::store::db::Db;
use crate::store::handles::ClusterStore;
use crate::store::StoreError;

/// The leases held by one incarnation of a node: `name`, `epoch`. `$1` node
/// id, `$2` incarnation. Cheap: `leases` has a row per group and gateway.
const HELD_BY: &str = "SELECT name, epoch FROM leases WHERE node_id = $1 AND incarnation = $2 ORDER BY name";

impl ClusterStore {
    /// The groups with work and their leases ([`GROUPS_WITH_WORK`]).
    pub async fn groups_with_work(&self) -> Result<Vec<(GroupName, LeaseSeen)>, StoreError> {
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

    /// The leases the store shows held by this node's incarnation
    /// `incarnation`, with their epochs (for `cluster::ghost`), and the
    /// generation of what this node holds in memory when it read them
    /// (for [`ClusterStore::adopt`]).
    pub async fn held_in_store(
        &self,
        node: &NodeId,
        incarnation: i64,
    ) -> Result<(Vec<(LeaseName, i64)>, u64), StoreError> {
        let generation = self.db.fences.generation();
        let reading = sqlx::query(HELD_BY).bind(node.as_str()).bind(incarnation).fetch_all(&self.db.pool);
        let rows = self.db.within("this node's leases", async { Ok(reading.await?) }).await?;
        let mut held = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = row.try_get(0)?;
            let Some(lease) = LeaseName::parse(&name) else {
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
}

/// The metrics' kind of a lease: a gateway's or a group's.
pub(in crate::store) fn kind(lease: &LeaseName) -> &'static str {
    if lease.is_gateway() {
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

/// Opens a claim's transaction: a lease row locked by someone else's open
/// transaction is waited for at most `PgBounds::claim_lock_wait`, then the
/// statement fails ([`skipped_when_locked`]) rather than hold up the claims
/// after it.
pub(in crate::store) async fn begin_claim(db: &Db) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
    let bounds = db.bounds.unwrap_or_default();
    let mut tx = db.pool.begin().await?;
    sqlx::query(SET_CLAIM_LOCK_WAIT).bind(bounds.claim_lock_wait_setting()).execute(&mut *tx).await?;
    Ok(tx)
}

/// Claims `lease`'s row in a claim's transaction ([`begin_claim`]): its new
/// epoch, or `None` when a live holder keeps it.
pub(in crate::store) async fn claim_row(
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

/// Sets the transaction's `lock_timeout`; `$1` its value (`"300ms"`).
const SET_CLAIM_LOCK_WAIT: &str = "SELECT set_config('lock_timeout', $1, true)";

/// A claim refused by its lock wait (PostgreSQL's `lock_not_available`,
/// 55P03) is no claim this round: `Ok(None)`, as when another node holds it.
pub(in crate::store) fn skipped_when_locked<T>(e: StoreError) -> Result<Option<T>, StoreError> {
    match &e {
        StoreError::Sql(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => {
            tracing::debug!(%e, "a lease row is locked by a write in progress; not claimed this round");
            Ok(None)
        }
        _ => Err(e),
    }
}
