//! What each group's agent is doing, mirrored between cluster nodes
//! (PostgreSQL only; `migrations/postgres/0009_activity.sql`): the node that
//! runs a group overwrites its row as the activity changes
//! ([`Activities::mirror`], fenced: only the group's owner writes it, so a
//! node that lost the group cannot show stale work), and the node serving
//! the group's chat reads the rows of the groups it follows
//! ([`Activities::read`]) while they were written under the group's lease
//! as it is held now (its epoch): a node that restarted, or took the group
//! back, shows nothing of what it mirrored before until it writes again. The body is the caller's text
//! (`domain::activity::wire`, at most its `MAX_BODY`, as the table's CHECK
//! says); the store keeps it opaque.

use sqlx::Row;

use super::cluster::fence::DB_NOW_US;
use super::db::Dialect;
use super::error::StoreError;
use super::fenced;
use super::handles::Activities;
use crate::domain::GroupName;

/// One group's mirrored activity, as last written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirrored {
    /// Grows at each write: a reader skips a version it has shown.
    pub version: i64,
    pub body: String,
}

/// The group's lease epoch, inside a fenced write: the fence check in the
/// same transaction made it this node's, at the epoch it claimed.
const EPOCH_NOW: &str = "COALESCE((SELECT epoch FROM leases WHERE name = $1), 0)";

impl Activities {
    /// Overwrites `group`'s activity with `body`, written by `node`; fenced
    /// to the group's owner ([`StoreError::Fenced`] once it is not).
    pub async fn mirror(&self, group: &GroupName, node: &str, body: &str) -> Result<(), StoreError> {
        self.postgres_only()?;
        let sql = format!(
            "INSERT INTO group_activity (group_name, node, version, body, epoch)
             VALUES ($1, $2, 1, $3, {EPOCH_NOW})
             ON CONFLICT (group_name) DO UPDATE
                SET node = $2, version = group_activity.version + 1, body = $3, written_at_us = {DB_NOW_US},
                    epoch = {EPOCH_NOW}"
        );
        let query = sqlx::query(&sql).bind(group.as_str()).bind(node).bind(body);
        fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }

    /// `group`'s activity as last mirrored, while its writer still holds the
    /// group on a live node at the epoch it wrote under; `None` when nothing
    /// was mirrored or the writer lost the group (died mid-turn, another node
    /// took it, or it claimed it again after a restart): what it showed is
    /// stale until the owner writes.
    pub async fn read(&self, group: &GroupName) -> Result<Option<Mirrored>, StoreError> {
        self.postgres_only()?;
        let sql = format!(
            "SELECT a.version, a.body FROM group_activity a
               JOIN leases l ON l.name = a.group_name AND l.node_id = a.node AND l.epoch = a.epoch
               JOIN nodes n ON n.node_id = l.node_id AND n.incarnation = l.incarnation
              WHERE a.group_name = $1 AND n.expires_at_us > {DB_NOW_US}"
        );
        let row = sqlx::query(&sql).bind(group.as_str()).fetch_optional(&self.db.pool).await?;
        let Some(row) = row else { return Ok(None) };
        let bad = |source| StoreError::BadRow { table: "group_activity", key: group.to_string(), source };
        Ok(Some(Mirrored { version: row.try_get("version").map_err(bad)?, body: row.try_get("body").map_err(bad)? }))
    }

    fn postgres_only(&self) -> Result<(), StoreError> {
        match self.db.dialect {
            Dialect::Postgres => Ok(()),
            Dialect::Sqlite => Err(StoreError::NotShared),
        }
    }
}

#[cfg(test)]
mod tests;
