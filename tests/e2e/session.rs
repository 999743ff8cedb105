//! The core promises: one live process per group, every result and task frame
//! stored and delivered, permissions answered, sessions resumed after a restart.

use std::time::Duration;

use pincer::domain::OutboundKind;
use pincer::store::HistoryEntry;
use serde_json::json;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Sandbox, PATIENCE};

fn results(history: &[HistoryEntry]) -> Vec<(Option<String>, Option<String>)> {
    history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Result { text, origin, .. } => Some((text.clone(), origin.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn two_messages_share_one_live_process() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    std::fs::create_dir_all(sandbox.config.groups_dir.join("global")).unwrap();
    std::fs::write(sandbox.config.groups_dir.join("global/CLAUDE.md"), "GLOBAL-MEMORY-MARKER").unwrap();
    let group = sandbox.add_group("alpha", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "hello MSG1").await;
    let first = pincer.next_outbound().await;
    assert_eq!((first.kind, first.text.as_str()), (OutboundKind::Reply, "ECHO: hello MSG1"));
    pincer.send(&group, "second MSG2").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: second MSG2");

    // One process: started once, never restarted.
    assert_eq!(pincer.session_events(&group).await, ["started"]);
    let history = pincer.store().history().history(&group, 100).await.unwrap();
    assert_eq!(results(&history).len(), 2);
    // A message is marked answered just after its result is stored.
    let states = || async {
        let history = pincer.store().history().history(&group, 100).await.unwrap();
        history
            .iter()
            .filter_map(|e| match e {
                HistoryEntry::Inbound { state, .. } => Some(state.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let settled = tokio::time::timeout(PATIENCE, async {
        while states().await != ["answered", "answered"] {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    assert!(settled.await.is_ok(), "both messages marked answered: {:?}", states().await);

    let requests = api.main_requests();
    assert_eq!(requests.len(), 2, "one model request per message");
    let carried = requests[1].all_text();
    assert!(carried.contains("hello MSG1") && carried.contains("ECHO: hello MSG1"), "{carried}");
    let system = requests[0].body()["system"].to_string();
    assert!(system.contains("GLOBAL-MEMORY-MARKER"), "shared memory reaches the agent");
    let status = pincer.status(&group).await;
    assert!(status.live && status.session_id.is_some());
    pincer.stop().await;
}

#[tokio::test]
async fn background_work_is_stored_and_its_follow_up_delivered() {
    let api = FakeApi::start(fake_api::bg_bash()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("bg", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "please run BGBASH now").await;
    let first = pincer.next_outbound().await;
    assert!(first.text.starts_with("AFTER_TOOL"), "{first:?}");
    // The follow-up arrives by itself, from the same process, stdin still open.
    let second = pincer.next_outbound().await;
    assert_eq!(second.text, "FOLLOWUP: saw task notification");
    assert!(pincer.status(&group).await.live);
    assert_eq!(pincer.session_events(&group).await, ["started"]);

    let history = pincer.store().history().history(&group, 100).await.unwrap();
    let frames: Vec<_> = history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Task { subtype, status, .. } => Some((subtype.as_str(), status.as_deref())),
            _ => None,
        })
        .collect();
    assert!(frames.contains(&("task_started", None)), "{frames:?}");
    assert!(frames.contains(&("task_notification", Some("completed"))), "{frames:?}");
    let results = results(&history);
    assert_eq!(results.len(), 2);
    assert_eq!(results[1].1.as_deref(), Some("task-notification"));
    pincer.stop().await;
}

#[tokio::test]
async fn permissions_allow_listed_tools_and_deny_the_rest() {
    let script = fake_api::scripted(vec![(
        "TOUCH",
        Reply::tool_use("Bash", json!({"command": "touch made-by-tool.txt && echo touched", "description": "touch"})),
    )]);
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    let allowed = sandbox.add_group("allowed", Some(&["Bash"])).await;
    let denied = sandbox.add_group("denied", Some(&["Read"])).await;
    let pincer = sandbox.start().await;

    pincer.send(&allowed, "TOUCH please").await;
    let reply = pincer.next_outbound().await;
    assert!(reply.text.contains("touched"), "the tool's output reached the model: {reply:?}");
    assert!(sandbox.group_dir("allowed").join("made-by-tool.txt").exists(), "the tool really ran");

    // A group that may never run Bash (not listed, no admins) is not even offered it.
    pincer.send(&denied, "TOUCH please").await;
    let reply = pincer.next_outbound().await;
    assert!(reply.text.contains("No such tool available: Bash"), "the model saw the refusal: {reply:?}");
    assert!(!sandbox.group_dir("denied").join("made-by-tool.txt").exists());

    let yes = pincer.store().journal().decisions(&allowed).await.unwrap();
    assert_eq!(yes.len(), 1);
    assert!(yes[0].allowed && yes[0].tool_name == "Bash" && yes[0].input.contains("made-by-tool"));
    let no = pincer.store().journal().decisions(&denied).await.unwrap();
    assert!(no.iter().all(|d| !d.allowed), "{no:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_restart_of_pincer_resumes_the_same_session() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("keep", None).await;

    // A folder removed behind pincer's back comes back with its starter memory.
    std::fs::remove_dir_all(sandbox.group_dir("keep")).unwrap();
    let pincer = sandbox.start().await;
    pincer.send(&group, "remember PINEAPPLE").await;
    pincer.next_outbound().await;
    let first_id = pincer.status(&group).await.session_id.expect("a session id");
    assert!(sandbox.group_dir("keep").join("CLAUDE.md").exists());
    pincer.stop().await;

    let pincer = sandbox.start().await;
    pincer.send(&group, "what did I say?").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: what did I say?");
    assert_eq!(pincer.status(&group).await.session_id.as_deref(), Some(first_id.as_str()));
    assert_eq!(pincer.session_events(&group).await, ["started", "shutdown", "resumed"]);
    let last = api.main_requests().pop().unwrap().all_text();
    assert!(last.contains("remember PINEAPPLE"), "earlier history was sent again: {last}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_vanished_session_starts_fresh_and_the_message_is_answered() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("lost", None).await;
    let store = pincer::app::open_store(&sandbox.config).await.unwrap();
    store.groups().set_session_id(&group, Some("00000000-0000-4000-8000-000000000000")).await.unwrap();
    store.close().await;

    let pincer = sandbox.start().await;
    pincer.send(&group, "hello again").await;
    let notice = pincer.next_outbound().await;
    assert_eq!(notice.kind, OutboundKind::Notice, "{notice:?}");
    assert_eq!(pincer.next_outbound().await.text, "ECHO: hello again");
    assert_eq!(pincer.session_events(&group).await, ["resumed", "resume_failed", "fresh", "started"]);
    let id = pincer.status(&group).await.session_id.unwrap();
    assert_ne!(id, "00000000-0000-4000-8000-000000000000");
    pincer.stop().await;
}

#[tokio::test]
async fn an_interrupt_ends_the_turn_and_the_session_goes_on() {
    // The interrupted turn leaves no assistant message, so the next request's
    // trailing user text still holds SLOWREPLY: the newer message's rule comes first.
    let script = fake_api::scripted(vec![
        ("after interrupt", Reply::text("ECHO: after interrupt")),
        ("SLOWREPLY", Reply::slow(Duration::from_secs(20), Reply::text("too late"))),
    ]);
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("stoppable", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "SLOWREPLY please").await;
    while api.main_requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pincer.engine.router.interrupt(&group).await.unwrap();
    let interrupted = pincer.next_outbound().await;
    assert_eq!(interrupted.kind, OutboundKind::Error, "{interrupted:?}");
    pincer.send(&group, "after interrupt").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: after interrupt");
    assert_eq!(pincer.session_events(&group).await, ["started"]);
    pincer.stop().await;
}
