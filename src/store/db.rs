//! The SQLite backend every handle wraps: the shared pool, the message
//! path's own connection (`hot`) and the file's path. Opening it creates and
//! migrates the database; nothing here knows a table.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{SqliteConnection, SqlitePool};

use super::error::StoreError;
use super::hot::Hot;

/// The open database, cheap to clone: every role's handle holds one.
#[derive(Clone, Debug)]
pub(super) struct Db {
    pub(super) pool: SqlitePool,
    /// The message path's own connection (`hot`).
    pub(super) hot: Hot,
    /// The database file, to name it to operators.
    pub(super) path: Arc<Path>,
}

impl Db {
    /// Opens (creating if missing) the database at `path` and migrates it.
    pub(super) async fn open(path: &Path) -> Result<Db, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL is durable against process crashes, which is what
            // "persist first" guards against; it trades only power-loss safety.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(5));
        let failed = |source| StoreError::Open { path: path.display().to_string(), source };
        if !path.exists() {
            // A new database gives pages freed by retention back (`store::retention`):
            // the mode is set once, by the connection that creates the file, before
            // any table. Set on every connection it would take the write lock at each
            // connect. An older database is never switched while pincer runs (a full
            // VACUUM holds the write lock): `retention.rs`, `SpaceMode`.
            let create = options.clone().auto_vacuum(sqlx::sqlite::SqliteAutoVacuum::Incremental);
            let first = SqlitePoolOptions::new().max_connections(1).connect_with(create).await.map_err(failed)?;
            sqlx::migrate!("./migrations").run(&first).await?;
            first.close().await;
        }
        let pool = SqlitePoolOptions::new()
            // A connection to a local file does not go stale the way a network
            // one does: the ping sqlx sends before lending it out would be one
            // more round trip to the connection's thread.
            .test_before_acquire(false)
            .after_release(|conn, _| Box::pin(roll_back_what_was_left_open(conn)))
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .map_err(failed)?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        let hot = Hot::open(&options).await.map_err(failed)?;
        Ok(Db { pool, hot, path: path.into() })
    }

    pub(super) async fn close(&self) {
        self.hot.close().await;
        self.pool.close().await;
    }
}

/// The pool's check on every connection given back: a transaction still
/// open on it is rolled back before anyone else may borrow it.
///
/// A borrower that opened a transaction with a raw `BEGIN` and was dropped
/// (cancelled) before its `COMMIT` or `ROLLBACK` would otherwise give the
/// connection back inside that transaction: its write lock would refuse
/// every other writer (after their 5 s busy timeout) for as long as the
/// connection sits idle, and whatever the next borrower writes there would
/// never be committed. One round trip per release, off the message path
/// (which has its own connection, `hot`). A connection that cannot say is
/// closed, which rolls back too.
async fn roll_back_what_was_left_open(conn: &mut SqliteConnection) -> Result<bool, sqlx::Error> {
    match sqlx::Executor::execute(&mut *conn, "ROLLBACK").await {
        Ok(_) => {
            tracing::warn!("rolled back a transaction left open on a database connection (its caller was cancelled)");
            Ok(true)
        }
        Err(sqlx::Error::Database(e)) if e.message().contains("no transaction is active") => Ok(true),
        Err(e) => {
            tracing::warn!(%e, "closing a database connection that may still be inside a transaction");
            Ok(false)
        }
    }
}
