//! Scheduled prompts end to end: the agent schedules through its tool, the
//! scheduler fires, the result reaches the chat and the run log; isolated runs
//! leave the group's session alone; missed runs are made up once; failures are
//! retried and told.

use std::time::Duration;

use chrono::Utc;
use pincer::domain::schedule::{ContextMode, Schedule, ScheduleId, Trigger};
use pincer::domain::{GroupName, OutboundKind};
use pincer::scheduler::manage;
use pincer::store::{HistoryEntry, NewSchedule, OutboxRow, RunRecord, Store};
use serde_json::json;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Running, Sandbox, PATIENCE};

/// The next outbound whose text contains `needle`; earlier ones are returned too.
async fn outbound_containing(pincer: &Running, needle: &str) -> (OutboxRow, Vec<OutboxRow>) {
    let mut before = Vec::new();
    loop {
        let out = pincer.next_outbound().await;
        if out.text.contains(needle) {
            return (out, before);
        }
        before.push(out);
    }
}

/// Waits until the schedule has `n` finished runs.
async fn finished_runs(pincer: &Running, id: ScheduleId, n: usize) -> Vec<RunRecord> {
    finished_runs_in(pincer.store(), id, n).await
}

async fn finished_runs_in(store: &Store, id: ScheduleId, n: usize) -> Vec<RunRecord> {
    let wait = async {
        loop {
            let runs = store.schedules().runs(id).await.unwrap();
            if runs.iter().filter(|r| r.outcome != "running").count() >= n {
                return runs;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait).await.expect("the runs finished within the patience limit")
}

/// Every file named `name` under `dir`, at any depth.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        if path.is_dir() {
            found.extend(files_named(&path, name));
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
    found
}

async fn add(pincer: &Running, group: &GroupName, prompt: &str, trigger: Trigger, context: ContextMode) -> Schedule {
    let new = NewSchedule { group: group.clone(), prompt: prompt.into(), trigger, context };
    manage::add(&pincer.store().schedules(), new, &Default::default()).await.unwrap()
}

#[tokio::test]
async fn the_agent_schedules_a_prompt_that_fires_and_reaches_the_chat() {
    let schedule = Reply::tool_use(
        "mcp__pincer__schedule_task",
        json!({"prompt": "DAILYREPORT summarize the day", "schedule_type": "cron", "schedule_value": "0 9 * * *",
               "timezone": "Europe/Berlin"}),
    );
    let api = FakeApi::start(fake_api::scripted(vec![("PLEASE SCHEDULE", schedule)])).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("daily", None).await;
    let mut pincer = sandbox.start().await;
    pincer.engine.start_scheduler();

    pincer.send(&group, "PLEASE SCHEDULE a daily report at 9").await;
    let confirmed = pincer.next_outbound().await;
    assert!(confirmed.text.contains("TOOL_RESULT(err=False):scheduled: #1"), "{confirmed:?}");
    let stored = pincer.store().schedules().schedules(Some(&group)).await.unwrap();
    assert_eq!(stored.len(), 1);
    let task = &stored[0];
    assert_eq!(task.trigger.describe(), "cron 0 9 * * * (Europe/Berlin)");
    assert!(task.next_run.is_some_and(|t| t > Utc::now()), "{task:?}");

    // `pincer tasks run-now 1`, then a poke as a tool would give.
    manage::run_now(&pincer.store().schedules(), task.id).await.unwrap();
    pincer.engine.scheduler.poke();
    let (report, _) = outbound_containing(&pincer, "DAILYREPORT").await;
    assert_eq!(report.kind, OutboundKind::Reply);
    assert!(report.text.starts_with("ECHO: [Scheduled task #1, cron 0 9 * * * (Europe/Berlin)]"), "{report:?}");

    let runs = finished_runs(&pincer, task.id, 1).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, "ok");
    assert!(runs[0].text.as_deref().unwrap().contains("DAILYREPORT"), "{runs:?}");
    assert!(runs[0].ended.is_some() && runs[0].duration_ms.is_some() && runs[0].cost_usd.is_some(), "{runs:?}");
    let task = pincer.store().schedules().schedule(task.id).await.unwrap();
    assert!(task.last_run.is_some() && task.next_run.is_some_and(|t| t > Utc::now()), "{task:?}");

    // The run went through the chat path: stored first, marked scheduled, answered.
    let history = pincer.store().history().history(&group, 100).await.unwrap();
    let scheduled: Vec<_> = history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Inbound { source, state, .. } if source == "scheduled" => Some(state.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(scheduled, ["answered"]);
    pincer.stop().await;
}

#[tokio::test]
async fn an_isolated_run_leaves_the_groups_session_alone() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.scheduler.poll_interval = Duration::from_millis(200);
    let group = sandbox.add_group("iso", None).await;
    let mut pincer = sandbox.start().await;
    pincer.engine.start_scheduler();

    pincer.send(&group, "remember KIWI").await;
    pincer.next_outbound().await;
    let session = pincer.status(&group).await.session_id.expect("the group has a session");

    let at = Utc::now() + chrono::Duration::seconds(2);
    let once = Trigger::once(&at.to_rfc3339(), "UTC").unwrap();
    let task = add(&pincer, &group, "NIGHTLY cleanup", once, ContextMode::Isolated).await;
    let (nightly, _) = outbound_containing(&pincer, "NIGHTLY").await;
    assert_eq!(nightly.group, group, "the isolated run's result goes to the group's chat");
    let runs = finished_runs(&pincer, task.id, 1).await;
    assert_eq!(runs[0].outcome, "ok");

    assert_eq!(pincer.status(&group).await.session_id.as_deref(), Some(session.as_str()));
    let stored = pincer.store().groups().group("iso").await.unwrap().session_id;
    assert_eq!(stored.as_deref(), Some(session.as_str()), "the stored session id is unchanged");
    let isolated = api.main_requests().into_iter().find(|r| r.all_text().contains("NIGHTLY")).unwrap();
    assert!(!isolated.all_text().contains("KIWI"), "a fresh session: the group's conversation is not in it");
    // A home of its own: the run's transcript is not in the group's CLI home,
    // and its home is gone once the run has ended.
    let history = pincer.store().history().history(&group, 100).await.unwrap();
    let run_session = history
        .iter()
        .find_map(|e| match e {
            HistoryEntry::Result { session_id, text: Some(text), .. } if text.contains("NIGHTLY") => session_id.clone(),
            _ => None,
        })
        .expect("the isolated run's result names its session");
    assert_ne!(run_session, session);
    let home = sandbox.config.data_dir.join("homes/iso");
    if home.exists() {
        let own = files_named(&home, &format!("{session}.jsonl"));
        assert!(!own.is_empty(), "the group's own transcript is where the search looks");
    }
    let in_home = files_named(&home, &format!("{run_session}.jsonl"));
    assert!(in_home.is_empty(), "the isolated run wrote into the group's CLI home: {in_home:?}");
    let isolated_homes = sandbox.config.data_dir.join("isolated-homes");
    let removed = async {
        while std::fs::read_dir(&isolated_homes).is_ok_and(|mut d| d.next().is_some()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, removed).await.expect("the isolated run's home is removed when it ends");
    // The scheduler settles the schedule just after the run's log entry is written.
    let spent = async {
        while pincer.store().schedules().schedule(task.id).await.unwrap().status.as_str() != "completed" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, spent).await.expect("a once is spent: its schedule is completed");
    let events = pincer.session_events(&group).await;
    assert!(events.starts_with(&["started".to_owned(), "isolated_started".to_owned()]), "{events:?}");
    assert!(!events.contains(&"resumed".to_owned()), "{events:?}");

    // The group's own session goes on as before.
    pincer.send(&group, "and now?").await;
    assert_eq!(outbound_containing(&pincer, "and now?").await.0.text, "ECHO: and now?");
    assert_eq!(pincer.status(&group).await.session_id.as_deref(), Some(session.as_str()));
    pincer.stop().await;
}

#[tokio::test]
async fn missed_runs_are_made_up_once_after_downtime() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("late", None).await;
    let store = sandbox.store().await;
    // Ten hourly runs were missed while pincer was stopped.
    let new = NewSchedule {
        group: group.clone(),
        prompt: "HOURLY check".into(),
        trigger: Trigger::interval("1h").unwrap(),
        context: ContextMode::Group,
    };
    let task = store.schedules().add_schedule(&new, Some(Utc::now() - chrono::Duration::hours(10))).await.unwrap();
    store.close().await;

    let mut pincer = sandbox.start().await;
    pincer.engine.start_scheduler();
    outbound_containing(&pincer, "HOURLY").await;
    let runs = finished_runs(&pincer, task.id, 1).await;
    assert_eq!(runs.len(), 1, "one run for all the missed ones");
    let task = pincer.store().schedules().schedule(task.id).await.unwrap();
    let next = task.next_run.unwrap();
    assert!(next > Utc::now() + chrono::Duration::minutes(50), "the next run counts from now: {next}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_failing_run_is_retried_and_the_chat_is_told_once_per_streak() {
    let failing = Reply::Error { status: 500, message: "the fake model is down".into() };
    let api = FakeApi::start(fake_api::scripted(vec![("FLAKY", failing)])).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.scheduler.retry_delay = Duration::from_millis(500);
    sandbox.config.scheduler.max_retries = 1;
    let group = sandbox.add_group("flaky", None).await;
    let mut pincer = sandbox.start().await;
    pincer.engine.start_scheduler();

    let task = add(&pincer, &group, "FLAKY job", Trigger::interval("1h").unwrap(), ContextMode::Group).await;
    manage::run_now(&pincer.store().schedules(), task.id).await.unwrap();
    pincer.engine.scheduler.poke();

    let (retrying, before) = outbound_containing(&pincer, "Retrying in").await;
    assert_eq!(retrying.kind, OutboundKind::Notice);
    assert!(
        retrying.text.contains("Scheduled task #1 failed") && retrying.text.contains("retry 1 of 1"),
        "{retrying:?}"
    );
    assert!(
        before.iter().any(|o| o.kind == OutboundKind::Error),
        "the failed turn itself reached the chat: {before:?}"
    );
    let runs = finished_runs(&pincer, task.id, 2).await;
    assert_eq!(runs.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(), ["error", "error"]);
    // The run's end is written before the scheduler decides what comes next:
    // wait for that decision (its streak ended), not just for the run.
    let settled = async {
        loop {
            let task = pincer.store().schedules().schedule(task.id).await.unwrap();
            if task.failures == 0 {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let task = tokio::time::timeout(PATIENCE, settled).await.expect("the streak ended within the patience limit");
    assert_eq!((task.status.as_str(), task.failures), ("active", 0), "it waits for its next regular run");
    assert!(task.next_run.is_some_and(|t| t > Utc::now() + chrono::Duration::minutes(50)), "{task:?}");
    // Stopped, so a notice the last failure would send is written by now.
    pincer.stop().await;
    // The streak was told once, at its start: neither the retry's failure
    // nor the giving up is told again.
    let rows = sandbox.store().await.outbox().outbox_after(pincer::store::OutboxId(0), 100).await.unwrap();
    let told: Vec<&str> =
        rows.iter().filter(|o| o.text.contains("Scheduled task #1 failed")).map(|o| o.text.as_str()).collect();
    assert_eq!(told.len(), 1, "one notice per streak: {told:?}");
}

#[tokio::test]
async fn pincer_run_fires_a_task_added_and_run_from_the_command_line() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.scheduler.poll_interval = Duration::from_millis(300);
    sandbox.add_group("ops", None).await;
    let daemon = sandbox.spawn_daemon();
    let run = |args: &[&str]| {
        let cli = <pincer::cli::Cli as clap::Parser>::try_parse_from([&["pincer"], args].concat()).unwrap();
        pincer::cli::execute(cli, sandbox.config.clone(), tokio_util::sync::CancellationToken::new())
    };

    run(&["tasks", "add", "ops", "--every", "1d", "--prompt", "WEEKLY numbers"]).await.unwrap();
    run(&["tasks", "run-now", "1"]).await.unwrap();
    let store = sandbox.store().await;
    let runs = finished_runs_in(&store, ScheduleId(1), 1).await;
    assert_eq!(runs[0].outcome, "ok");
    assert!(
        runs[0].text.as_deref().unwrap().contains("ECHO: [Scheduled task #1, every 1day] WEEKLY numbers"),
        "{runs:?}"
    );
    run(&["tasks", "runs", "1"]).await.unwrap();
    daemon.stop().await;
    store.close().await;
}

#[tokio::test]
async fn the_tasks_command_rejects_bad_times_and_manages_schedules() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    sandbox.add_group("team", None).await;
    let run = |args: &[&str]| {
        let cli = <pincer::cli::Cli as clap::Parser>::try_parse_from([&["pincer"], args].concat()).unwrap();
        pincer::cli::execute(cli, sandbox.config.clone(), tokio_util::sync::CancellationToken::new())
    };

    let bad_cron = run(&["tasks", "add", "team", "--cron", "0 9 * *", "--prompt", "x"]).await.unwrap_err();
    assert!(bad_cron.to_string().contains("invalid cron expression"), "{bad_cron}");
    let bad_zone = run(&["tasks", "add", "team", "--cron", "0 9 * * 1-5", "--tz", "Nowhere/Land", "--prompt", "x"])
        .await
        .unwrap_err();
    assert!(bad_zone.to_string().contains("unknown time zone"), "{bad_zone}");
    let past = run(&["tasks", "add", "team", "--at", "2020-01-01T09:00", "--prompt", "x"]).await.unwrap_err();
    assert!(past.to_string().contains("in the past"), "{past}");
    let unknown = run(&["tasks", "add", "nobody", "--every", "2h", "--prompt", "x"]).await.unwrap_err();
    assert!(unknown.to_string().contains("not registered"), "{unknown}");
    // The operator's command obeys scheduler.min_interval like the agent's tool.
    let fast = run(&["tasks", "add", "team", "--every", "1s", "--prompt", "x"]).await.unwrap_err();
    assert!(fast.to_string().contains("shorter than the minimum of 5m"), "{fast}");
    let fast_cron = run(&["tasks", "add", "team", "--cron", "* * * * *", "--prompt", "x"]).await.unwrap_err();
    assert!(fast_cron.to_string().contains("scheduler.min_interval"), "{fast_cron}");

    run(&["tasks", "add", "team", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", "--prompt", "standup"])
        .await
        .unwrap();
    run(&["tasks", "add", "team", "--every", "2h", "--prompt", "check", "--isolated"]).await.unwrap();
    run(&["tasks", "pause", "1"]).await.unwrap();
    let store = sandbox.store().await;
    let tasks = store.schedules().schedules(None).await.unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!((tasks[0].status.as_str(), tasks[0].next_run), ("paused", None));
    assert_eq!(tasks[1].context, ContextMode::Isolated);
    let not_active = run(&["tasks", "run-now", "1"]).await.unwrap_err();
    assert!(not_active.to_string().contains("resume it first"), "{not_active}");
    run(&["tasks", "resume", "1"]).await.unwrap();
    run(&["tasks", "cancel", "2"]).await.unwrap();
    run(&["tasks", "runs", "1"]).await.unwrap();
    let tasks = store.schedules().schedules(None).await.unwrap();
    assert_eq!(tasks.len(), 1, "cancelled tasks are not listed");
    assert_eq!(tasks[0].status.as_str(), "active");
    assert!(tasks[0].next_run.is_some());
    store.close().await;
}

/// In a group whose tools are for admins only, a scheduled prompt runs with a
/// member's rights (the agent may have scheduled it on a member's word), while
/// the operator's console line keeps the group's own list.
#[tokio::test]
async fn in_an_admins_only_group_a_scheduled_prompt_gets_only_what_a_member_has() {
    let api = FakeApi::start(fake_api::scripted(vec![
        ("SCHEDBASH", Reply::bash("touch scheduled.txt && echo touched", "make a file")),
        ("CONSOLEBASH", Reply::bash("touch console.txt && echo touched", "make a file")),
    ]))
    .await;
    let sandbox = Sandbox::new(&api);
    let settings = pincer::store::GroupSettings {
        allowed_tools: Some(vec!["Bash".into()]),
        tools: pincer::domain::ToolsFor::Admins,
        ..Default::default()
    };
    let group = sandbox.add_group_with("ops", settings).await;
    let mut pincer = sandbox.start().await;
    pincer.engine.start_scheduler();

    let task = add(&pincer, &group, "SCHEDBASH now", Trigger::interval("1h").unwrap(), ContextMode::Group).await;
    manage::run_now(&pincer.store().schedules(), task.id).await.unwrap();
    pincer.engine.scheduler.poke();
    let (report, _) = outbound_containing(&pincer, "needs an admin").await;
    assert!(report.text.contains("TOOL_RESULT(err=True)"), "{report:?}");
    assert!(!sandbox.group_dir("ops").join("scheduled.txt").exists());

    pincer.send(&group, "CONSOLEBASH").await;
    let (reply, _) = outbound_containing(&pincer, "touched").await;
    assert!(reply.text.starts_with("AFTER_TOOL: TOOL_RESULT(err=False)"), "{reply:?}");
    assert!(sandbox.group_dir("ops").join("console.txt").exists(), "the operator keeps the group's list");
    pincer.stop().await;
}
