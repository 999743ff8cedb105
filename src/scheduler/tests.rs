//! The scheduler's writes against a real SQLite file: what a pincer killed at
//! each step leaves behind, and changes that race each other. A kill is
//! simulated by a trigger that aborts the statement it names, so the store is
//! left exactly as a process that died before that statement would leave it.

use chrono::{DateTime, Utc};

use super::*;
use crate::config::SchedulerConfig;
use crate::domain::schedule::{ContextMode, Schedule, ScheduleStatus, Trigger};
use crate::domain::GroupName;
use crate::store::{GroupSettings, NewSchedule, Store};

struct Db {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    store: Store,
}

async fn db() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pincer.db");
    let store = Store::open(&path).await.unwrap();
    store.groups().add_group(&"g".parse::<GroupName>().unwrap(), &GroupSettings::default()).await.unwrap();
    Db { _dir: dir, path, store }
}

impl Db {
    async fn add(&self, trigger: Trigger, next_run: DateTime<Utc>) -> Schedule {
        let new = NewSchedule { group: "g".parse().unwrap(), prompt: "p".into(), trigger, context: ContextMode::Group };
        self.store.schedules().add_schedule(&new, Some(next_run)).await.unwrap()
    }

    /// From now on pincer dies where `statement` (e.g. `INSERT ON schedule_runs`) would run.
    async fn kill_at(&self, statement: &str) {
        crate::store::testing::kill_before(&self.path, statement).await;
    }

    /// The next pincer runs without the kill.
    async fn restart(&self) {
        crate::store::testing::revive(&self.path).await;
    }

    async fn get(&self, s: &Schedule) -> Schedule {
        self.store.schedules().schedule(s.id).await.unwrap()
    }

    /// What `Scheduler::fire` does with a due schedule.
    async fn fire(&self, s: &Schedule, now: DateTime<Utc>) -> Result<Option<crate::store::RunId>, StoreError> {
        let next = limits::next_run(&s.trigger, now, SchedulerConfig::default().min_interval);
        self.store.schedules().fire_schedule(s.id, &s.group, now, next).await
    }
}

use crate::store::StoreError;

/// The restart's recovery (`store/recovery.rs`), which the router runs before the scheduler starts.
async fn recover(store: &Store, now: DateTime<Utc>) -> Result<(), StoreError> {
    store.queue().recover_after_restart(now).await.map(drop)
}

/// Now, to the microsecond, as the store keeps times.
fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap()
}

#[tokio::test]
async fn a_once_killed_as_it_fires_is_still_due_and_runs_after_the_restart() {
    let db = db().await;
    let at = now() - chrono::Duration::minutes(1);
    let once = db.add(Trigger::Once(at), at).await;
    let now = now();

    // Killed after the schedule is marked started, before its run is logged.
    db.kill_at("INSERT ON schedule_runs").await;
    assert!(db.fire(&once, now).await.is_err());
    db.restart().await;
    recover(&db.store, now).await.unwrap();

    let after = db.get(&once).await;
    assert!(after.is_due(now), "neither run nor next run left: {after:?}");
    assert_eq!(after.last_run, None);
    assert!(db.store.schedules().runs(once.id).await.unwrap().is_empty());
    assert!(db.fire(&after, now).await.unwrap().is_some(), "the restarted scheduler runs it");
    let runs = db.store.schedules().runs(once.id).await.unwrap();
    assert_eq!(runs.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(), ["running"]);
    assert_eq!(db.get(&once).await.next_run, None, "fired: nothing else due");
}

#[tokio::test]
async fn a_run_cut_off_by_a_kill_is_logged_as_failed_and_due_again_even_if_recovery_is_killed() {
    let db = db().await;
    let at = now() - chrono::Duration::minutes(1);
    let once = db.add(Trigger::Once(at), at).await;
    db.fire(&once, now()).await.unwrap().unwrap();

    // The next pincer is killed while it recovers that run, before the schedule is due again.
    let now = now();
    db.kill_at("UPDATE OF next_run_us ON schedules").await;
    assert!(recover(&db.store, now).await.is_err());
    db.restart().await;
    recover(&db.store, now).await.unwrap();

    let runs = db.store.schedules().runs(once.id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, "error");
    assert!(runs[0].text.as_deref().unwrap().contains("killed or crashed"));
    let after = db.get(&once).await;
    assert!(after.is_due(now), "{after:?}");
    recover(&db.store, now).await.unwrap();
    assert_eq!(db.store.schedules().runs(once.id).await.unwrap().len(), 1, "recovered once");
}

