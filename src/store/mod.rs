//! The store: the only module that speaks SQL.
//!
//! SQLite in WAL mode through sqlx, with the migrations in `migrations/`
//! embedded at build time and applied when the store opens. Every write that
//! the session engine depends on ("persist first") goes through here.

mod history;

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::domain::{GroupName, Inbound, InboundId, PermissionDecision, TaskFrame, TurnResult};

pub use history::HistoryEntry;

/// What can go wrong talking to the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("group `{0}` is already registered")]
    GroupExists(GroupName),
    #[error("group `{0}` is not registered: add it with `pincer groups add {0}`")]
    UnknownGroup(String),
    #[error("cannot open the database {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot migrate the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
}

/// A registered group as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub name: GroupName,
    pub created_at_us: i64,
    pub session_id: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
}

/// Where an inbound message is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InboundState {
    Queued,
    Sent,
    Answered,
    Failed,
}

impl InboundState {
    fn as_str(self) -> &'static str {
        match self {
            InboundState::Queued => "queued",
            InboundState::Sent => "sent",
            InboundState::Answered => "answered",
            InboundState::Failed => "failed",
        }
    }
}

/// A cheap, cloneable handle to the database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
}

/// Now, as unix microseconds, strictly increasing within this process.
///
/// History merges several tables by this timestamp, so two rows written in the
/// same microsecond (or across a clock step back) must still sort in write order.
pub fn now_us() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let wall = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    let prev = LAST.fetch_max(wall, Ordering::Relaxed);
    if wall > prev {
        wall
    } else {
        LAST.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl Store {
    /// Opens (creating if missing) the database at `path` and migrates it.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
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
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Store { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub async fn add_group(&self, name: &GroupName, allowed_tools: Option<&[String]>) -> Result<(), StoreError> {
        let tools = allowed_tools.map(|t| serde_json::to_string(t).expect("a list of strings serializes"));
        let done = sqlx::query(
            "INSERT INTO groups (name, created_at_us, allowed_tools) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(name.as_str())
        .bind(now_us())
        .bind(tools)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::GroupExists(name.clone()));
        }
        Ok(())
    }

    pub async fn group(&self, name: &str) -> Result<GroupRecord, StoreError> {
        let row = sqlx::query("SELECT name, created_at_us, session_id, allowed_tools FROM groups WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(group_from_row).ok_or_else(|| StoreError::UnknownGroup(name.to_owned()))
    }

    pub async fn groups(&self) -> Result<Vec<GroupRecord>, StoreError> {
        let rows = sqlx::query("SELECT name, created_at_us, session_id, allowed_tools FROM groups ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(group_from_row).collect())
    }

    pub async fn set_session_id(&self, group: &GroupName, session_id: Option<&str>) -> Result<(), StoreError> {
        sqlx::query("UPDATE groups SET session_id = ? WHERE name = ?")
            .bind(session_id)
            .bind(group.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn insert_inbound(&self, msg: &Inbound) -> Result<InboundId, StoreError> {
        let id = sqlx::query("INSERT INTO inbound (group_name, at_us, source, sender, text) VALUES (?, ?, ?, ?, ?)")
            .bind(msg.group.as_str())
            .bind(now_us())
            .bind(msg.source.as_str())
            .bind(&msg.sender)
            .bind(&msg.text)
            .execute(&self.pool)
            .await?
            .last_insert_rowid();
        Ok(InboundId(id))
    }

    pub async fn set_inbound_state(&self, ids: &[InboundId], state: InboundState) -> Result<(), StoreError> {
        for id in ids {
            sqlx::query("UPDATE inbound SET state = ? WHERE id = ?")
                .bind(state.as_str())
                .bind(id.0)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    pub async fn record_result(&self, group: &GroupName, r: &TurnResult, raw: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO results (group_name, at_us, session_id, subtype, is_error, text, total_cost_usd, duration_ms, num_turns, origin, raw)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(&r.session_id)
        .bind(&r.subtype)
        .bind(r.is_error)
        .bind(&r.text)
        .bind(r.total_cost_usd)
        .bind(r.duration_ms)
        .bind(r.num_turns)
        .bind(&r.origin)
        .bind(raw)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn record_task_frame(&self, group: &GroupName, t: &TaskFrame, raw: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO task_frames (group_name, at_us, session_id, subtype, task_id, task_type, status, summary, description, raw)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(&t.session_id)
        .bind(&t.subtype)
        .bind(&t.task_id)
        .bind(&t.task_type)
        .bind(&t.status)
        .bind(&t.summary)
        .bind(&t.description)
        .bind(raw)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn record_decision(&self, group: &GroupName, d: &PermissionDecision) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO permission_decisions (group_name, at_us, tool_name, tool_use_id, input, allowed, message, decided_by)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(&d.tool_name)
        .bind(&d.tool_use_id)
        .bind(&d.input)
        .bind(d.allowed)
        .bind(&d.message)
        .bind(&d.decided_by)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn decisions(&self, group: &GroupName) -> Result<Vec<PermissionDecision>, StoreError> {
        let rows = sqlx::query(
            "SELECT tool_name, tool_use_id, input, allowed, message, decided_by FROM permission_decisions WHERE group_name = ? ORDER BY id",
        )
        .bind(group.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| PermissionDecision {
                tool_name: r.get(0),
                tool_use_id: r.get(1),
                input: r.get(2),
                allowed: r.get(3),
                message: r.get(4),
                decided_by: r.get(5),
            })
            .collect())
    }

    pub async fn record_session_event(
        &self,
        group: &GroupName,
        kind: &str,
        session_id: Option<&str>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO session_events (group_name, at_us, kind, session_id, detail) VALUES (?, ?, ?, ?, ?)")
            .bind(group.as_str())
            .bind(now_us())
            .bind(kind)
            .bind(session_id)
            .bind(detail)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Session lifecycle events of a group, oldest first, as `(kind, session_id)`.
    pub async fn session_events(&self, group: &GroupName) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let rows = sqlx::query("SELECT kind, session_id FROM session_events WHERE group_name = ? ORDER BY id")
            .bind(group.as_str())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

fn group_from_row(row: sqlx::sqlite::SqliteRow) -> GroupRecord {
    let name: String = row.get(0);
    let tools: Option<String> = row.get(3);
    GroupRecord {
        // Names were validated before they were stored.
        name: name.parse().expect("stored group names are valid"),
        created_at_us: row.get(1),
        session_id: row.get(2),
        allowed_tools: tools.and_then(|t| serde_json::from_str(&t).ok()),
    }
}

#[cfg(test)]
mod tests;
