//! A consistent copy of a live SQLite database file (pincer's store or the
//! WhatsApp device store) through `VACUUM INTO`: a read transaction, so
//! writers go on. Used by `pincer backup`; touches only the two files.

use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use super::error::StoreError;

/// Copies the SQLite database `from` into the new file `to`.
pub async fn copy_sqlite(from: &Path, to: &str) -> Result<(), StoreError> {
    let options = SqliteConnectOptions::new().filename(from).read_only(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(|source| StoreError::Open { path: from.display().to_string(), source })?;
    let copied = sqlx::query("VACUUM INTO ?").bind(to).execute(&pool).await;
    pool.close().await;
    copied?;
    Ok(())
}
