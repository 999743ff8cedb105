//! Changing schedules: what `pincer tasks` and the agent's tools both do, with
//! the same rules (which status may become which, how often and how many:
//! [`Limits`]) and the same messages. The operator is bound too: the limits
//! are the operator's own settings, so an operator who wants more changes
//! `[scheduler]` in pincer.toml rather than slipping past them.
//! A running scheduler learns of a change when poked, or at its next poll.

use chrono::Utc;

use super::limits::{self, LimitError, Limits};
use crate::domain::schedule::{Schedule, ScheduleId, ScheduleStatus, TriggerError};
use crate::store::{NewSchedule, Schedules, StoreError};

/// A change that was refused; the text says why and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error(transparent)]
    Trigger(#[from] TriggerError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error("task #{id} is {status}, so it cannot be {action}{hint}")]
    State { id: ScheduleId, status: &'static str, action: &'static str, hint: &'static str },
    #[error("the prompt is empty: say what the agent should do when the task runs")]
    EmptyPrompt,
}

/// Stores a new schedule, due at its first run, within `limits`.
pub async fn add(store: &Schedules, new: NewSchedule, limits: &Limits) -> Result<Schedule, ManageError> {
    if new.prompt.trim().is_empty() {
        return Err(ManageError::EmptyPrompt);
    }
    let now = Utc::now();
    let first = new.trigger.first_run(now, true)?;
    let active = store.active_schedule_count(&new.group).await?;
    limits::check(&new.group, &new.trigger, active, limits, now)?;
    // Checked again as it is stored: another caller may have taken the last place meanwhile.
    let too_many = || LimitError::TooMany { group: new.group.clone(), active: limits.max_active };
    store.add_schedule_capped(&new, first, limits.max_active).await?.ok_or_else(|| too_many().into())
}

// Each change is one statement that checks the status it changes (so a change
// read before another one landed cannot undo it: a cancelled task stays
// cancelled); the schedule is read only afterwards, to show it or say why not.

pub async fn pause(store: &Schedules, id: ScheduleId) -> Result<Schedule, ManageError> {
    let paused = store.pause_schedule(id).await?;
    settled(store, id, paused, "paused", "").await
}

/// Resumes a paused schedule from now: runs missed while paused are not made
/// up. The limits apply as to a new one, so pausing never makes room to add
/// more, and a schedule stored before a limit was lowered must be changed to
/// run again.
pub async fn resume(store: &Schedules, id: ScheduleId, limits: &Limits) -> Result<Schedule, ManageError> {
    let s = store.schedule(id).await?;
    require(&s, &[ScheduleStatus::Paused, ScheduleStatus::Active], "resumed", "")?;
    if s.status == ScheduleStatus::Active {
        return Ok(s);
    }
    let now = Utc::now();
    let next = s.trigger.first_run(now, false)?;
    let active = store.active_schedule_count(&s.group).await?;
    limits::check(&s.group, &s.trigger, active, limits, now)?;
    let resumed = store.resume_schedule_capped(id, next, limits.max_active).await?;
    let now_stored = store.schedule(id).await?;
    if !resumed && now_stored.status == ScheduleStatus::Paused {
        return Err(LimitError::TooMany { group: s.group, active: limits.max_active }.into());
    }
    // Not resumed because another caller changed it meanwhile: say what it is now.
    require(&now_stored, &[ScheduleStatus::Active], "resumed", "")?;
    Ok(now_stored)
}

pub async fn cancel(store: &Schedules, id: ScheduleId) -> Result<Schedule, ManageError> {
    let cancelled = store.cancel_schedule(id).await?;
    settled(store, id, cancelled, "cancelled", "").await
}

/// Makes an active schedule due now; its regular times stay as they were
/// computed after this run.
pub async fn run_now(store: &Schedules, id: ScheduleId) -> Result<Schedule, ManageError> {
    let due = store.make_due(id, Utc::now()).await?;
    settled(store, id, due, "run now", ": resume it first (`pincer tasks resume ID`)").await
}

/// The schedule after a guarded change: as it is now if `changed`, else why not.
async fn settled(
    store: &Schedules,
    id: ScheduleId,
    changed: bool,
    action: &'static str,
    hint: &'static str,
) -> Result<Schedule, ManageError> {
    let s = store.schedule(id).await?;
    if changed {
        Ok(s)
    } else {
        Err(ManageError::State { id, status: s.status.as_str(), action, hint })
    }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::schedule::{ContextMode, Trigger};
    use crate::domain::GroupName;
    use crate::store::tests::store_with;
    use crate::store::GroupSettings;

    fn daily(group: &GroupName) -> NewSchedule {
        let trigger = Trigger::interval("1day").unwrap();
        NewSchedule { group: group.clone(), prompt: "p".into(), trigger, context: ContextMode::Group }
    }

    #[tokio::test]
    async fn the_task_after_the_most_is_refused_and_pausing_makes_no_room_to_resume() {
        let g: GroupName = "team".parse().unwrap();
        let other: GroupName = "other".parse().unwrap();
        let (_dir, store) = store_with(&g).await;
        store.groups().add_group(&other, &GroupSettings::default()).await.unwrap();
        let limits = Limits { min_interval: Duration::from_secs(300), max_active: 3 };
        let mut added = Vec::new();
        for _ in 0..3 {
            added.push(add(&store.schedules(), daily(&g), &limits).await.unwrap());
        }
        let err = add(&store.schedules(), daily(&g), &limits).await.unwrap_err();
        assert!(matches!(err, ManageError::Limit(LimitError::TooMany { active: 3, .. })), "{err:?}");
        assert_eq!(store.schedules().active_schedule_count(&g).await.unwrap(), 3, "nothing was stored");
        add(&store.schedules(), daily(&other), &limits).await.expect("the cap is per group");

        // Pause one, add another in its place: the paused one cannot come back.
        pause(&store.schedules(), added[0].id).await.unwrap();
        add(&store.schedules(), daily(&g), &limits).await.unwrap();
        let err = resume(&store.schedules(), added[0].id, &limits).await.unwrap_err();
        assert!(matches!(err, ManageError::Limit(LimitError::TooMany { .. })), "{err:?}");
        assert_eq!(store.schedules().schedule(added[0].id).await.unwrap().status, ScheduleStatus::Paused);
        cancel(&store.schedules(), added[1].id).await.unwrap();
        let back = resume(&store.schedules(), added[0].id, &limits).await.unwrap();
        assert_eq!(back.status, ScheduleStatus::Active);
    }

    #[tokio::test]
    async fn a_schedule_below_the_minimum_is_refused_when_added_or_resumed() {
        let g: GroupName = "team".parse().unwrap();
        let (_dir, store) = store_with(&g).await;
        let limits = Limits::default();
        let fast = NewSchedule { trigger: Trigger::interval("1s").unwrap(), ..daily(&g) };
        let err = add(&store.schedules(), fast.clone(), &limits).await.unwrap_err();
        assert!(err.to_string().contains("shorter than the minimum of 5m"), "{err}");
        let cron = NewSchedule { trigger: Trigger::cron("* * * * *", "UTC").unwrap(), ..daily(&g) };
        assert!(matches!(add(&store.schedules(), cron, &limits).await, Err(ManageError::Limit(_))));
        assert!(store.schedules().schedules(Some(&g)).await.unwrap().is_empty());

        // One stored before the minimum was raised keeps its place, paused, until it is changed.
        let old = store.schedules().add_schedule(&fast, None).await.unwrap();
        pause(&store.schedules(), old.id).await.unwrap();
        assert!(matches!(resume(&store.schedules(), old.id, &limits).await, Err(ManageError::Limit(_))));
    }
}
