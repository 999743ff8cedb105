//! The backend every handle wraps: a pool over sqlx's `Any` driver, the
//! message path's own connection (`hot`), and which database it is (SQLite
//! in the data directory, or PostgreSQL shared by several nodes). Opening it
//! creates and migrates the database; nothing here knows a table.
//!
//! One code path serves both: the statements are written in the SQL both
//! speak (`$1` parameters, `ON CONFLICT`, `RETURNING`), and where they do not
//! agree a handle asks [`Db::dialect`] for its statement.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

use super::error::StoreError;
use super::fences::Fences;
use super::hot::Hot;
use crate::cluster::PgBounds;

/// Where the store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (the default: `data/pincer.db`).
    File(PathBuf),
    /// A PostgreSQL database, by its URL (`postgres://…`), shared by every node.
    Postgres(String),
}

impl Location {
    /// The PostgreSQL database at `url` when one is given, else the SQLite `file`.
    pub fn url_or_file(url: Option<&str>, file: PathBuf) -> Location {
        match url {
            Some(url) => Location::Postgres(url.to_owned()),
            None => Location::File(file),
        }
    }
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl std::fmt::Display for Location {
    /// The file, or the URL without its password: what an operator is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => f.write_str(&without_password(url)),
        }
    }
}

/// `url` with its password (if any) replaced by `***`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return "postgres://…".to_owned() };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The SQL a backend speaks, where the two differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

/// The open database, cheap to clone: every role's handle holds one.
#[derive(Clone, Debug)]
pub(super) struct Db {
    pub(super) pool: AnyPool,
    /// The message path's own connection (`hot`).
    pub(super) hot: Hot,
    pub(super) dialect: Dialect,
    /// Where it is, to name it to operators.
    pub(super) location: Arc<Location>,
    /// The leases a cluster node holds, which its group writes check.
    pub(super) fences: Fences,
    /// How long anything waits on PostgreSQL (`None`: SQLite, unbounded as ever).
    pub(super) bounds: Option<PgBounds>,
}

impl Db {
    /// Opens (creating if missing) the database at `location` and migrates
    /// it; a PostgreSQL one's waits bounded by `bounds`.
    pub(super) async fn open(location: &Location, bounds: PgBounds) -> Result<Db, StoreError> {
        sqlx::any::install_default_drivers();
        match location {
            Location::File(path) => open_sqlite(path).await,
            Location::Postgres(url) => open_postgres(url, bounds).await,
        }
    }

    /// `work`, given up with [`StoreError::TimedOut`] (naming `what`) after
    /// the client's bound on PostgreSQL: a server that stops answering (a
    /// partition, a lost answer) must not hang a node's loop for good. On
    /// SQLite, `work` as it is.
    pub(super) async fn within<T>(
        &self,
        what: &'static str,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.bounds {
            None => work.await,
            Some(bounds) => within(bounds.client_wait(), what, work).await,
        }
    }

    pub(super) async fn close(&self) {
        self.hot.close().await;
        self.pool.close().await;
    }

    /// The database's size: the file as SQLite counts it (pages × page
    /// size), or what PostgreSQL counts for the database.
    pub(super) async fn bytes(&self) -> Result<u64, StoreError> {
        let sql = match self.dialect {
            Dialect::Sqlite => "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            Dialect::Postgres => "SELECT pg_database_size(current_database())",
        };
        let bytes: i64 = sqlx::query_scalar(sql).fetch_one(&self.pool).await?;
        Ok(u64::try_from(bytes).unwrap_or(0))
    }

    /// The SQLite file, if the store is one.
    pub(super) fn file(&self) -> Option<&Path> {
        match &*self.location {
            Location::File(path) => Some(path),
            Location::Postgres(_) => None,
        }
    }
}

/// The pragmas every SQLite connection runs with. WAL + NORMAL is durable
/// against process crashes, which is what "persist first" guards against;
/// it trades only power-loss safety.
const SQLITE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
                              PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000";

async fn open_sqlite(path: &Path) -> Result<Db, StoreError> {
    let failed = |source| StoreError::Open { path: path.display().to_string(), source };
    // `mode=rwc` creates the file; the path is percent-encoded into the URL.
    let url = format!("sqlite://{}?mode=rwc", encode_path(path));
    let options: AnyConnectOptions = url.parse().map_err(failed)?;
    if !path.exists() {
        // A new database gives pages freed by retention back (`store::retention`):
        // the mode is set once, by the connection that creates the file, before
        // any table. Set on every connection it would take the write lock at each
        // connect. An older database is never switched while pincer runs (a full
        // VACUUM holds the write lock): `retention.rs`, `SpaceMode`.
        let first = AnyPoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("PRAGMA auto_vacuum = INCREMENTAL").await?;
                    conn.execute(SQLITE_PRAGMAS).await.map(drop)
                })
            })
            .connect_with(options.clone())
            .await
            .map_err(failed)?;
        sqlx::migrate!("./migrations").run(&first).await?;
        first.close().await;
    }
    let pool = AnyPoolOptions::new()
        // A connection to a local file does not go stale the way a network
        // one does: the ping sqlx sends before lending it out would be one
        // more round trip to the connection's thread.
        .test_before_acquire(false)
        .after_connect(|conn, _| Box::pin(async move { conn.execute(SQLITE_PRAGMAS).await.map(drop) }))
        .after_release(|conn, _| Box::pin(roll_back_what_was_left_open(conn)))
        .max_connections(4)
        .connect_with(options.clone())
        .await
        .map_err(failed)?;
    sqlx::migrate!("./migrations").run(&pool).await?;
    let mut hot = AnyConnection::connect_with(&options).await.map_err(failed)?;
    hot.execute(SQLITE_PRAGMAS).await.map_err(failed)?;
    Ok(Db {
        pool,
        hot: Hot::held(hot),
        dialect: Dialect::Sqlite,
        location: Arc::new(Location::File(path.to_owned())),
        fences: Fences::default(),
        bounds: None,
    })
}

