//! Starting, resuming, answering, holding for a usage limit, closing when
//! idle, and approvals: one real actor each, with the fake CLI.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::{between, test_config, Rig};
use crate::domain::{Approval, ApprovalAnswer};
use crate::session::fake_cli::{self, FakeCli, Reply, Said};
use crate::store::GroupSettings;

#[tokio::test(start_paused = true)]
async fn a_message_starts_the_cli_and_its_result_is_the_reply() {
    let rig = Rig::new().await;
    let id = rig.say("hello").await;
    rig.until_state(id, "answered").await;

    let starts = rig.cli.starts();
    assert_eq!((starts.len(), starts[0].resume.as_deref()), (1, None), "a group without a session starts fresh");
    let replies = rig.replies().await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0].starts_with("echo: ") && replies[0].contains("hello"), "{replies:?}");
    let stored = rig.store.groups().group("team").await.unwrap().session_id;
    assert_eq!(stored, Some(rig.cli.session()), "the CLI's session id is kept for the next start");
    assert_eq!(rig.events().await[0].0, "started");
    let status = rig.handle.status();
    assert!(status.live && !status.busy(), "{status:?}");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stored_session_is_resumed() {
    let rig = Rig::with(test_config(), GroupSettings::default(), Some("s-old"), FakeCli::default()).await;
    let id = rig.say("again").await;
    rig.until_state(id, "answered").await;
    assert_eq!(rig.cli.starts()[0].resume.as_deref(), Some("s-old"));
    assert_eq!(rig.events().await[0].0, "resumed");
    rig.stop().await;
}

/// The lines of a turn the account's usage limit refused, resetting in `resets_in`.
pub(super) fn usage_limit(resets_in: Duration) -> Reply {
    let resets_at = (SystemTime::now() + resets_in).duration_since(UNIX_EPOCH).unwrap().as_secs();
    Reply::Lines(Box::new(move |said: &Said| {
        let info = json!({"status": "rejected", "resetsAt": resets_at, "rateLimitType": "five_hour"});
        let mut lines = fake_cli::turn_start(said);
        lines.push(json!({"type": "assistant", "is_api_error_message": true, "parent_tool_use_id": null,
            "error": "rate_limit", "api_error_status": 429, "api_error": "usage_limit_reached",
            "api_error_type": "rate_limit_error", "api_error_params": {"rate_limit_info": info},
            "message": {"content": [{"type": "text", "text": "You've hit your 5-hour limit"}]}}));
        lines.push(json!({"type": "result", "subtype": "success", "is_error": true, "session_id": said.session,
            "result": "You've hit your 5-hour limit", "terminal_reason": "api_error", "api_error_status": 429,
            "api_error_type": "rate_limit_error", "api_error": "usage_limit_reached"}));
        lines
    }))
}

