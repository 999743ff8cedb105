//! The session survives API faults and hung turns: the real CLI against a fake
//! API that answers 529s, 500s, usage limits, or nothing at all. Every failed
//! turn reaches the chat as a clear line; a usage limit's message goes out
//! again once after the reset unless `/stop` cancels it; a hung turn is
//! interrupted and the session restarted with `--resume`; a scheduled run
//! that gets no answer in time is logged as failed.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use pincer::domain::schedule::{ContextMode, ScheduleId, Trigger};
use pincer::domain::{GroupName, OutboundKind};
use pincer::scheduler::manage;
use pincer::store::{HistoryEntry, NewSchedule, OutboxRow, RunRecord};

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Running, Sandbox, PATIENCE};

/// The CLI's own retries, few so a test that exhausts them stays short.
/// Whether the CLI under test is older than the pinned one and answered a
/// usage limit as a plain rate limit (2.1.197 does not report usage limits
/// to a gateway; the pinned CLI must, so there this is always false). The
/// chat must then have been told of the rate limit, and nothing is resent.
fn rate_limit_on_an_older_cli(told: &OutboxRow) -> bool {
    if told.text.starts_with("Usage limit reached") {
        return false;
    }
    let pinned: Vec<u32> = pincer::claude::install::PINNED_VERSION.split('.').map(|p| p.parse().unwrap()).collect();
    let (major, minor, patch) = crate::support::cli::cli_version();
    assert!((major, minor, patch) < (pinned[0], pinned[1], pinned[2]), "the pinned CLI reports usage limits: {told:?}");
    assert!(told.text.contains("rate-limiting"), "an older CLI's 429 is told as a rate limit: {told:?}");
    true
}

fn few_retries(sandbox: &mut Sandbox, retries: u32) {
    sandbox.config.claude.env.insert("CLAUDE_CODE_MAX_RETRIES".into(), retries.to_string());
}

fn inbound_states(history: &[HistoryEntry]) -> Vec<String> {
    history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Inbound { state, .. } => Some(state.clone()),
            _ => None,
        })
        .collect()
}

