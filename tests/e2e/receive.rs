//! Receiving from Telegram, end to end: an update is confirmed to Telegram
//! (by the next `getUpdates` offset, or by answering the webhook's POST) only
//! once pincer stored its message, so a message pincer dies holding comes
//! again after the restart, and one that comes again is not answered twice.
//! The store is held up for real: another connection holds its write lock.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::domain::ChatAddress;
use pincer::store::{GroupSettings, HistoryEntry};
use sqlx::{Connection, Executor, SqliteConnection};

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, Sent, TgChat, TgUser};
use crate::support::harness::{spawn_pincer_run, Sandbox, PATIENCE};
use crate::support::store_lock::WriteLock;

fn team() -> TgChat {
    TgChat { id: -100_400, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

/// A daemon config serving `team` as group `team`, every message engaging.
async fn serving(api: &FakeApi, bot: &FakeBot) -> Sandbox {
    let mut sandbox = Sandbox::new(api);
    sandbox.use_telegram(bot);
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(team().id, None)),
        requires_trigger: false,
        ..Default::default()
    };
    sandbox.add_group_with("team", settings).await;
    sandbox
}

/// Says `text` in the team chat; returns the id of the update that carries it.
fn say(bot: &FakeBot, text: &str) -> u64 {
    let message = bot.say(&team(), &alice(), text);
    bot.update_of(team().id, message).expect("the fake queued an update")
}

/// The text of the message that closes a test; echoed in its answer.
const MARKER: &str = "MARKER after the rest";

/// Says [`MARKER`] in the team chat and waits for its answer; returns what
/// reached the chat before it. A chat's updates are taken in order, its turns
/// run in order and its replies are delivered in order, so a second answer to
/// an earlier message would be among them: no fixed wait rules one out.
async fn before_a_marker(bot: &FakeBot) -> Vec<Sent> {
    say(bot, MARKER);
    bot.wait_for("the marker's answer", |bot| bot.sent(team().id).iter().any(|s| s.text.contains(MARKER))).await;
    let mut sent = bot.sent(team().id);
    let marker = sent.iter().position(|s| s.text.contains(MARKER)).unwrap();
    sent.truncate(marker);
    sent
}

/// The user text of each turn the agent was asked; the last must be the
/// marker's alone (a message answered again would share its turn).
fn turns_before_the_marker(api: &FakeApi) -> Vec<String> {
    let mut turns = api.user_texts();
    let last = turns.pop().expect("the marker's turn");
    assert!(last.contains(MARKER) && turns.iter().all(|t| !t.contains(MARKER)), "{turns:?} then {last}");
    assert!(!last.contains("hello"), "the marker's turn holds only the marker: {last}");
    turns
}

#[tokio::test]
async fn a_message_pincer_dies_holding_is_answered_after_the_restart() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot).await;
    let config = sandbox.write_config();
    let mut child = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;

    // pincer receives the message but cannot store it yet.
    let lock = WriteLock::take(&sandbox).await;
    let update = say(&bot, "hello HELD1");
    bot.wait_for("pincer to poll again while it holds the message", |bot| bot.times_handed_out(update) >= 2).await;
    assert!(bot.is_unconfirmed(update), "a later poll must not confirm an update whose message is not stored");

    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGKILL).unwrap();
    child.wait().await.unwrap();
    lock.release().await;
    assert!(bot.sent(team().id).is_empty(), "nothing was answered before the kill");

    let pincer = sandbox.spawn_daemon();
    let sent = bot.wait_sent(team().id, 1).await;
    assert!(sent[0].text.contains("hello HELD1"), "{}", sent[0].text);
    bot.wait_for("the update to be confirmed", |bot| !bot.is_unconfirmed(update)).await;
    let before = before_a_marker(&bot).await;
    assert_eq!(before.len(), 1, "answered once: {before:?}");
    assert_eq!(turns_before_the_marker(&api).len(), 1);
    pincer.stop().await;
}

