//! Test helpers that reach the database from outside the store's handles, as
//! another process (or a crash) would: a test inspects or breaks the store
//! only through these, so the SQL stays in `store`. Test builds only.

use std::path::Path;

use sqlx::Connection;

use super::db::Location;

/// Through a connection of its own to the SQLite file at `path`.
async fn on_the_side(path: &Path, sql: &str) {
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    sqlx::query(sql).execute(&mut other).await.unwrap();
    other.close().await.unwrap();
}

/// From now on every statement `statement` (a trigger's event, e.g.
/// `INSERT ON schedule_runs`) aborts, as if pincer died just before it.
pub(crate) async fn kill_before(path: &Path, statement: &str) {
    on_the_side(path, &format!("CREATE TRIGGER kill BEFORE {statement} BEGIN SELECT RAISE(ABORT, 'killed here'); END"))
        .await;
}

/// Undoes [`kill_before`]: the next pincer runs without the kill.
pub(crate) async fn revive(path: &Path) {
    on_the_side(path, "DROP TRIGGER kill").await;
}

/// The node `node`'s row of the shared (PostgreSQL) store expires now, as if
/// it had frozen and stopped renewing.
pub(crate) async fn expire_node(location: &Location, node: &str) {
    let Location::Postgres(url) = location else { panic!("nodes expire in a shared (PostgreSQL) store") };
    let mut db = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = $1").bind(node).execute(&mut db).await.unwrap();
    db.close().await.unwrap();
}
