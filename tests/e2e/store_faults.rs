//! When the store cannot be written, a message is refused, the chat is told
//! (the one word that bypasses the outbox, since the outbox is what failed),
//! nothing pretends it was taken, and pincer works again by itself once the
//! store does. The fault is real: another connection holds SQLite's write
//! lock, so pincer's writes fail with "database is locked" after its busy
//! timeout, as they would while a backup tool or a stray `sqlite3` holds it.

use std::time::Duration;

use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use whatsapp_rust::proto_helpers::MessageBuilderExt;
use whatsapp_rust::waproto::whatsapp as wa;

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::fake_wa::{inbound, FakeWa, Person};
use crate::support::harness::Sandbox;
use crate::support::store_lock::WriteLock;

async fn inbound_texts(sandbox: &Sandbox, group: &str) -> Vec<String> {
    let store = sandbox.store().await;
    let history = store.history().history(&group.parse().unwrap(), 50).await.unwrap();
    store.close().await;
    history
        .iter()
        .map(|entry| serde_json::to_value(entry).unwrap())
        .filter(|json| json["kind"] == "inbound")
        .map(|json| json["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn telegram_a_message_the_store_cannot_take_is_refused_in_the_chat_and_the_next_one_works() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let chat = TgChat { id: -100_700, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() };
    let alice = TgUser { id: 42, first_name: "Alice".into(), username: None };
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let bound = GroupSettings { chat: Some(ChatAddress::telegram(chat.id, None)), ..GroupSettings::default() };
    sandbox.add_group_with("team", bound).await;
    let pincer = sandbox.spawn_daemon();
    bot.wait_for("pincer to poll", |bot| !bot.calls_to("getUpdates").is_empty()).await;

    let lock = WriteLock::take(&sandbox).await;
    bot.say(&chat, &alice, "@Andy first try");
    let sent = bot.wait_sent(chat.id, 1).await;
    assert!(sent[0].text.contains("could not take this message"), "{}", sent[0].text);
    assert!(sent[0].text.contains("database is locked"), "says why: {}", sent[0].text);
    lock.release().await;
    assert!(api.main_requests().is_empty(), "the refused message reached no agent");

    bot.say(&chat, &alice, "@Andy second try");
    let sent = bot.wait_sent(chat.id, 2).await;
    assert!(sent[1].text.starts_with("ECHO: ") && sent[1].text.contains("second try"), "{}", sent[1].text);
    assert!(!sent[1].text.contains("first try"), "nothing of the refused message was kept: {}", sent[1].text);
    let texts = inbound_texts(&sandbox, "team").await;
    assert!(texts.iter().all(|t| !t.contains("first try")), "not stored as taken: {texts:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn whatsapp_a_message_the_store_cannot_take_is_not_acked_and_is_answered_once_when_it_comes_again() {
    const FAMILY: &str = "120363012345678901@g.us";
    let alice = Person { name: "Alice", number: "4915100000001", lid: None };
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let mut sandbox = Sandbox::new(&api);
    sandbox.fast_retries();
    let bound = GroupSettings { chat: Some(ChatAddress::whatsapp_group(FAMILY).unwrap()), ..GroupSettings::default() };
    sandbox.add_group_with("family", bound).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    let lock = WriteLock::take(&sandbox).await;
    let message = inbound(FAMILY, &alice, "3EB0STOREFAULT", wa::Message::text("@Andy are you there?"), false);
    wa.deliver(message.clone());
    let sent = wa.wait_sent(FAMILY, 1).await;
    assert!(sent[0].text.contains("could not take this message"), "{}", sent[0].text);
    lock.release().await;
    assert!(wa.read().is_empty(), "not marked read: WhatsApp is not told it was received");

    // WhatsApp brings what it was not acked for again.
    wa.deliver(message);
    let sent = wa.wait_sent(FAMILY, 2).await;
    assert!(sent[1].text.starts_with("ECHO: ") && sent[1].text.contains("are you there"), "{}", sent[1].text);
    // Taken, answered and delivered in order: a second answer would come
    // before the marker's.
    wa.say(FAMILY, &alice, "@Andy MARKER after the rest");
    let before = wa.sent_before(FAMILY, "MARKER after the rest").await;
    assert_eq!(before.len(), 2, "answered once: {before:?}");
    let turns = api.user_texts();
    assert_eq!(turns.len(), 2, "one turn, then the marker's: {turns:?}");
    assert!(!turns[1].contains("are you there"), "{turns:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_result_the_store_cannot_take_yet_is_stored_and_delivered_once_it_can() {
    use crate::support::fake_api::{Reply, Script};
    use std::sync::Arc;

    let echo = fake_api::echo();
    let slow: Script = Arc::new(move |req| Reply::slow(Duration::from_secs(2), echo(req)));
    let api = FakeApi::start(slow).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("patient", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "are you saving this?").await;
    api.wait_for_requests(1, crate::support::harness::PATIENCE).await;
    // The result comes while the database is locked for longer than pincer's
    // busy timeout (5 s): its first writes fail.
    let lock = WriteLock::take(&sandbox).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    lock.release().await;

    let reply = pincer.next_outbound().await;
    assert!(reply.text.starts_with("ECHO: ") && reply.text.contains("are you saving this?"), "{reply:?}");
    let history = pincer.store().history().history(&group, 50).await.unwrap();
    let results = history.iter().filter(|e| matches!(e, pincer::store::HistoryEntry::Result { .. })).count();
    assert_eq!(results, 1, "stored once: {history:?}");
    pincer.stop().await;
}
