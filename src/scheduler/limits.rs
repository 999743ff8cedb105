//! How often and how many: the limits on schedules that the agent's tools and
//! `pincer tasks` both obey (`scheduler.min_interval`, `scheduler.max_active_tasks`).
//!
//! Every run takes a CLI process and a live slot, so a group that schedules a
//! prompt every second, or thousands of them, starves the others. The check is
//! a pure function of the trigger, the group's count of active schedules and
//! the time, so it is tested without a clock or a store.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::SchedulerConfig;
use crate::domain::schedule::Trigger;
use crate::domain::GroupName;

/// How many fire times of a cron expression are looked at. A cron's fire times
/// repeat day by day (its minute and hour sets are the same on every matching
/// day), so the shortest gap shows within its first day's fires; this many
/// covers a day of fires every three minutes, and the check stops at the first
/// gap that is too short (`* * * * *` at its second fire time).
const CRON_SAMPLES: usize = 512;

/// The limits in force, from `[scheduler]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub min_interval: Duration,
    pub max_active: usize,
}

impl From<&SchedulerConfig> for Limits {
    fn from(config: &SchedulerConfig) -> Limits {
        Limits { min_interval: config.min_interval, max_active: config.max_active_tasks }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::from(&SchedulerConfig::default())
    }
}

/// A schedule refused by a limit; the text says why and what to do, for the
/// agent (as its tool's error) and for the operator (`pincer tasks add`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "an interval of {every} is shorter than the minimum of {min}: schedule it every {min} or more \
         (the operator sets the minimum as scheduler.min_interval in pincer.toml)"
    )]
    IntervalTooShort { every: String, min: String },
    #[error(
        "the cron expression {expr:?} fires {gap} apart (at {at} and the time before), more often than the \
         minimum of {min}: use fewer minutes or hours, e.g. \"0 * * * *\" for once an hour (the operator sets \
         the minimum as scheduler.min_interval in pincer.toml)"
    )]
    CronTooOften { expr: String, gap: String, at: String, min: String },
    #[error(
        "group {group} already has {active} active scheduled tasks, the most it may have: cancel or pause one \
         first (list_tasks or `pincer tasks list {group}` shows them; the operator sets the most as \
         scheduler.max_active_tasks in pincer.toml)"
    )]
    TooMany { group: GroupName, active: usize },
}

/// Whether `trigger` may become one more active schedule of `group`, which
/// has `active` already, at `now`.
pub fn check(
    group: &GroupName,
    trigger: &Trigger,
    active: usize,
    limits: &Limits,
    now: DateTime<Utc>,
) -> Result<(), LimitError> {
    if active >= limits.max_active {
        return Err(LimitError::TooMany { group: group.clone(), active });
    }
    check_frequency(trigger, limits.min_interval, now)
}

/// Whether `trigger` fires at most once per `min`. A once always passes.
pub fn check_frequency(trigger: &Trigger, min: Duration, now: DateTime<Utc>) -> Result<(), LimitError> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    match trigger {
        Trigger::Interval(every) if *every < min => {
            Err(LimitError::IntervalTooShort { every: show(*every), min: show(min) })
        }
        Trigger::Cron { expr, tz, .. } => {
            let Some((gap, at)) = shortest_gap(trigger, now, tz, min) else {
                return Ok(());
            };
            Err(LimitError::CronTooOften {
                expr: expr.clone(),
                gap: show(gap),
                at: at.with_timezone(tz).format("%Y-%m-%d %H:%M %Z").to_string(),
                min: show(min),
            })
        }
        _ => Ok(()),
    }
}

/// When a schedule that fires at `now` runs next: its trigger's next time,
/// but never sooner than `min` from now. Schedules are checked when added and
/// resumed; this keeps one stored before the minimum was raised (or by an
/// older pincer) from running more often than the minimum all the same.
pub fn next_run(trigger: &Trigger, now: DateTime<Utc>, min: Duration) -> Option<DateTime<Utc>> {
    let floor = chrono::Duration::from_std(min).ok().and_then(|min| now.checked_add_signed(min));
    trigger.next_after(now).map(|next| next.max(floor.unwrap_or(DateTime::<Utc>::MAX_UTC)))
}

