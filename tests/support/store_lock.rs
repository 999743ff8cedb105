//! Another connection holding SQLite's write lock, as a backup tool or a
//! stray `sqlite3` would: pincer's writes wait for it (its busy timeout, 5 s)
//! and then fail with "database is locked".

use sqlx::{Connection, Executor, SqliteConnection};

use super::harness::Sandbox;

/// Holds the database's write lock until released.
pub struct WriteLock(SqliteConnection);

impl WriteLock {
    pub async fn take(sandbox: &Sandbox) -> WriteLock {
        let url = format!("sqlite://{}", sandbox.config.database_path().display());
        let mut conn = SqliteConnection::connect(&url).await.expect("a second connection opens");
        conn.execute("BEGIN EXCLUSIVE").await.expect("the write lock is free");
        WriteLock(conn)
    }

    pub async fn release(mut self) {
        self.0.execute("ROLLBACK").await.unwrap();
        self.0.close().await.unwrap();
    }
}
