//! What a failed run changes in its schedule: a pure decision
//! ([`after_failure`]) from the schedule as read, written by one statement
//! that checks the schedule is still as read ([`record_failure`]). So the
//! failure count and the next run are never written apart, and a change made
//! meanwhile (a cancel, a pause, a run-now) is never undone by a decision
//! taken before it: the decision is taken again on the schedule as it is now.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::SchedulerConfig;
use crate::domain::schedule::{Schedule, ScheduleId, ScheduleStatus, Trigger};
use crate::retry::RetryPolicy;
use crate::store::{Schedules, StoreError};

/// Retries never wait longer than this.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// A schedule changed by someone else this many times while one failure is
/// being written is left as it is (and the failure logged).
const ATTEMPTS: usize = 8;
/// How much of the reason a notice quotes.
const WHY_CHARS: usize = 300;

/// A schedule after a failed run, and what the chat is told.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct AfterFailure {
    pub status: ScheduleStatus,
    /// Failed runs in a row, this one included (0 once pincer stops retrying).
    pub failures: u32,
    pub next_run: Option<DateTime<Utc>>,
    /// What the chat is told: only at the first failure of a streak, so a
    /// task that keeps failing is one message, not one per retry.
    pub notice: Option<String>,
}

/// A failed run of `s` (as read after it) is retried with backoff while the
/// schedule is active and fewer than `max_retries` failed in a row; then it
/// waits for its next regular run (a `once` is spent). One that is no longer
/// active keeps its state.
pub(super) fn after_failure(s: &Schedule, why: &str, config: &SchedulerConfig, now: DateTime<Utc>) -> AfterFailure {
    let mut after = decide(s, why, config, now);
    if s.failures > 0 {
        after.notice = None;
    }
    after
}

fn decide(s: &Schedule, why: &str, config: &SchedulerConfig, now: DateTime<Utc>) -> AfterFailure {
    let failures = s.failures.saturating_add(1);
    let why: String = why.chars().take(WHY_CHARS).collect();
    if s.status != ScheduleStatus::Active {
        let notice =
            format!("Scheduled task #{} failed ({why}). It is {} now, so it is not retried.", s.id, s.status.as_str());
        return AfterFailure { status: s.status, failures: 0, next_run: s.next_run, notice: Some(notice) };
    }
    if failures <= config.max_retries {
        let delay = backoff(config.retry_delay, failures);
        let retry_at = chrono::Duration::from_std(delay).ok().and_then(|d| now.checked_add_signed(d)).unwrap_or(now);
        // The loop sleeps until the earliest next run, so the retry needs no timer of its own.
        let next = s.next_run.map_or(retry_at, |regular| regular.min(retry_at));
        let notice = format!(
            "Scheduled task #{} failed ({why}). Retrying in {} (retry {failures} of {}); further failures \
             of this run are not told here (/tasks shows how it stands).",
            s.id,
            humantime::format_duration(delay),
            config.max_retries
        );
        return AfterFailure { status: ScheduleStatus::Active, failures, next_run: Some(next), notice: Some(notice) };
    }
    let (status, next_run, then) = if matches!(s.trigger, Trigger::Once(_)) {
        (ScheduleStatus::Completed, None, "It will not run again.".to_owned())
    } else {
        let then = s.next_run.map_or_else(String::new, |at| format!("Its next regular run is at {}.", at.to_rfc3339()));
        (ScheduleStatus::Active, s.next_run, then)
    };
    let notice = format!(
        "Scheduled task #{} failed {failures} times in a row ({why}); pincer gave up on this run. {then} \
         `pincer tasks runs {}` shows the log.",
        s.id, s.id
    );
    AfterFailure { status, failures: 0, next_run, notice: Some(notice) }
}

/// Records a failed run of schedule `id`: decides on the schedule as stored
/// and writes the decision if the schedule is still as read, else reads and
/// decides again. Returns the schedule as the decision saw it, and the decision.
pub(super) async fn record_failure(
    store: &Schedules,
    config: &SchedulerConfig,
    id: ScheduleId,
    why: &str,
    now: DateTime<Utc>,
) -> Result<(Schedule, AfterFailure), StoreError> {
    for _ in 0..ATTEMPTS {
        let seen = store.schedule(id).await?;
        let after = after_failure(&seen, why, config, now);
        if store.change_schedule_if(&seen, after.status, after.failures, after.next_run).await? {
            return Ok((seen, after));
        }
    }
    Err(StoreError::ScheduleContended(id.0))
}

