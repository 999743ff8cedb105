//! Approvals show provenance (issue 44), end to end with the real CLI: a
//! member has the agent `Write` files in the group's folder (allowed by the
//! group's list), then an admin is asked about a `Bash` command: the prompt
//! names those files and the member, and once an admin approved, the next
//! prompt names none. In Telegram (the fake Bot API, buttons) and WhatsApp
//! (the fake client, answer codes). In Telegram, pincer restarts between
//! the writes and the prompt: the list is kept in the store. A file a
//! member sent, which pincer saved in the folder, is named the same way.

use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use serde_json::json;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::{ChatKind, FakeBot, Incoming, TgChat, TgUser};
use crate::support::fake_wa::{FakeWa, Person};
use crate::support::harness::{Sandbox, PATIENCE};

const WRITTEN: &str = "written since your last approval";

fn script() -> fake_api::Script {
    let write = |path: &str| Reply::tool_use("Write", json!({"file_path": path, "content": "planted\n"}));
    fake_api::scripted(vec![
        ("WRITE_CONFIG", write("config")),
        ("WRITE_HEAD", write("HEAD")),
        ("MAKE_ONE", Reply::bash("echo first-make", "build")),
        ("MAKE_TWO", Reply::bash("echo second-make", "build")),
    ])
}

/// Write is allowed by name, Bash is not: an admin decides it.
fn settings(chat: ChatAddress, admins: Vec<String>) -> GroupSettings {
    GroupSettings {
        chat: Some(chat),
        allowed_tools: Some(["Read", "Write"].map(String::from).to_vec()),
        requires_trigger: false,
        admins,
        ..GroupSettings::default()
    }
}

