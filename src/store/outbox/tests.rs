//! The outbox's states against a real SQLite file: what a row is addressed
//! to, how it moves, and how far its delivery got.

use super::*;
use crate::domain::{Inbound, InboundId, Platform, Source};
use crate::store::tests::{on_both, success as result, temp_store};
use crate::store::{GroupSettings, HistoryEntry};
use crate::store::{InboundState, Store};

fn group(name: &str) -> GroupName {
    name.parse().unwrap()
}

fn bound(chat: i64) -> GroupSettings {
    GroupSettings { chat: Some(ChatAddress::telegram(chat, None)), ..GroupSettings::default() }
}

fn reply(text: &str) -> Enqueue<'_> {
    Enqueue { kind: OutboundKind::Reply, text, console: false }
}

/// The row as a delivery worker would read it now.
async fn seen(store: &Store, id: OutboxId) -> Seen {
    store.outbox().outbox_row(id).await.unwrap().unwrap().seen()
}

async fn mark_parts(store: &Store, id: OutboxId, parts: u32) {
    assert_eq!(store.outbox().outbox_parts_done(&seen(store, id).await, parts).await.unwrap(), Marked::Recorded);
}

on_both! {
async fn rows_are_addressed_by_the_binding_when_written() {
    let (_dir, store) = temp_store().await;
    store.groups().add_group(&group("team"), &bound(-100)).await.unwrap();
    store.groups().add_group(&group("solo"), &GroupSettings::default()).await.unwrap();

    let to_chat = store.outbox().enqueue(&group("team"), reply("hi")).await.unwrap();
    let to_console = store.outbox().enqueue(&group("solo"), reply("hi")).await.unwrap();
    let forced = store.outbox().enqueue(&group("team"), Enqueue { console: true, ..reply("typed") }).await.unwrap();
    let outbox = store.outbox();
    let row = |id| outbox.outbox_row(id);
    assert_eq!(row(to_chat).await.unwrap().unwrap().to, ChatAddress::telegram(-100, None));
    assert_eq!(row(to_console).await.unwrap().unwrap().to, ChatAddress::console(&group("solo")));
    assert_eq!(row(forced).await.unwrap().unwrap().to, ChatAddress::console(&group("team")));
    let missing = store.outbox().enqueue(&group("nobody"), reply("hi")).await.unwrap_err();
    assert!(matches!(missing, StoreError::UnknownGroup(_)), "{missing}");
}
}

/// Each of the group's results in its history, oldest first: where its reply stands.
async fn result_deliveries(store: &Store, g: &GroupName) -> Vec<Option<String>> {
    let history = store.history().history(g, 10).await.unwrap();
    history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Result { delivery, .. } => Some(delivery.as_ref().map(ToString::to_string)),
            _ => None,
        })
        .collect()
}

on_both! {
async fn a_result_and_its_row_are_written_together() {
    let (_dir, store) = temp_store().await;
    let g = group("team");
    store.groups().add_group(&g, &bound(-100)).await.unwrap();
    let said = |text: &str| Inbound::new(g.clone(), Source::Chat(Platform::Telegram), "ann", text);
    let asked = store.queue().insert_inbound(&said("question"), InboundState::Sent).await.unwrap();
    let other = store.queue().insert_inbound(&said("another"), InboundState::Sent).await.unwrap();
    let settles = [(asked, InboundState::Answered)];
    let id = store
        .outbox()
        .record_result(&g, &result("answer"), None, "{}", Some(reply("answer")), &settles)
        .await
        .unwrap()
        .unwrap();
    assert!(store.outbox().record_result(&g, &result("quiet"), None, "{}", None, &[]).await.unwrap().is_none());
    // A row for a group that does not exist fails the whole step: no result
    // without its delivery, and no message settled by it.
    let ghost = group("ghost");
    let settles = [(other, InboundState::Answered)];
    assert!(store.outbox().record_result(&ghost, &result("x"), None, "{}", Some(reply("x")), &settles).await.is_err());
    let state = |id: InboundId| {
        sqlx::query_scalar::<_, String>("SELECT state FROM inbound WHERE id = $1").bind(id.0).fetch_one(&store.db.pool)
    };
    assert_eq!((state(asked).await.unwrap(), state(other).await.unwrap()), ("answered".into(), "sent".into()));
    let ghosts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM results WHERE group_name = 'ghost'")
        .fetch_one(&store.db.pool)
        .await
        .unwrap();
    assert_eq!(ghosts, 0);

    assert_eq!(result_deliveries(&store, &g).await, [Some("queued (telegram -100)".to_owned()), None]);

    let seen = seen(&store, id).await;
    assert_eq!(store.outbox().outbox_attempt_failed(&seen, "Bad Gateway").await.unwrap(), Marked::Recorded);
    let row = store.outbox().outbox_row(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts, row.last_error.as_deref()), (DeliveryState::Queued, 1, Some("Bad Gateway")));
    assert_eq!(store.outbox().outbox_parts_done(&seen, 1).await.unwrap(), Marked::Recorded);
    let seen = Seen { parts_done: 1, ..seen };
    assert_eq!(store.outbox().outbox_delivered(&seen, 2).await.unwrap(), Marked::Recorded);
    let row = store.outbox().outbox_row(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.parts_done, row.last_error), (DeliveryState::Delivered, 2, None));
    let history = store.history().history(&g, 10).await.unwrap();
    let newest_result = history.iter().find(|e| matches!(e, HistoryEntry::Result { .. }));
    assert!(matches!(newest_result, Some(HistoryEntry::Result { delivery: Some(d), .. }) if d.state == "delivered"));
}
}

