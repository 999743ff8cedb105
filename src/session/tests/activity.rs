//! What the session publishes about its agent's work, as the chat side reads
//! it from `SessionHandle::activity`.

use serde_json::{json, Value};
use tokio::sync::watch;

use super::Rig;
use crate::domain::activity::{Activity, WorkKind};
use crate::session::fake_cli::{self, Reply};

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "assistant", "parent_tool_use_id": null,
           "message": {"content": [{"type": "tool_use", "id": id, "name": name, "input": input}]}})
}

fn task(subtype: &str, id: &str, more: Value) -> Value {
    let mut frame = json!({"type": "system", "subtype": subtype, "task_id": id});
    frame.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
    frame
}

fn now_words(activity: &watch::Receiver<Activity>) -> Option<(u32, String)> {
    let activity = activity.borrow();
    let turn = activity.turn.as_ref()?;
    Some((turn.steps, turn.now.as_ref()?.words.clone()))
}

#[tokio::test(start_paused = true)]
async fn a_turns_tool_calls_are_its_steps_and_its_result_is_the_last_done() {
    let rig = Rig::new().await;
    let mut activity = rig.handle.activity();
    rig.cli.script([Reply::Lines(Box::new(fake_cli::turn_start))]);
    let id = rig.say("run the tests").await;
    rig.until("the turn starts", || activity.borrow().turn.is_some()).await;
    assert_eq!(activity.borrow().turn.as_ref().map(|t| (t.number, t.steps)), Some((1, 0)));

    rig.cli.print(tool_use("toolu_1", "Read", json!({"file_path": "notes.md"})));
    rig.until("step 1", || now_words(&activity).is_some_and(|(n, _)| n == 1)).await;
    assert_eq!(now_words(&activity), Some((1, "Reading notes.md".into())));
    rig.cli.print(tool_use("toolu_2", "Bash", json!({"command": "TOKEN=sk-abc cargo test --lib | tail"})));
    rig.until("step 2", || now_words(&activity).is_some_and(|(n, _)| n == 2)).await;
    assert_eq!(now_words(&activity), Some((2, "Running `cargo test --lib`".into())));

    rig.cli.print(json!({"type": "result", "subtype": "success", "is_error": false, "result": "all green",
                         "session_id": rig.cli.session(), "total_cost_usd": 0.25}));
    rig.until("the turn ends", || activity.borrow().turn.is_none()).await;
    let done = activity.borrow().last_done.clone().expect("the turn is done");
    assert_eq!((done.number, done.steps, done.cost_usd, done.ok), (1, 2, Some(0.25), true));
    rig.until_state(id, "answered").await;

    // Lines that change nothing shown wake no watcher: a text-only assistant
    // line, a rate-limit frame, a foreground task (which the status counts,
    // so the test knows when all three were handled).
    activity.mark_unchanged();
    rig.cli.print(json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "hm"}]}}));
    rig.cli.print(json!({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}));
    rig.cli.print(task("task_started", "fg1", json!({"task_type": "local_bash", "is_backgrounded": false})));
    rig.until("the foreground task is counted", || rig.handle.status().running_tasks == 1).await;
    assert!(!activity.has_changed().unwrap(), "{:?}", *activity.borrow());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn background_work_appears_and_goes_with_its_frames_and_a_crash_clears_it() {
    let rig = Rig::new().await;
    let activity = rig.handle.activity();
    let id = rig.say("start a crawl").await;
    rig.until_state(id, "answered").await;
    assert!(!activity.borrow().working(), "the echo turn is over");

    let started = json!({"tool_use_id": "toolu_bg", "description": "crawl", "task_type": "local_bash",
                         "is_backgrounded": true});
    rig.cli.print(task("task_started", "b1", started.clone()));
    rig.until("the task is listed", || !activity.borrow().background.is_empty()).await;
    let work = activity.borrow().background[0].clone();
    assert_eq!((work.id.as_str(), work.kind, work.label.as_str()), ("b1", WorkKind::Task, "crawl"));
    rig.cli.print(task("task_notification", "b1", json!({"status": "completed", "summary": "done"})));
    rig.until("the task is gone", || activity.borrow().background.is_empty()).await;

    rig.cli.print(task("task_started", "b2", started));
    rig.until("the next task is listed", || !activity.borrow().background.is_empty()).await;
    rig.cli.crash();
    rig.until("the crash clears it", || !activity.borrow().working()).await;
    rig.until_event("crashed").await;
    assert!(activity.borrow().background.is_empty());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_restarted_actor_numbers_its_turns_on_from_the_ended_ones() {
    let rig = Rig::new().await;
    let activity = rig.handle.activity();
    let first = rig.say("one").await;
    rig.until_state(first, "answered").await;
    rig.cli.crash();
    rig.until_event("exited").await;
    rig.cli.panic_on_start(1);
    let second = rig.say("two").await;
    rig.until_event("actor_restarted").await;
    rig.until_state(second, "answered").await;
    let done = activity.borrow().last_done.clone().expect("a turn done");
    assert_eq!((done.number, done.ok), (2, true), "a watcher never sees turn 1 twice");
    rig.stop().await;
}
