//! The outbox: every message for a chat, stored before any send is tried, with
//! how far its delivery got.
//!
//! A row is written in the same transaction as what it carries (a result, an
//! agent's post), addressed to the group's chat as bound at that moment (or
//! its console when it has none). It moves with the group's binding while it
//! waits. Its states: `queued` → `delivered`, or `failed` when the platform
//! refused it for good; `parts_done` counts the parts already in the chat.
//! Delivery's marks are guarded by what the worker read (state, address,
//! parts done), so a row rebound mid-delivery is never marked from its old chat.

use sqlx::any::AnyRow;
use sqlx::{Any, FromRow, Row, Transaction};

use super::clock::now_us;
use super::error::{bad_row, readable, StoreError};
use super::fenced;
use super::handles::OutboxLog;
use crate::domain::media::{FileKind, OutboundFile};
use crate::domain::{ChatAddress, GroupName, OutboundKind, Platform};

/// Row id of an outbox entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutboxId(pub i64);

/// What to put in the outbox beside a stored result or post.
#[derive(Clone, Copy, Debug)]
pub struct Enqueue<'a> {
    pub kind: OutboundKind,
    pub text: &'a str,
    /// To the group's console whatever its binding (`pincer chat NAME` serves it).
    pub console: bool,
}

/// One outbox entry as a delivery worker (or `pincer history`) sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRow {
    pub id: OutboxId,
    pub group: GroupName,
    pub at_us: i64,
    pub kind: OutboundKind,
    pub text: String,
    pub to: ChatAddress,
    pub state: DeliveryState,
    pub parts_done: u32,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// A file to send, `text` its caption (see `domain::media::OutboundFile`).
    pub file: Option<OutboundFile>,
}

/// An outbox row as a delivery worker read it. The worker's marks apply only
/// while the row is still like this; see [`Marked`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: OutboxId,
    pub to: ChatAddress,
    pub parts_done: u32,
}

/// What became of a delivery mark.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marked {
    Recorded,
    /// The row is no longer queued at the address with the parts the worker
    /// read (rebound, moved, or settled elsewhere): nothing was written, and
    /// the worker must drop the row (the worker for its new address sends it).
    Moved,
}

impl Marked {
    fn from_rows(affected: u64) -> Marked {
        if affected == 0 {
            Marked::Moved
        } else {
            Marked::Recorded
        }
    }
}

impl OutboxRow {
    /// The row as read now, to guard the marks made while delivering it.
    pub fn seen(&self) -> Seen {
        Seen { id: self.id, to: self.to.clone(), parts_done: self.parts_done }
    }
}

/// Where an outbox entry is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryState {
    Queued,
    Delivered,
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Queued => "queued",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> DeliveryState {
        match s {
            "delivered" => DeliveryState::Delivered,
            "failed" => DeliveryState::Failed,
            _ => DeliveryState::Queued,
        }
    }
}