/// Waits until the group's messages are in `expected` states: the session
/// marks them just after it stores the result that the chat already sees.
async fn settle(pincer: &Running, group: &GroupName, expected: &[&str]) {
    let wait = async {
        loop {
            let states = inbound_states(&pincer.store().history().history(group, 100).await.unwrap());
            if states == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(PATIENCE, wait).await.is_err() {
        let states = inbound_states(&pincer.store().history().history(group, 100).await.unwrap());
        panic!("the messages' states stayed {states:?}, expected {expected:?}");
    }
}

fn task_subtypes(history: &[HistoryEntry]) -> Vec<String> {
    history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Task { subtype, .. } => Some(subtype.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_overloaded_api_is_told_to_the_chat_and_the_next_message_works() {
    let overloaded = Reply::retryable(529, "Overloaded");
    let script = fake_api::faults(vec![("OVERLOADED", vec![overloaded; 3])], fake_api::echo());
    let api = FakeApi::start(script).await;
    let mut sandbox = Sandbox::new(&api);
    few_retries(&mut sandbox, 2);
    let group = sandbox.add_group("busy", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "OVERLOADED hello").await;
    let told = pincer.next_outbound().await;
    assert_eq!(told.kind, OutboundKind::Error, "{told:?}");
    assert!(told.text.contains("overloaded (529)") && told.text.contains("your message was not answered"), "{told:?}");
    assert_eq!(api.main_requests().len(), 3, "the CLI retried twice before it gave up");
    let history = pincer.store().history().history(&group, 100).await.unwrap();
    let retries = task_subtypes(&history).iter().filter(|s| *s == "api_retry").count();
    assert_eq!(retries, 2, "the CLI's retries are stored: {history:?}");

    pincer.send(&group, "next message").await;
    let reply = pincer.next_outbound().await;
    assert_eq!(reply.kind, OutboundKind::Reply, "{reply:?}");
    assert!(reply.text.starts_with("ECHO: ") && reply.text.contains("next message"), "{reply:?}");
    assert_eq!(pincer.session_events(&group).await, ["started"], "the process lived on");
    pincer.stop().await;
}

#[tokio::test]
async fn a_server_error_that_passes_is_retried_by_the_cli_and_answered() {
    let failing = Reply::retryable(500, "Internal server error");
    let script = fake_api::faults(vec![("FLAKY", vec![failing.clone(), failing])], fake_api::echo());
    let api = FakeApi::start(script).await;
    let mut sandbox = Sandbox::new(&api);
    few_retries(&mut sandbox, 3);
    let group = sandbox.add_group("flaky", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "FLAKY question").await;
    let reply = pincer.next_outbound().await;
    assert_eq!((reply.kind, reply.text.as_str()), (OutboundKind::Reply, "ECHO: FLAKY question"));
    assert_eq!(api.main_requests().len(), 3, "two 500s, then the answer");
    settle(&pincer, &group, &["answered"]).await;
    pincer.stop().await;
}

/// A sandbox whose CLI takes the fake API for a Claude gateway, the setup in
/// which 2.1.330 reports a usage limit with its reset (see `GATEWAY_TOKEN`).
/// The credential proxy of a confined group would hand the CLI an API key
/// instead, so this one runs unconfined.
async fn gateway(api: &FakeApi, name: &str) -> (Sandbox, GroupName) {
    let mut sandbox = Sandbox::new(api);
    sandbox.config.sandbox.mode = pincer::config::SandboxMode::None;
    sandbox.config.claude.env.insert("ANTHROPIC_AUTH_TOKEN".into(), fake_api::GATEWAY_TOKEN.into());
    let group = sandbox.add_group(name, None).await;
    (sandbox, group)
}

/// A reset `secs` ahead, in whole seconds as the API's header carries it.
fn reset_in(secs: u64) -> SystemTime {
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(now + secs)
}

fn hh_mm(at: SystemTime) -> String {
    DateTime::<Utc>::from(at).format("%H:%M").to_string()
}

#[tokio::test]
async fn a_usage_limit_is_told_with_its_reset_and_the_message_goes_out_again_once() {
    let reset = reset_in(3);
    let limited = Reply::UsageLimit { resets_at: reset, limit: "five_hour" };
    let api = FakeApi::start(fake_api::faults(vec![("LIMITED", vec![limited])], fake_api::echo())).await;
    let (sandbox, group) = gateway(&api, "capped").await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "LIMITED report please").await;
    let told = pincer.next_outbound().await;
    assert_eq!(told.kind, OutboundKind::Error, "{told:?}");
    if rate_limit_on_an_older_cli(&told) {
        return pincer.stop().await;
    }
    let expected = format!(
        "Usage limit reached (5-hour limit). I'll send your message again at {} (UTC) — /stop cancels.",
        hh_mm(reset)
    );
    assert_eq!(told.text, expected);
    let waiting = pincer.wait_status(&group, |s| s.resend_at.is_some()).await;
    assert!(waiting.resend_at.is_some_and(|at| at >= reset), "{waiting:?}");
    assert!(!waiting.busy(), "a planned resend is not work in flight: {waiting:?}");

    let reply = pincer.next_outbound().await;
    // The refused turn left no assistant message, so the model sees the message twice.
    assert_eq!(reply.kind, OutboundKind::Reply, "{reply:?}");
    assert!(reply.text.starts_with("ECHO: LIMITED report please"), "{reply:?}");
    assert!(SystemTime::now() >= reset, "sent again only after the reset");
    assert_eq!(api.main_requests().len(), 2, "one refusal, one resend");
    let events = pincer.session_events(&group).await;
    assert_eq!(events, ["started", "resent_after_limit"]);
    settle(&pincer, &group, &["answered"]).await;
    assert_eq!(pincer.status(&group).await.resend_at, None);
    pincer.stop().await;
}

#[tokio::test]
async fn a_reset_time_past_any_calendar_is_told_as_unknown_and_the_group_goes_on() {
    // Year ~271,000: a date for the CLI (JavaScript's range), none for chrono or humantime.
    let reset = SystemTime::UNIX_EPOCH + Duration::from_secs(8_500_000_000_000);
    let limited = Reply::UsageLimit { resets_at: reset, limit: "five_hour" };
    let api = FakeApi::start(fake_api::faults(vec![("LIMITED", vec![limited])], fake_api::echo())).await;
    let (sandbox, group) = gateway(&api, "farout").await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "LIMITED report please").await;
    let told = pincer.next_outbound().await;
    assert_eq!(told.kind, OutboundKind::Error, "{told:?}");
    if rate_limit_on_an_older_cli(&told) {
        return pincer.stop().await;
    }
    assert_eq!(
        told.text,
        "Usage limit reached (5-hour limit), so your message was not answered. Send it again once the limit resets."
    );
    settle(&pincer, &group, &["failed"]).await;
    assert_eq!(pincer.status(&group).await.resend_at, None, "nothing is held for a time no clock reaches");
    // The session is still there: the next message is answered.
    pincer.send(&group, "and now?").await;
    // (The refused turn stays in the conversation, so the model sees that message too.)
    let reply = pincer.next_outbound().await;
    assert!(reply.kind == OutboundKind::Reply && reply.text.ends_with("and now?"), "{reply:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_usage_limit_met_again_after_the_resend_is_told_and_given_up() {
    let reset = reset_in(2);
    let limited = Reply::UsageLimit { resets_at: reset, limit: "seven_day" };
    let script = fake_api::faults(vec![("CAPPED", vec![limited.clone(), limited])], fake_api::echo());
    let api = FakeApi::start(script).await;
    let (sandbox, group) = gateway(&api, "twice").await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "CAPPED again").await;
    let first = pincer.next_outbound().await;
    if rate_limit_on_an_older_cli(&first) {
        return pincer.stop().await;
    }
    assert!(first.text.contains("I'll send your message again at"), "{first:?}");
    let second = pincer.next_outbound().await;
    assert_eq!(second.kind, OutboundKind::Error, "{second:?}");
    assert!(
        second.text.starts_with("Usage limit reached again (weekly limit)") && second.text.contains("gave up on it"),
        "{second:?}"
    );
    assert_eq!(api.main_requests().len(), 2, "sent again only once");
    settle(&pincer, &group, &["failed"]).await;
    let after = pincer.wait_status(&group, |s| s.pending == 0).await;
    assert_eq!(after.resend_at, None, "no third attempt is planned");
    pincer.stop().await;
}

#[tokio::test]
async fn stop_before_the_reset_cancels_the_resend() {
    let reset = reset_in(3);
    let limited = Reply::UsageLimit { resets_at: reset, limit: "five_hour" };
    let api = FakeApi::start(fake_api::faults(vec![("LIMITED", vec![limited])], fake_api::echo())).await;
    let (sandbox, group) = gateway(&api, "stopped").await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "LIMITED job").await;
    let told = pincer.next_outbound().await;
    if rate_limit_on_an_older_cli(&told) {
        return pincer.stop().await;
    }
    assert!(told.text.contains("/stop cancels"), "{told:?}");
    pincer.wait_status(&group, |s| s.resend_at.is_some()).await;
    // What `/stop` sends to the session.
    pincer.engine.router.interrupt(&group).await.unwrap();
    let cancelled = pincer.next_outbound().await;
    assert_eq!(cancelled.kind, OutboundKind::Notice, "{cancelled:?}");
    assert!(cancelled.text.starts_with("Cancelled: pincer will not send your message again"), "{cancelled:?}");
    pincer.wait_status(&group, |s| s.resend_at.is_none()).await;

    // Past the reset (and the margin): nothing was sent again.
    let past = reset + Duration::from_secs(4);
    tokio::time::sleep(past.duration_since(SystemTime::now()).unwrap_or_default()).await;
    pincer.send(&group, "after the stop").await;
    let reply = pincer.next_outbound().await;
    assert!(reply.text.starts_with("ECHO: ") && reply.text.contains("after the stop"), "{reply:?}");
    assert_eq!(api.main_requests().len(), 2, "the refused message and the new one, no resend");
    settle(&pincer, &group, &["failed", "answered"]).await;
    assert!(!pincer.session_events(&group).await.contains(&"resent_after_limit".to_owned()));
    pincer.stop().await;
}

#[tokio::test]
async fn a_hung_turn_is_interrupted_and_the_resumed_session_answers() {
    let hang = Reply::Hang { after_headers: false };
    let api = FakeApi::start(fake_api::faults(vec![("HANGME", vec![hang])], fake_api::echo())).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.turn_timeout = Duration::from_secs(5);
    let group = sandbox.add_group("stuck", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "HANGME please").await;
    let notice = pincer.next_outbound().await;
    assert_eq!(notice.kind, OutboundKind::Notice, "{notice:?}");
    assert!(
        notice.text.contains("no sign of life for 5s") && notice.text.contains("sending your message again"),
        "{notice:?}"
    );
    let reply = pincer.next_outbound().await;
    assert_eq!(reply.kind, OutboundKind::Reply, "{reply:?}");
    assert!(reply.text.starts_with("ECHO: ") && reply.text.contains("HANGME please"), "{reply:?}");
    let session = pincer.status(&group).await.session_id.expect("a session id");
    assert_eq!(pincer.session_events(&group).await, ["started", "hung", "resumed"]);

    pincer.send(&group, "and now?").await;
    let next = pincer.next_outbound().await;
    assert!(next.text.starts_with("ECHO: ") && next.text.contains("and now?"), "{next:?}");
    assert_eq!(pincer.status(&group).await.session_id.as_deref(), Some(session.as_str()), "the same session");
    assert_eq!(pincer.session_events(&group).await, ["started", "hung", "resumed"]);
    settle(&pincer, &group, &["answered", "answered"]).await;
    pincer.stop().await;
}

#[tokio::test]
async fn a_turn_that_hangs_again_after_the_restart_is_given_up() {
    let hang = Reply::Hang { after_headers: true };
    let api = FakeApi::start(fake_api::faults(vec![("HANGME", vec![hang.clone(), hang])], fake_api::echo())).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.turn_timeout = Duration::from_secs(5);
    let group = sandbox.add_group("wedged", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "HANGME twice").await;
    let restarted = pincer.next_outbound().await;
    assert!(restarted.text.contains("sending your message again"), "{restarted:?}");
    let gave_up = pincer.next_outbound().await;
    assert_eq!(gave_up.kind, OutboundKind::Notice, "{gave_up:?}");
    assert!(gave_up.text.contains("again after a restart, so pincer gave up on your message"), "{gave_up:?}");
    settle(&pincer, &group, &["failed"]).await;
    assert_eq!(pincer.session_events(&group).await, ["started", "hung", "resumed", "hung", "gave_up"]);

    pincer.send(&group, "still there?").await;
    let reply = pincer.next_outbound().await;
    assert!(reply.text.starts_with("ECHO: ") && reply.text.contains("still there?"), "{reply:?}");
    pincer.stop().await;
}

/// The next outbound whose text contains `needle`.
async fn outbound_containing(pincer: &Running, needle: &str) -> OutboxRow {
    loop {
        let out = pincer.next_outbound().await;
        if out.text.contains(needle) {
            return out;
        }
    }
}

async fn finished_run(pincer: &Running, id: ScheduleId) -> RunRecord {
    let wait = async {
        loop {
            let runs = pincer.store().schedules().runs(id).await.unwrap();
            if let Some(run) = runs.into_iter().find(|r| r.outcome != "running") {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait).await.expect("the run finished within the patience limit")
}

#[tokio::test]
async fn a_scheduled_run_without_an_answer_in_time_is_logged_as_failed() {
    let hang = Reply::Hang { after_headers: true };
    let api = FakeApi::start(fake_api::faults(vec![("NIGHTLY", vec![hang])], fake_api::echo())).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.scheduler.run_timeout = Duration::from_secs(2);
    sandbox.config.scheduler.max_retries = 0;
    let group = sandbox.add_group("nightly", None).await;
    let mut pincer = sandbox.start().await;
    pincer.engine.start_scheduler();

    let new = NewSchedule {
        group: group.clone(),
        prompt: "NIGHTLY backup".into(),
        trigger: Trigger::interval("1d").unwrap(),
        context: ContextMode::Isolated,
    };
    let task = manage::add(&pincer.store().schedules(), new, &Default::default()).await.unwrap();
    manage::run_now(&pincer.store().schedules(), task.id).await.unwrap();
    pincer.engine.scheduler.poke();

    let run = finished_run(&pincer, task.id).await;
    assert_eq!(run.outcome, "error", "{run:?}");
    let why = run.text.as_deref().unwrap_or_default();
    assert!(why.contains("no answer within scheduler.run_timeout = 2s"), "{run:?}");
    let told = outbound_containing(&pincer, "Scheduled task #1 failed").await;
    assert!(told.text.contains("scheduler.run_timeout"), "{told:?}");
    // Its throwaway session ends with the run (after the CLI's stop grace).
    let stopped = async {
        while !pincer.session_events(&group).await.contains(&"isolated_shutdown".to_owned()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(PATIENCE, stopped).await.expect("the run's isolated session stopped");
    pincer.stop().await;
}