#[tokio::test]
async fn a_message_telegram_sends_again_is_answered_once() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot).await;
    let pincer = sandbox.spawn_daemon();

    let update = say(&bot, "hello TWICE1");
    let sent = bot.wait_sent(team().id, 1).await;
    assert!(sent[0].text.contains("hello TWICE1"), "{}", sent[0].text);
    bot.wait_for("the update to be confirmed", |bot| !bot.is_unconfirmed(update)).await;

    // As after a crash between storing a message and confirming its update.
    bot.send_again(update);
    bot.wait_for("the update sent again to be confirmed", |bot| {
        bot.times_handed_out(update) >= 2 && !bot.is_unconfirmed(update)
    })
    .await;
    let before = before_a_marker(&bot).await;
    assert_eq!(before.len(), 1, "not answered twice: {before:?}");
    assert_eq!(turns_before_the_marker(&api).len(), 1, "no second turn");
    let store = sandbox.store().await;
    let history = store.history().history(&"team".parse().unwrap(), 50).await.unwrap();
    let stored = history
        .iter()
        .filter(|e| matches!(e, HistoryEntry::Inbound { text, .. } if text.contains("hello TWICE1")))
        .count();
    assert_eq!(stored, 1, "stored once: {history:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_webhook_post_is_answered_only_once_its_message_is_stored() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = serving(&api, &bot).await;
    sandbox.use_webhook();
    let pincer = sandbox.spawn_daemon();
    bot.wait_for("pincer to set its webhook", |bot| bot.webhook().is_some()).await;

    let lock = WriteLock::take(&sandbox).await;
    let update = say(&bot, "hello HOOKED1");
    bot.wait_for("the update to be POSTed", |bot| bot.times_handed_out(update) >= 1).await;
    // Well inside the store's 5 s busy timeout, after which the message would be refused.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(bot.is_unconfirmed(update), "the POST must wait until the message is stored");
    lock.release().await;

    let sent = bot.wait_sent(team().id, 1).await;
    assert!(sent[0].text.contains("hello HOOKED1"), "{}", sent[0].text);
    tokio::time::timeout(PATIENCE, async {
        while bot.is_unconfirmed(update) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the POST is answered once the message is stored");
    pincer.stop().await;
}

#[tokio::test]
async fn a_webhook_that_cannot_be_set_is_retried_with_backoff_and_health_says_so() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = serving(&api, &bot).await;
    sandbox.fast_retries();
    sandbox.use_webhook();
    // Until the fault is ended below: no fixed count, so no race with the retries.
    bot.drop_connections(&["setWebhook"], PATIENCE * 4);
    let pincer = sandbox.spawn_daemon();

    let failed = |bot: &FakeBot| bot.calls_to("setWebhook").into_iter().filter(|c| !c.ok).collect::<Vec<_>>();
    bot.wait_for("three failed setWebhook calls", |bot| failed(bot).len() >= 3).await;
    let calls = failed(&bot);
    let (first, second) = (calls[1].at - calls[0].at, calls[2].at - calls[1].at);
    // fast_retries: 200 ms, then 400 ms, each drawn from its top quarter (jitter).
    assert!(first >= Duration::from_millis(150), "{first:?}");
    assert!(second >= Duration::from_millis(300) && second > first, "backoff grows: {first:?} then {second:?}");

    let store = sandbox.store().await;
    let health =
        || async { store.channels().channel_health(pincer::domain::Platform::Telegram).await.unwrap().unwrap() };
    let failing = health().await;
    assert_eq!(failing.state, "failing", "{failing:?}");
    let detail = failing.detail.unwrap_or_default();
    assert!(detail.contains("cannot set the Telegram webhook") && detail.contains("keeps trying"), "{detail}");
    assert!(bot.webhook().is_none());

    bot.end_faults();
    bot.wait_for("pincer to set its webhook", |bot| bot.webhook().is_some()).await;
    // Before any update arrives: the webhook being set is what says so.
    tokio::time::timeout(PATIENCE, async {
        while health().await.state != "connected" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("health reads connected once the webhook is set");
    say(&bot, "hello HOOKED2");
    let sent = bot.wait_sent(team().id, 1).await;
    assert!(sent[0].text.contains("hello HOOKED2"), "{}", sent[0].text);
    pincer.stop().await;
}

/// What the chat is told of a message pincer could not take.
const NOT_TAKEN: &str = "pincer could not take this message";

/// Waits until `update` is confirmed and the team chat was told its message
/// was not taken: every update is stored or refused before it is confirmed.
async fn refused_then_confirmed(bot: &FakeBot, update: u64) {
    let sent = bot.wait_sent(team().id, 1).await;
    assert!(sent[0].text.contains(NOT_TAKEN), "{}", sent[0].text);
    bot.wait_for("the update to be confirmed", |bot| !bot.is_unconfirmed(update)).await;
}

#[tokio::test]
async fn a_context_message_that_cannot_be_stored_is_refused_in_its_chat() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let settings = GroupSettings { chat: Some(ChatAddress::telegram(team().id, None)), ..Default::default() };
    sandbox.add_group_with("team", settings).await;
    let pincer = sandbox.spawn_daemon();

    let lock = WriteLock::take(&sandbox).await;
    let update = say(&bot, "lunch at noon? CONTEXT1");
    refused_then_confirmed(&bot, update).await;
    lock.release().await;
    assert!(api.main_requests().is_empty(), "no trigger, no turn");
    pincer.stop().await;
}

#[tokio::test]
async fn a_message_whose_group_cannot_be_looked_up_is_refused_in_its_chat() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot).await;
    let pincer = sandbox.spawn_daemon();
    bot.wait_for("pincer to poll", |bot| !bot.calls_to("getUpdates").is_empty()).await;

    // Every lookup of a chat's group now fails.
    let url = format!("sqlite://{}", sandbox.config.database_path().display());
    let mut conn = SqliteConnection::connect(&url).await.unwrap();
    conn.execute("ALTER TABLE chat_bindings RENAME TO chat_bindings_away").await.unwrap();
    let update = say(&bot, "hello LOOKUP1");
    refused_then_confirmed(&bot, update).await;
    conn.execute("ALTER TABLE chat_bindings_away RENAME TO chat_bindings").await.unwrap();
    conn.close().await.unwrap();
    pincer.stop().await;
}

