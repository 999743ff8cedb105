//! Scheduled prompts and their run log. Runs a stopped pincer or node left
//! `running` are recovered with the rest of what it left (`recovery.rs`).

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::FromRow;

use super::clock::now_us;
use super::error::{bad_row, readable, StoreError};
use super::handles::{Groups, Schedules};
use crate::domain::schedule::{ContextMode, Schedule, ScheduleId, ScheduleStatus, Trigger};
use crate::domain::GroupName;

/// A schedule before it has an id.
#[derive(Clone, Debug)]
pub struct NewSchedule {
    pub group: GroupName,
    pub prompt: String,
    pub trigger: Trigger,
    pub context: ContextMode,
}

/// Row id of one run of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunId(pub i64);

/// One logged run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub schedule_id: ScheduleId,
    pub started: DateTime<Utc>,
    pub ended: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    /// `running`, `ok` or `error`.
    pub outcome: String,
    /// The result's text, or what went wrong.
    pub text: Option<String>,
    pub cost_usd: Option<f64>,
}

fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn time(us: Option<i64>) -> Option<DateTime<Utc>> {
    us.and_then(DateTime::from_timestamp_micros)
}

const SELECT_SCHEDULE: &str = "SELECT id, group_name, prompt, kind, value, tz, context_mode, status, next_run_us, \
                               last_run_us, failures FROM schedules";

impl Schedules {
    pub async fn add_schedule(&self, s: &NewSchedule, next_run: Option<DateTime<Utc>>) -> Result<Schedule, StoreError> {
        // No cap: the insert always happens, so `None` cannot come back.
        let added = self.add_schedule_capped(s, next_run, usize::MAX).await?;
        added.ok_or(StoreError::Sql(sqlx::Error::RowNotFound))
    }

