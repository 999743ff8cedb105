//! The one place a fenced transaction is begun and its lease checked: every
//! write of a group's on a cluster node (results, message states, journal,
//! notices, schedules, transcripts, …) goes through here; on one machine
//! the same calls write unfenced.
//!
//! A fenced write is a transaction that first runs `store::cluster::fence::FENCE_CHECK`
//! (`FOR SHARE` on the lease's row with this node and the epoch it claimed):
//! with no row, the lease moved on, the write is rolled back and the caller
//! gets [`StoreError::Fenced`]. A takeover's `UPDATE` of that row waits for
//! every such transaction still open, so the new holder reads the group
//! only after the old holder's last write committed.
//!
//! Every statement after the check runs under the pools' session bounds
//! (`statement_timeout`, `idle_in_transaction_session_timeout`: `cluster::bounds`,
//! set in `db.rs`), so a node frozen inside one holds the lease row's lock
//! for a bounded time; [`execute_for`] and [`fetch_hot_for`] also bound the
//! whole write by the client's wait (`Db::within`), [`begin_for`] its opening
//! and check.

use sqlx::AnyConnection;

use super::cluster::fence::FENCE_CHECK;
use super::db::Db;
use super::error::StoreError;
use super::fences::Fences;
use crate::cluster::fence::{Fence, LeaseName};
use crate::domain::GroupName;

/// Runs the fence check of `fence` on `conn`, inside the caller's
/// transaction; a lease that moved on is forgotten and refused.
async fn check(conn: &mut AnyConnection, fences: &Fences, fence: &Fence) -> Result<(), StoreError> {
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
    db: &Db,
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
    db: &Db,
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
pub(super) async fn begin_for(db: &Db, group: &GroupName) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
    db.within("a fenced write's lease check", begin_checked(&db.pool, &db.fences, group)).await
}
