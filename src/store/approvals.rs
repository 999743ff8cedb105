//! Tool approvals asked across cluster nodes (PostgreSQL only;
//! `migrations/postgres/0007_approvals.sql`): the asking node's rows, the
//! gateway's marks of what it shows, and the first verdict written back.
//! What to show and when a row is stale is decided in `node::approvals`;
//! here it runs. Touches the `approvals` table and reads `leases`.
//!
//! Bounds: a row's tool name and summary come from the agent's input, so
//! [`NewApproval::new`] refuses what is over [`MAX_TOOL_NAME`] /
//! [`MAX_SUMMARY`] (the table's CHECKs say the same), and an answerer's
//! name is cut to [`MAX_ANSWERED_BY`]. The words about the files members'
//! messages wrote (`session::provenance`) are cut to [`MAX_PROVENANCE`].

use std::time::Duration;

use sqlx::Row;

use super::cluster::fence::DB_NOW_US;
use super::db::Dialect;
use super::error::StoreError;
use super::handles::Approvals;
use crate::cluster::fence::LeaseName;
use crate::cluster::node_id::NodeId;
use crate::domain::{Approval, ApprovalAnswer, GroupName, Platform};

/// The longest tool name a row carries, in bytes.
pub const MAX_TOOL_NAME: usize = 256;
/// The longest summary (the tool's input as a person reads it) a row carries, in bytes.
pub const MAX_SUMMARY: usize = 256 * 1024;
/// The longest provenance text (which files members' messages wrote) a row carries, in bytes.
pub const MAX_PROVENANCE: usize = 4096;
/// The longest answerer's name kept, in characters.
pub const MAX_ANSWERED_BY: usize = 512;
/// At most this many rows are read at one look.
pub const LOOK_LIMIT: usize = 256;

/// Why a tool call cannot be asked across nodes.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("the tool's name is {0} bytes long, over the {MAX_TOOL_NAME} an approval across nodes carries")]
    ToolNameTooLong(usize),
    #[error("the tool's input is {0} bytes long, over the {MAX_SUMMARY} an approval across nodes carries")]
    SummaryTooLong(usize),
    #[error("no gateway shows approvals for {0} chats")]
    NoGateway(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A tool call to ask, within the bounds of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewApproval {
    group: GroupName,
    platform: Platform,
    tool_name: String,
    summary: String,
    provenance: Option<String>,
    timeout: Duration,
}

impl NewApproval {
    /// A row for a chat on `platform` (Telegram or WhatsApp: a gateway's).
    pub fn new(
        group: GroupName,
        platform: Platform,
        tool_name: String,
        summary: String,
        timeout: Duration,
    ) -> Result<NewApproval, ApprovalError> {
        if platform == Platform::Console {
            return Err(ApprovalError::NoGateway(platform.as_str()));
        }
        if tool_name.len() > MAX_TOOL_NAME {
            return Err(ApprovalError::ToolNameTooLong(tool_name.len()));
        }
        if summary.len() > MAX_SUMMARY {
            return Err(ApprovalError::SummaryTooLong(summary.len()));
        }
        Ok(NewApproval { group, platform, tool_name, summary, provenance: None, timeout })
    }

    /// With the words about the files members' messages wrote, cut to [`MAX_PROVENANCE`]
    /// (they are bounded where they are made; this keeps the row's CHECK whatever the caller).
    pub fn with_provenance(mut self, provenance: Option<String>) -> NewApproval {
        self.provenance = provenance.map(|text| cut_bytes(text, MAX_PROVENANCE));
        self
    }
}

/// `text` cut at a character boundary to at most `max` bytes.
fn cut_bytes(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

/// One of this node's rows, as its asking side sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub id: i64,
    /// The verdict, once a person answered.
    pub answer: Option<ApprovalAnswer>,
}

/// An unanswered row, as a gateway looks at it (without its text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unanswered {
    pub id: i64,
    /// The gateway lease's epoch it was shown under, if it was.
    pub shown_epoch: Option<i64>,
    /// Until it expires, by the database's clock (negative: expired).
    pub remaining_us: i64,
}

/// A row a gateway marked shown: what to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToShow {
    pub id: i64,
    pub group: GroupName,
    pub tool_name: String,
    pub summary: String,
    /// Which files members' messages wrote since the last approval, if any.
    pub provenance: Option<String>,
    /// Until it expires, by the database's clock.
    pub remaining: Duration,
}

impl Approvals {
    /// Whether this store asks across nodes: a cluster node's, on PostgreSQL.
    pub fn shared(&self) -> bool {
        self.db.dialect == Dialect::Postgres && self.db.fences.is_cluster_node()
    }

    /// Stores `new`, asked by `node`, expiring after its timeout by the database's clock; its id.
    pub async fn ask(&self, new: &NewApproval, node: &NodeId) -> Result<i64, ApprovalError> {
        let timeout_us = i64::try_from(new.timeout.as_micros()).unwrap_or(i64::MAX / 4).min(i64::MAX / 4);
        let sql = format!(
            "INSERT INTO approvals (group_name, platform, asked_by, tool_name, summary, provenance, asked_at_us, expires_at_us)
             VALUES ($1, $2, $3, $4, $5, $7, {DB_NOW_US}, {DB_NOW_US} + $6) RETURNING id"
        );
        let id: i64 = sqlx::query_scalar(&sql)
            .bind(new.group.as_str())
            .bind(new.platform.as_str())
            .bind(node.as_str())
            .bind(&new.tool_name)
            .bind(&new.summary)
            .bind(timeout_us)
            .bind(&new.provenance)
            .fetch_one(&self.db.pool)
            .await
            .map_err(StoreError::from)?;
        Ok(id)
    }

