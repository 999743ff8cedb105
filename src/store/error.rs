//! What can go wrong talking to the store, and how a row that does not read
//! is named and skipped. Touches nothing but the rows handed to it.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::domain::GroupName;

/// What can go wrong talking to the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("group `{0}` is already registered")]
    GroupExists(GroupName),
    #[error("group `{0}` is not registered: add it with `pincer groups add {0}`")]
    UnknownGroup(String),
    #[error("there is no scheduled task #{0}: `pincer tasks list` shows them")]
    UnknownSchedule(i64),
    #[error("scheduled task #{0} kept changing while pincer recorded its run; `pincer tasks runs {0}` shows the log")]
    ScheduleContended(i64),
    #[error("that chat (or topic) is already bound to group `{0}`: unbind it there first")]
    ChatTaken(String),
    #[error("message {0} was already received")]
    Duplicate(String),
    #[error("this node no longer holds `{0}`: another node took it over, so this write was rolled back")]
    Fenced(String),
    #[error("the database did not answer {what} within {after:?}; pincer tries again (is PostgreSQL reachable?)")]
    TimedOut { what: &'static str, after: std::time::Duration },
    #[error("several nodes need a shared store: set [store] url to a PostgreSQL database")]
    NotShared,
    #[error("cannot open the database {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot migrate the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error(
        "a stored row of `{table}` ({key}) cannot be read, so it was changed outside pincer: {source}. \
         Fix or delete that row with sqlite3"
    )]
    BadRow { table: &'static str, key: String, source: sqlx::Error },
}

/// Why a stored row does not read as what its table holds.
pub(super) fn bad_row(why: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Decode(why.to_string().into())
}

/// `read` over `rows`, each row that does not read logged and skipped: a row
/// changed outside pincer (by hand, by another program) must not take a
/// listing, or pincer, down with it. Every read is `try_get`, never `get`,
/// which panics on a value of another type.
pub(super) fn readable<T>(
    table: &'static str,
    rows: &[AnyRow],
    read: impl Fn(&AnyRow) -> Result<T, sqlx::Error>,
) -> Vec<T> {
    rows.iter()
        .filter_map(|row| match read(row) {
            Ok(value) => Some(value),
            Err(e) => {
                tracing::error!(
                    table, row = %row_key(row), %e,
                    "skipping a stored row that cannot be read (changed outside pincer?); fix or delete it with sqlite3"
                );
                None
            }
        })
        .collect()
}

/// The row's `id` (or a group's `name`), to name it in a log line.
pub(super) fn row_key(row: &AnyRow) -> String {
    row.try_get::<i64, _>("id")
        .map(|id| id.to_string())
        .or_else(|_| row.try_get::<String, _>("name"))
        .unwrap_or_else(|_| "?".to_owned())
}
