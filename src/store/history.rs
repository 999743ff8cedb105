//! A group's persisted history as one stream, oldest first: what came in,
//! what each turn returned, every task frame, what the agent posted itself,
//! pincer's own notices, and how far each message for the chat got.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::clock::now_us;
use super::error::{readable, StoreError};
use super::fenced;
use super::flag::Flag;
use super::handles::{History, OutboxLog};
use super::outbox::{enqueue_in, Enqueue, OutboxId};
use super::rows;
use crate::domain::media::OutboundFile;
use crate::domain::GroupName;

/// One line of `pincer history`; `--json` prints it with a `kind` tag.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HistoryEntry {
    Inbound {
        at_us: i64,
        source: String,
        sender: String,
        text: String,
        state: String,
        /// The photos and files it carried, and what became of each.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        media: Vec<crate::domain::media::Attachment>,
    },
    Result {
        at_us: i64,
        session_id: Option<String>,
        subtype: String,
        is_error: bool,
        text: Option<String>,
        /// This turn's own cost (the CLI reports a running total per process).
        cost_usd: Option<f64>,
        duration_ms: Option<i64>,
        origin: Option<String>,
        /// `None` for a result with nothing to deliver (a vanished session).
        delivery: Option<Delivery>,
    },
    Task {
        at_us: i64,
        session_id: Option<String>,
        subtype: String,
        task_id: Option<String>,
        task_type: Option<String>,
        status: Option<String>,
        summary: Option<String>,
        description: Option<String>,
    },
    /// Posted by an agent through the `send_message` tool, mid-turn, or a
    /// file it sent with `send_file` (`text` is then its caption).
    Message {
        at_us: i64,
        /// The group whose agent sent it.
        sent_by: String,
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        file: Option<FileEntry>,
        delivery: Option<Delivery>,
    },
    /// Pincer itself speaking in the chat: restarts, failures, what to do.
    Notice { at_us: i64, text: String, delivery: Option<Delivery> },
}

/// A file an agent sent: how it goes (`photo`, `audio`, `document`), the
/// name the chat shows, and its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileEntry {
    pub kind: String,
    pub name: String,
    pub bytes: u64,
    /// Where it was in the group's folder, relative (shown only).
    pub from: String,
}

/// How far a message for the chat got (its outbox row).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// `queued`, `delivered` or `failed`.
    pub state: String,
    /// Where it goes, e.g. `telegram -1001234 topic 7`.
    pub to: String,
    /// Why the last try failed (for `failed`: why it was given up).
    pub error: Option<String>,
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.state.as_str(), &self.error) {
            ("queued", Some(e)) => write!(f, "queued for {}, last try failed: {e}", self.to),
            ("failed", Some(e)) => write!(f, "failed ({}): {e}", self.to),
            (state, _) => write!(f, "{state} ({})", self.to),
        }
    }
}

impl HistoryEntry {
    pub fn at_us(&self) -> i64 {
        match self {
            HistoryEntry::Inbound { at_us, .. }
            | HistoryEntry::Result { at_us, .. }
            | HistoryEntry::Task { at_us, .. }
            | HistoryEntry::Message { at_us, .. }
            | HistoryEntry::Notice { at_us, .. } => *at_us,
        }
    }
}

/// Between a task frame's summary and description in [`HISTORY_SQL`]'s one
/// column (`$3`): a character neither has.
const TASK_TEXT_SEPARATOR: &str = "\u{1f}";

// One UNION so that `--limit` cuts the newest N across all kinds. The
// columns are positional: a, b, c, d are kind-specific text columns; ds, dt,
// de are the delivery (outbox) state, address and error.
const HISTORY_SQL: &str = "
SELECT * FROM (
    SELECT 'inbound' AS kind, at_us, id, source AS a, sender AS b, text AS c, state AS d,
           media AS e, NULL AS f, NULL AS is_error, NULL AS cost, NULL AS dur, NULL AS ds, NULL AS dt, NULL AS de
      FROM inbound WHERE group_name = $1
    UNION ALL
    SELECT 'result', r.at_us, r.id, r.session_id, r.subtype, r.text, r.origin, NULL, NULL, r.is_error, r.cost_usd,
           r.duration_ms, o.state, o.platform || ' ' || o.chat || COALESCE(' topic ' || o.thread, ''), o.last_error
      FROM results r LEFT JOIN outbox o ON o.result_id = r.id WHERE r.group_name = $1
    UNION ALL
    SELECT 'task', at_us, id, session_id, subtype, task_id, task_type, status, COALESCE(summary, '') || $3 || COALESCE(description, ''), NULL, NULL, NULL, NULL, NULL, NULL
      FROM task_frames WHERE group_name = $1
    UNION ALL
    SELECT 'message', m.at_us, m.id, m.sent_by, m.text, o.file_kind, o.file_name, CAST(o.file_bytes AS TEXT), o.file_from, NULL, NULL, NULL,
           o.state, o.platform || ' ' || o.chat || COALESCE(' topic ' || o.thread, ''), o.last_error
      FROM agent_messages m LEFT JOIN outbox o ON o.agent_message_id = m.id WHERE m.group_name = $1
    UNION ALL
    SELECT 'notice', at_us, id, text, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           state, platform || ' ' || chat || COALESCE(' topic ' || thread, ''), last_error
      FROM outbox WHERE group_name = $1 AND result_id IS NULL AND agent_message_id IS NULL
    ORDER BY at_us DESC, id DESC
    LIMIT $2
) AS newest ORDER BY at_us ASC, id ASC";