on_both! {
async fn each_chat_is_served_oldest_first_and_an_inactive_group_waits() {
    let (_dir, store) = temp_store().await;
    store.groups().add_group(&group("a"), &bound(-1)).await.unwrap();
    store.groups().add_group(&group("b"), &bound(-2)).await.unwrap();
    let a1 = store.outbox().enqueue(&group("a"), reply("a1")).await.unwrap();
    let b1 = store.outbox().enqueue(&group("b"), reply("b1")).await.unwrap();
    let a2 = store.outbox().enqueue(&group("a"), reply("a2")).await.unwrap();
    let mut chats = store.outbox().queued_chats(Platform::Telegram).await.unwrap();
    chats.sort();
    assert_eq!(chats, [ChatAddress::telegram(-1, None), ChatAddress::telegram(-2, None)]);
    assert!(store.outbox().queued_chats(Platform::Console).await.unwrap().is_empty());

    let store = &store;
    let next = |chat| async move {
        store.outbox().next_queued(&ChatAddress::telegram(chat, None)).await.unwrap().map(|r| r.id)
    };
    assert_eq!(next(-1).await, Some(a1));
    assert_eq!(store.outbox().outbox_failed(&seen(store, a1).await, "refused").await.unwrap(), Marked::Recorded);
    assert_eq!(next(-1).await, Some(a2), "a failed row does not hold the chat up");
    assert_eq!(store.outbox().outbox_row(a1).await.unwrap().unwrap().state, DeliveryState::Failed);

    store.groups().set_group_active(&group("b"), false, Some("kicked")).await.unwrap();
    assert_eq!(next(-2).await, None, "an inactive group's replies wait");
    assert_eq!(store.outbox().queued_chats(Platform::Telegram).await.unwrap(), [ChatAddress::telegram(-1, None)]);
    assert_eq!(store.outbox().queued_count(&group("b")).await.unwrap(), 1);
    store.groups().set_group_active(&group("b"), true, None).await.unwrap();
    assert_eq!(next(-2).await, Some(b1));

    // The console of a group whose chat is gone still prints what is meant for it.
    store.groups().set_group_active(&group("b"), false, Some("kicked")).await.unwrap();
    let typed = store.outbox().enqueue(&group("b"), Enqueue { console: true, ..reply("typed") }).await.unwrap();
    let console = ChatAddress::console(&group("b"));
    assert_eq!(store.outbox().next_queued(&console).await.unwrap().map(|r| r.id), Some(typed));
    assert_eq!(store.outbox().queued_chats(Platform::Console).await.unwrap(), [console]);
}
}