/// The statement that writes one outbox row, what it carries given as SQL:
/// `$result_id` (none, the result the same statement list has just
/// written, or a parameter) and `$agent_message_id` (none, or a parameter).
/// Its parameters: the group, `at_us`, kind, text, whether it is for the
/// console, as `$p` names them (`?` in SQLite's statement lists, whose
/// parameters run on from statement to statement; `$1` to `$5` elsewhere).
///
/// The address is resolved here, from the binding as it is when the row is
/// written, so a reply can never be addressed from a stale copy of it.
macro_rules! enqueue_sql {
    ([$g:literal, $at:literal, $kind:literal, $text:literal, $console:literal], $result_id:literal, $agent_message_id:literal) => {
        concat!(
            "
INSERT INTO outbox (group_name, at_us, kind, text, platform, chat, thread, result_id, agent_message_id)
SELECT g.name, v.at_us, v.kind, v.text,
       CASE WHEN v.console OR b.platform IS NULL THEN 'console' ELSE b.platform END,
       CASE WHEN v.console OR b.platform IS NULL THEN g.name ELSE b.chat END,
       CASE WHEN v.console OR b.platform IS NULL THEN NULL ELSE b.thread END,
       v.result_id, v.agent_message_id
  FROM (SELECT ",
            $g,
            " AS group_name, ",
            $at,
            " AS at_us, ",
            $kind,
            " AS kind, ",
            $text,
            " AS text, ",
            $console,
            " AS console,
               ",
            $result_id,
            " AS result_id, ",
            $agent_message_id,
            " AS agent_message_id) v
  JOIN groups g ON g.name = v.group_name
  LEFT JOIN chat_bindings b ON b.group_name = g.name"
        )
    };
}

const ENQUEUE_RETURNING_SQL: &str =
    concat!(enqueue_sql!(["$1", "$2", "$3", "$4", "$5"], "CAST(NULL AS BIGINT)", "$6"), " RETURNING id");

/// [`ENQUEUE_RETURNING_SQL`] for a result's reply, written right after the result in
/// one statement list (`OutboxLog::record_result`), returning the row's id.
pub(super) const ENQUEUE_AFTER_RESULT_SQL: &str =
    concat!(enqueue_sql!(["?", "?", "?", "?", "?"], "last_insert_rowid()", "NULL"), " RETURNING id");

/// [`ENQUEUE_RETURNING_SQL`] for a result's reply in a transaction of its own
/// statements (PostgreSQL), the result's id given as `$6`.
pub(super) const ENQUEUE_RESULT_REPLY_SQL: &str =
    concat!(enqueue_sql!(["$1", "$2", "$3", "$4", "$5"], "$6", "CAST(NULL AS BIGINT)"), " RETURNING id");

const SELECT_ROW: &str = "
SELECT o.id, o.group_name, o.at_us, o.kind, o.text, o.platform, o.chat, o.thread, o.state, o.parts_done,
       o.attempts, o.last_error, o.file_path, o.file_name, o.file_kind, o.file_bytes, o.file_from
  FROM outbox o";

/// Writes one outbox row inside `tx`, carrying the agent's message
/// `agent_message_id` if it is one. (A result's reply, which carries its
/// result, is written by `OutboxLog::record_result`'s statement list.)
pub(super) async fn enqueue_in(
    tx: &mut Transaction<'_, Any>,
    group: &GroupName,
    out: Enqueue<'_>,
    agent_message_id: Option<i64>,
) -> Result<OutboxId, StoreError> {
    let id: Option<i64> = sqlx::query_scalar(ENQUEUE_RETURNING_SQL)
        .bind(group.as_str())
        .bind(now_us())
        .bind(out.kind.as_str())
        .bind(out.text)
        .bind(out.console)
        .bind(agent_message_id)
        .fetch_optional(&mut **tx)
        .await?;
    id.map(OutboxId).ok_or_else(|| StoreError::UnknownGroup(group.to_string()))
}

/// After a group's binding changed: its waiting replies go to the new chat
/// (from their first part), or to its console when it has no chat any more.
/// Replies that were waiting for the console stay there: they were never
/// meant for a chat.
pub(super) async fn follow_binding(tx: &mut Transaction<'_, Any>, group: &GroupName) -> Result<(), StoreError> {
    let bound: Option<(String, String, Option<String>)> =
        sqlx::query_as("SELECT platform, chat, thread FROM chat_bindings WHERE group_name = $1")
            .bind(group.as_str())
            .fetch_optional(&mut **tx)
            .await?;
    let (platform, chat, thread) = bound.unwrap_or_else(|| ("console".into(), group.to_string(), None));
    sqlx::query(
        "UPDATE outbox SET platform = $1, chat = $2, thread = $3, parts_done = 0
          WHERE group_name = $4 AND state = 'queued' AND platform != 'console'
            AND NOT (platform = $1 AND chat = $2 AND thread IS NOT DISTINCT FROM $3)",
    )
    .bind(platform)
    .bind(chat)
    .bind(thread)
    .bind(group.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl OutboxLog {
    /// Puts a message (a notice, or anything not stored elsewhere) in the outbox.
    pub async fn enqueue(&self, group: &GroupName, out: Enqueue<'_>) -> Result<OutboxId, StoreError> {
        let mut tx = fenced::begin_for(&self.db, group).await?;
        let id = enqueue_in(&mut tx, group, out, None).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// The chats of `platform` with replies waiting, whose groups are active
    /// (a group's activity is its chat's: the console is always there).
    pub async fn queued_chats(&self, platform: Platform) -> Result<Vec<ChatAddress>, StoreError> {
        let rows: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT DISTINCT o.chat, o.thread FROM outbox o JOIN groups g ON g.name = o.group_name
              WHERE o.state = 'queued' AND o.platform = $1 AND (g.active <> 0 OR $1 = 'console')",
        )
        .bind(platform.as_str())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.into_iter().map(|(chat, thread)| ChatAddress { platform, chat, thread }).collect())
    }

    /// The oldest reply waiting for a chat, unless its group is inactive. A
    /// row that does not read (changed outside pincer) is marked failed, with
    /// why, and the next one is taken: left queued, it would stall the chat.
    pub async fn next_queued(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.next_queued_of(to, Carrying::Any).await
    }

    /// [`OutboxLog::next_queued`] among the rows without a file: a chat's text
    /// goes on while a file is on its way.
    pub async fn next_queued_text(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.next_queued_of(to, Carrying::Text).await
    }

    /// [`OutboxLog::next_queued`] among the rows with a file.
    pub async fn next_queued_file(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.next_queued_of(to, Carrying::File).await
    }

    async fn next_queued_of(&self, to: &ChatAddress, carrying: Carrying) -> Result<Option<OutboxRow>, StoreError> {
        loop {
            let Some(row) = self.oldest_queued(to, carrying).await? else {
                return Ok(None);
            };
            match row_from(&row) {
                Ok(read) => return Ok(Some(read)),
                Err(e) => {
                    let id: i64 = row.try_get("id")?;
                    tracing::error!(
                        outbox = id, %e,
                        "a queued reply cannot be read (changed outside pincer?); marked failed, the chat's next one goes on"
                    );
                    sqlx::query(
                        "UPDATE outbox SET state = 'failed', last_error = $1 WHERE id = $2 AND state = 'queued'",
                    )
                    .bind(format!("unreadable row: {e}"))
                    .bind(id)
                    .execute(&self.db.pool)
                    .await?;
                }
            }
        }
    }

    async fn oldest_queued(&self, to: &ChatAddress, carrying: Carrying) -> Result<Option<AnyRow>, StoreError> {
        let carrying = match carrying {
            Carrying::Any => "",
            Carrying::Text => "AND o.file_path IS NULL",
            Carrying::File => "AND o.file_path IS NOT NULL",
        };
        let row = sqlx::query(&format!(
            "{SELECT_ROW} JOIN groups g ON g.name = o.group_name
              WHERE o.state = 'queued' AND o.platform = $1 AND o.chat = $2 AND o.thread IS NOT DISTINCT FROM $3
                AND (g.active <> 0 OR $1 = 'console') {carrying}
              ORDER BY o.id LIMIT 1"
        ))
        .bind(to.platform.as_str())
        .bind(&to.chat)
        .bind(&to.thread)
        .fetch_optional(&mut *self.db.hot.lock().await?)
        .await?;
        Ok(row)
    }

    /// Outbox rows after `after` (any chat, any state), oldest first, at most `limit`.
    pub async fn outbox_after(&self, after: OutboxId, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(&format!("{SELECT_ROW} WHERE o.id > $1 ORDER BY o.id LIMIT $2"))
            .bind(after.0)
            .bind(i64::from(limit))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(readable("outbox", &rows, row_from))
    }

    /// The group's outbox rows after `after` (any chat, any state), oldest first, at most `limit`.
    pub async fn group_outbox_after(
        &self,
        group: &GroupName,
        after: OutboxId,
        limit: u32,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(&format!("{SELECT_ROW} WHERE o.group_name = $1 AND o.id > $2 ORDER BY o.id LIMIT $3"))
            .bind(group.as_str())
            .bind(after.0)
            .bind(i64::from(limit))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(readable("outbox", &rows, row_from))
    }

    /// One outbox row, whatever its state.
    pub async fn outbox_row(&self, id: OutboxId) -> Result<Option<OutboxRow>, StoreError> {
        let row =
            sqlx::query(&format!("{SELECT_ROW} WHERE o.id = $1")).bind(id.0).fetch_optional(&self.db.pool).await?;
        let bad = |source| StoreError::BadRow { table: "outbox", key: id.0.to_string(), source };
        row.map(|row| row_from(&row).map_err(bad)).transpose()
    }

    /// The newest outbox row's id (`OutboxId(0)` when there is none).
    pub async fn outbox_last_id(&self) -> Result<OutboxId, StoreError> {
        let id: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM outbox").fetch_one(&self.db.pool).await?;
        Ok(OutboxId(id.unwrap_or(0)))
    }

    /// How many replies wait for the group's chat.
    pub async fn queued_count(&self, group: &GroupName) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE group_name = $1 AND state = 'queued'")
            .bind(group.as_str())
            .fetch_one(&self.db.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The copies of files that queued messages still carry (every other
    /// copy in `data_dir/outgoing` may go).
    pub async fn queued_files(&self) -> Result<Vec<std::path::PathBuf>, StoreError> {
        let paths: Vec<String> =
            sqlx::query_scalar("SELECT file_path FROM outbox WHERE state = 'queued' AND file_path IS NOT NULL")
                .fetch_all(&self.db.pool)
                .await?;
        Ok(paths.into_iter().map(Into::into).collect())
    }

    /// `parts` of the row's parts are in the chat now.
    pub async fn outbox_parts_done(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        let done = sqlx::query(&format!("UPDATE outbox SET parts_done = $6, last_error = NULL {GUARD}"))
            .bind_seen(seen)
            .bind(i64::from(parts))
            .execute(&self.db.pool)
            .await?;
        Ok(Marked::from_rows(done.rows_affected()))
    }

    /// The whole row is in the chat.
    pub async fn outbox_delivered(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        let done = sqlx::query(&format!(
            "UPDATE outbox SET state = 'delivered', parts_done = $6, delivered_at_us = $7, last_error = NULL {GUARD}"
        ))
        .bind_seen(seen)
        .bind(i64::from(parts))
        .bind(now_us())
        .execute(&mut *self.db.hot.lock().await?)
        .await?;
        Ok(Marked::from_rows(done.rows_affected()))
    }

    /// A try failed: counted, with why, and the row stays queued.
    pub async fn outbox_attempt_failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        let done = sqlx::query(&format!("UPDATE outbox SET attempts = attempts + 1, last_error = $6 {GUARD}"))
            .bind_seen(seen)
            .bind(why)
            .execute(&self.db.pool)
            .await?;
        Ok(Marked::from_rows(done.rows_affected()))
    }

    /// A file the platform would not take (refused, or too many failed
    /// tries): the row failed, with why, and `notice` queued for the group's
    /// chat, together (if the row is still as `seen`).
    pub async fn outbox_file_failed(
        &self,
        group: &GroupName,
        seen: &Seen,
        why: &str,
        notice: Enqueue<'_>,
    ) -> Result<Marked, StoreError> {
        let mut tx = self.db.pool.begin().await?;
        let done = sqlx::query(&format!(
            "UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_error = $6 {GUARD}"
        ))
        .bind_seen(seen)
        .bind(why)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(Marked::Moved);
        }
        enqueue_in(&mut tx, group, notice, None).await?;
        tx.commit().await?;
        Ok(Marked::Recorded)
    }

    /// The platform refused the row for good.
    pub async fn outbox_failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        let done = sqlx::query(&format!(
            "UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_error = $6 {GUARD}"
        ))
        .bind_seen(seen)
        .bind(why)
        .execute(&self.db.pool)
        .await?;
        Ok(Marked::from_rows(done.rows_affected()))
    }
}

/// Which of a chat's queued rows a read looks at.
#[derive(Clone, Copy, Debug)]
enum Carrying {
    Any,
    Text,
    File,
}

/// Every delivery mark applies only to the row as the worker read it: still
/// queued, at the same address, with as many parts done. A rebinding (or
/// another worker's progress) between the read and the mark makes it a no-op,
/// so a worker can never record progress made in one chat against a row that
/// now waits for another. Binds ?1 to ?5 (see [`BindSeen`]).
const GUARD: &str =
    "WHERE id = $1 AND state = 'queued' AND platform = $2 AND chat = $3 AND thread IS NOT DISTINCT FROM $4 AND parts_done = $5";

trait BindSeen<'q> {
    fn bind_seen(self, seen: &'q Seen) -> Self;
}

impl<'q> BindSeen<'q> for sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    fn bind_seen(self, seen: &'q Seen) -> Self {
        self.bind(seen.id.0)
            .bind(seen.to.platform.as_str())
            .bind(&seen.to.chat)
            .bind(&seen.to.thread)
            .bind(i64::from(seen.parts_done))
    }
}

