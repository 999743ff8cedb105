//! The groups' folder snapshots a cluster node keeps in the shared store
//! (PostgreSQL only; `migrations/postgres/0004_folders.sql`): the latest
//! one per group, written by its owner in a fenced transaction, read by the
//! node that claims the group next. What the bytes hold is `workspace`'s.

use super::clock::now_us;
use super::db::Dialect;
use super::error::StoreError;
use super::fenced;
use super::handles::Folders;
use crate::domain::GroupName;

/// A stored snapshot: when it was taken, and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FolderSnapshot {
    pub taken_at_us: i64,
    pub bytes: Vec<u8>,
}

impl Folders {
    /// Whether this store keeps folders: a cluster node's, on PostgreSQL.
    pub fn kept(&self) -> bool {
        self.db.dialect == Dialect::Postgres && self.db.fences.is_cluster_node()
    }

    /// Stores `bytes` as `group`'s folder, taken now by `node` (fenced: a
    /// node whose lease moved on stores nothing); returns its time.
    pub async fn put(&self, group: &GroupName, node: &str, bytes: &[u8]) -> Result<i64, StoreError> {
        let at = now_us();
        let query = sqlx::query(
            "INSERT INTO group_folders (group_name, taken_at_us, taken_by, bytes) VALUES ($1, $2, $3, $4)
             ON CONFLICT (group_name) DO UPDATE SET taken_at_us = EXCLUDED.taken_at_us,
                    taken_by = EXCLUDED.taken_by, bytes = EXCLUDED.bytes",
        )
        .bind(group.as_str())
        .bind(at)
        .bind(node)
        .bind(bytes);
        fenced::execute_for(&self.db, group, query).await?;
        Ok(at)
    }

    /// When `group`'s stored snapshot was taken, if there is one.
    pub async fn taken_at(&self, group: &GroupName) -> Result<Option<i64>, StoreError> {
        let at = sqlx::query_scalar("SELECT taken_at_us FROM group_folders WHERE group_name = $1")
            .bind(group.as_str())
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(at)
    }

    /// `group`'s stored snapshot, if there is one.
    pub async fn get(&self, group: &GroupName) -> Result<Option<FolderSnapshot>, StoreError> {
        let row: Option<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT taken_at_us, bytes FROM group_folders WHERE group_name = $1")
                .bind(group.as_str())
                .fetch_optional(&self.db.pool)
                .await?;
        Ok(row.map(|(taken_at_us, bytes)| FolderSnapshot { taken_at_us, bytes }))
    }
}