#[tokio::test]
async fn a_message_in_a_chat_not_marked_reachable_is_still_stored_or_refused() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot).await;
    let team_group = "team".parse().unwrap();
    sandbox.store().await.groups().set_group_active(&team_group, false, Some("the bot was removed")).await.unwrap();
    let pincer = sandbox.spawn_daemon();

    // Neither "reachable again" nor the message can be written.
    let lock = WriteLock::take(&sandbox).await;
    let update = say(&bot, "hello BACK1");
    refused_then_confirmed(&bot, update).await;
    lock.release().await;
    pincer.stop().await;
}

#[tokio::test]
async fn a_group_move_that_cannot_be_recorded_is_told_in_the_new_chat() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let old = TgChat { id: -400, kind: ChatKind::Group, title: "Team".into() };
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(old.id, None)),
        requires_trigger: false,
        ..Default::default()
    };
    sandbox.add_group_with("team", settings).await;
    let pincer = sandbox.spawn_daemon();

    let lock = WriteLock::take(&sandbox).await;
    let update = bot.migrate(&old, &team());
    let sent = bot.wait_sent(team().id, 1).await;
    assert!(sent[0].text.contains(&format!("--telegram {}", team().id)), "{}", sent[0].text);
    bot.wait_for("the update to be confirmed", |bot| !bot.is_unconfirmed(update)).await;
    lock.release().await;
    pincer.stop().await;
}
