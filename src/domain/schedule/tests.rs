//! Next-run computation: cron in zones and across DST, intervals, once, catch-up.

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn next(t: &Trigger, after: &str) -> String {
    t.next_after(utc(after)).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)).unwrap_or_default()
}

#[test]
fn cron_runs_on_weekdays_in_its_zone() {
    let t = Trigger::cron("0 9 * * 1-5", "Europe/Berlin").unwrap();
    // Friday 11:00 in Berlin (UTC+1 in November): the next is Monday 09:00 local.
    assert_eq!(next(&t, "2026-11-20T10:00:00Z"), "2026-11-23T08:00:00Z");
    assert_eq!(next(&t, "2026-11-23T07:59:00Z"), "2026-11-23T08:00:00Z");
    // Strictly after: a run at 09:00 does not find itself again.
    assert_eq!(next(&t, "2026-11-23T08:00:00Z"), "2026-11-24T08:00:00Z");
    let utc_cron = Trigger::cron("0 9 * * *", "UTC").unwrap();
    assert_eq!(next(&utc_cron, "2026-11-20T10:00:00Z"), "2026-11-21T09:00:00Z");
}

#[test]
fn cron_keeps_local_time_across_dst_changes() {
    let daily = Trigger::cron("0 9 * * *", "Europe/Berlin").unwrap();
    // Spring forward on 2026-03-29: 09:00 is UTC+1 before, UTC+2 after.
    assert_eq!(next(&daily, "2026-03-28T09:00:00Z"), "2026-03-29T07:00:00Z");
    // Fall back on 2026-10-25: back to UTC+1.
    assert_eq!(next(&daily, "2026-10-24T08:00:00Z"), "2026-10-25T08:00:00Z");
}

#[test]
fn cron_in_the_skipped_hour_runs_right_after_the_gap_and_once_in_the_repeated_hour() {
    let t = Trigger::cron("30 2 * * *", "Europe/Berlin").unwrap();
    // 02:30 does not exist on 2026-03-29 (02:00 → 03:00): it runs at 03:00 CEST.
    assert_eq!(next(&t, "2026-03-28T12:00:00Z"), "2026-03-29T01:00:00Z");
    // 02:30 happens twice on 2026-10-25: it runs at the first, and not again that day.
    assert_eq!(next(&t, "2026-10-24T12:00:00Z"), "2026-10-25T00:30:00Z");
    assert_eq!(next(&t, "2026-10-25T00:30:00Z"), "2026-10-26T01:30:00Z");
}

#[test]
fn intervals_count_from_the_given_time() {
    let t = Trigger::interval("2h").unwrap();
    assert_eq!(next(&t, "2026-11-20T10:00:00Z"), "2026-11-20T12:00:00Z");
    assert_eq!(t.value(), "2h");
    assert_eq!(Trigger::interval("0s"), Err(TriggerError::IntervalTooShort));
    assert!(matches!(Trigger::interval("soon"), Err(TriggerError::Interval(_))));
}

#[test]
fn once_fires_only_while_in_the_future() {
    let t = Trigger::once("2026-12-01T09:00:00+01:00", "UTC").unwrap();
    assert_eq!(next(&t, "2026-11-30T00:00:00Z"), "2026-12-01T08:00:00Z");
    assert_eq!(next(&t, "2026-12-01T08:00:00Z"), "", "spent");
    assert_eq!(t.first_run(utc("2026-11-30T00:00:00Z"), true), Ok(Some(utc("2026-12-01T08:00:00Z"))));
    assert!(matches!(t.first_run(utc("2026-12-02T00:00:00Z"), true), Err(TriggerError::Past(_))));
    // Resumed after its time passed: runs now rather than never.
    let now = utc("2026-12-02T00:00:00Z");
    assert_eq!(t.first_run(now, false), Ok(Some(now)));
}

#[test]
fn once_reads_a_local_time_in_the_configured_zone() {
    let t = Trigger::once("2026-12-01T09:00", "Europe/Berlin").unwrap();
    assert_eq!(t, Trigger::Once(utc("2026-12-01T08:00:00Z")));
    let summer = Trigger::once("2026-07-01 09:00", "Europe/Berlin").unwrap();
    assert_eq!(summer, Trigger::Once(utc("2026-07-01T07:00:00Z")));
    let skipped = Trigger::once("2026-03-29T02:30", "Europe/Berlin").unwrap_err();
    assert!(skipped.to_string().contains("does not exist"), "{skipped}");
}

#[test]
fn bad_input_says_what_is_wrong() {
    let e = Trigger::cron("0 9 * *", "UTC").unwrap_err().to_string();
    assert!(e.contains("invalid cron expression") && e.contains("5 fields"), "{e}");
    let e = Trigger::cron("0 25 * * *", "UTC").unwrap_err().to_string();
    assert!(e.contains("invalid cron expression"), "{e}");
    let e = Trigger::cron("0 9 * * *", "Mars/Olympus").unwrap_err().to_string();
    assert!(e.contains("unknown time zone \"Mars/Olympus\""), "{e}");
    let e = Trigger::once("next tuesday", "UTC").unwrap_err().to_string();
    assert!(e.contains("invalid time") && e.contains("RFC 3339"), "{e}");
    let e = Trigger::parse("weekly", "x", "UTC").unwrap_err().to_string();
    assert!(e.contains("\"cron\", \"interval\" or \"once\""), "{e}");
}

#[test]
fn after_downtime_a_missed_schedule_is_due_once_and_then_counts_from_now() {
    let now = utc("2026-11-20T20:00:00Z");
    let schedule = Schedule {
        id: ScheduleId(1),
        group: "g".parse().unwrap(),
        prompt: "p".into(),
        trigger: Trigger::interval("1h").unwrap(),
        context: ContextMode::Group,
        status: ScheduleStatus::Active,
        // Ten runs were missed while pincer was stopped.
        next_run: Some(utc("2026-11-20T10:00:00Z")),
        last_run: Some(utc("2026-11-20T09:00:00Z")),
        failures: 0,
    };
    assert!(schedule.is_due(now));
    // The run starts now; the next one is an interval from now, not from the missed slot.
    assert_eq!(schedule.trigger.next_after(now), Some(utc("2026-11-20T21:00:00Z")));
    let cron = Trigger::cron("0 * * * *", "UTC").unwrap();
    assert_eq!(cron.next_after(now + chrono::Duration::seconds(5)), Some(utc("2026-11-20T21:00:00Z")));
    let paused = Schedule { status: ScheduleStatus::Paused, ..schedule };
    assert!(!paused.is_due(now));
}