#[tokio::test(start_paused = true)]
async fn a_vanished_session_is_started_fresh_and_the_message_answered() {
    let rig = Rig::with(test_config(), GroupSettings::default(), Some("gone"), FakeCli::default()).await;
    // As the CLI does: the refusal at start, before `initialize` is answered.
    rig.cli.forget_session("gone");
    let id = rig.say("still there?").await;
    rig.until_state(id, "answered").await;

    let resumed: Vec<Option<String>> = rig.cli.starts().into_iter().map(|s| s.resume).collect();
    assert_eq!(resumed, [Some("gone".to_owned()), None], "the second process starts fresh");
    let kinds: Vec<String> = rig.events().await.into_iter().map(|(kind, _)| kind).collect();
    assert_eq!(kinds, ["resumed", "resume_failed", "fresh", "started"]);
    assert_eq!(rig.notices().await, ["The previous conversation could not be found, so a fresh session was started."]);
    assert_eq!(rig.replies().await.len(), 1, "the vanished session's error is stored, not sent");
    assert_eq!(rig.store.groups().group("team").await.unwrap().session_id, Some(rig.cli.session()));
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_a_planned_resend() {
    let rig = Rig::new().await;
    rig.cli.script([usage_limit(Duration::from_secs(5))]);
    let id = rig.say("later please").await;
    rig.until("the resend is planned", || rig.handle.status().resend_at.is_some()).await;
    rig.handle.send(crate::session::Command::Interrupt).await.unwrap();
    rig.until_state(id, "failed").await;
    rig.until_stored("the chat is told", || async { !rig.notices().await.is_empty() }).await;
    assert_eq!(
        rig.notices().await,
        ["Cancelled: pincer will not send your message again when the usage limit resets (the history keeps it)."]
    );
    // Past the reset, the next message is the only one written again.
    let past = tokio::time::Instant::now() + Duration::from_secs(10);
    rig.until("the reset has passed", || tokio::time::Instant::now() >= past).await;
    let next = rig.say("and now").await;
    rig.until_state(next, "answered").await;
    assert_eq!(rig.cli.user_messages().len(), 2, "{:?}", rig.cli.user_messages());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_usage_limit_holds_the_message_and_sends_it_once_at_the_reset() {
    let rig = Rig::new().await;
    rig.cli.script([usage_limit(Duration::from_secs(20))]);
    let id = rig.say("later please").await;
    rig.until("the resend is planned", || rig.handle.status().resend_at.is_some()).await;
    let refused_at = rig.cli.written()[0].at;
    assert_eq!(rig.state_of(id).await, "sent", "held, not failed");
    let told = rig.replies().await;
    assert!(told.len() == 1 && told[0].contains("send"), "the chat hears when it goes out again: {told:?}");

    rig.until("the resend", || rig.cli.user_messages().len() == 2).await;
    rig.until_state(id, "answered").await;
    let messages = rig.cli.user_messages();
    assert_eq!(messages.len(), 2, "written once more, at the reset: {messages:?}");
    let resent_at = rig.cli.written().iter().filter(|w| w.line["type"] == "user").nth(1).unwrap().at;
    // The reset is whole seconds of wall clock away, plus a margin of 2 s.
    assert!(between(refused_at, resent_at) >= Duration::from_secs(20), "not before the reset");
    assert!(rig.events().await.iter().any(|(kind, _)| kind == "resent_after_limit"));
    assert!(rig.handle.status().resend_at.is_none());
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_message_refused_again_after_its_resend_is_given_up() {
    let rig = Rig::new().await;
    rig.cli.script([usage_limit(Duration::from_secs(5)), usage_limit(Duration::from_secs(5))]);
    let id = rig.say("twice refused").await;
    rig.until("the resend", || rig.cli.user_messages().len() == 2).await;
    rig.until_state(id, "failed").await;
    assert_eq!(rig.cli.user_messages().len(), 2, "sent again once, not a second time");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_session_closes_only_after_its_background_task_and_follow_up() {
    let rig = Rig::new().await;
    rig.cli.script([Reply::Lines(Box::new(|said: &Said| {
        let mut lines = fake_cli::turn_start(said);
        lines.push(fake_cli::task_started(said, "b1", "bg sleep"));
        lines.push(fake_cli::result(said, "started it"));
        lines
    }))]);
    let id = rig.say("run it in the background").await;
    rig.until_state(id, "answered").await;
    assert_eq!(rig.handle.status().running_tasks, 1);

    // Three idle timeouts pass with the task running: the session stays.
    let idle = rig.config.claude.idle_timeout;
    let until = tokio::time::Instant::now() + idle * 3;
    rig.until("three idle timeouts", || tokio::time::Instant::now() >= until).await;
    let notified_at = tokio::time::Instant::now();
    rig.cli.print(json!({"type": "system", "subtype": "task_notification", "task_id": "b1", "status": "completed",
        "summary": "Background command \"bg sleep\" completed (exit code 0)"}));
    rig.until("the follow-up is expected", || rig.handle.status().in_turn).await;
    let said = Said { text: String::new(), uuid: String::new(), session: rig.cli.session() };
    rig.cli.print(json!({"type": "system", "subtype": "init", "session_id": said.session}));
    rig.cli.print(fake_cli::result(&said, "the task is done"));

    rig.until("the idle close", || !rig.cli.ended().is_empty()).await;
    let ended = rig.cli.ended();
    assert_eq!(ended.len(), 1, "one process, closed once: {ended:?}");
    assert!(between(notified_at, ended[0].1) >= idle, "closed an idle timeout after the task's end, not before");
    rig.until_event("idle_closed").await;
    assert!(rig.replies().await.iter().any(|r| r == "the task is done"));
    rig.stop().await;
}

/// A Bash call as the CLI makes it: pincer's hook first, then (when the hook
/// said `ask`) the permission request.
fn asks_for_bash(request_id: &'static str) -> Reply {
    Reply::Lines(Box::new(move |said: &Said| {
        let mut lines = fake_cli::turn_start(said);
        lines.push(fake_cli::pre_tool_use(&format!("{request_id}_hook"), "Bash", json!({"command": "ls"}), "toolu_1"));
        lines.push(json!({"type": "control_request", "request_id": request_id, "request": {"subtype": "can_use_tool",
            "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_1"}}));
        lines
    }))
}

fn answered_requests(rig: &Rig) -> Vec<String> {
    let written = rig.cli.written();
    let responses = written
        .iter()
        .filter(|w| w.line["type"] == "control_response" && w.line["response"]["response"]["behavior"].is_string());
    responses.map(|w| w.line["response"]["request_id"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test(start_paused = true)]
async fn an_approval_answered_after_its_process_crashed_is_dropped() {
    let settings = GroupSettings { admins: vec!["42".into()], allowed_tools: Some(Vec::new()), ..Default::default() };
    let rig = Rig::with(test_config(), settings, None, FakeCli::default()).await;
    rig.cli.script([asks_for_bash("req_old"), asks_for_bash("req_new")]);
    rig.say("list the files").await;
    let old = rig.asked().await;
    rig.cli.crash();
    let new = rig.asked().await;
    assert_eq!(rig.cli.starts().len(), 2, "the message went to a new process, which asked again");

    let allow = || ApprovalAnswer { verdict: Approval::Allow, by: "ann".into() };
    old.respond.send(allow()).unwrap();
    new.respond.send(allow()).unwrap();
    // Answers come back in the order they were given: once the new one is
    // written, the old one was handled before it.
    rig.until("the new request is answered", || answered_requests(&rig).contains(&"req_new".to_owned())).await;
    assert_eq!(answered_requests(&rig), ["req_new"], "the old process's answer never reaches the new one");
    let decisions = rig.store.journal().decisions(&rig.group).await.unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    rig.stop().await;
}