    /// Stores a new active schedule unless its group already has `max_active`
    /// active ones (then `None`). The count is taken in the same statement, so
    /// two callers at once cannot both take the last place.
    pub async fn add_schedule_capped(
        &self,
        s: &NewSchedule,
        next_run: Option<DateTime<Utc>>,
        max_active: usize,
    ) -> Result<Option<Schedule>, StoreError> {
        Groups::new(self.db.clone()).group(s.group.as_str()).await?;
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO schedules (group_name, created_at_us, prompt, kind, value, tz, context_mode, status, next_run_us)
             SELECT $1, $2, $3, $4, $5, $6, $7, 'active', $8
             WHERE (SELECT COUNT(*) FROM schedules WHERE group_name = $9 AND status = 'active') < $10
             RETURNING id",
        )
        .bind(s.group.as_str())
        .bind(now_us())
        .bind(&s.prompt)
        .bind(s.trigger.kind())
        .bind(s.trigger.value())
        .bind(s.trigger.tz())
        .bind(s.context.as_str())
        .bind(next_run.map(us))
        .bind(s.group.as_str())
        .bind(i64::try_from(max_active).unwrap_or(i64::MAX))
        .fetch_optional(&self.db.pool)
        .await?;
        match id {
            Some(id) => self.schedule(ScheduleId(id)).await.map(Some),
            None => Ok(None),
        }
    }

    /// How many active schedules `group` has.
    pub async fn active_schedule_count(&self, group: &GroupName) -> Result<usize, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schedules WHERE group_name = $1 AND status = 'active'")
            .bind(group.as_str())
            .fetch_one(&self.db.pool)
            .await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Makes a paused schedule active again, due at `next_run`, unless its
    /// group already has `max_active` active ones (then false). Counted in the
    /// same statement, like [`Schedules::add_schedule_capped`].
    pub async fn resume_schedule_capped(
        &self,
        id: ScheduleId,
        next_run: Option<DateTime<Utc>>,
        max_active: usize,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedules SET status = 'active', next_run_us = $1 WHERE id = $2 AND status = 'paused'
             AND (SELECT COUNT(*) FROM schedules AS o
                  WHERE o.group_name = schedules.group_name AND o.status = 'active') < $3",
        )
        .bind(next_run.map(us))
        .bind(id.0)
        .bind(i64::try_from(max_active).unwrap_or(i64::MAX))
        .execute(&self.db.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn schedule(&self, id: ScheduleId) -> Result<Schedule, StoreError> {
        let row =
            sqlx::query(&format!("{SELECT_SCHEDULE} WHERE id = $1")).bind(id.0).fetch_optional(&self.db.pool).await?;
        let row = row.ok_or(StoreError::UnknownSchedule(id.0))?;
        schedule_from_row(&row).map_err(|source| StoreError::BadRow {
            table: "schedules",
            key: id.0.to_string(),
            source,
        })
    }

    /// The schedules of one group, or of all groups; cancelled ones left out.
    pub async fn schedules(&self, group: Option<&GroupName>) -> Result<Vec<Schedule>, StoreError> {
        let rows = sqlx::query(&format!(
            "{SELECT_SCHEDULE} WHERE status != 'cancelled' AND ($1 IS NULL OR group_name = $2) ORDER BY id"
        ))
        .bind(group.map(GroupName::as_str))
        .bind(group.map(GroupName::as_str))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(readable("schedules", &rows, schedule_from_row))
    }

    /// Schedules that may come due: active ones.
    pub async fn active_schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let rows = sqlx::query(&format!("{SELECT_SCHEDULE} WHERE status = 'active' ORDER BY id"))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(readable("schedules", &rows, schedule_from_row))
    }

    /// Pauses a schedule unless it was cancelled or completed meanwhile (then
    /// false): the status is checked by the statement that changes it.
    pub async fn pause_schedule(&self, id: ScheduleId) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedules SET status = 'paused', next_run_us = NULL
             WHERE id = $1 AND status IN ('active', 'paused')",
        )
        .bind(id.0)
        .execute(&self.db.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Cancels a schedule unless it is cancelled already (then false).
    pub async fn cancel_schedule(&self, id: ScheduleId) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedules SET status = 'cancelled', next_run_us = NULL
             WHERE id = $1 AND status IN ('active', 'paused', 'completed')",
        )
        .bind(id.0)
        .execute(&self.db.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Makes a schedule due at `at` if it is still active (a paused or
    /// cancelled one stays as it is: false).
    pub async fn make_due(&self, id: ScheduleId, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE schedules SET next_run_us = $1 WHERE id = $2 AND status = 'active'")
            .bind(us(at))
            .bind(id.0)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Fires a schedule that is still active and due at `now`: its last run
    /// is now, its next one `next_run`, and its run is logged as running, in
    /// one transaction. A pincer killed at any point leaves either all of it
    /// (recovery finds the running run) or none (the schedule is still due);
    /// never a spent `once` without a run. `None` if the schedule changed
    /// since it was read (paused, cancelled, already fired).
    pub async fn fire_schedule(
        &self,
        id: ScheduleId,
        group: &GroupName,
        now: DateTime<Utc>,
        next_run: Option<DateTime<Utc>>,
    ) -> Result<Option<RunId>, StoreError> {
        // A write first, so the transaction holds the write lock from its
        // start; on a cluster node, after the group's lease is checked, so
        // only the group's owner fires (once) what is due.
        let mut tx = super::fenced::begin_for(&self.db, group).await?;
        let fired = sqlx::query(
            "UPDATE schedules SET last_run_us = $1, next_run_us = $2
             WHERE id = $3 AND status = 'active' AND next_run_us <= $4",
        )
        .bind(us(now))
        .bind(next_run.map(us))
        .bind(id.0)
        .bind(us(now))
        .execute(&mut *tx)
        .await?;
        if fired.rows_affected() == 0 {
            return Ok(None);
        }
        let run: i64 = sqlx::query_scalar(
            "INSERT INTO schedule_runs (schedule_id, group_name, started_us, outcome)
             SELECT id, group_name, $1, 'running' FROM schedules WHERE id = $2 RETURNING id",
        )
        .bind(us(now))
        .bind(id.0)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(RunId(run)))
    }

    /// A run succeeded: no failures in a row, and a `once` that is still
    /// active is spent. One statement, whatever changed since the run began;
    /// fenced by `group`'s lease, so a node that lost the group while the run
    /// went on leaves the schedule as the new owner judged it.
    pub async fn schedule_succeeded(&self, id: ScheduleId, group: &GroupName) -> Result<(), StoreError> {
        let query = sqlx::query(
            "UPDATE schedules SET failures = 0,
                    next_run_us = CASE WHEN kind = 'once' AND status = 'active' THEN NULL ELSE next_run_us END,
                    status = CASE WHEN kind = 'once' AND status = 'active' THEN 'completed' ELSE status END
             WHERE id = $1",
        )
        .bind(id.0);
        super::fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }

    /// Writes a schedule's status, failures and next run together, if they
    /// are still what `seen` read (false otherwise: read it again and decide
    /// again). So a change made meanwhile (a cancel, a run-now) is never
    /// overwritten by a decision taken before it. Fenced by the group's lease.
    pub async fn change_schedule_if(
        &self,
        seen: &Schedule,
        status: ScheduleStatus,
        failures: u32,
        next_run: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE schedules SET status = $1, failures = $2, next_run_us = $3
             WHERE id = $4 AND status = $5 AND failures = $6 AND next_run_us IS NOT DISTINCT FROM $7",
        )
        .bind(status.as_str())
        .bind(i64::from(failures))
        .bind(next_run.map(us))
        .bind(seen.id.0)
        .bind(seen.status.as_str())
        .bind(i64::from(seen.failures))
        .bind(seen.next_run.map(us));
        let done = super::fenced::execute_for(&self.db, &seen.group, query).await?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn finish_run(
        &self,
        run: RunId,
        group: &GroupName,
        ok: bool,
        text: &str,
        cost_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        let ended = Utc::now();
        let query = sqlx::query(
            "UPDATE schedule_runs SET ended_us = $1, duration_ms = ($2 - started_us) / 1000, outcome = $3, text = $4, cost_usd = $5
             WHERE id = $6",
        )
        .bind(us(ended))
        .bind(us(ended))
        .bind(if ok { "ok" } else { "error" })
        .bind(text)
        .bind(cost_usd)
        .bind(run.0);
        // Fenced: a node that lost the group leaves the run as the new owner judged it.
        super::fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }

    /// The run log of a schedule, oldest first.
    pub async fn runs(&self, id: ScheduleId) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, schedule_id, started_us, ended_us, duration_ms, outcome, text, cost_usd
               FROM schedule_runs WHERE schedule_id = $1 ORDER BY id",
        )
        .bind(id.0)
        .fetch_all(&self.db.pool)
        .await?;
        Ok(readable("schedule_runs", &rows, |row| {
            let r = RunRow::from_row(row)?;
            Ok(RunRecord {
                id: RunId(r.id),
                schedule_id: ScheduleId(r.schedule_id),
                started: time(Some(r.started_us)).unwrap_or_default(),
                ended: time(r.ended_us),
                duration_ms: r.duration_ms,
                outcome: r.outcome,
                text: r.text,
                cost_usd: r.cost_usd,
            })
        }))
    }
}