impl OutboxLog {
    /// Stores a message an agent posts to `group`'s chat with `send_message`
    /// (or a file with `send_file`, `out.text` its caption), and its outbox
    /// row, in one transaction.
    pub async fn record_agent_message(
        &self,
        group: &GroupName,
        sent_by: &GroupName,
        out: Enqueue<'_>,
        file: Option<&OutboundFile>,
    ) -> Result<OutboxId, StoreError> {
        let mut tx = fenced::begin_for(&self.db, group).await?;
        let message: i64 = sqlx::query_scalar(
            "INSERT INTO agent_messages (group_name, at_us, sent_by, text) VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(sent_by.as_str())
        .bind(out.text)
        .fetch_one(&mut *tx)
        .await?;
        let id = enqueue_in(&mut tx, group, out, Some(message)).await?;
        if let Some(file) = file {
            sqlx::query(
                "UPDATE outbox SET file_path = $1, file_name = $2, file_kind = $3, file_bytes = $4, file_from = $5 WHERE id = $6",
            )
            .bind(file.path.to_string_lossy().into_owned())
            .bind(&file.name)
            .bind(file.kind.as_str())
            .bind(i64::try_from(file.bytes).unwrap_or(i64::MAX))
            .bind(&file.from)
            .bind(id.0)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(id)
    }
}

impl History {
    /// The newest `limit` entries of a group's history, oldest first.
    pub async fn history(&self, group: &GroupName, limit: u32) -> Result<Vec<HistoryEntry>, StoreError> {
        let rows = sqlx::query(HISTORY_SQL)
            .bind(group.as_str())
            .bind(i64::from(limit))
            .bind(TASK_TEXT_SEPARATOR)
            .fetch_all(&self.db.pool)
            .await?;
        Ok(readable("history", &rows, entry_from_row))
    }
}

/// The generic columns every kind of history row fills (`a` to `d`), as
/// [`HISTORY_SQL`] names them.
struct Columns {
    at_us: i64,
    a: Option<String>,
    b: Option<String>,
    c: Option<String>,
    d: Option<String>,
    /// How far the row's message for the chat got, if it has one.
    delivery: Option<Delivery>,
}

fn entry_from_row(row: &AnyRow) -> Result<HistoryEntry, sqlx::Error> {
    let kind: String = row.try_get("kind")?;
    let cols = Columns {
        at_us: row.try_get("at_us")?,
        a: row.try_get("a")?,
        b: row.try_get("b")?,
        c: row.try_get("c")?,
        d: row.try_get("d")?,
        delivery: delivery(row)?,
    };
    Ok(match kind.as_str() {
        "inbound" => inbound_entry(row, cols)?,
        "result" => result_entry(row, cols)?,
        "message" => message_entry(row, cols)?,
        "notice" => {
            HistoryEntry::Notice { at_us: cols.at_us, text: cols.a.unwrap_or_default(), delivery: cols.delivery }
        }
        _ => task_entry(row, cols)?,
    })
}

/// The delivery columns (`ds`, `dt`, `de`).
fn delivery(row: &AnyRow) -> Result<Option<Delivery>, sqlx::Error> {
    Ok(match row.try_get::<Option<String>, _>("ds")? {
        Some(state) => Some(Delivery {
            state,
            to: row.try_get::<Option<String>, _>("dt")?.unwrap_or_default(),
            error: row.try_get("de")?,
        }),
        None => None,
    })
}

fn inbound_entry(row: &AnyRow, cols: Columns) -> Result<HistoryEntry, sqlx::Error> {
    Ok(HistoryEntry::Inbound {
        at_us: cols.at_us,
        source: cols.a.unwrap_or_default(),
        sender: cols.b.unwrap_or_default(),
        text: cols.c.unwrap_or_default(),
        state: cols.d.unwrap_or_default(),
        // History shows what it can: media that does not read is left out.
        media: rows::read_media(row.try_get::<Option<String>, _>("e")?.as_deref()).unwrap_or_default(),
    })
}

fn result_entry(row: &AnyRow, cols: Columns) -> Result<HistoryEntry, sqlx::Error> {
    Ok(HistoryEntry::Result {
        at_us: cols.at_us,
        session_id: cols.a,
        subtype: cols.b.unwrap_or_default(),
        text: cols.c,
        origin: cols.d,
        is_error: row.try_get::<Option<Flag>, _>("is_error")?.is_some_and(bool::from),
        cost_usd: row.try_get("cost")?,
        duration_ms: row.try_get("dur")?,
        delivery: cols.delivery,
    })
}

fn message_entry(row: &AnyRow, cols: Columns) -> Result<HistoryEntry, sqlx::Error> {
    let bytes = row.try_get::<Option<String>, _>("e")?.and_then(|b| b.parse().ok()).unwrap_or(0);
    let from = row.try_get::<Option<String>, _>("f")?.unwrap_or_default();
    let file = cols.c.map(|kind| FileEntry { kind, name: cols.d.unwrap_or_default(), bytes, from });
    Ok(HistoryEntry::Message {
        at_us: cols.at_us,
        sent_by: cols.a.unwrap_or_default(),
        text: cols.b.unwrap_or_default(),
        file,
        delivery: cols.delivery,
    })
}

fn task_entry(row: &AnyRow, cols: Columns) -> Result<HistoryEntry, sqlx::Error> {
    let e: Option<String> = row.try_get("e")?;
    let f: Option<String> = row.try_get("f")?;
    // summary and description travel in one column, split by a unit separator.
    let (summary, description) = f.as_deref().and_then(|f| f.split_once('\u{1f}')).unwrap_or_default();
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(HistoryEntry::Task {
        at_us: cols.at_us,
        session_id: cols.a,
        subtype: cols.b.unwrap_or_default(),
        task_id: cols.c,
        task_type: cols.d,
        status: e,
        summary: non_empty(summary),
        description: non_empty(description),
    })
}
