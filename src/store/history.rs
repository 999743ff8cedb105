//! A group's persisted history as one stream, oldest first: what came in,
//! what each turn returned, every task frame, and what the agent posted itself.

use serde::Serialize;
use sqlx::Row;

use super::{Store, StoreError};
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
    /// Posted by an agent through the `send_message` tool, mid-turn.
    Message {
        at_us: i64,
        /// The group whose agent sent it.
        sent_by: String,
        text: String,
    },
}

impl HistoryEntry {
    pub fn at_us(&self) -> i64 {
        match self {
            HistoryEntry::Inbound { at_us, .. }
            | HistoryEntry::Result { at_us, .. }
            | HistoryEntry::Task { at_us, .. }
            | HistoryEntry::Message { at_us, .. } => *at_us,
        }
    }
}

// One UNION so that `--limit` cuts the newest N across all kinds. The
// columns are positional: a, b, c, d are kind-specific text columns.
const HISTORY_SQL: &str = "
SELECT * FROM (
    SELECT 'inbound' AS kind, at_us, id, source AS a, sender AS b, text AS c, state AS d,
           NULL AS e, NULL AS f, NULL AS is_error, NULL AS cost, NULL AS dur
      FROM inbound WHERE group_name = ?1
    UNION ALL
    SELECT 'result', at_us, id, session_id, subtype, text, origin, NULL, NULL, is_error, cost_usd, duration_ms
      FROM results WHERE group_name = ?1
    UNION ALL
    SELECT 'task', at_us, id, session_id, subtype, task_id, task_type, status, IFNULL(summary, '') || char(31) || IFNULL(description, ''), NULL, NULL, NULL
      FROM task_frames WHERE group_name = ?1
    UNION ALL
    SELECT 'message', at_us, id, sent_by, text, NULL, NULL, NULL, NULL, NULL, NULL, NULL
      FROM agent_messages WHERE group_name = ?1
    ORDER BY at_us DESC, id DESC
    LIMIT ?2
) ORDER BY at_us ASC, id ASC";

impl Store {
    /// Stores a message an agent posts to `group`'s chat with `send_message`.
    pub async fn record_agent_message(
        &self,
        group: &GroupName,
        sent_by: &GroupName,
        text: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO agent_messages (group_name, at_us, sent_by, text) VALUES (?, ?, ?, ?)")
            .bind(group.as_str())
            .bind(super::now_us())
            .bind(sent_by.as_str())
            .bind(text)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The newest `limit` entries of a group's history, oldest first.
    pub async fn history(&self, group: &GroupName, limit: u32) -> Result<Vec<HistoryEntry>, StoreError> {
        let rows = sqlx::query(HISTORY_SQL).bind(group.as_str()).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(entry_from_row).collect())
    }
}

fn entry_from_row(row: &sqlx::sqlite::SqliteRow) -> HistoryEntry {
    let kind: String = row.get("kind");
    let at_us: i64 = row.get("at_us");
    let a: Option<String> = row.get("a");
    let b: Option<String> = row.get("b");
    let c: Option<String> = row.get("c");
    let d: Option<String> = row.get("d");
    match kind.as_str() {
        "inbound" => HistoryEntry::Inbound {
            at_us,
            source: a.unwrap_or_default(),
            sender: b.unwrap_or_default(),
            text: c.unwrap_or_default(),
            state: d.unwrap_or_default(),
        },
        "result" => HistoryEntry::Result {
            at_us,
            session_id: a,
            subtype: b.unwrap_or_default(),
            text: c,
            origin: d,
            is_error: row.get::<Option<bool>, _>("is_error").unwrap_or(false),
            cost_usd: row.get("cost"),
            duration_ms: row.get("dur"),
        },
        "message" => HistoryEntry::Message { at_us, sent_by: a.unwrap_or_default(), text: b.unwrap_or_default() },
        _ => {
            let e: Option<String> = row.get("e");
            let f: Option<String> = row.get("f");
            // summary and description travel in one column, split by a unit separator.
            let (summary, description) = f.as_deref().and_then(|f| f.split_once('\u{1f}')).unwrap_or_default();
            let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
            HistoryEntry::Task {
                at_us,
                session_id: a,
                subtype: b.unwrap_or_default(),
                task_id: c,
                task_type: d,
                status: e,
                summary: non_empty(summary),
                description: non_empty(description),
            }
        }
    }
}
