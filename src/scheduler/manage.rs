//! Changing schedules: what `pincer tasks` and the agent's tools both do, with
//! the same rules (which status may become which) and the same messages.
//! A running scheduler learns of a change when poked, or at its next poll.

use chrono::Utc;

use super::schedule::{Schedule, ScheduleId, ScheduleStatus, TriggerError};
use crate::store::{NewSchedule, Store, StoreError};

/// A change that was refused; the text says why and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error(transparent)]
    Trigger(#[from] TriggerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("task #{id} is {status}, so it cannot be {action}{hint}")]
    State { id: ScheduleId, status: &'static str, action: &'static str, hint: &'static str },
    #[error("the prompt is empty: say what the agent should do when the task runs")]
    EmptyPrompt,
}

/// Stores a new schedule, due at its first run.
pub async fn add(store: &Store, new: NewSchedule) -> Result<Schedule, ManageError> {
    if new.prompt.trim().is_empty() {
        return Err(ManageError::EmptyPrompt);
    }
    let first = new.trigger.first_run(Utc::now(), true)?;
    Ok(store.add_schedule(&new, first).await?)
}

pub async fn pause(store: &Store, id: ScheduleId) -> Result<Schedule, ManageError> {
    let s = store.schedule(id).await?;
    require(&s, &[ScheduleStatus::Active, ScheduleStatus::Paused], "paused", "")?;
    store.set_schedule_state(id, ScheduleStatus::Paused, None).await?;
    Ok(store.schedule(id).await?)
}

/// Resumes a paused schedule from now: runs missed while paused are not made up.
pub async fn resume(store: &Store, id: ScheduleId) -> Result<Schedule, ManageError> {
    let s = store.schedule(id).await?;
    require(&s, &[ScheduleStatus::Paused, ScheduleStatus::Active], "resumed", "")?;
    if s.status == ScheduleStatus::Active {
        return Ok(s);
    }
    let next = s.trigger.first_run(Utc::now(), false)?;
    store.set_schedule_state(id, ScheduleStatus::Active, next).await?;
    Ok(store.schedule(id).await?)
}

pub async fn cancel(store: &Store, id: ScheduleId) -> Result<Schedule, ManageError> {
    let s = store.schedule(id).await?;
    require(&s, &[ScheduleStatus::Active, ScheduleStatus::Paused, ScheduleStatus::Completed], "cancelled", "")?;
    store.set_schedule_state(id, ScheduleStatus::Cancelled, None).await?;
    Ok(store.schedule(id).await?)
}

/// Makes an active schedule due now; its regular times stay as they were
/// computed after this run.
pub async fn run_now(store: &Store, id: ScheduleId) -> Result<Schedule, ManageError> {
    let s = store.schedule(id).await?;
    require(&s, &[ScheduleStatus::Active], "run now", ": resume it first (`pincer tasks resume ID`)")?;
    store.set_schedule_state(id, ScheduleStatus::Active, Some(Utc::now())).await?;
    Ok(store.schedule(id).await?)
}

fn require(
    s: &Schedule,
    allowed: &[ScheduleStatus],
    action: &'static str,
    hint: &'static str,
) -> Result<(), ManageError> {
    if allowed.contains(&s.status) {
        Ok(())
    } else {
        Err(ManageError::State { id: s.id, status: s.status.as_str(), action, hint })
    }
}
