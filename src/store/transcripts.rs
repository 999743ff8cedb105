//! The CLI transcripts a cluster node keeps in the shared store (PostgreSQL
//! only; `migrations/postgres/0003_transcripts.sql`): per group and session,
//! the bytes its `.jsonl` gained, as contiguous chunks. A chunk is written
//! in the result's fenced transaction (`results.rs`) or alone, fenced the
//! same way ([`Transcripts::sync`]); the next owner reads them back before
//! `--resume`. What the bytes are and where they come from is
//! `session::transcript`'s.

use sqlx::AnyConnection;

use super::clock::now_us;
use super::db::Dialect;
use super::error::StoreError;
use super::fenced;
use super::handles::Transcripts;
use crate::domain::GroupName;

/// A write of one session's stored transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TranscriptWrite {
    /// `bytes` appended at byte `at` of the file (where the stored copy ends).
    Append { session: String, at: i64, bytes: Vec<u8> },
    /// The stored copy cannot be kept whole (a cap, a rewritten file): none
    /// is kept, so the next owner starts a fresh session.
    Drop { session: String },
}

/// A chunk, inserted only where the stored copy ends: a chunk read against
/// a stale offset is left out (the next capture reads from the right one).
const APPEND_SQL: &str = "
INSERT INTO transcript_chunks (group_name, session_id, start_at, end_at, bytes, stored_at_us)
SELECT $1, $2, $3, $4, $5, $6
 WHERE $3 = (SELECT COALESCE(MAX(end_at), 0) FROM transcript_chunks WHERE group_name = $1 AND session_id = $2)";

const DROP_SQL: &str = "DELETE FROM transcript_chunks WHERE group_name = $1 AND session_id = $2";

const STORED_LEN_SQL: &str =
    "SELECT COALESCE(MAX(end_at), 0) FROM transcript_chunks WHERE group_name = $1 AND session_id = $2";

const LAST_CHUNK_SQL: &str = "SELECT start_at, bytes FROM transcript_chunks
 WHERE group_name = $1 AND session_id = $2 ORDER BY start_at DESC LIMIT 1";

const CHUNKS_SQL: &str =
    "SELECT start_at, bytes FROM transcript_chunks WHERE group_name = $1 AND session_id = $2 ORDER BY start_at";

/// Runs `write` of `group`'s on `conn`, inside the caller's (fenced) transaction.
pub(super) async fn write_in(
    conn: &mut AnyConnection,
    group: &GroupName,
    write: &TranscriptWrite,
) -> Result<(), StoreError> {
    match write {
        TranscriptWrite::Append { session, at, bytes } => {
            let end = at + i64::try_from(bytes.len()).unwrap_or(i64::MAX);
            let done = sqlx::query(APPEND_SQL)
                .bind(group.as_str())
                .bind(session.as_str())
                .bind(*at)
                .bind(end)
                .bind(bytes.as_slice())
                .bind(now_us())
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() == 0 {
                tracing::warn!(%group, session, at, "a transcript chunk did not follow the stored copy; left out");
            }
        }
        TranscriptWrite::Drop { session } => {
            sqlx::query(DROP_SQL).bind(group.as_str()).bind(session.as_str()).execute(&mut *conn).await?;
        }
    }
    Ok(())
}

impl Transcripts {
    /// Whether this store keeps transcripts: only a cluster node's (its
    /// writes are fenced). Everything else here is for such a store.
    pub fn kept(&self) -> bool {
        self.db.dialect == Dialect::Postgres && self.db.fences.is_cluster_node()
    }

    /// Where `session`'s stored copy ends (0: nothing stored).
    pub async fn stored_len(&self, group: &GroupName, session: &str) -> Result<u64, StoreError> {
        self.postgres_only()?;
        let len: i64 =
            sqlx::query_scalar(STORED_LEN_SQL).bind(group.as_str()).bind(session).fetch_one(&self.db.pool).await?;
        Ok(u64::try_from(len).unwrap_or(0))
    }

    /// The last chunk of `session`'s stored copy, and where it starts.
    pub async fn last_chunk(&self, group: &GroupName, session: &str) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.postgres_only()?;
        let last: Option<(i64, Vec<u8>)> =
            sqlx::query_as(LAST_CHUNK_SQL).bind(group.as_str()).bind(session).fetch_optional(&self.db.pool).await?;
        Ok(last.map(|(start, bytes)| (u64::try_from(start).unwrap_or(0), bytes)))
    }

    /// `session`'s stored copy, from its first byte; empty when none is
    /// stored or its chunks do not join up.
    pub async fn load(&self, group: &GroupName, session: &str) -> Result<Vec<u8>, StoreError> {
        self.postgres_only()?;
        let chunks: Vec<(i64, Vec<u8>)> =
            sqlx::query_as(CHUNKS_SQL).bind(group.as_str()).bind(session).fetch_all(&self.db.pool).await?;
        let mut whole = Vec::new();
        for (start, bytes) in chunks {
            if usize::try_from(start).ok() != Some(whole.len()) {
                tracing::warn!(%group, session, start, "a stored transcript has a gap; not restored");
                return Ok(Vec::new());
            }
            whole.extend_from_slice(&bytes);
        }
        Ok(whole)
    }

    /// Stores `write` alone (at an idle close, before a clean stop), fenced
    /// by the group's lease.
    pub async fn sync(&self, group: &GroupName, write: &TranscriptWrite) -> Result<(), StoreError> {
        self.postgres_only()?;
        let mut tx = fenced::begin_for(&self.db, group).await?;
        write_in(&mut tx, group, write).await?;
        tx.commit().await?;
        Ok(())
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
