//! The store is the queue: a message is stored and the sender goes on; the
//! group's session takes it when it can. No busy group holds up another's intake.

use std::time::Duration;

use pincer::domain::{Inbound, Platform, Source};
use sqlx::Connection;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::Sandbox;

/// More than any in-memory queue of a session used to hold (64 commands).
const BACKLOG: usize = 80;

#[tokio::test]
async fn a_backlog_behind_a_held_slot_delays_no_chats_intake_and_is_answered_once_the_slot_frees() {
    let script = fake_api::scripted(vec![("HOLD", Reply::slow(Duration::from_secs(60), Reply::text("held")))]);
    let api = FakeApi::start(script).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.claude.max_live_sessions = 1;
    let busy = sandbox.add_group("busy", None).await;
    let waiting = sandbox.add_group("waiting", None).await;
    let other = sandbox.add_group("other", None).await;
    let pincer = sandbox.start().await;

    // The only live slot is held by a long turn.
    pincer.send(&busy, "HOLD the slot").await;
    api.wait_for_requests(1, Duration::from_secs(60)).await;

    // A flood for a group that cannot go live, then one message for another:
    // every one is stored and the sender free again, while the turn still holds the slot.
    let chat = |group: &pincer::domain::GroupName, text: String| {
        Inbound::new(group.clone(), Source::Chat(Platform::Telegram), "ana", text)
    };
    let intake = async {
        let mut ids = Vec::new();
        for i in 0..BACKLOG {
            ids.push(pincer.engine.router.send(chat(&waiting, format!("flood {i}"))).await.expect("stored"));
        }
        ids.push(pincer.engine.router.send(chat(&other, "hello".into())).await.expect("stored"));
        ids
    };
    // Not a speed bound: without the fix the 66th send waits for the 60 s turn.
    let ids = tokio::time::timeout(Duration::from_secs(30), intake)
        .await
        .expect("the senders waited for the busy group's turn: one group stalled everyone's intake");
    assert_eq!(ids.len(), BACKLOG + 1);
    assert!(pincer.status(&busy).await.in_turn, "the long turn still holds the slot");

    // The slot frees: the backlog and the other group's message are all answered, once each.
    pincer.engine.router.interrupt(&busy).await.unwrap();
    let url = format!("sqlite://{}", sandbox.config.database_path().display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let mut answered = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    while answered < ids.len() {
        assert!(tokio::time::Instant::now() < deadline, "only {answered} of {} answered", ids.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
        answered = 0;
        for id in &ids {
            let state: String = sqlx::query_scalar("SELECT state FROM inbound WHERE id = ?")
                .bind(id.0)
                .fetch_one(&mut db)
                .await
                .unwrap();
            answered += usize::from(state == "answered");
        }
    }
    let echoes: Vec<String> =
        api.main_requests().iter().map(|r| r.last_user_text()).filter(|p| p.contains("flood ")).collect();
    for i in 0..BACKLOG {
        let needle = format!(">flood {i}</message>");
        let times = echoes.iter().filter(|p| p.contains(&needle)).count();
        assert_eq!(times, 1, "flood {i} reached the model {times} times");
    }
    pincer.stop().await;
}
