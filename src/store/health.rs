//! Whether the database answers and takes writes (the watchdog, `/readyz`),
//! and the outbox's backlog for the status page.

use super::db::Dialect;
use super::error::StoreError;
use super::handles::Health;

impl Health {
    /// Whether the database answers a query now (the service watchdog's check).
    pub async fn answers(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.db.pool).await.is_ok()
    }

    /// Whether a write could start now (`/readyz`): takes the write lock
    /// and lets it go at once, writing nothing. PostgreSQL has no database
    /// write lock: there a read-write transaction starts, which a standby
    /// (in recovery) refuses.
    ///
    /// Cancel-safe: a probe whose client goes away while the database is
    /// locked drops this future half-way. As a sqlx transaction, a `BEGIN`
    /// that succeeds after nobody waits for it is rolled back by the
    /// connection's own thread, and a dropped transaction rolls back too
    /// (and `db::roll_back_what_was_left_open` catches anything else).
    pub async fn writable(&self) -> bool {
        let begin = match self.db.dialect {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN READ WRITE",
        };
        let Ok(tx) = self.db.pool.begin_with(begin).await else {
            return false;
        };
        let _ = tx.rollback().await;
        true
    }

    /// The outbox now, per platform: rows waiting and the oldest one's `at_us`.
    pub async fn outbox_backlog(&self) -> Result<Vec<(String, i64, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT platform, COUNT(*), MIN(at_us) FROM outbox WHERE state = 'queued' GROUP BY platform ORDER BY platform",
        )
        .fetch_all(&self.db.pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::tests::{on_both, temp_store};

    on_both! {
    async fn a_fresh_store_answers_and_takes_writes() {
        let (_dir, store) = temp_store().await;
        assert!(store.health().answers().await);
        assert!(store.health().writable().await, "/readyz would say the store takes no writes");
    }
    }
}
