//! Which files in a group's folder a member-steered turn wrote since the
//! admins last approved a command (issue 44; `session::provenance` decides,
//! this keeps it across restarts and node moves). Touches `file_provenance`;
//! each write is fenced by the group's lease on a cluster node (`fenced.rs`).
//!
//! Bounds: at most [`MAX_ROWS`] rows per group (the newest), a path and a
//! sender list cut to what the table's CHECKs allow.

use sqlx::Row;

use super::error::StoreError;
use super::fenced;
use super::handles::Journal;
use crate::domain::GroupName;

/// Most rows kept per group: the newest.
pub const MAX_ROWS: usize = 64;
/// Longest path kept, in characters (the table's CHECK).
const MAX_PATH_CHARS: usize = 512;
/// Longest sender list kept, in characters (the table's CHECK).
const MAX_SENDERS_CHARS: usize = 2048;

/// One path and whose messages steered its writing.
pub type Written = (String, Vec<String>);

impl Journal {
    /// `group`'s paths, oldest first.
    pub async fn provenance(&self, group: &GroupName) -> Result<Vec<Written>, StoreError> {
        let rows = sqlx::query("SELECT path, senders FROM file_provenance WHERE group_name = $1 ORDER BY seq LIMIT $2")
            .bind(group.as_str())
            .bind(MAX_ROWS as i64)
            .fetch_all(&self.db.pool)
            .await?;
        Ok(super::error::readable("file_provenance", &rows, |row| {
            let senders: String = row.try_get(1)?;
            Ok((row.try_get(0)?, senders.lines().map(str::to_owned).collect()))
        }))
    }

    /// Replaces `group`'s paths with `written` (oldest first; the newest [`MAX_ROWS`] are kept).
    pub async fn keep_provenance(&self, group: &GroupName, written: &[Written]) -> Result<(), StoreError> {
        let newest = &written[written.len().saturating_sub(MAX_ROWS)..];
        let mut tx = fenced::begin_for(&self.db, group).await?;
        sqlx::query("DELETE FROM file_provenance WHERE group_name = $1").bind(group.as_str()).execute(&mut *tx).await?;
        for (seq, (path, senders)) in newest.iter().enumerate() {
            // A sender's name holds no line break (control characters are dropped before it comes here).
            let senders: String = senders.join("\n").chars().take(MAX_SENDERS_CHARS).collect();
            sqlx::query("INSERT INTO file_provenance (group_name, seq, path, senders) VALUES ($1, $2, $3, $4)")
                .bind(group.as_str())
                .bind(seq as i64)
                .bind(path.chars().take(MAX_PATH_CHARS).collect::<String>())
                .bind(senders)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Forgets `group`'s paths: an admin approved a command.
    pub async fn clear_provenance(&self, group: &GroupName) -> Result<(), StoreError> {
        let query = sqlx::query("DELETE FROM file_provenance WHERE group_name = $1").bind(group.as_str());
        fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }
}
