//! Chat commands handed to their group's owner (PostgreSQL only;
//! `migrations/postgres/0008_commands.sql`): a node that receives a command
//! for a group it does not hold stores it here ([`Commands::hand_over`],
//! unfenced: it is not a write of the group's, as a received message is
//! not), and the owner reads its groups' ([`Commands::pending`]) and takes
//! each ([`Commands::take`], fenced: only the group's owner takes, so a
//! command runs on one node). What a command says is the caller's encoding
//! of a closed set; the store keeps it opaque.

use std::time::Duration;

use sqlx::Row;

use super::cluster::fence::DB_NOW_US;
use super::db::Dialect;
use super::error::{bad_row, readable, StoreError};
use super::fenced;
use super::handles::Commands;
use crate::domain::GroupName;

/// The most commands one look reads: more wait for the next look.
const LOOK_LIMIT: i64 = 100;
/// The longest key of a command seen (the table's CHECK says the same).
const SEEN_KEY_MAX: usize = 512;
/// How long a command seen is remembered: a day, far past any redelivery.
const SEEN_FOR_US: i64 = 24 * 3600 * 1_000_000;

/// A command waiting for its group's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCommand {
    pub id: i64,
    pub group: GroupName,
    /// As the asking node encoded it.
    pub command: String,
    pub by_admin: bool,
    /// How long ago it was asked, by the database's clock.
    pub age: Duration,
}

impl Commands {
    /// Stores `command` (encoded) for `group`'s owner to run; its id.
    pub async fn hand_over(&self, group: &GroupName, command: &str, by_admin: bool) -> Result<i64, StoreError> {
        self.postgres_only()?;
        let id = sqlx::query_scalar(
            "INSERT INTO pending_commands (group_name, command, by_admin) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(group.as_str())
        .bind(command)
        .bind(i64::from(by_admin))
        .fetch_one(&self.db.pool)
        .await?;
        Ok(id)
    }

    /// The commands waiting, of every group, oldest first: the caller runs
    /// those of the groups it holds.
    pub async fn pending(&self) -> Result<Vec<PendingCommand>, StoreError> {
        self.postgres_only()?;
        let sql = format!(
            "SELECT id, group_name, command, by_admin, {DB_NOW_US} - asked_at_us AS age_us
               FROM pending_commands ORDER BY id LIMIT $1"
        );
        let rows = sqlx::query(&sql).bind(LOOK_LIMIT).fetch_all(&self.db.pool).await?;
        Ok(readable("pending_commands", &rows, |row| {
            let name: String = row.try_get("group_name")?;
            let age_us: i64 = row.try_get("age_us")?;
            Ok(PendingCommand {
                id: row.try_get("id")?,
                group: name.parse().map_err(bad_row)?,
                command: row.try_get("command")?,
                by_admin: row.try_get::<i64, _>("by_admin")? != 0,
                age: Duration::from_micros(age_us.max(0).unsigned_abs()),
            })
        }))
    }

    /// Takes (deletes) command `id` of `group`, fenced by the group's lease:
    /// whether it was still there (`false`: taken already).
    pub async fn take(&self, group: &GroupName, id: i64) -> Result<bool, StoreError> {
        let query =
            sqlx::query("DELETE FROM pending_commands WHERE id = $1 AND group_name = $2").bind(id).bind(group.as_str());
        Ok(fenced::execute_for(&self.db, group, query).await?.rows_affected() == 1)
    }

    /// Whether this is the first node to see the command `key` (the
    /// platform's id of its message): true once, for the node that then
    /// runs or hands it over. Rows past a day go as new ones come.
    pub async fn first_sight(&self, key: &str) -> Result<bool, StoreError> {
        self.postgres_only()?;
        let key: String = key.chars().take(SEEN_KEY_MAX).collect();
        let prune = format!("DELETE FROM seen_commands WHERE seen_at_us < {DB_NOW_US} - $1");
        sqlx::query(&prune).bind(SEEN_FOR_US).execute(&self.db.pool).await?;
        let first = sqlx::query("INSERT INTO seen_commands (seen_key) VALUES ($1) ON CONFLICT (seen_key) DO NOTHING")
            .bind(key)
            .execute(&self.db.pool)
            .await?;
        Ok(first.rows_affected() == 1)
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
