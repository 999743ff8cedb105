//! Process lifecycle: idle sessions close (never while background work runs)
//! and resume on the next message; `max_live_sessions` makes groups take turns.

use std::time::Duration;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::Sandbox;

#[tokio::test]
async fn an_idle_session_closes_and_the_next_message_resumes_it() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.idle_timeout = Duration::from_secs(1);
    let group = sandbox.add_group("sleepy", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "first").await;
    pincer.next_outbound().await;
    let id = pincer.status(&group).await.session_id.unwrap();
    pincer.wait_status(&group, |s| !s.live).await;
    pincer.send(&group, "second").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: second");
    assert_eq!(pincer.status(&group).await.session_id, Some(id));
    assert_eq!(pincer.session_events(&group).await, ["started", "idle_closed", "resumed"]);
    pincer.stop().await;
}

#[tokio::test]
async fn idle_close_waits_for_background_work() {
    let script = fake_api::scripted(vec![
        ("BGBASH", Reply::bash_background("sleep 4; echo done-bg", "bg sleep")),
        (fake_api::TASK_NOTIFICATION, Reply::text("FOLLOWUP: done")),
    ]);
    let api = FakeApi::start(script).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.idle_timeout = Duration::from_secs(1);
    let group = sandbox.add_group("patient", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "BGBASH").await;
    pincer.next_outbound().await;
    let running = pincer.wait_status(&group, |s| s.running_tasks == 1 || !s.live).await;
    assert!(running.live, "{running:?}");
    // The task ends 4 s in, far past the idle timeout: whichever comes first,
    // its end or a close, says whether the process stayed while it ran.
    let ended = pincer.wait_status(&group, |s| s.running_tasks == 0 || !s.live).await;
    assert!(ended.live, "the session stayed while its task ran: {ended:?}");
    assert_eq!(pincer.next_outbound().await.text, "FOLLOWUP: done");
    pincer.wait_status(&group, |s| !s.live).await;
    assert_eq!(pincer.session_events(&group).await, ["started", "idle_closed"]);
    pincer.stop().await;
}

#[tokio::test]
async fn groups_beyond_the_live_limit_wait_their_turn() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.max_live_sessions = 1;
    let a = sandbox.add_group("one", None).await;
    let b = sandbox.add_group("two", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&a, "from one").await;
    pincer.send(&b, "from two").await;
    let mut replies = [pincer.next_outbound().await, pincer.next_outbound().await];
    // Whichever session asked for the slot first got it (both were woken at once).
    let (first, second) = if replies[0].group == a { (&a, &b) } else { (&b, &a) };
    replies.sort_by(|x, y| x.group.cmp(&y.group));
    assert_eq!(replies[0].text, "ECHO: from one");
    assert_eq!(replies[1].text, "ECHO: from two");
    // The second could only start after the first gave its slot up, long
    // before its idle timeout; a stop is recorded before its slot goes.
    assert_eq!(pincer.session_events(first).await, ["started", "yielded"]);
    assert_eq!(pincer.session_events(second).await, ["started"]);
    pincer.stop().await;
}

#[tokio::test]
async fn a_waiting_group_closes_exactly_one_idle_session() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.max_live_sessions = 2;
    // Long enough for `three` to ask for a slot first; short enough that the
    // session that keeps its slot closes by itself, which ends the test.
    sandbox.config.claude.idle_timeout = Duration::from_secs(3);
    let a = sandbox.add_group("one", None).await;
    let b = sandbox.add_group("two", None).await;
    let c = sandbox.add_group("three", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&a, "from one").await;
    pincer.send(&b, "from two").await;
    pincer.next_outbound().await;
    pincer.next_outbound().await;
    pincer.wait_status(&a, |s| s.live && !s.in_turn).await;
    pincer.wait_status(&b, |s| s.live && !s.in_turn).await;

    pincer.send(&c, "from three").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: from three");
    // A second, wrongful yield would close the other session before its idle
    // timeout does: the close that ends each session says which it was.
    pincer.wait_status(&a, |s| !s.live).await;
    pincer.wait_status(&b, |s| !s.live).await;
    let mut closes = [pincer.session_events(&a).await, pincer.session_events(&b).await];
    closes.sort();
    assert_eq!(closes, [["started", "idle_closed"], ["started", "yielded"]], "one idle session yielded");
    pincer.stop().await;
}