/// A [`SELECT_ROW`] row, by column name.
#[derive(sqlx::FromRow)]
struct StoredRow {
    id: i64,
    group_name: String,
    at_us: i64,
    kind: String,
    text: String,
    platform: String,
    chat: String,
    thread: Option<String>,
    state: String,
    parts_done: i64,
    attempts: i64,
    last_error: Option<String>,
    file_path: Option<String>,
    file_name: Option<String>,
    file_kind: Option<String>,
    file_bytes: Option<i64>,
    file_from: Option<String>,
}

fn row_from(row: &AnyRow) -> Result<OutboxRow, sqlx::Error> {
    let r = StoredRow::from_row(row)?;
    let group = &r.group_name;
    Ok(OutboxRow {
        id: OutboxId(r.id),
        group: group.parse().map_err(|e| bad_row(format!("group name {group:?}: {e}")))?,
        at_us: r.at_us,
        kind: OutboundKind::parse(&r.kind).ok_or_else(|| bad_row(format!("no kind {:?}", r.kind)))?,
        text: r.text,
        to: ChatAddress {
            platform: Platform::parse(&r.platform).ok_or_else(|| bad_row(format!("no platform {:?}", r.platform)))?,
            chat: r.chat,
            thread: r.thread,
        },
        state: DeliveryState::parse(&r.state),
        parts_done: u32::try_from(r.parts_done).unwrap_or(0),
        attempts: u32::try_from(r.attempts).unwrap_or(0),
        last_error: r.last_error,
        file: match (r.file_path, r.file_kind) {
            (Some(path), Some(kind)) => Some(OutboundFile {
                path: path.into(),
                name: r.file_name.unwrap_or_else(|| "file".to_owned()),
                kind: FileKind::parse(&kind).ok_or_else(|| bad_row(format!("no file kind {kind:?}")))?,
                bytes: r.file_bytes.and_then(|b| u64::try_from(b).ok()).unwrap_or(0),
                from: r.file_from.unwrap_or_default(),
            }),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests;