/// A row as a schedule; a row that no longer parses (edited by hand) is an
/// error, which listings log and skip rather than failing every listing.
fn schedule_from_row(row: &AnyRow) -> Result<Schedule, sqlx::Error> {
    let r = ScheduleRow::from_row(row)?;
    let trigger = Trigger::parse(&r.kind, &r.value, r.tz.as_deref().unwrap_or("UTC")).map_err(bad_row)?;
    let group = &r.group_name;
    Ok(Schedule {
        id: ScheduleId(r.id),
        group: group.parse().map_err(|e| bad_row(format!("group name {group:?}: {e}")))?,
        prompt: r.prompt,
        trigger,
        context: ContextMode::parse(&r.context_mode).unwrap_or(ContextMode::Group),
        status: ScheduleStatus::parse(&r.status).unwrap_or(ScheduleStatus::Paused),
        next_run: time(r.next_run_us),
        last_run: time(r.last_run_us),
        failures: r.failures.try_into().unwrap_or(0),
    })
}

/// A [`SELECT_SCHEDULE`] row, by column name.
#[derive(sqlx::FromRow)]
struct ScheduleRow {
    id: i64,
    group_name: String,
    prompt: String,
    kind: String,
    value: String,
    tz: Option<String>,
    context_mode: String,
    status: String,
    next_run_us: Option<i64>,
    last_run_us: Option<i64>,
    failures: i64,
}

/// A `schedule_runs` row, by column name.
#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    schedule_id: i64,
    started_us: i64,
    ended_us: Option<i64>,
    duration_ms: Option<i64>,
    outcome: String,
    text: Option<String>,
    cost_usd: Option<f64>,
}
