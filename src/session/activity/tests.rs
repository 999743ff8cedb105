//! The builder fed by hand, with instants a fixed distance apart.

use std::time::Duration;

use super::*;
use crate::claude::protocol::{BackgroundTask, TaskNotification, TaskProgress, TaskStatus, TaskUpdated};

fn call(id: &str, tool: ToolKind) -> ToolCall {
    ToolCall { id: id.into(), tool, parent_tool_use_id: None, background: false }
}

fn bash(id: &str, command: &str) -> ToolCall {
    call(id, ToolKind::Bash { command: command.into() })
}

fn agent(id: &str, description: &str, name: Option<&str>, background: bool) -> ToolCall {
    let tool = ToolKind::Agent { description: description.into(), subagent_type: None, name: name.map(Into::into) };
    ToolCall { background, ..call(id, tool) }
}

fn started(task: &str, by: &str, task_type: &str, is_backgrounded: Option<bool>) -> TaskEvent {
    TaskEvent::Started(TaskStarted {
        task_id: task.into(),
        tool_use_id: Some(by.into()),
        description: Some(format!("{task} described")),
        task_type: Some(task_type.into()),
        is_backgrounded,
        ..TaskStarted::default()
    })
}

fn notified(task: &str, status: Option<TaskStatus>) -> TaskEvent {
    TaskEvent::Notification(TaskNotification { task_id: task.into(), status, ..TaskNotification::default() })
}

fn labels(b: &ActivityBuilder) -> Vec<(&str, WorkKind, Option<&str>)> {
    b.activity().background.iter().map(|w| (w.label.as_str(), w.kind, w.doing.as_deref())).collect()
}

#[tokio::test(start_paused = true)]
async fn a_turn_counts_its_steps_keeps_the_last_few_and_ends_in_last_done() {
    let mut b = ActivityBuilder::default();
    let t0 = Instant::now();
    assert!(b.feed(Fed::TurnStarted, t0));
    assert!(!b.feed(Fed::TurnStarted, t0 + Duration::from_secs(1)), "init of the same turn changes nothing");
    for n in 0..7u64 {
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(b.feed(Fed::ToolCalls(&[bash(&format!("t{n}"), &format!("step {n}"))]), Instant::now()));
    }
    let turn = b.activity().turn.clone().expect("a turn");
    assert_eq!((turn.number, turn.started, turn.steps), (1, t0, 7));
    assert_eq!(
        turn.now.as_ref().map(|s| (s.words.as_str(), s.at)),
        Some(("Running `step 6`", t0 + Duration::from_secs(7)))
    );
    let recent: Vec<&str> = turn.recent.iter().map(|s| s.words.as_str()).collect();
    assert_eq!(
        recent,
        ["Running `step 2`", "Running `step 3`", "Running `step 4`", "Running `step 5`", "Running `step 6`"]
    );

    tokio::time::advance(Duration::from_secs(3)).await;
    assert!(b.feed(Fed::Result { ok: true, cost_usd: Some(0.31) }, Instant::now()));
    let done = TurnDone { number: 1, took: Duration::from_secs(10), steps: 7, cost_usd: Some(0.31), ok: true };
    assert_eq!((b.activity().turn.as_ref(), b.activity().last_done.as_ref()), (None, Some(&done)));
    assert!(!b.feed(Fed::Result { ok: true, cost_usd: None }, Instant::now()), "a second result changes nothing");
    b.feed(Fed::TurnStarted, Instant::now());
    assert_eq!(b.activity().turn.as_ref().map(|t| (t.number, t.steps)), Some((2, 0)), "the next turn is counted anew");
}

#[tokio::test(start_paused = true)]
async fn a_background_subagent_is_listed_its_calls_are_its_doing_and_its_end_removes_it() {
    let (mut b, now) = (ActivityBuilder::default(), Instant::now());
    b.feed(Fed::TurnStarted, now);
    b.feed(Fed::ToolCalls(&[agent("toolu_ag1", "bg helper", None, true)]), now);
    assert!(b.feed(Fed::Task(&started("a1", "toolu_ag1", "local_agent", Some(true))), now));
    assert_eq!(labels(&b), [("a1 described", WorkKind::Teammate, None)]);

    let sub = ToolCall { parent_tool_use_id: Some("toolu_ag1".into()), ..bash("toolu_sub1", "echo sub-bash-ok") };
    assert!(b.feed(Fed::ToolCalls(std::slice::from_ref(&sub)), now));
    assert!(!b.feed(Fed::ToolCalls(&[sub]), now), "the same words again change nothing");
    assert_eq!(labels(&b), [("a1 described", WorkKind::Teammate, Some("Running `echo sub-bash-ok`"))]);
    assert_eq!(b.activity().turn.as_ref().map(|t| t.steps), Some(1), "only the main thread's call is a step");

    let progress =
        TaskProgress { task_id: "a1".into(), description: Some("Running subagent echo".into()), ..Default::default() };
    assert!(b.feed(Fed::Task(&TaskEvent::Progress(progress)), now));
    assert_eq!(labels(&b)[0].2, Some("Running subagent echo"));

    b.feed(Fed::Result { ok: true, cost_usd: None }, now);
    assert!(b.activity().working(), "background work outlives the turn");
    assert!(!b.feed(Fed::Task(&notified("a1", Some(TaskStatus::Other("paused".into())))), now));
    assert!(b.feed(Fed::Task(&notified("a1", Some(TaskStatus::Completed))), now));
    assert!(!b.activity().working());
    let late = ToolCall { parent_tool_use_id: Some("toolu_ag1".into()), ..bash("toolu_sub2", "late") };
    assert!(!b.feed(Fed::ToolCalls(&[late]), now), "a gone subagent's call outside a turn is not shown");
}

