//! `/tasks` and `/budget` in a Telegram group, through the `pincer` binary:
//! a member looks, an admin changes; a task of another group is not there;
//! a budget an admin sets to nothing holds the next message, and given back
//! to the default lets it through.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::domain::schedule::{ContextMode, Trigger};
use pincer::store::{GroupSettings, NewSchedule};

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{spawn_pincer_run, Sandbox};

fn team() -> TgChat {
    TgChat { id: -100_500, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn admin() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

fn member() -> TgUser {
    TgUser { id: 43, first_name: "Bob".into(), username: Some("bob".into()) }
}

fn texts(bot: &FakeBot) -> Vec<String> {
    bot.sent(team().id).into_iter().map(|s| s.text).collect()
}

/// Says `text` as `from` and waits for the bot's next message that contains `expect`.
async fn ask(bot: &FakeBot, from: &TgUser, text: &str, expect: &str) -> String {
    let before = texts(bot).len();
    bot.say(&team(), from, text);
    bot.wait_for(expect, |bot| texts(bot)[before..].iter().any(|t| t.contains(expect))).await;
    texts(bot)[before..].iter().find(|t| t.contains(expect)).unwrap().clone()
}

#[tokio::test]
async fn tasks_and_budget_are_seen_by_members_and_changed_by_admins_in_the_chat() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let chat = Some(pincer::domain::ChatAddress::telegram(team().id, None));
    let settings = GroupSettings { chat, requires_trigger: false, admins: vec!["42".into()], ..Default::default() };
    let group = sandbox.add_group_with("team", settings).await;
    let other = sandbox.add_group_with("other", GroupSettings::default()).await;
    let store = sandbox.store().await;
    let tomorrow = chrono::Utc::now() + chrono::Duration::days(1);
    let new = |group, prompt: &str| NewSchedule {
        group,
        prompt: prompt.into(),
        trigger: Trigger::interval("1d").unwrap(),
        context: ContextMode::Group,
    };
    let ours = store.schedules().add_schedule(&new(group.clone(), "water the PLANTS"), Some(tomorrow)).await.unwrap();
    let theirs = store.schedules().add_schedule(&new(other, "not yours"), Some(tomorrow)).await.unwrap();
    store.close().await;
    let config = sandbox.write_config();
    let child = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;

    let list = ask(&bot, &member(), "/tasks", "Scheduled tasks").await;
    assert!(list.contains(&format!("#{} [active] every 1d", ours.id)) && list.contains("water the PLANTS"), "{list}");
    assert!(!list.contains("not yours"), "only this group's tasks: {list}");
    let said = ask(&bot, &member(), &format!("/tasks pause {}", ours.id), "Only this group's admins").await;
    assert!(said.contains("run, pause or resume"), "{said}");
    ask(&bot, &admin(), &format!("/tasks pause {}", theirs.id), &format!("This group has no task #{}", theirs.id))
        .await;
    ask(&bot, &admin(), &format!("/tasks pause {}", ours.id), "is paused").await;
    ask(&bot, &admin(), &format!("/tasks run {}", ours.id), "resume it first").await;
    ask(&bot, &admin(), &format!("/tasks resume {}", ours.id), "is resumed").await;
    ask(&bot, &admin(), &format!("/tasks run {}", ours.id), "runs now").await;
    bot.wait_for("the run's answer", |bot| {
        texts(bot).iter().any(|t| t.contains("ECHO") && t.contains("water the PLANTS"))
    })
    .await;
    ask(&bot, &member(), "/tasks delete everything", "Use /tasks").await;

    let said = ask(&bot, &member(), "/budget", "This group's budget: none").await;
    assert!(said.contains("Spent today: $") && said.contains("turns"), "{said}");
    ask(&bot, &member(), "/budget turns 0", "Only this group's admins can change its budget").await;
    ask(&bot, &admin(), "/budget turns 0", "Budget changed: 0 turns/day").await;
    let held = ask(&bot, &member(), "held QUESTION", "budget of 0 turns a day").await;
    assert!(held.contains("/budget turns N"), "{held}");
    assert!(!texts(&bot).iter().any(|t| t.contains("ECHO") && t.contains("held QUESTION")), "held");
    ask(&bot, &admin(), "/budget turns default", "Budget changed: none").await;
    bot.wait_for("the held answer", |bot| texts(bot).iter().any(|t| t.contains("ECHO") && t.contains("held QUESTION")))
        .await;
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}
