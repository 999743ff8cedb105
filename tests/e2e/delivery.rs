//! Delivery through the outbox, end to end: the whole daemon with real
//! teloxide against the fake Bot API, which injects the faults (an outage,
//! dropped connections, a hung call), and the real CLI against the fake
//! Messages API. Every reply must reach its chat once, whatever happened on
//! the way.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::domain::ChatAddress;
use pincer::store::{GroupSettings, HistoryEntry, Store};

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::{ChatKind, FakeBot, Sent, TgChat, TgUser};
use crate::support::harness::{spawn_pincer_run, Sandbox, PATIENCE};

/// Long enough for a 40 s outage, teloxide's 10 s pause after each 5xx, and a retry.
const THROUGH_AN_OUTAGE: Duration = Duration::from_secs(150);

fn team() -> TgChat {
    TgChat { id: -100_300, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

/// A daemon config serving `chat` as group `team` (every message engages),
/// with quick delivery retries.
async fn serving(api: &FakeApi, bot: &FakeBot, chat: &TgChat) -> Sandbox {
    let mut sandbox = Sandbox::new(api);
    sandbox.use_telegram(bot);
    sandbox.fast_retries();
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(chat.id, None)),
        requires_trigger: false,
        ..Default::default()
    };
    sandbox.add_group_with("team", settings).await;
    sandbox
}