    /// `node`'s rows, with their verdicts once answered.
    pub async fn asked_by(&self, node: &NodeId) -> Result<Vec<Asked>, StoreError> {
        let rows =
            sqlx::query("SELECT id, verdict, answered_by FROM approvals WHERE asked_by = $1 ORDER BY id LIMIT $2")
                .bind(node.as_str())
                .bind(LOOK_LIMIT as i64 * 4)
                .fetch_all(&self.db.pool)
                .await?;
        Ok(super::error::readable("approvals", &rows, |row| {
            let verdict: Option<String> = row.try_get(1)?;
            let by: Option<String> = row.try_get(2)?;
            let answer = match (verdict, by) {
                (Some(verdict), Some(by)) => {
                    let verdict = verdict_of(&verdict).ok_or_else(|| super::error::bad_row(verdict))?;
                    Some(ApprovalAnswer { verdict, by })
                }
                _ => None,
            };
            Ok(Asked { id: row.try_get(0)?, answer })
        }))
    }

    /// Deletes the row `id` (answered and passed on, given up, or stale).
    pub async fn forget(&self, id: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM approvals WHERE id = $1").bind(id).execute(&self.db.pool).await?;
        Ok(())
    }

    /// The unanswered rows for `platform`'s gateway, oldest first.
    pub async fn unanswered(&self, platform: Platform) -> Result<Vec<Unanswered>, StoreError> {
        let sql = format!(
            "SELECT id, shown_epoch, expires_at_us - {DB_NOW_US} FROM approvals
              WHERE verdict IS NULL AND platform = $1 ORDER BY id LIMIT $2"
        );
        let rows = sqlx::query(&sql).bind(platform.as_str()).bind(LOOK_LIMIT as i64).fetch_all(&self.db.pool).await?;
        Ok(super::error::readable("approvals", &rows, |row| {
            Ok(Unanswered { id: row.try_get(0)?, shown_epoch: row.try_get(1)?, remaining_us: row.try_get(2)? })
        }))
    }

    /// The epoch this node holds `lease` at, if it does.
    pub fn epoch(&self, lease: &LeaseName) -> Option<i64> {
        self.db.fences.of(lease).ok().flatten().map(|fence| fence.epoch)
    }

    /// Marks row `id` shown by this node under `lease` (a gateway's, which
    /// this node must hold by the store, at the epoch it claimed); what to
    /// show. `None`: answered, expired, gone, or the lease moved on.
    pub async fn show(&self, id: i64, lease: &LeaseName) -> Result<Option<ToShow>, StoreError> {
        let Some(fence) = self.db.fences.of(lease)? else { return Err(StoreError::NotShared) };
        let (name, node, epoch) = fence.params();
        let sql = format!(
            "UPDATE approvals SET shown_by = $2, shown_epoch = $3
              WHERE id = $1 AND verdict IS NULL AND expires_at_us > {DB_NOW_US}
                AND EXISTS (SELECT 1 FROM leases WHERE name = $4 AND node_id = $2 AND epoch = $3)
             RETURNING group_name, tool_name, summary, expires_at_us - {DB_NOW_US}, provenance"
        );
        let row = sqlx::query(&sql).bind(id).bind(node).bind(epoch).bind(name).fetch_optional(&self.db.pool).await?;
        let Some(row) = row else { return Ok(None) };
        let read = || -> Result<ToShow, sqlx::Error> {
            let group: String = row.try_get(0)?;
            let remaining_us: i64 = row.try_get(3)?;
            Ok(ToShow {
                id,
                group: group.parse().map_err(super::error::bad_row)?,
                tool_name: row.try_get(1)?,
                summary: row.try_get(2)?,
                provenance: row.try_get(4)?,
                remaining: Duration::from_micros(remaining_us.max(0).unsigned_abs()),
            })
        };
        read().map(Some).map_err(|source| StoreError::BadRow { table: "approvals", key: id.to_string(), source })
    }

    /// Writes a person's answer to row `id` unless one was written first:
    /// whether this one counts.
    pub async fn answer(&self, id: i64, answer: &ApprovalAnswer) -> Result<bool, StoreError> {
        let by: String = answer.by.chars().take(MAX_ANSWERED_BY).collect();
        let done = sqlx::query("UPDATE approvals SET verdict = $2, answered_by = $3 WHERE id = $1 AND verdict IS NULL")
            .bind(id)
            .bind(verdict_str(answer.verdict))
            .bind(by)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}

fn verdict_str(verdict: Approval) -> &'static str {
    match verdict {
        Approval::Allow => "allow",
        Approval::Deny => "deny",
        Approval::AlwaysAllow => "always",
    }
}

fn verdict_of(s: &str) -> Option<Approval> {
    [Approval::Allow, Approval::Deny, Approval::AlwaysAllow].into_iter().find(|v| verdict_str(*v) == s)
}

#[cfg(test)]
mod tests;