#[tokio::test(start_paused = true)]
async fn a_foreground_subagents_calls_are_steps_of_the_turn() {
    let (mut b, now) = (ActivityBuilder::default(), Instant::now());
    b.feed(Fed::TurnStarted, now);
    b.feed(Fed::ToolCalls(&[agent("toolu_fg", "look around", None, false)]), now);
    assert!(!b.feed(Fed::Task(&started("a2", "toolu_fg", "local_agent", Some(false))), now));
    let sub = ToolCall {
        parent_tool_use_id: Some("toolu_fg".into()),
        ..call("s1", ToolKind::Read { path: "a/b/c.md".into() })
    };
    b.feed(Fed::ToolCalls(&[sub]), now);
    let turn = b.activity().turn.clone().unwrap();
    assert_eq!((turn.steps, turn.now.unwrap().words.as_str()), (2, "Reading b/c.md"));
    assert!(b.activity().background.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_old_cli_that_does_not_say_backgrounded_is_read_from_the_call() {
    let (mut b, now) = (ActivityBuilder::default(), Instant::now());
    b.feed(Fed::TurnStarted, now);
    let bg_bash = ToolCall { background: true, ..bash("toolu_bg1", "sleep 20") };
    b.feed(Fed::ToolCalls(&[bg_bash, bash("toolu_fg1", "sleep 1")]), now);
    assert!(b.feed(Fed::Task(&started("b1", "toolu_bg1", "local_bash", None)), now));
    assert!(!b.feed(Fed::Task(&started("b2", "toolu_fg1", "local_bash", None)), now), "a foreground shell");
    b.feed(Fed::ToolCalls(&[agent("toolu_team", "teammate", Some("researcher"), true)]), now);
    b.feed(Fed::Task(&started("a3", "toolu_team", "local_agent", None)), now);
    b.feed(Fed::Task(&started("a4", "toolu_unseen", "local_agent", None)), now);
    let expected = [
        ("b1 described", WorkKind::Task, None),
        ("researcher", WorkKind::Teammate, None),
        ("a4 described", WorkKind::Teammate, None),
    ];
    assert_eq!(labels(&b), expected, "a teammate by its name; an unseen call's subagent counts as background");
    let killed = TaskUpdated { task_id: "b1".into(), status: Some(TaskStatus::Killed), end_time_ms: None };
    assert!(b.feed(Fed::Task(&TaskEvent::Updated(killed)), now));
    assert_eq!(b.activity().background.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_background_list_is_the_authoritative_set_and_keeps_what_is_known() {
    let (mut b, t0) = (ActivityBuilder::default(), Instant::now());
    let listed = |id: &str| BackgroundTask {
        task_id: id.into(),
        task_type: Some("local_bash".into()),
        description: Some(format!("{id} listed")),
        ..BackgroundTask::default()
    };
    // 2.1.330 lists a task before its task_started.
    assert!(b.feed(Fed::Task(&TaskEvent::BackgroundChanged(vec![listed("b1")])), t0));
    let t1 = t0 + Duration::from_secs(5);
    assert!(b.feed(Fed::Task(&started("b1", "toolu_b1", "local_bash", Some(true))), t1), "a better label");
    assert_eq!(labels(&b), [("b1 described", WorkKind::Task, None)]);
    assert!(!b.feed(Fed::Task(&TaskEvent::BackgroundChanged(vec![listed("b1")])), t1), "the same set changes nothing");
    assert!(b.feed(Fed::Task(&TaskEvent::BackgroundChanged(vec![listed("b2"), listed("b1")])), t1));
    let ids: Vec<(&str, Instant)> = b.activity().background.iter().map(|w| (w.id.as_str(), w.started)).collect();
    assert_eq!(ids, [("b1", t0), ("b2", t1)], "kept in the order they started");
    assert!(b.feed(Fed::Task(&TaskEvent::BackgroundChanged(Vec::new())), t1));
    assert!(!b.activity().working());
}

#[test]
fn the_process_end_clears_everything_and_records_the_cut_turn() {
    let (mut b, t0) = (ActivityBuilder::default(), Instant::now());
    b.feed(Fed::TurnStarted, t0);
    b.feed(Fed::ToolCalls(&[ToolCall { background: true, ..bash("toolu_bg", "crawl") }]), t0);
    b.feed(Fed::Task(&started("b1", "toolu_bg", "local_bash", Some(true))), t0);
    assert!(b.feed(Fed::ProcessEnded, t0 + Duration::from_secs(2)));
    let activity = b.activity();
    assert!(activity.turn.is_none() && activity.background.is_empty());
    let done = activity.last_done.clone().unwrap();
    assert_eq!((done.number, done.steps, done.ok, done.took), (1, 1, false, Duration::from_secs(2)));
    assert!(!b.feed(Fed::ProcessEnded, t0), "nothing left to clear");
}

#[test]
fn background_entries_are_bounded() {
    let (mut b, now) = (ActivityBuilder::default(), Instant::now());
    let many: Vec<BackgroundTask> =
        (0..100).map(|n| BackgroundTask { task_id: format!("t{n}"), ..BackgroundTask::default() }).collect();
    b.feed(Fed::Task(&TaskEvent::BackgroundChanged(many)), now);
    assert_eq!(b.activity().background.len(), MAX_BACKGROUND);
    assert!(!b.feed(Fed::Task(&started("extra", "toolu_x", "local_bash", Some(true))), now));
    assert_eq!(b.activity().background[0].label, "background command");
}

/// What a watcher saw: the turn's number and steps, the background work as
/// "label: doing", the last turn done.
type Shown = (Option<(u64, u32)>, Vec<String>, Option<u64>);

/// Feeds a recorded transcript of the real CLI through the parser and the
/// builder, one second apart; returns what was shown after each line that
/// changed it.
fn replay(dir: &str, name: &str) -> Vec<Shown> {
    use crate::claude::protocol::{parse_line, CliEvent};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(dir).join(name);
    let (mut b, mut now, mut shown) = (ActivityBuilder::default(), Instant::now(), Vec::new());
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        now += Duration::from_secs(1);
        let changed = match parse_line(line).unwrap() {
            CliEvent::Init { .. } => b.feed(Fed::TurnStarted, now),
            CliEvent::ToolCalls(calls) => b.feed(Fed::ToolCalls(&calls), now),
            CliEvent::System { task: Some(task), .. } => b.feed(Fed::Task(&task), now),
            CliEvent::Result { result, .. } => b.feed(Fed::Result { ok: !result.is_error, cost_usd: None }, now),
            _ => false,
        };
        if changed {
            let a = b.activity();
            let background = a.background.iter().map(|w| format!("{}: {}", w.label, w.doing.as_deref().unwrap_or("-")));
            shown.push((
                a.turn.as_ref().map(|t| (t.number, t.steps)),
                background.collect(),
                a.last_done.as_ref().map(|d| d.number),
            ));
        }
    }
    shown
}

#[test]
fn recorded_background_agents_are_shown_from_start_to_end_on_both_versions() {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let old = replay("transcripts-2.1.197", "03a-bg-agent-stdin-open.stdout.jsonl");
    let expected_old = [
        (Some((1, 0)), s(&[]), None),
        (Some((1, 1)), s(&[]), None),
        (Some((1, 1)), s(&["bg helper: -"]), None),
        (Some((1, 1)), s(&["bg helper: Running `echo sub-bash-ok`"]), None),
        (Some((1, 1)), s(&["bg helper: Running subagent echo"]), None),
        (None, s(&["bg helper: Running subagent echo"]), Some(1)),
        (None, s(&[]), Some(1)),
        (Some((2, 0)), s(&[]), Some(1)),
        (None, s(&[]), Some(2)),
    ];
    assert_eq!(old, expected_old);
    let new = replay("transcripts-2.1.330", "03a-bg-agent.stdout.jsonl");
    let listed_first = new.iter().any(|(_, bg, _)| bg == &s(&["bg helper: -"]));
    let last = new.last().unwrap();
    assert!(listed_first && last == &(None, s(&[]), Some(2)), "{new:#?}");
    assert!(new.iter().any(|(turn, bg, _)| turn.is_none() && bg.len() == 1), "listed after its turn: {new:#?}");
}

#[test]
fn a_recorded_background_shell_and_a_foreground_one_on_both_versions() {
    for (dir, name) in
        [("transcripts-2.1.197", "02a-bg-bash-stdin-open.stdout.jsonl"), ("transcripts-2.1.330", "02a.stdout.jsonl")]
    {
        let shown = replay(dir, name);
        assert!(shown.iter().any(|(_, bg, _)| bg == &["bg sleep: -".to_owned()]), "{dir}: {shown:#?}");
        assert_eq!(shown.last().unwrap(), &(None, Vec::new(), Some(2)), "{dir}");
    }
    let foreground = replay("transcripts-2.1.197", "01e-second-message-during-tool-turn.stdout.jsonl");
    assert!(foreground.iter().all(|(_, bg, _)| bg.is_empty()), "a foreground shell is a step: {foreground:#?}");
}