#[tokio::test]
async fn a_group_whose_redelivery_fails_does_not_cost_the_others_their_messages() {
    use pincer::domain::{Inbound, Platform, Source};
    use pincer::store::InboundState;
    use sqlx::{Connection, Executor};

    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let gone = sandbox.add_group("gone", None).await;
    let kept = sandbox.add_group("kept", None).await;
    // What a killed pincer leaves: messages taken, never answered; the first
    // belongs to a group that was since deleted by hand.
    let store = sandbox.store().await;
    let lost = store
        .queue()
        .insert_inbound(&Inbound::new(gone, Source::Chat(Platform::Telegram), "ana", "hello?"), InboundState::Sent)
        .await;
    let lost = lost.unwrap();
    store
        .queue()
        .insert_inbound(
            &Inbound::new(kept.clone(), Source::Chat(Platform::Telegram), "bo", "still there?"),
            InboundState::Sent,
        )
        .await
        .unwrap();
    store.close().await;
    let url = format!("sqlite://{}", sandbox.config.database_path().display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    conn.execute("PRAGMA foreign_keys = OFF; DELETE FROM groups WHERE name = 'gone'").await.unwrap();
    conn.close().await.unwrap();

    let pincer = sandbox.start().await;
    assert_eq!(pincer.engine.router.recover().await.unwrap(), 1, "the other group's message went");
    let notice = pincer.next_outbound().await;
    assert!(notice.text.contains("restarted before answering 1 message"), "{notice:?}");
    let reply = pincer.next_outbound().await.text;
    assert!(reply.starts_with(r#"ECHO: <message from="bo" admin="no" at="#), "{reply}");
    assert!(reply.ends_with(">still there?</message>"), "{reply}");
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let state: String =
        sqlx::query_scalar("SELECT state FROM inbound WHERE id = ?").bind(lost.0).fetch_one(&mut conn).await.unwrap();
    assert_eq!(state, "failed", "the message of the deleted group is marked failed");
    conn.close().await.unwrap();
    pincer.stop().await;
}

#[tokio::test]
async fn a_turn_that_calls_the_api_again_during_the_shutdown_grace_is_answered() {
    // pincer begins to stop while the turn runs; its next call goes to the
    // API (through the credential proxy) after shutdown began. (The tool
    // itself is refused if its hook comes after stdin closed: no answer can
    // reach the CLI then, and the hook fails closed.)
    let script = fake_api::scripted(vec![("TWOCALLS", Reply::bash("sleep 2; echo step-done", "slow step"))]);
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("closing", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "TWOCALLS please").await;
    while api.main_requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pincer.shutdown.cancel();
    pincer.engine.stop_sessions().await;

    assert_eq!(api.main_requests().len(), 2, "the turn's second call reached the API during the grace");
    let reply = pincer.next_outbound().await;
    assert!(reply.text.starts_with("AFTER_TOOL: TOOL_RESULT("), "{reply:?}");
    assert_eq!(pincer.session_events(&group).await, ["started", "shutdown"]);
    pincer.stop().await;
}

#[tokio::test]
async fn a_message_stored_while_the_sessions_stop_is_answered_at_the_next_start() {
    use pincer::domain::{Inbound, Platform, Source};

    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("team", None).await;
    let pincer = sandbox.start().await;
    // The sessions stop (pincer stopping) while a chat adapter still hands
    // one a message: it is stored, so the chat may confirm it, and it waits.
    pincer.engine.router.session(&group).await.unwrap();
    pincer.engine.stop_sessions().await;
    let msg = Inbound::new(group.clone(), Source::Chat(Platform::Telegram), "ana", "are you there?");
    pincer.engine.router.send(msg).await.expect("stored, whatever the session does");
    pincer.stop().await;
    assert!(api.main_requests().is_empty(), "no agent got it yet");

    let pincer = sandbox.start().await;
    assert_eq!(pincer.engine.router.recover().await.unwrap(), 1, "it waits in the queue");
    let notice = pincer.next_outbound().await;
    assert!(notice.text.contains("restarted before answering 1 message"), "{notice:?}");
    let reply = pincer.next_outbound().await.text;
    assert!(reply.ends_with(">are you there?</message>"), "{reply}");
    assert_eq!(api.main_requests().len(), 1, "answered once");
    pincer.stop().await;
}
