//! Which files in a group's folder a member-steered turn wrote since the
//! admins last approved a command (issue 44; `session::provenance` decides,
//! this keeps it across restarts and node moves). Touches `file_provenance`;
//! each write is fenced by the group's lease on a cluster node (`fenced.rs`).
//!
//! Bounds: at most [`MAX_ROWS`] rows per group (the newest), a path and a
//! sender list cut to what the table's CHECKs allow. A write touches one
//! path's row and trims what falls past the bound: its cost does not grow
//! with the rows kept.

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

    /// `written` becomes `group`'s newest path (its older row, if any, goes:
    /// the caller merged its senders), and only the newest [`MAX_ROWS`] stay.
    pub async fn record_provenance(&self, group: &GroupName, written: &Written) -> Result<(), StoreError> {
        let (path, senders) = written;
        let path: String = path.chars().take(MAX_PATH_CHARS).collect();
        // A sender's name holds no line break (control characters are dropped before it comes here).
        let senders: String = senders.join("\n").chars().take(MAX_SENDERS_CHARS).collect();
        let mut tx = fenced::begin_for(&self.db, group).await?;
        sqlx::query("DELETE FROM file_provenance WHERE group_name = $1 AND path = $2")
            .bind(group.as_str())
            .bind(&path)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO file_provenance (group_name, seq, path, senders) \
             SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3 FROM file_provenance WHERE group_name = $1",
        )
        .bind(group.as_str())
        .bind(&path)
        .bind(senders)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM file_provenance WHERE group_name = $1 AND seq NOT IN \
             (SELECT seq FROM file_provenance WHERE group_name = $1 ORDER BY seq DESC LIMIT $2)",
        )
        .bind(group.as_str())
        .bind(MAX_ROWS as i64)
        .execute(&mut *tx)
        .await?;
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

#[cfg(test)]
mod tests {
    use crate::store::tests::{on_both, temp_store};

    use super::*;

    fn group(name: &str) -> GroupName {
        name.parse().unwrap()
    }

    fn written(path: &str, senders: &[&str]) -> Written {
        (path.to_owned(), senders.iter().map(|s| s.to_string()).collect())
    }

    on_both! {
        async fn a_write_is_the_newest_row_and_the_oldest_past_the_bound_go() {
            let (_dir, store) = temp_store().await;
            let (a, b) = (group("a"), group("b"));
            let journal = store.journal();
            for i in 0..MAX_ROWS + 5 {
                journal.record_provenance(&a, &written(&format!("f{i}"), &["mallory"])).await.unwrap();
            }
            journal.record_provenance(&b, &written("HEAD", &["eve", "mallory"])).await.unwrap();
            let kept = journal.provenance(&a).await.unwrap();
            assert_eq!(kept.len(), MAX_ROWS, "the newest kept");
            assert_eq!(kept.first().unwrap().0, "f5");
            assert_eq!(kept.last().unwrap(), &written(&format!("f{}", MAX_ROWS + 4), &["mallory"]));
            // Written again: its row moves to the newest, with the senders given.
            journal.record_provenance(&a, &written("f10", &["mallory", "eve"])).await.unwrap();
            let kept = journal.provenance(&a).await.unwrap();
            assert_eq!(kept.len(), MAX_ROWS, "one row per path");
            assert_eq!(kept.last().unwrap(), &written("f10", &["mallory", "eve"]));
            assert_eq!(kept.iter().filter(|(path, _)| path == "f10").count(), 1);
            assert_eq!(journal.provenance(&b).await.unwrap(), [written("HEAD", &["eve", "mallory"])], "per group");
            journal.clear_provenance(&a).await.unwrap();
            assert!(journal.provenance(&a).await.unwrap().is_empty());
            journal.record_provenance(&a, &written("config", &["mallory"])).await.unwrap();
            assert_eq!(journal.provenance(&a).await.unwrap(), [written("config", &["mallory"])], "after a clear");
        }
    }

    on_both! {
        async fn a_write_touches_one_row_however_many_are_kept() {
            let (_dir, store) = temp_store().await;
            let a = group("a");
            let journal = store.journal();
            for i in 0..MAX_ROWS {
                journal.record_provenance(&a, &written(&format!("f{i}"), &["mallory"])).await.unwrap();
            }
            let seqs = || async {
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT path, seq FROM file_provenance WHERE group_name = 'a' ORDER BY seq")
                        .fetch_all(&store.db.pool)
                        .await
                        .unwrap();
                rows
            };
            let before = seqs().await;
            journal.record_provenance(&a, &written("new", &["eve"])).await.unwrap();
            let after = seqs().await;
            // The rows kept are the very rows that were there (same seq): not rewritten.
            assert_eq!(after[..MAX_ROWS - 1], before[1..], "only the oldest went");
            assert_eq!(after.last().unwrap().0, "new");
        }
    }
}