fn team() -> TgChat {
    TgChat { id: -100_300, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

fn mallory() -> TgUser {
    TgUser { id: 44, first_name: "Mallory".into(), username: None }
}

/// Telegram's team, its admin Alice, its prompts waiting as long as the test.
async fn tg_team(api: &FakeApi, bot: &FakeBot) -> Sandbox {
    let mut sandbox = Sandbox::new(api);
    sandbox.use_telegram(bot);
    sandbox.config.claude.approval_timeout = PATIENCE;
    let chat = ChatAddress::telegram(team().id, None);
    sandbox.add_group_with("team", settings(chat, vec![alice().id.to_string()])).await;
    sandbox
}

/// Waits for the agent's `n`th answer after a tool call: the `n`th turn ended.
async fn tg_turn_done(bot: &FakeBot, n: usize) {
    let done = |b: &FakeBot| b.sent(team().id).iter().filter(|s| s.text.starts_with("AFTER_TOOL")).count() >= n;
    bot.wait_for(&format!("turn {n} ended"), done).await;
}

/// The newest prompt in the team chat that asks about `command`.
async fn tg_prompt(bot: &FakeBot, command: &str) -> crate::support::fake_bot::Sent {
    let asked =
        |b: &FakeBot| b.sent(team().id).into_iter().find(|s| s.reply_markup.is_some() && s.text.contains(command));
    bot.wait_for(&format!("a prompt about {command}"), |b| asked(b).is_some()).await;
    asked(bot).unwrap()
}

fn button(prompt: &crate::support::fake_bot::Sent, code: &str) -> String {
    let buttons = prompt.reply_markup.clone().expect("the prompt has buttons");
    buttons["inline_keyboard"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|b| b["callback_data"].as_str().unwrap().to_owned()))
        .find(|d| d.ends_with(code))
        .unwrap()
}

#[tokio::test]
async fn a_telegram_prompt_names_the_files_a_members_messages_wrote_until_an_admin_approves() {
    let api = FakeApi::start(script()).await;
    let bot = FakeBot::start().await;
    let sandbox = tg_team(&api, &bot).await;
    let pincer = sandbox.spawn_daemon();

    for (n, needle) in [(1, "WRITE_CONFIG"), (2, "WRITE_HEAD")] {
        bot.say(&team(), &mallory(), &format!("{needle} please"));
        tg_turn_done(&bot, n).await;
    }
    assert!(sandbox.group_dir("team").join("config").exists() && sandbox.group_dir("team").join("HEAD").exists());
    // What was written is kept in the store: a restart of pincer forgets none of it.
    pincer.stop().await;
    let pincer = sandbox.spawn_daemon();

    bot.say(&team(), &alice(), "MAKE_ONE please");
    let prompt = tg_prompt(&bot, "first-make").await;
    assert!(
        prompt.text.contains(&format!("{WRITTEN}, from Mallory's messages: HEAD, config")),
        "the prompt names the files and the member: {}",
        prompt.text
    );
    bot.press(&team(), &alice(), prompt.message_id, &button(&prompt, ":a"));
    tg_turn_done(&bot, 3).await;

    bot.say(&team(), &alice(), "MAKE_TWO please");
    let prompt = tg_prompt(&bot, "second-make").await;
    assert!(!prompt.text.contains(WRITTEN), "an approval cleared the list: {}", prompt.text);
    bot.press(&team(), &alice(), prompt.message_id, &button(&prompt, ":d"));
    tg_turn_done(&bot, 4).await;
    pincer.stop().await;
}

#[tokio::test]
async fn a_file_a_member_sent_is_named_in_the_next_prompt() {
    let api = FakeApi::start(script()).await;
    let bot = FakeBot::start().await;
    let sandbox = tg_team(&api, &bot).await;
    let pincer = sandbox.spawn_daemon();

    // An archive an approved `tar xf` would unpack: the member's as much as a file the agent wrote for them.
    let archive = bot.upload(b"not really an archive".to_vec());
    bot.say_with(Incoming::document(
        &team(),
        &mallory(),
        "here are the tools",
        &archive,
        "tools.tgz",
        "application/gzip",
    ));
    bot.wait_for("the file's turn answered", |b| !b.sent(team().id).is_empty()).await;

    bot.say(&team(), &alice(), "MAKE_ONE please");
    let prompt = tg_prompt(&bot, "first-make").await;
    assert!(
        prompt.text.contains(&format!("{WRITTEN}, from Mallory's messages: inbox/"))
            && prompt.text.contains("tools.tgz"),
        "the prompt names the file the member sent: {}",
        prompt.text
    );
    bot.press(&team(), &alice(), prompt.message_id, &button(&prompt, ":d"));
    tg_turn_done(&bot, 1).await;
    pincer.stop().await;
}

const FAMILY: &str = "120363012345678901@g.us";

fn wa_alice() -> Person {
    Person { name: "Alice", number: "4915100000001", lid: None }
}

fn wa_mallory() -> Person {
    Person { name: "Mallory", number: "4915100000004", lid: None }
}

/// Waits for the agent's `n`th answer after a tool call: the `n`th turn ended.
async fn wa_turn_done(wa: &FakeWa, n: usize) {
    let done = |w: &FakeWa| w.sent(FAMILY).iter().filter(|s| s.text.starts_with("AFTER_TOOL")).count() >= n;
    wa.wait_for(&format!("turn {n} ended"), done).await;
}

/// The prompt that asks about `command`, and its answer code.
async fn wa_prompt(wa: &FakeWa, command: &str) -> (String, String) {
    let asked = |w: &FakeWa| w.sent(FAMILY).into_iter().find(|s| s.text.starts_with("🔐") && s.text.contains(command));
    wa.wait_for(&format!("a prompt about {command}"), |w| asked(w).is_some()).await;
    let text = asked(wa).unwrap().text;
    let at = text.find("allow ").expect("the prompt names its code") + "allow ".len();
    let code = text[at..].chars().take(4).collect();
    (text, code)
}

#[tokio::test]
async fn a_whatsapp_prompt_names_the_files_a_members_messages_wrote_until_an_admin_approves() {
    let api = FakeApi::start(script()).await;
    let wa = FakeWa::new();
    let mut sandbox = Sandbox::new(&api);
    sandbox.fast_retries();
    sandbox.config.claude.approval_timeout = PATIENCE;
    let chat = ChatAddress::whatsapp_group(FAMILY).unwrap();
    sandbox.add_group_with("family", settings(chat, vec![wa_alice().number.to_owned()])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    for (n, needle) in [(1, "WRITE_CONFIG"), (2, "WRITE_HEAD")] {
        wa.say(FAMILY, &wa_mallory(), &format!("{needle} please"));
        wa_turn_done(&wa, n).await;
    }

    wa.say(FAMILY, &wa_alice(), "MAKE_ONE please");
    let (text, code) = wa_prompt(&wa, "first-make").await;
    assert!(
        text.contains(&format!("{WRITTEN}, from Mallory's messages: HEAD, config")),
        "the prompt names the files and the member: {text}"
    );
    wa.say(FAMILY, &wa_alice(), &format!("allow {code}"));
    wa_turn_done(&wa, 3).await;

    wa.say(FAMILY, &wa_alice(), "MAKE_TWO please");
    let (text, code) = wa_prompt(&wa, "second-make").await;
    assert!(!text.contains(WRITTEN), "an approval cleared the list: {text}");
    wa.say(FAMILY, &wa_alice(), &format!("deny {code}"));
    wa_turn_done(&wa, 4).await;
    pincer.stop().await;
}
