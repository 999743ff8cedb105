//! A group's budget: reached, its messages wait in the store and the chat
//! is told once; raised, they are answered.

use super::{test_config, Rig};
use crate::domain::budget::Budget;
use crate::session::fake_cli::FakeCli;
use crate::session::Command;
use crate::store::GroupSettings;

#[tokio::test(start_paused = true)]
async fn a_reached_budget_holds_the_queue_says_so_once_and_a_raise_lets_it_go() {
    let own = Budget { daily_turns: Some(1), ..Budget::default() };
    let settings = GroupSettings { budget: own, ..GroupSettings::default() };
    let rig = Rig::with(test_config(), settings.clone(), None, FakeCli::default()).await;
    let first = rig.say("one").await;
    rig.until_state(first, "answered").await;

    let second = rig.say("two").await;
    let third = rig.say("three").await;
    rig.until_stored("the chat is told", || async { !rig.notices().await.is_empty() }).await;
    let notices = rig.notices().await;
    assert_eq!(notices.len(), 1, "told once for both: {notices:?}");
    assert!(notices[0].contains("budget of 1 turns a day") && notices[0].contains("--budget-turns"), "{notices:?}");
    assert_eq!((rig.state_of(second).await, rig.state_of(third).await), ("queued".into(), "queued".into()));
    assert_eq!(rig.cli.user_messages().len(), 1, "nothing more was written to the CLI");

    let raised = GroupSettings { budget: Budget { daily_turns: Some(5), ..Budget::default() }, ..settings };
    rig.store.groups().save_group_settings(&rig.group, &raised).await.unwrap();
    rig.handle.send(Command::ReloadSettings).await.unwrap();
    rig.until_state(third, "answered").await;
    assert_eq!(rig.state_of(second).await, "answered");
    assert_eq!(rig.notices().await.len(), 1, "no second notice");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_configured_default_applies_to_a_group_without_its_own() {
    let mut config = test_config();
    config.budget.daily_usd = Some(0.0);
    let rig = Rig::with(config, GroupSettings::default(), None, FakeCli::default()).await;
    let id = rig.say("anything").await;
    rig.until_stored("the chat is told", || async { !rig.notices().await.is_empty() }).await;
    assert!(rig.notices().await[0].contains("budget of $0.00 a day"), "{:?}", rig.notices().await);
    assert_eq!(rig.state_of(id).await, "queued");
    assert!(rig.cli.starts().is_empty(), "no CLI was started for it");
    rig.stop().await;
}