#[tokio::test]
async fn a_failure_and_its_retry_are_written_together() {
    let db = db().await;
    let config = SchedulerConfig::default();
    let regular = now() - chrono::Duration::minutes(1);
    let daily = db.add(Trigger::interval("1day").unwrap(), regular).await;
    let now = now();
    db.fire(&daily, now).await.unwrap().unwrap();

    db.kill_at("UPDATE OF next_run_us ON schedules").await;
    assert!(outcome::record_failure(&db.store.schedules(), &config, daily.id, "boom", now).await.is_err());
    assert_eq!(db.get(&daily).await.failures, 0, "no failure counted without its retry");
    db.restart().await;

    let (_, after) = outcome::record_failure(&db.store.schedules(), &config, daily.id, "boom", now).await.unwrap();
    let stored = db.get(&daily).await;
    assert_eq!((stored.failures, stored.next_run), (1, Some(now + chrono::Duration::minutes(1))));
    assert_eq!(after.next_run, stored.next_run);
}

#[tokio::test]
async fn changes_decided_before_a_cancel_leave_it_cancelled() {
    let db = db().await;
    let config = SchedulerConfig::default();
    let at = now() - chrono::Duration::minutes(1);
    let task = db.add(Trigger::interval("1day").unwrap(), at).await;
    let now = now();
    // Every racing change has read the task active and due; then the cancel lands.
    let seen = db.get(&task).await;
    assert!(seen.is_due(now));
    manage::cancel(&db.store.schedules(), task.id).await.unwrap();

    // ... and then their writes.
    assert!(!db.store.schedules().pause_schedule(task.id).await.unwrap(), "pause");
    assert!(!db.store.schedules().make_due(task.id, now).await.unwrap(), "run-now, or a run cut off by shutdown");
    assert!(db.fire(&seen, now).await.unwrap().is_none(), "the scheduler firing it");
    let failed = !db.store.schedules().change_schedule_if(&seen, ScheduleStatus::Active, 1, Some(now)).await.unwrap();
    assert!(failed, "a failed run's retry");
    let (_, after) = outcome::record_failure(&db.store.schedules(), &config, task.id, "boom", now).await.unwrap();
    let told = after.notice.expect("the first failure is told");
    assert!(told.contains("It is cancelled now, so it is not retried"), "{told}");
    let resumed = manage::resume(&db.store.schedules(), task.id, &limits::Limits::default()).await.unwrap_err();
    assert!(resumed.to_string().contains("is cancelled, so it cannot be resumed"), "{resumed}");
    let err = manage::pause(&db.store.schedules(), task.id).await.unwrap_err();
    assert!(err.to_string().contains("is cancelled, so it cannot be paused"), "{err}");

    let after = db.get(&task).await;
    assert_eq!((after.status, after.next_run, after.failures), (ScheduleStatus::Cancelled, None, 0));
    assert!(db.store.schedules().runs(task.id).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_run_now_that_lands_while_a_failure_is_recorded_is_kept() {
    let db = db().await;
    let config = SchedulerConfig::default();
    let at = now() - chrono::Duration::minutes(1);
    let task = db.add(Trigger::interval("1day").unwrap(), at).await;
    let now = now();
    db.fire(&task, now).await.unwrap().unwrap();
    let seen = db.get(&task).await;
    manage::run_now(&db.store.schedules(), task.id).await.unwrap();

    // The failure decided on what it read before the run-now is not written ...
    let stale = outcome::after_failure(&seen, "boom", &config, now);
    assert!(!db
        .store
        .schedules()
        .change_schedule_if(&seen, stale.status, stale.failures, stale.next_run)
        .await
        .unwrap());
    // ... it is decided again: the run-now's time is sooner than the retry, so it stays.
    let due_now = db.get(&task).await.next_run;
    outcome::record_failure(&db.store.schedules(), &config, task.id, "boom", now).await.unwrap();
    let after = db.get(&task).await;
    assert_eq!((after.failures, after.next_run), (1, due_now));
}