/// `path` as the path part of a `sqlite://` URL.
fn encode_path(path: &Path) -> String {
    let mut out = String::new();
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => out.push(char::from(*byte)),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// `work`, or [`StoreError::TimedOut`] naming `what` once `limit` passed.
pub(super) async fn within<T>(
    limit: Duration,
    what: &'static str,
    work: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(limit, work).await.unwrap_or(Err(StoreError::TimedOut { what, after: limit }))
}

async fn open_postgres(url: &str, bounds: PgBounds) -> Result<Db, StoreError> {
    let location = Location::Postgres(url.to_owned());
    let failed = |source| StoreError::Open { path: location.to_string(), source };
    let options: AnyConnectOptions = url.parse().map_err(failed)?;
    // Migrated on a connection of its own, without the pools' statement
    // timeout: a migration of a large database may take longer than a ttl.
    // (A pool of one: the migrator over a bare `&mut` connection makes a future
    // that is not `Send` for every lifetime, which `tokio::spawn` refuses.)
    let migrating = AnyPoolOptions::new().max_connections(1).connect_with(options.clone()).await.map_err(failed)?;
    sqlx::migrate!("./migrations/postgres").run(&migrating).await?;
    migrating.close().await;
    let pool = bounded_pool(bounds).max_connections(8).connect_with(options.clone()).await.map_err(failed)?;
    // The message path's own connections, as SQLite's `hot`: long reads on
    // the shared pool (history, status, backups, retention) never hold up a
    // message. Two, so the session's writes and the outbox's marks do not
    // wait for each other's round trips to the server.
    let hot = bounded_pool(bounds).max_connections(2).connect_with(options).await.map_err(failed)?;
    Ok(Db {
        hot: Hot::pooled(hot),
        pool,
        dialect: Dialect::Postgres,
        location: Arc::new(location),
        fences: Fences::default(),
        bounds: Some(bounds),
    })
}

/// A PostgreSQL pool whose every connection runs with `bounds`' session
/// settings (`cluster::bounds` says why each), whose borrowers wait at most
/// the client's bound for a connection, and which never hangs on a
/// connection given back whose server stopped answering.
fn bounded_pool(bounds: PgBounds) -> AnyPoolOptions {
    let settings: Arc<str> = bounds.session_settings().into();
    let wait = bounds.client_wait();
    AnyPoolOptions::new()
        .acquire_timeout(wait)
        .after_connect(move |conn, _| {
            let settings = settings.clone();
            Box::pin(async move { conn.execute(&*settings).await.map(drop) })
        })
        .after_release(move |conn, _| Box::pin(answers_within(conn, wait)))
}

/// The pool's check on every PostgreSQL connection given back, before its
/// own unbounded ping: a borrower given up mid-statement (its bound passed:
/// the server, or the way to it, stopped answering) leaves the connection
/// waiting for an answer that may never come, and sqlx's ping would wait
/// with it, holding a pool slot. A connection that does not answer a ping
/// within `wait` is closed instead.
async fn answers_within(conn: &mut AnyConnection, wait: Duration) -> Result<bool, sqlx::Error> {
    match tokio::time::timeout(wait, conn.ping()).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

/// The pool's check on every SQLite connection given back: a transaction
/// still open on it is rolled back before anyone else may borrow it.
///
/// A borrower that opened a transaction with a raw `BEGIN` and was dropped
/// (cancelled) before its `COMMIT` or `ROLLBACK` would otherwise give the
/// connection back inside that transaction: its write lock would refuse
/// every other writer (after their 5 s busy timeout) for as long as the
/// connection sits idle, and whatever the next borrower writes there would
/// never be committed. One round trip per release, off the message path
/// (which has its own connection, `hot`). A connection that cannot say is
/// closed, which rolls back too. (PostgreSQL's pool needs no such check:
/// there, every transaction is sqlx's, which rolls back when dropped.)
async fn roll_back_what_was_left_open(conn: &mut AnyConnection) -> Result<bool, sqlx::Error> {
    match conn.execute("ROLLBACK").await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_is_shown_the_url_without_its_password() {
        let at = |url: &str| Location::Postgres(url.to_owned()).to_string();
        assert_eq!(
            at("postgres://pincer:s3cret@db.example:5432/pincer"),
            "postgres://pincer:***@db.example:5432/pincer"
        );
        assert_eq!(at("postgres://pincer@/pincer?host=/run/pg"), "postgres://pincer@/pincer?host=/run/pg");
        assert_eq!(at("postgres://db/pincer"), "postgres://db/pincer");
        assert_eq!(at("not a url"), "postgres://…");
    }

    #[test]
    fn a_path_with_odd_characters_makes_a_sqlite_url() {
        assert_eq!(encode_path(Path::new("/tmp/a b/p#1.db")), "/tmp/a%20b/p%231.db");
    }
}
