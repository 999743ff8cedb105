//! Tests' own view of the cluster's `nodes` table on PostgreSQL: read a
//! node's row, hold it locked, expire it, as another node or a frozen one
//! would, so a test outside the store never speaks SQL.

use sqlx::{Connection, Executor, PgConnection};

/// A connection of the test's own to the database at a URL.
pub(crate) struct RawNodes {
    conn: PgConnection,
}

impl RawNodes {
    pub(crate) async fn connect(url: &str) -> RawNodes {
        RawNodes { conn: PgConnection::connect(url).await.unwrap() }
    }

    /// `(incarnation, renewed_at_us, live, unexpired by the database's clock)` of node `id`.
    pub(crate) async fn row(&mut self, id: &str) -> (i64, i64, i64, bool) {
        let sql = "SELECT incarnation, renewed_at_us, live, \
                   expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint \
                   FROM nodes WHERE node_id = $1";
        sqlx::query_as(sql).bind(id).fetch_one(&mut self.conn).await.unwrap()
    }

    /// Holds node `id`'s row locked in an open transaction until [`RawNodes::release`].
    pub(crate) async fn hold(&mut self, id: &str) {
        self.conn.execute("BEGIN").await.unwrap();
        sqlx::query("SELECT 1 FROM nodes WHERE node_id = $1 FOR UPDATE")
            .bind(id)
            .execute(&mut self.conn)
            .await
            .unwrap();
    }

    /// Ends what [`RawNodes::hold`] began.
    pub(crate) async fn release(&mut self) {
        self.conn.execute("ROLLBACK").await.unwrap();
    }

    /// Node `id`'s row expired, as if the node had been frozen past its ttl.
    pub(crate) async fn expire(&mut self, id: &str) {
        sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = $1")
            .bind(id)
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}