/// The first gap shorter than `min` between the next fire times after `now`,
/// and the fire time that ends it. A gap is short only when it is short both
/// in real time and on the zone's wall clock (as the expression is written):
/// a daylight saving change shortens one of the two for a night (02:30 comes
/// twice in autumn, 02:00 is skipped in spring), and the answer must not
/// depend on whether such a night falls among the fire times looked at.
fn shortest_gap(
    trigger: &Trigger,
    now: DateTime<Utc>,
    tz: &chrono_tz::Tz,
    min: Duration,
) -> Option<(Duration, DateTime<Utc>)> {
    let mut previous = trigger.next_after(now)?;
    for _ in 1..CRON_SAMPLES {
        let next = trigger.next_after(previous)?;
        let wall = next.with_timezone(tz).naive_local() - previous.with_timezone(tz).naive_local();
        let gap = wall.max(next - previous).to_std().unwrap_or_default();
        if gap < min {
            return Some((gap, next));
        }
        previous = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const NOW: &str = "2026-11-23T10:00:00Z";
    const FIVE_MIN: Duration = Duration::from_secs(300);

    fn freq(trigger: &Trigger) -> Result<(), LimitError> {
        check_frequency(trigger, FIVE_MIN, at(NOW))
    }

    #[test]
    fn intervals_below_the_minimum_are_refused_with_what_to_do() {
        let err = freq(&Trigger::interval("1s").unwrap()).unwrap_err();
        assert_eq!(err, LimitError::IntervalTooShort { every: "1s".into(), min: "5m".into() });
        let text = err.to_string();
        assert!(text.contains("every 5m or more") && text.contains("scheduler.min_interval"), "{text}");
        assert_eq!(freq(&Trigger::interval("4m 59s").unwrap()).map_err(|_| ()), Err(()));
        assert_eq!(freq(&Trigger::interval("5m").unwrap()), Ok(()), "the minimum itself is allowed");
        assert_eq!(freq(&Trigger::interval("1day").unwrap()), Ok(()));
    }

    #[test]
    fn a_cron_that_fires_more_often_than_the_minimum_is_refused() {
        let every_minute = Trigger::cron("* * * * *", "UTC").unwrap();
        let err = freq(&every_minute).unwrap_err();
        assert!(matches!(&err, LimitError::CronTooOften { gap, .. } if gap == "1m"), "{err:?}");
        assert!(err.to_string().contains("\"* * * * *\" fires 1m apart"), "{err}");
        assert!(freq(&Trigger::cron("*/2 * * * *", "Europe/Berlin").unwrap()).is_err());
        assert_eq!(freq(&Trigger::cron("*/5 * * * *", "UTC").unwrap()), Ok(()), "exactly the minimum");
        assert_eq!(freq(&Trigger::cron("0 9 * * 1-5", "Europe/Berlin").unwrap()), Ok(()));
    }

    #[test]
    fn a_short_gap_anywhere_in_the_day_is_found() {
        // Hourly most of the day, but twice a minute apart at 23:59 and 00:00.
        let late = Trigger::cron("0,59 0,23 * * *", "UTC").unwrap();
        assert!(matches!(freq(&late), Err(LimitError::CronTooOften { gap, .. }) if gap == "1m"));
        // A burst on one day of the year, months away.
        let new_year = Trigger::cron("*/1 0 1 1 *", "UTC").unwrap();
        let err = freq(&new_year).unwrap_err();
        assert!(err.to_string().contains("2027-01-01 00:01 UTC"), "names when: {err}");
        // Two times an hour apart: fine with 5 minutes, refused with 2 hours.
        let twice = Trigger::cron("0 9,10 * * *", "UTC").unwrap();
        assert_eq!(freq(&twice), Ok(()));
        assert!(check_frequency(&twice, Duration::from_secs(7200), at(NOW)).is_err());
    }

    #[test]
    fn daylight_saving_does_not_change_the_answer() {
        // 01:30 and 02:30 are an hour apart on the wall clock and in real
        // time, but for one night a year one of the two clocks disagrees: in
        // spring 02:30 is 03:00, 30 minutes after 01:30 in real time; in autumn
        // 02:30 comes twice. The answer is the same on the eve of either change
        // as on any other day.
        let t = Trigger::cron("30 1,2 * * *", "Europe/Berlin").unwrap();
        let hour = Duration::from_secs(3600);
        assert_eq!(check_frequency(&t, hour, at("2026-03-28T12:00:00Z")), Ok(()));
        assert_eq!(check_frequency(&t, hour, at("2026-10-24T12:00:00Z")), Ok(()));
        assert_eq!(check_frequency(&t, hour, at(NOW)), Ok(()));
        assert!(check_frequency(&t, hour + Duration::from_secs(60), at(NOW)).is_err());
    }

    #[test]
    fn a_once_is_never_too_frequent() {
        let once = Trigger::once("2026-12-01T09:00:00Z", "UTC").unwrap();
        assert_eq!(check_frequency(&once, Duration::from_secs(86_400 * 365), at(NOW)), Ok(()));
    }

    #[test]
    fn the_task_after_the_most_is_refused() {
        let g: GroupName = "team".parse().unwrap();
        let limits = Limits { min_interval: FIVE_MIN, max_active: 50 };
        let daily = Trigger::interval("1day").unwrap();
        assert_eq!(check(&g, &daily, 49, &limits, at(NOW)), Ok(()), "the 50th is allowed");
        let err = check(&g, &daily, 50, &limits, at(NOW)).unwrap_err();
        assert_eq!(err, LimitError::TooMany { group: g.clone(), active: 50 });
        let text = err.to_string();
        assert!(text.contains("cancel or pause one") && text.contains("scheduler.max_active_tasks"), "{text}");
        // The count is checked first: a full group hears that, whatever the trigger.
        let fast = Trigger::interval("1s").unwrap();
        assert!(matches!(check(&g, &fast, 50, &limits, at(NOW)), Err(LimitError::TooMany { .. })));
        assert!(matches!(check(&g, &fast, 0, &limits, at(NOW)), Err(LimitError::IntervalTooShort { .. })));
    }

    #[test]
    fn a_schedule_stored_before_the_minimum_still_waits_the_minimum() {
        let now = at(NOW);
        let every_second = Trigger::Interval(Duration::from_secs(1));
        assert_eq!(next_run(&every_second, now, FIVE_MIN), Some(at("2026-11-23T10:05:00Z")));
        let hourly = Trigger::interval("1h").unwrap();
        assert_eq!(next_run(&hourly, now, FIVE_MIN), Some(at("2026-11-23T11:00:00Z")), "untouched");
        let spent = Trigger::once("2026-11-01T00:00:00Z", "UTC").unwrap();
        assert_eq!(next_run(&spent, now, FIVE_MIN), None, "a spent once stays spent");
    }

    #[test]
    fn the_defaults_are_five_minutes_and_fifty_tasks() {
        assert_eq!(Limits::default(), Limits { min_interval: FIVE_MIN, max_active: 50 });
    }
}