on_both! {
async fn waiting_rows_follow_the_binding_and_a_moved_chat() {
    let (_dir, store) = temp_store().await;
    let g = group("team");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let for_console = store.outbox().enqueue(&g, reply("before any chat")).await.unwrap();
    store.groups().save_group_settings(&g, &bound(-100)).await.unwrap();
    let waiting = store.outbox().enqueue(&g, reply("long")).await.unwrap();
    mark_parts(&store, waiting, 2).await;
    let delivered = store.outbox().enqueue(&g, reply("done")).await.unwrap();
    assert_eq!(store.outbox().outbox_delivered(&seen(&store, delivered).await, 1).await.unwrap(), Marked::Recorded);

    store.groups().save_group_settings(&g, &bound(-200)).await.unwrap();
    let row = store.outbox().outbox_row(waiting).await.unwrap().unwrap();
    assert_eq!((row.to, row.parts_done), (ChatAddress::telegram(-200, None), 0), "all its parts go to the new chat");
    let console = store.outbox().outbox_row(for_console).await.unwrap().unwrap();
    assert_eq!(console.to, ChatAddress::console(&g), "console replies never move into a chat");
    assert_eq!(store.outbox().outbox_row(delivered).await.unwrap().unwrap().to, ChatAddress::telegram(-100, None));

    mark_parts(&store, waiting, 1).await;
    store.groups().save_group_settings(&g, &bound(-200)).await.unwrap();
    assert_eq!(store.outbox().outbox_row(waiting).await.unwrap().unwrap().parts_done, 1, "same chat: progress kept");

    store.groups().move_chat(Platform::Telegram, "-200", "-100200").await.unwrap();
    let row = store.outbox().outbox_row(waiting).await.unwrap().unwrap();
    assert_eq!((row.to, row.parts_done), (ChatAddress::telegram(-100_200, None), 1), "same chat, new id");

    store.groups().save_group_settings(&g, &GroupSettings::default()).await.unwrap();
    assert_eq!(store.outbox().outbox_row(waiting).await.unwrap().unwrap().to, ChatAddress::console(&g));
}
}

on_both! {
async fn notices_and_agent_posts_show_in_history_with_their_delivery() {
    let (_dir, store) = temp_store().await;
    let g = group("team");
    store.groups().add_group(&g, &bound(-100)).await.unwrap();
    let notice =
        store.outbox().enqueue(&g, Enqueue { kind: OutboundKind::Notice, ..reply("restarting") }).await.unwrap();
    let why = "Bad Request: message thread not found";
    assert_eq!(store.outbox().outbox_failed(&seen(&store, notice).await, why).await.unwrap(), Marked::Recorded);
    store.outbox().record_agent_message(&g, &g, reply("from the agent"), None).await.unwrap();
    let history = store.history().history(&g, 10).await.unwrap();
    match &history[..] {
        [HistoryEntry::Notice { text, delivery: Some(n), .. }, HistoryEntry::Message { delivery: Some(m), .. }] => {
            assert_eq!(text, "restarting");
            assert_eq!(n.to_string(), "failed (telegram -100): Bad Request: message thread not found");
            assert_eq!(m.state, "queued");
        }
        other => panic!("{other:?}"),
    }
}
}

/// Every mark a delivery worker can make, against a row it read as `seen`.
async fn every_mark(store: &Store, seen: &Seen) -> [Marked; 4] {
    [
        store.outbox().outbox_parts_done(seen, 1).await.unwrap(),
        store.outbox().outbox_attempt_failed(seen, "Bad Gateway").await.unwrap(),
        store.outbox().outbox_failed(seen, "refused").await.unwrap(),
        store.outbox().outbox_delivered(seen, 2).await.unwrap(),
    ]
}

on_both! {
async fn a_mark_against_a_row_that_moved_changes_nothing_and_says_so() {
    let (_dir, store) = temp_store().await;
    let g = group("team");
    store.groups().add_group(&g, &bound(-100)).await.unwrap();
    let id = store.outbox().enqueue(&g, reply("long")).await.unwrap();
    let unchanged = |at: i64, parts: u32| {
        let store = &store;
        async move {
            let row = store.outbox().outbox_row(id).await.unwrap().unwrap();
            let expected = (ChatAddress::telegram(at, None), DeliveryState::Queued, parts, 0, None);
            assert_eq!((row.to, row.state, row.parts_done, row.attempts, row.last_error), expected);
        }
    };

    // Rebound while the worker for -100 was sending: its marks find nothing.
    let old = seen(&store, id).await;
    store.groups().save_group_settings(&g, &bound(-200)).await.unwrap();
    assert_eq!(every_mark(&store, &old).await, [Marked::Moved; 4]);
    unchanged(-200, 0).await;

    // Rebound away and back: same address, but its progress was reset, so
    // the old worker's count is stale.
    mark_parts(&store, id, 1).await;
    let before = seen(&store, id).await;
    store.groups().save_group_settings(&g, &bound(-300)).await.unwrap();
    store.groups().save_group_settings(&g, &bound(-200)).await.unwrap();
    assert_eq!(before.to, seen(&store, id).await.to);
    assert_eq!(every_mark(&store, &before).await, [Marked::Moved; 4]);
    unchanged(-200, 0).await;

    // The chat got a new id: the row kept its progress, but at another address.
    mark_parts(&store, id, 1).await;
    let before = seen(&store, id).await;
    store.groups().move_chat(Platform::Telegram, "-200", "-100200").await.unwrap();
    assert_eq!(every_mark(&store, &before).await, [Marked::Moved; 4]);
    unchanged(-100_200, 1).await;

    // Settled rows take no more marks.
    let now = seen(&store, id).await;
    assert_eq!(store.outbox().outbox_delivered(&now, 2).await.unwrap(), Marked::Recorded);
    assert_eq!(every_mark(&store, &Seen { parts_done: 2, ..now }).await, [Marked::Moved; 4]);
    let row = store.outbox().outbox_row(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.parts_done, row.attempts), (DeliveryState::Delivered, 2, 0));
}
}