/// Waits until the chat holds `n` messages from the bot, for up to `limit`.
async fn sent_within(bot: &FakeBot, chat: i64, n: usize, limit: Duration) -> Vec<Sent> {
    tokio::time::timeout(limit, async {
        loop {
            let sent = bot.sent(chat);
            if sent.len() >= n {
                return sent;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} message(s) in chat {chat} within {limit:?}: {:?}", bot.sent(chat)))
}

/// The text of the message that closes a test; echoed in its answer.
const MARKER: &str = "MARKER after the rest";

/// Says [`MARKER`] in `chat` and waits for its answer; returns what reached
/// the chat before it. A chat's replies are delivered in order, each whole
/// before the next is tried, so a duplicate of an earlier reply (a retry after
/// success) would be among them: no fixed wait is needed to rule one out.
async fn before_a_marker(bot: &FakeBot, chat: &TgChat, from: &TgUser) -> Vec<Sent> {
    bot.say(chat, from, MARKER);
    bot.wait_for("the marker's answer", |bot| bot.sent(chat.id).iter().any(|s| s.text.contains(MARKER))).await;
    let mut sent = bot.sent(chat.id);
    let marker = sent.iter().position(|s| s.text.contains(MARKER)).unwrap();
    sent.truncate(marker);
    sent
}

/// `(ok, error)` of each `sendMessage` the bot tried, but the marker's.
fn send_tries(bot: &FakeBot) -> Vec<(bool, Option<String>)> {
    bot.calls_to("sendMessage")
        .into_iter()
        .filter(|c| !c.params.to_string().contains(MARKER))
        .map(|c| (c.ok, c.error))
        .collect()
}

/// The delivery states of the group's results, as `pincer history` shows them.
async fn result_deliveries(store: &Store) -> Vec<String> {
    let group: pincer::domain::GroupName = "team".parse().unwrap();
    let history = store.history().history(&group, 100).await.unwrap();
    history
        .into_iter()
        .filter_map(|e| match e {
            HistoryEntry::Result { delivery, .. } => Some(delivery.map_or("none".into(), |d| d.state)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_reply_produced_during_a_40s_outage_arrives_after_it_exactly_once() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot, &team()).await;
    let pincer = sandbox.spawn_daemon();

    bot.outage(&["sendMessage"], 502, Duration::from_secs(40));
    bot.say(&team(), &alice(), "during the OUTAGE");
    let sent = sent_within(&bot, team().id, 1, THROUGH_AN_OUTAGE).await;
    assert!(sent[0].text.contains("during the OUTAGE"), "{}", sent[0].text);
    let before = before_a_marker(&bot, &team(), &alice()).await;
    assert_eq!(before.len(), 1, "exactly once: {before:?}");

    let tries = send_tries(&bot);
    assert!(tries.len() >= 2, "tried during the outage, then after it: {tries:?}");
    assert!(tries[..tries.len() - 1].iter().all(|t| t.1.as_deref() == Some("fault: 502")), "{tries:?}");
    assert!(tries.last().unwrap().0, "{tries:?}");
    // The chat has the marker's answer a moment before pincer records it delivered.
    let store = sandbox.store().await;
    let both_delivered = tokio::time::timeout(PATIENCE, async {
        while result_deliveries(&store).await != ["delivered", "delivered"] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let waited = both_delivered.await;
    assert!(waited.is_ok(), "the reply, the marker's: {:?}", result_deliveries(&store).await);
    pincer.stop().await;
}

#[tokio::test]
async fn a_reply_produced_while_connections_drop_arrives_later() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot, &team()).await;
    let pincer = sandbox.spawn_daemon();

    // Dropped until the reply has met a dropped connection, however long the
    // turn takes; then the network is back.
    bot.drop_connections(&["sendMessage"], PATIENCE);
    bot.say(&team(), &alice(), "while the NETWORK drops");
    let dropped = |t: &(bool, Option<String>)| t.1.as_deref() == Some("fault: connection dropped");
    bot.wait_for("a send cut by the network", |b| send_tries(b).iter().any(dropped)).await;
    bot.end_faults();
    let sent = sent_within(&bot, team().id, 1, PATIENCE).await;
    assert!(sent[0].text.contains("while the NETWORK drops"), "{}", sent[0].text);
    let before = before_a_marker(&bot, &team(), &alice()).await;
    assert_eq!(before.len(), 1, "exactly once: {before:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_long_reply_cut_by_an_outage_midway_is_completed_without_repeating_a_part() {
    let paragraph = "word ".repeat(150);
    let long: String = (0..12).map(|i| format!("Paragraph {i}: {paragraph}\n\n")).collect();
    let api = FakeApi::start(fake_api::scripted(vec![("LONG", Reply::text(long.clone()))])).await;
    let bot = FakeBot::start().await;
    // A private chat: Telegram (and teloxide's Throttle) allow one message a
    // second there, so the outage below starts between two parts.
    let user = alice();
    let private = TgChat::private(&user);
    let sandbox = serving(&api, &bot, &private).await;
    let pincer = sandbox.spawn_daemon();
    let parts = pincer::channel::telegram::format::render(long.trim()).len();
    assert!(parts >= 3, "the reply is long enough to be cut: {parts} parts");

    bot.say(&private, &user, "LONG please");
    // The first part itself: under load a slow turn posts a status message first.
    let first_part = |bot: &FakeBot| bot.sent(private.id).iter().any(|s| s.text.contains("Paragraph 0:"));
    bot.wait_for("the first part", first_part).await;
    bot.outage(&["sendMessage"], 503, Duration::from_secs(5));
    let sent = sent_within(&bot, private.id, parts, THROUGH_AN_OUTAGE).await;
    let before = before_a_marker(&bot, &private, &user).await;
    assert_eq!(before.len(), parts, "every part once: {:?}", before.iter().map(|s| &s.text).collect::<Vec<_>>());
    for i in 0..12 {
        let holding = sent.iter().filter(|s| s.text.contains(&format!("Paragraph {i}:"))).count();
        assert_eq!(holding, 1, "paragraph {i} arrived once");
    }
    let tries = send_tries(&bot);
    let first_fault = tries.iter().position(|t| !t.0).expect("the outage cut the reply");
    assert!(first_fault >= 1 && first_fault < tries.len() - 1, "cut midway: {tries:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn pincer_killed_while_a_send_hangs_delivers_it_on_the_next_run_once() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let sandbox = serving(&api, &bot, &team()).await;
    let config = sandbox.write_config();

    let mut child = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;

    bot.hang_next("sendMessage");
    bot.say(&team(), &alice(), "answer me BEFORE the crash");
    bot.wait_for("the reply's send to hang", |bot| {
        bot.calls_to("sendMessage").iter().any(|c| c.error.as_deref() == Some("fault: hung"))
    })
    .await;
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGKILL).unwrap();
    child.wait().await.unwrap();
    bot.release_hangs();
    assert!(bot.sent(team().id).is_empty(), "nothing reached the chat before the kill");

    let pincer = sandbox.spawn_daemon();
    let sent = sent_within(&bot, team().id, 1, PATIENCE).await;
    assert!(sent[0].text.contains("answer me BEFORE the crash"), "{}", sent[0].text);
    let before = before_a_marker(&bot, &team(), &alice()).await;
    // The CLI killed with pincer may not have written its session yet: then
    // the marker's turn starts fresh, and the chat is told so. That notice
    // aside, the reply came once, and no "restarted before answering" notice.
    let fresh = "a fresh session was started";
    let before: Vec<_> = before.into_iter().filter(|m| !m.text.contains(fresh)).collect();
    assert_eq!(before.len(), 1, "once, and no restart notice (the message was answered): {before:?}");
    let turns = api.user_texts();
    assert_eq!(turns.len(), 2, "the answer came from the store, not a second turn: {turns:?}");
    assert!(!turns[1].contains("BEFORE the crash"), "the marker's turn holds only the marker: {turns:?}");
    pincer.stop().await;
}
