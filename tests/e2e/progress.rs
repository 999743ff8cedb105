//! Live progress on the platforms: Telegram's and WhatsApp's status ports
//! against the fake Bot API and the fake WhatsApp client, the receipt
//! reaction on an engaging message, and the Stop button of a status message
//! pressed by an admin (the turn is interrupted) and by a member (refused).

use std::time::Duration;

use pincer::channel::progress::{StatusError, StatusPort};
use pincer::channel::telegram::{Telegram, TelegramStatus, STOP_BUTTON_DATA};
use pincer::channel::whatsapp::{WhatsAppStatus, REPOST_EVERY, STOP_HINT};
use pincer::domain::activity::{ProgressMode, WhenDone};
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::{ChatKind, FakeBot, FakeError, TgChat, TgUser};
use crate::support::fake_wa::{FakeWa, Person};
use crate::support::harness::{Sandbox, PATIENCE};

fn team() -> TgChat {
    TgChat { id: -100_700, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn forum() -> TgChat {
    TgChat { id: -100_701, kind: ChatKind::Supergroup { forum: true }, title: "Research".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

fn bob() -> TgUser {
    TgUser { id: 43, first_name: "Bob".into(), username: None }
}

/// The status port over a bot pointed at `bot`, as the adapter builds it.
fn telegram_status(bot: &FakeBot) -> TelegramStatus {
    let config = pincer::config::TelegramConfig {
        token: Some(pincer::config::Secret::new("123456:TEST-TOKEN")),
        api_url: Some(bot.api_url()),
        ..Default::default()
    };
    TelegramStatus::new(Telegram::client(&config).unwrap())
}

#[tokio::test]
async fn the_telegram_status_message_is_posted_in_its_topic_edited_deleted_and_reactions_set() {
    let bot = FakeBot::start().await;
    let status = telegram_status(&bot);
    let at = ChatAddress::telegram(forum().id, Some(7));
    bot.add_chat(&forum());

    let id = status.post(&at, "Working · 6 s · Reading <notes.md> & more", true).await.unwrap();
    let sent = bot.sent(forum().id).remove(0);
    assert_eq!(sent.message_id.to_string(), id);
    assert_eq!(sent.thread_id, Some(7), "posted in the group's topic");
    assert_eq!(sent.text, "Working · 6 s · Reading <notes.md> & more", "plain text, shown as written");
    assert_eq!(sent.button_data(), vec![STOP_BUTTON_DATA.to_owned()]);

    // The same state again is "not modified" at Telegram, and fine here.
    status.edit(&at, &id, "Working · 6 s · Reading <notes.md> & more", true).await.unwrap();
    let refused = bot.calls_to("editMessageText");
    assert!(refused[0].error.as_deref().is_some_and(|e| e.contains("not modified")), "{refused:?}");

    status.edit(&at, &id, "Done in 9 s", false).await.unwrap();
    let edited = bot.sent(forum().id).remove(0);
    assert_eq!((edited.text.as_str(), edited.edits), ("Done in 9 s", 1));
    assert!(edited.button_data().is_empty(), "the Stop button goes with stop = false");

    bot.fail_next("editMessageText", FakeError::RetryAfter(5));
    let limited = status.edit(&at, &id, "later", false).await;
    assert_eq!(limited, Err(StatusError::RateLimited { retry_after: Some(Duration::from_secs(5)) }));

    let said = bot.say(&forum(), &alice(), "@Andy hi");
    status.react(&at, &said.to_string(), "👀").await.unwrap();
    assert_eq!(bot.reactions(forum().id, said), vec!["👀".to_owned()]);
    let refused = status.react(&at, &said.to_string(), "🦀").await.unwrap_err();
    assert!(refused.to_string().contains("[progress] reaction"), "says what to do: {refused}");

    status.delete(&at, &id).await.unwrap();
    assert!(bot.sent(forum().id)[0].deleted);
    status.delete(&at, &id).await.expect("deleting what is already gone is done");
    let gone = status.edit(&at, &id, "again", false).await;
    assert!(matches!(gone, Err(StatusError::Gone(_))), "{gone:?}");
    assert!(matches!(status.edit(&at, &said.to_string(), "x", false).await, Err(StatusError::Gone(_))));
}

/// The text the bot answered callback query `id` with, once it has.
pub(crate) async fn answer_to(bot: &FakeBot, id: &str) -> String {
    let answered = |b: &FakeBot| {
        b.calls_to("answerCallbackQuery").into_iter().find(|c| c.params["callback_query_id"].as_str() == Some(id))
    };
    bot.wait_for("the press is answered", |b| answered(b).is_some()).await;
    answered(bot).unwrap().params["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_stop_button_interrupts_for_an_admin_and_is_refused_to_a_member() {
    let script = fake_api::scripted(vec![("SLOWREPLY", Reply::slow(Duration::from_secs(30), Reply::text("too late")))]);
    let api = FakeApi::start(script).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(team().id, None)),
        requires_trigger: false,
        admins: vec![alice().id.to_string()],
        ..GroupSettings::default()
    };
    sandbox.add_group_with("team", settings).await;
    let pincer = sandbox.spawn_daemon();

    let asked = bot.say(&team(), &bob(), "SLOWREPLY please");
    api.wait_for_main_requests(1, PATIENCE).await;
    bot.wait_for("the receipt reaction", |b| b.reactions(team().id, asked) == ["👀"]).await;

    // The presenter's status message, with its button.
    let status = telegram_status(&bot);
    let id = status.post(&ChatAddress::telegram(team().id, None), "Working · 6 s", true).await.unwrap();
    let message: i64 = id.parse().unwrap();
    let data = bot.sent(team().id)[0].button_data();

    let refused = bot.press(&team(), &bob(), message, &data[0]);
    assert_eq!(answer_to(&bot, &refused).await, "Only this group's admins can stop the agent.");

    let stopped = bot.press(&team(), &alice(), message, &data[0]);
    assert_eq!(answer_to(&bot, &stopped).await, "Stopping the agent.");
    bot.wait_for("the turn ends interrupted", |b| b.sent(team().id).iter().any(|s| s.text.starts_with("⚠️"))).await;
    let texts: Vec<String> = bot.sent(team().id).into_iter().map(|s| s.text).collect();
    // Had the member's press stopped the turn, the admin's would find none.
    assert_eq!(texts.iter().filter(|t| t.contains("Interrupting")).count(), 1, "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("not in a turn") || t.contains("too late")), "{texts:?}");

    let forged = bot.press(&team(), &alice(), message, "stop:all");
    assert_eq!(answer_to(&bot, &forged).await, "This button is no longer in use.");
    let late = bot.press(&team(), &alice(), message, &data[0]);
    assert_eq!(answer_to(&bot, &late).await, "The agent is not in a turn right now.");
    // Anything the late press said in the chat would come before this answer.
    bot.say(&team(), &alice(), "/status");
    bot.wait_for("the status", |b| b.sent(team().id).iter().any(|s| s.text.contains("Session:"))).await;
    let texts: Vec<String> = bot.sent(team().id).into_iter().map(|s| s.text).collect();
    assert!(
        !texts.iter().any(|t| t.contains("not in a turn")),
        "a press on an old button stays in its popup: {texts:?}"
    );
    pincer.stop().await;
}

const FAMILY: &str = "120363012345678901@g.us";

fn wa_alice() -> Person {
    Person { name: "Alice", number: "4915100000001", lid: Some("111111111111111") }
}

fn wa_bob() -> Person {
    Person { name: "Bob", number: "4915100000002", lid: None }
}

fn family() -> ChatAddress {
    ChatAddress::whatsapp_group(FAMILY).unwrap()
}

#[tokio::test]
async fn an_engaging_whatsapp_message_gets_the_receipt_reaction_and_context_does_not() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = Sandbox::new(&api);
    sandbox.add_group_with("family", GroupSettings { chat: Some(family()), ..GroupSettings::default() }).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say(FAMILY, &wa_bob(), "lunch at noon?");
    let engaging = wa.say(FAMILY, &wa_alice(), "@Andy what did we decide?");
    wa.wait_sent(FAMILY, 1).await;
    wa.wait_for("the receipt reaction", |wa| !wa.reactions(FAMILY).is_empty()).await;
    let reactions = wa.reactions(FAMILY);
    assert_eq!(reactions.len(), 1, "context gets none: {reactions:?}");
    assert_eq!((reactions[0].id.as_str(), reactions[0].emoji.as_str()), (engaging.as_str(), "👀"));
    assert_eq!(reactions[0].sender, "111111111111111@lid", "the message is named by its author too");
    pincer.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_whatsapp_status_message_is_edited_and_falls_back_to_one_repost_a_minute() {
    let wa = FakeWa::new();
    let status = WhatsAppStatus::new(wa.client());
    let at = family();

    let id = status.post(&at, "Working · 6 s", true).await.unwrap();
    assert_eq!(wa.sent(FAMILY)[0].text, format!("Working · 6 s\n\n{STOP_HINT}"));
    status.edit(&at, &id, "Working · 9 s", true).await.unwrap();
    assert_eq!(wa.edits(FAMILY), vec![(id.clone(), format!("Working · 9 s\n\n{STOP_HINT}"))]);

    // Edits stop working: composing instead, and a new message once a minute.
    wa.fail_edits(true);
    status.edit(&at, &id, "Working · 12 s", true).await.unwrap();
    assert_eq!(wa.failed_edits(FAMILY), vec![id.clone()]);
    assert_eq!(wa.composing(FAMILY), vec![true]);
    assert_eq!(wa.sent(FAMILY).len(), 1, "no new message within the minute");

    status.edit(&at, &id, "Done in 40 s", false).await.unwrap();
    assert_eq!(wa.sent(FAMILY).len(), 1, "held back, not posted");

    // The minute is up: the newest state comes, the old message gone first.
    tokio::time::advance(REPOST_EVERY).await;
    wa.wait_for("the held-back summary", |wa| wa.alive(FAMILY).iter().any(|s| s.text == "Done in 40 s")).await;
    assert_eq!(wa.alive(FAMILY).len(), 1, "never two alive: {:?}", wa.sent(FAMILY));
    assert_eq!(wa.revoked(FAMILY), vec![id.clone()], "the old one went first");
    assert_eq!(wa.sent(FAMILY).len(), 2, "one new message, with the newest state only");
    assert_eq!(wa.failed_edits(FAMILY).len(), 1, "no edit tried once edits failed");

    status.delete(&at, &id).await.unwrap();
    assert!(wa.alive(FAMILY).is_empty(), "the presenter's id deletes the message showing now");

    status.react(&at, &format!("{FAMILY}/111111111111111@lid/3EB0AA"), "👀").await.unwrap();
    let reaction = wa.reactions(FAMILY).remove(0);
    assert_eq!((reaction.sender.as_str(), reaction.id.as_str()), ("111111111111111@lid", "3EB0AA"));
}

fn quiet() -> TgChat {
    TgChat { id: -100_702, kind: ChatKind::Supergroup { forum: false }, title: "Quiet".into() }
}

/// The wired presenter, end to end: a slow turn (the model thinks 3 s, reads
/// a file, then answers) in a group with `after = 1s` gets the receipt and
/// one status message with a Stop button, edited as time passes and deleted
/// once the answer is there; the same turn in a group with `--progress off`
/// gets nothing but the answer.
#[tokio::test]
async fn a_slow_turn_shows_one_status_message_until_its_answer_and_progress_off_shows_nothing() {
    let slow_read =
        Reply::slow(Duration::from_secs(3), Reply::tool_use("Read", serde_json::json!({"file_path": "notes.md"})));
    let script = fake_api::scripted(vec![("SLOWWORK", slow_read)]);
    let api = FakeApi::start(script).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    sandbox.config.progress.after = Duration::from_secs(1);
    sandbox.config.progress.every = Duration::from_secs(1);
    for (name, chat, mode) in [("team", team(), None), ("quiet", quiet(), Some(ProgressMode::Off))] {
        let settings = GroupSettings {
            chat: Some(ChatAddress::telegram(chat.id, None)),
            requires_trigger: false,
            progress: mode,
            ..GroupSettings::default()
        };
        sandbox.add_group_with(name, settings).await;
    }
    std::fs::write(sandbox.group_dir("team").join("notes.md"), "milk, eggs\n").unwrap();
    std::fs::write(sandbox.group_dir("quiet").join("notes.md"), "milk, eggs\n").unwrap();
    let pincer = sandbox.spawn_daemon();

    let asked = bot.say(&team(), &alice(), "SLOWWORK please");
    let hushed = bot.say(&quiet(), &alice(), "SLOWWORK quietly");
    let answered = |b: &FakeBot, chat: i64| {
        b.sent(chat).iter().any(|s| s.text.contains("milk, eggs") || s.text.contains("SLOWWORK"))
    };
    bot.wait_for("both answers", |b| answered(b, team().id) && answered(b, quiet().id)).await;
    bot.wait_for("the status message deleted", |b| b.sent(team().id).iter().any(|s| s.deleted)).await;

    let sent = bot.sent(team().id);
    let statuses: Vec<_> = sent.iter().filter(|s| s.text.starts_with("Working…")).collect();
    assert_eq!(statuses.len(), 1, "one status message for the turn: {sent:?}");
    let status = statuses[0];
    assert!(status.deleted, "gone once the answer is there");
    assert_eq!(status.button_data(), [STOP_BUTTON_DATA]);
    assert_eq!(bot.reactions(team().id, asked), ["👀"]);
    let id = status.message_id.to_string();
    let edited = |c: &crate::support::fake_bot::Call| {
        let at = &c.params["message_id"];
        at.as_i64() == Some(status.message_id) || at.as_str() == Some(id.as_str())
    };
    let edits: Vec<_> = bot.calls_to("editMessageText").into_iter().filter(edited).collect();
    assert!(!edits.is_empty(), "a 3 s turn shown from 1 s is edited as its time goes by");
    // At most one edit a second, over however long the turn took here (a
    // loaded machine stretches the 3 s turn); a little slack for the jitter
    // between two edits' arrivals.
    let gone = bot.calls_to("deleteMessage").into_iter().find(edited).expect("the status message's deletion").at;
    let lived = gone.duration_since(edits[0].at).as_secs_f64();
    assert!(
        edits.len() as f64 <= lived + 1.5,
        "no faster than one edit a second: {} edits in {lived:.1} s",
        edits.len()
    );

    let quiet_sent = bot.sent(quiet().id);
    assert!(quiet_sent.iter().all(|s| !s.text.starts_with("Working…")), "{quiet_sent:?}");
    assert!(bot.reactions(quiet().id, hushed).is_empty(), "progress off: no receipt either");
    pincer.stop().await;
}

/// Background work that outlives its turn gets one line under the answer,
/// which goes away when the work ends; and a slow turn in a group that wants
/// summaries ends with its status message turned into one line.
#[tokio::test]
async fn background_work_after_the_turn_gets_a_line_that_goes_when_it_ends_and_a_summary_ends_a_slow_turn() {
    let script = fake_api::scripted(vec![
        ("BGSLEEP", Reply::bash_background("sleep 4; echo done-bg", "bg sleep")),
        (fake_api::TASK_NOTIFICATION, Reply::text("FOLLOWUP: saw task notification")),
        ("SLOWWORK", Reply::slow(Duration::from_secs(3), Reply::text("slow answer"))),
    ]);
    let api = FakeApi::start(script).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    sandbox.config.progress.after = Duration::from_secs(1);
    sandbox.config.progress.every = Duration::from_secs(1);
    sandbox.config.progress.when_done = WhenDone::Summary;
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(team().id, None)),
        requires_trigger: false,
        allowed_tools: Some(vec!["Bash".into()]),
        ..GroupSettings::default()
    };
    sandbox.add_group_with("team", settings).await;
    let pincer = sandbox.spawn_daemon();

    bot.say(&team(), &alice(), "please BGSLEEP");
    let line = |s: &crate::support::fake_bot::Sent| s.text.starts_with("1 background task running: bg sleep");
    bot.wait_for("the background line", |b| b.sent(team().id).iter().any(line)).await;
    bot.wait_for("the follow-up", |b| b.sent(team().id).iter().any(|s| s.text.contains("FOLLOWUP"))).await;
    bot.wait_for("the line gone with the work", |b| b.sent(team().id).iter().filter(|s| line(s)).all(|s| s.deleted))
        .await;
    let sent = bot.sent(team().id);
    assert_eq!(sent.iter().filter(|s| line(s)).count(), 1, "one line for the work: {sent:?}");
    let at = sent.iter().position(line).unwrap();
    assert!(sent[..at].iter().any(|s| !s.deleted && !line(s)), "the line comes under the turn's answer: {sent:?}");

    bot.say(&team(), &alice(), "SLOWWORK now");
    bot.wait_for("the slow answer", |b| b.sent(team().id).iter().any(|s| s.text.contains("slow answer"))).await;
    bot.wait_for("the summary", |b| b.sent(team().id).iter().any(|s| s.text.starts_with("Done in "))).await;
    let summary = bot.sent(team().id).into_iter().find(|s| s.text.starts_with("Done in ")).unwrap();
    assert!(!summary.deleted, "a summary stays: {summary:?}");
    assert!(summary.button_data().is_empty(), "a finished message has no Stop button: {summary:?}");
    pincer.stop().await;
}

/// WhatsApp through the daemon: a slow turn gets the receipt and one status
/// message saying how to stop, edited no more often than WhatsApp's own
/// floor, and deleted once the answer is there.
#[tokio::test]
async fn a_slow_whatsapp_turn_shows_one_status_message_edited_then_deleted() {
    let slow = Reply::slow(Duration::from_secs(3), Reply::text("slow answer"));
    let api = FakeApi::start(fake_api::scripted(vec![("SLOWWORK", slow)])).await;
    let wa = FakeWa::new();
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.progress.after = Duration::from_secs(1);
    sandbox.config.progress.every = Duration::from_secs(1);
    let settings = GroupSettings { chat: Some(family()), requires_trigger: false, ..GroupSettings::default() };
    sandbox.add_group_with("family", settings).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    let since = std::time::Instant::now();
    wa.say(FAMILY, &wa_alice(), "SLOWWORK please");
    wa.wait_for("the answer", |wa| wa.sent(FAMILY).iter().any(|s| s.text.contains("slow answer"))).await;
    wa.wait_for("the status message deleted", |wa| !wa.revoked(FAMILY).is_empty()).await;
    let lived = since.elapsed().as_secs_f64();
    let sent = wa.sent(FAMILY);
    let statuses: Vec<_> = sent.iter().filter(|s| s.text.starts_with("Working…")).collect();
    assert_eq!(statuses.len(), 1, "one status message: {sent:?}");
    assert!(statuses[0].text.ends_with(STOP_HINT), "{:?}", statuses[0]);
    // `every` is 1 s here, but a WhatsApp chat is edited at most every 6 s:
    // one edit in the 3 s turn, more only where a loaded machine stretched it.
    let edits = wa.edits(FAMILY);
    assert!(edits.len() as f64 <= 1.0 + lived / 6.0, "at most one edit each 6 s, {lived:.1} s: {edits:?}");
    assert_eq!(wa.alive(FAMILY).iter().filter(|s| s.text.starts_with("Working…")).count(), 0, "{sent:?}");
    assert_eq!(wa.reactions(FAMILY).len(), 1, "the receipt");
    pincer.stop().await;
}
