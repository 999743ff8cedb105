//! A held queue: a reached budget keeps the group quiet (not busy, told
//! once, its status saying until when), stops work the CLI would start by
//! itself, and postpones a usage limit's resend; a CLI that cannot start
//! is told once however many messages wait, and answers them when it starts.

use std::time::Duration;

use super::{test_config, Rig};
use crate::domain::budget::Budget;
use crate::session::fake_cli::{self, FakeCli, Reply, Said};
use crate::session::lifecycle::FIRST_START_BACKOFF;
use crate::session::QueueHold;
use crate::store::GroupSettings;

fn one_turn_a_day() -> GroupSettings {
    GroupSettings { budget: Budget { daily_turns: Some(1), ..Budget::default() }, ..GroupSettings::default() }
}

#[tokio::test(start_paused = true)]
async fn a_held_group_is_quiet_not_busy_and_its_status_says_until_when() {
    let rig = Rig::with(test_config(), one_turn_a_day(), None, FakeCli::default()).await;
    let first = rig.say("one").await;
    rig.until_state(first, "answered").await;
    let later: Vec<_> = [rig.say("two").await, rig.say("three").await, rig.say("four").await].into();
    rig.until_stored("the chat is told", || async { !rig.notices().await.is_empty() }).await;
    // Waited for, not slept on: held, the session owes nothing (a wake it
    // never answered kept it busy, and "typing…" on, until the period turned).
    rig.until("the held group is not busy", || !rig.handle.busy()).await;
    assert!(!rig.handle.turn_in_progress(), "what the typing indicator follows: {:?}", rig.handle.status());
    let held = rig.handle.status().held;
    assert!(matches!(held, Some(QueueHold::Budget { until }) if until > std::time::SystemTime::now()), "{held:?}");
    for id in later {
        assert_eq!(rig.state_of(id).await, "queued", "held in the store");
    }
    assert_eq!(rig.notices().await.len(), 1, "told once: {:?}", rig.notices().await);
    assert_eq!(rig.cli.user_messages().len(), 1, "nothing more was written to the CLI");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_budget_reached_by_a_turn_stops_its_background_work_before_a_follow_up() {
    let rig = Rig::with(test_config(), one_turn_a_day(), None, FakeCli::default()).await;
    rig.cli.script([Reply::Lines(Box::new(|said: &Said| {
        let mut lines = fake_cli::turn_start(said);
        lines.push(fake_cli::task_started(said, "b1", "bg loop"));
        lines.push(fake_cli::result(said, "started it"));
        lines
    }))]);
    let id = rig.say("run it in the background").await;
    rig.until_state(id, "answered").await;
    // The turn used the day's budget: the process (and the task in it) is
    // stopped now, not left to start a follow-up turn when the task ends.
    rig.until("the process is stopped", || !rig.cli.ended().is_empty()).await;
    rig.until_event("budget_reached").await;
    rig.until_stored("the chat is told", || async { !rig.notices().await.is_empty() }).await;
    let notices = rig.notices().await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("budget of 1 turns a day") && notices[0].contains("Background work"), "{notices:?}");
    // The handle's view follows the actor's: waited for, not read at once.
    rig.until("the session is down and owes nothing", || !rig.handle.status().live && !rig.handle.busy()).await;
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_usage_limit_resend_waits_while_the_budget_is_reached() {
    let rig = Rig::with(test_config(), GroupSettings::default(), None, FakeCli::default()).await;
    rig.cli.script([super::turns::usage_limit(Duration::from_secs(20))]);
    let id = rig.say("later please").await;
    rig.until("the resend is planned", || rig.handle.status().resend_at.is_some()).await;
    let planned = rig.handle.status().resend_at.unwrap();
    // Meanwhile the group's budget becomes one already used up.
    let spent = GroupSettings { budget: Budget { daily_cents: Some(0), ..Budget::default() }, ..Default::default() };
    rig.store.groups().save_group_settings(&rig.group, &spent).await.unwrap();
    rig.handle.send(crate::session::Command::ReloadSettings).await.unwrap();
    // Past the reset: the resend is put off until the budget opens, not written.
    rig.until("the resend is put off", || rig.handle.status().resend_at.is_some_and(|at| at > planned)).await;
    assert_eq!(rig.cli.user_messages().len(), 1, "not sent again: {:?}", rig.cli.user_messages());
    assert_eq!(rig.state_of(id).await, "sent", "still held, not failed");
    assert!(rig.notices().await.iter().any(|n| n.contains("budget of $0.00 a day")), "{:?}", rig.notices().await);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_cli_that_cannot_start_is_told_once_for_five_messages_and_answers_them_when_it_starts() {
    let rig = Rig::new().await;
    rig.cli.fail_starts(&["disk full", "disk full"]);
    let ids = [
        rig.say("one").await,
        rig.say("two").await,
        rig.say("three").await,
        rig.say("four").await,
        rig.say("five").await,
    ];
    rig.until_stored("the chat is told", || async { !rig.notices().await.is_empty() }).await;
    rig.until("the waiting group is not busy", || !rig.handle.busy()).await;
    assert!(matches!(rig.handle.status().held, Some(QueueHold::CannotStart { .. })), "{:?}", rig.handle.status());
    // Through the backoffs with a look at memory only: a store read each millisecond would take long.
    rig.until("the CLI starts at last", || !rig.cli.starts().is_empty()).await;
    for id in ids {
        rig.until_state(id, "answered").await;
    }
    let notices = rig.notices().await;
    assert_eq!(notices.len(), 1, "one notice, not one per message: {notices:?}");
    assert!(notices[0].contains("disk full") && notices[0].contains("tries again in 5s"), "{notices:?}");
    let failed = rig.cli.failed_at();
    assert_eq!(failed.len(), 2, "one try, then one after the backoff, then a start");
    assert!(super::between(failed[0], failed[1]) >= FIRST_START_BACKOFF, "not before the backoff");
    assert!(super::between(failed[1], rig.cli.starts()[0].at) >= 2 * FIRST_START_BACKOFF, "twice as long");
    assert!(rig.handle.status().held.is_none());
    let replies = rig.replies().await;
    for text in ["one", "two", "three", "four", "five"] {
        assert!(replies.iter().any(|r| r.contains(text)), "{text} answered: {replies:?}");
    }
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_start_failing_for_another_reason_is_told_again() {
    let rig = Rig::new().await;
    rig.cli.fail_starts(&["disk full", "no permission"]);
    let id = rig.say("one").await;
    rig.until_state(id, "answered").await;
    let notices = rig.notices().await;
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(notices[0].contains("disk full") && notices[1].contains("no permission"), "{notices:?}");
    rig.stop().await;
}
