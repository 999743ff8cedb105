//! The session's journal: lifecycle events, task frames and permission
//! decisions of a group, written as they happen and read back by tests and
//! operators. Touches `session_events`, `task_frames`, `permission_decisions`;
//! each write is fenced by the group's lease on a cluster node (`fenced.rs`).

use sqlx::FromRow;

use super::clock::now_us;
use super::error::{readable, StoreError};
use super::fenced;
use super::handles::Journal;
use super::rows;
use crate::domain::{GroupName, PermissionDecision, TaskFrame};

impl Journal {
    pub async fn record_task_frame(&self, group: &GroupName, t: &TaskFrame, raw: &str) -> Result<(), StoreError> {
        let query = sqlx::query(
            "INSERT INTO task_frames (group_name, at_us, session_id, subtype, task_id, task_type, status, summary, description, raw)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
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
        .bind(raw);
        fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }

    pub async fn record_decision(&self, group: &GroupName, d: &PermissionDecision) -> Result<(), StoreError> {
        let query = sqlx::query(
            "INSERT INTO permission_decisions (group_name, at_us, tool_name, tool_use_id, input, allowed, message, decided_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(&d.tool_name)
        .bind(&d.tool_use_id)
        .bind(&d.input)
        .bind(i64::from(d.allowed))
        .bind(&d.message)
        .bind(&d.decided_by);
        fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }

    pub async fn decisions(&self, group: &GroupName) -> Result<Vec<PermissionDecision>, StoreError> {
        let rows = sqlx::query(
            "SELECT tool_name, tool_use_id, input, allowed, message, decided_by FROM permission_decisions WHERE group_name = $1 ORDER BY id",
        )
        .bind(group.as_str())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(readable("permission_decisions", &rows, |r| Ok(rows::DecisionRow::from_row(r)?.into())))
    }

    pub async fn record_session_event(
        &self,
        group: &GroupName,
        kind: &str,
        session_id: Option<&str>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let query = sqlx::query(
            "INSERT INTO session_events (group_name, at_us, kind, session_id, detail) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(kind)
        .bind(session_id)
        .bind(detail);
        fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }

    /// Session lifecycle events of a group, oldest first, as `(kind, session_id)`.
    pub async fn session_events(&self, group: &GroupName) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let rows = sqlx::query("SELECT kind, session_id FROM session_events WHERE group_name = $1 ORDER BY id")
            .bind(group.as_str())
            .fetch_all(&self.db.pool)
            .await?;
        Ok(readable("session_events", &rows, |r| {
            let e = rows::SessionEventRow::from_row(r)?;
            Ok((e.kind, e.session_id))
        }))
    }
}

#[cfg(test)]
impl Journal {
    /// Session events of a group with their details, oldest first, as `(kind, detail)`.
    pub(crate) async fn session_event_details(
        &self,
        group: &GroupName,
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let rows = sqlx::query("SELECT kind, detail FROM session_events WHERE group_name = $1 ORDER BY id")
            .bind(group.as_str())
            .fetch_all(&self.db.pool)
            .await?;
        Ok(readable("session_events", &rows, |r| Ok((sqlx::Row::try_get(r, 0)?, sqlx::Row::try_get(r, 1)?))))
    }
}