/// `delay`, doubled for every further failure in a row, at most an hour.
/// Without jitter: the retry is a time written in the store and told to the
/// chat ("Retrying in 1m"), and runs that failed together are spread anyway
/// by the live-session limit they wait for.
fn backoff(delay: Duration, failures: u32) -> Duration {
    RetryPolicy::new(delay.min(MAX_BACKOFF), MAX_BACKOFF).without_jitter().pause(failures, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(trigger: Trigger, status: ScheduleStatus, failures: u32, next_run: Option<DateTime<Utc>>) -> Schedule {
        Schedule {
            id: ScheduleId(7),
            group: "g".parse().unwrap(),
            prompt: "p".into(),
            trigger,
            context: crate::domain::schedule::ContextMode::Group,
            status,
            next_run,
            last_run: None,
            failures,
        }
    }

    #[test]
    fn retries_back_off_and_stay_bounded() {
        let base = Duration::from_secs(60);
        assert_eq!(backoff(base, 1), Duration::from_secs(60));
        assert_eq!(backoff(base, 3), Duration::from_secs(240));
        assert_eq!(backoff(base, 40), MAX_BACKOFF);
        assert_eq!(backoff(base, u32::MAX), MAX_BACKOFF, "no overflow");
        assert_eq!(backoff(Duration::from_secs(7200), 1), MAX_BACKOFF, "a delay past the cap is the cap");
    }

    #[test]
    fn a_failure_is_retried_before_the_regular_run_then_given_up() {
        let config = SchedulerConfig::default();
        let now = Utc::now();
        let regular = now + chrono::Duration::days(1);
        let daily = Trigger::interval("1day").unwrap();

        let first =
            after_failure(&schedule(daily.clone(), ScheduleStatus::Active, 0, Some(regular)), "x", &config, now);
        assert_eq!((first.status, first.failures), (ScheduleStatus::Active, 1));
        assert_eq!(first.next_run, Some(now + chrono::Duration::minutes(1)));
        let told = first.notice.as_deref().expect("the first failure of a streak is told");
        assert!(told.contains("Retrying in 1m (retry 1 of 3)"), "{told}");

        // A retry never pushes the regular run later.
        let soon = now + chrono::Duration::seconds(10);
        let retry = after_failure(&schedule(daily.clone(), ScheduleStatus::Active, 1, Some(soon)), "x", &config, now);
        assert_eq!(retry.next_run, Some(soon));
        assert_eq!(retry.notice, None, "a retry that fails again is not told: one message per streak");

        let gave_up = after_failure(&schedule(daily, ScheduleStatus::Active, 3, Some(regular)), "x", &config, now);
        assert_eq!((gave_up.status, gave_up.failures, gave_up.next_run), (ScheduleStatus::Active, 0, Some(regular)));
        assert_eq!(gave_up.notice, None, "the streak was told at its start");
        let no_retries = SchedulerConfig { max_retries: 0, ..SchedulerConfig::default() };
        let at_once = after_failure(
            &schedule(Trigger::interval("1day").unwrap(), ScheduleStatus::Active, 0, Some(regular)),
            "x",
            &no_retries,
            now,
        );
        let told = at_once.notice.as_deref().expect("told");
        assert!(told.contains("failed 1 times in a row") && told.contains("gave up"), "{told}");

        let once = Trigger::Once(now);
        let spent = after_failure(&schedule(once, ScheduleStatus::Active, 3, None), "x", &config, now);
        assert_eq!((spent.status, spent.failures, spent.next_run), (ScheduleStatus::Completed, 0, None));
    }

    #[test]
    fn a_schedule_no_longer_active_keeps_its_state() {
        let config = SchedulerConfig::default();
        let now = Utc::now();
        for status in [ScheduleStatus::Paused, ScheduleStatus::Cancelled, ScheduleStatus::Completed] {
            let s = schedule(Trigger::interval("1h").unwrap(), status, 2, None);
            let after = after_failure(&s, &"y".repeat(1000), &config, now);
            assert_eq!((after.status, after.failures, after.next_run), (status, 0, None));
            let s = schedule(Trigger::interval("1h").unwrap(), status, 0, None);
            let told = after_failure(&s, &"y".repeat(1000), &config, now).notice.expect("told");
            assert!(told.contains("so it is not retried"), "{told}");
            assert!(told.len() < 450, "the reason is cut: {}", told.len());
        }
    }
}