on_both! {
async fn a_queued_row_changed_outside_pincer_is_failed_and_the_chat_goes_on() {
    let (_dir, store) = temp_store().await;
    let team = group("team");
    store.groups().add_group(&team, &bound(-100)).await.unwrap();
    let odd = store.outbox().enqueue(&team, reply("odd")).await.unwrap();
    let good = store.outbox().enqueue(&team, reply("good")).await.unwrap();
    sqlx::query("UPDATE outbox SET kind = 'mystery' WHERE id = $1").bind(odd.0).execute(&store.db.pool).await.unwrap();

    let at = ChatAddress::telegram(-100, None);
    let next = store.outbox().next_queued(&at).await.unwrap().expect("the chat's next reply is not stalled behind it");
    assert_eq!(next.id, good);
    let failed: (String, Option<String>) = sqlx::query_as("SELECT state, last_error FROM outbox WHERE id = $1")
        .bind(odd.0)
        .fetch_one(&store.db.pool)
        .await
        .unwrap();
    assert_eq!(failed.0, "failed");
    assert!(failed.1.is_some_and(|e| e.contains("mystery")), "says why");
    assert!(matches!(store.outbox().outbox_row(odd).await, Err(StoreError::BadRow { table: "outbox", .. })));
    let listed: Vec<_> =
        store.outbox().outbox_after(OutboxId(0), 10).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(listed, [good]);
}
}

on_both! {
async fn text_rows_are_read_past_a_file_and_a_failed_file_tells_the_chat_in_the_same_write() {
    let (_dir, store) = temp_store().await;
    let g = group("team");
    store.groups().add_group(&g, &bound(-100)).await.unwrap();
    let file = OutboundFile {
        path: "/data/outgoing/team/1-big.zip".into(),
        name: "big.zip".into(),
        kind: FileKind::Document,
        bytes: 40 << 20,
        from: "big.zip".into(),
    };
    let with_file = store.outbox().record_agent_message(&g, &g, reply("the archive"), Some(&file)).await.unwrap();
    let text = store.outbox().enqueue(&g, reply("later")).await.unwrap();
    let at = ChatAddress::telegram(-100, None);
    let id = |row: Option<OutboxRow>| row.map(|r| r.id);
    assert_eq!(id(store.outbox().next_queued(&at).await.unwrap()), Some(with_file));
    assert_eq!(id(store.outbox().next_queued_text(&at).await.unwrap()), Some(text));
    assert_eq!(id(store.outbox().next_queued_file(&at).await.unwrap()), Some(with_file));

    let notice = Enqueue { kind: OutboundKind::Notice, text: "The file big.zip could not be sent", console: false };
    let as_read = seen(&store, with_file).await;
    let stale = Seen { parts_done: 1, ..as_read.clone() };
    assert_eq!(store.outbox().outbox_file_failed(&g, &stale, "no answer", notice).await.unwrap(), Marked::Moved);
    assert_eq!(store.outbox().outbox_row(OutboxId(text.0 + 1)).await.unwrap(), None, "no notice for a row that moved");

    assert_eq!(store.outbox().outbox_file_failed(&g, &as_read, "no answer", notice).await.unwrap(), Marked::Recorded);
    let failed = store.outbox().outbox_row(with_file).await.unwrap().unwrap();
    assert_eq!((failed.state, failed.last_error.as_deref()), (DeliveryState::Failed, Some("no answer")));
    assert_eq!(id(store.outbox().next_queued_file(&at).await.unwrap()), None);
    let told = store.outbox().outbox_row(OutboxId(text.0 + 1)).await.unwrap().expect("the notice is queued");
    assert_eq!((told.kind, told.text.as_str(), told.to), (OutboundKind::Notice, notice.text, at));
}
}
