//! WhatsApp end to end: the whole daemon (`app::run_with`, as `app::run`
//! runs it with the linked device) with the real CLI against the fake
//! Messages API, and the WhatsApp adapter fed the crate's real event types
//! through a fake client (`support::fake_wa`): no WhatsApp server is
//! reachable from here.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use pincer::domain::{ChatAddress, GroupName, Platform};
use pincer::store::GroupSettings;
use whatsapp_rust::proto_helpers::MessageBuilderExt;
use whatsapp_rust::waproto::whatsapp as wa;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::fake_wa::{inbound, mentioning, replying, FakeWa, Person, WaSent, BOT_LID, BOT_NUMBER};
use crate::support::harness::{Sandbox, PATIENCE};

const FAMILY: &str = "120363012345678901@g.us";

fn alice() -> Person {
    Person { name: "Alice", number: "4915100000001", lid: Some("111111111111111") }
}

fn bob() -> Person {
    Person { name: "Bob", number: "4915100000002", lid: None }
}

fn bound(admins: &[&Person]) -> GroupSettings {
    GroupSettings {
        chat: Some(ChatAddress::whatsapp_group(FAMILY).unwrap()),
        admins: admins.iter().map(|p| p.number.to_owned()).collect(),
        ..GroupSettings::default()
    }
}

async fn family_sandbox(api: &FakeApi, settings: GroupSettings) -> Sandbox {
    let mut sandbox = Sandbox::new(api);
    sandbox.fast_retries();
    sandbox.add_group_with("family", settings).await;
    sandbox
}

/// The text of the message that closes a test (it engages); echoed in its answer.
const MARKER: &str = "@Andy MARKER after the rest";

/// Alice says [`MARKER`] in the family group; returns what the group got
/// before its answer, and the user text of each agent turn before the
/// marker's own. Anything an earlier message would have caused (a reply, a
/// turn) comes first, or shares the marker's turn: none of `ruled_out` may.
async fn before_a_marker(wa: &FakeWa, api: &FakeApi, ruled_out: &[&str]) -> (Vec<WaSent>, Vec<String>) {
    wa.say(FAMILY, &alice(), MARKER);
    let sent = wa.sent_before(FAMILY, "MARKER after the rest").await;
    let mut turns = api.user_texts();
    let last = turns.pop().expect("the marker's turn");
    assert!(last.contains("MARKER") && !turns.iter().any(|t| t.contains("MARKER")), "{turns:?} then {last}");
    assert!(!ruled_out.iter().any(|text| last.contains(text)), "the marker's turn holds it alone: {last}");
    (sent, turns)
}

#[tokio::test]
async fn a_triggered_message_is_answered_in_the_same_group_and_context_goes_with_it() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    let lunch = wa.say(FAMILY, &bob(), "lunch at noon?");
    wa.say_with(FAMILY, &alice(), replying("sounds good", &lunch, "4915100000002@s.whatsapp.net", "lunch at noon?"));
    wa.say(FAMILY, &alice(), "@Andy what did we decide?");
    let sent = wa.wait_sent(FAMILY, 1).await;
    assert!(sent[0].text.starts_with("ECHO: "), "{}", sent[0].text);

    let requests = api.main_requests();
    assert_eq!(requests.len(), 1, "only the triggered message started a turn");
    let prompt = requests[0].last_user_prompt();
    assert!(prompt.starts_with("<missed "), "{prompt}");
    assert!(
        prompt.contains(r#"<message from="Bob" admin="no" at="#) && prompt.contains(">lunch at noon?</message>"),
        "{prompt}"
    );
    assert!(prompt.contains(r#"reply-to="4915100000002: lunch at noon?">sounds good</message>"#), "{prompt}");
    assert!(prompt.contains(r#"<message from="Alice" admin="no" at="#), "{prompt}");
    assert!(prompt.ends_with(">@Andy what did we decide?</message>"), "{prompt}");
    assert_eq!(wa.composing(FAMILY).first(), Some(&true), "typing… was shown");
    wa.wait_for("every message marked read", |wa| wa.read().len() == 3).await;

    let store = sandbox.store().await;
    let history = store.history().history(&"family".parse().unwrap(), 10).await.unwrap();
    let json = serde_json::to_value(history.last().unwrap()).unwrap();
    assert_eq!(json["delivery"]["to"], format!("whatsapp {FAMILY}"));
    pincer.stop().await;
}

#[tokio::test]
async fn the_same_message_delivered_twice_is_answered_once() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    let message = inbound(FAMILY, &alice(), "3EB0DUPLICATE", wa::Message::text("@Andy once please"), false);
    wa.deliver(message.clone());
    wa.wait_sent(FAMILY, 1).await;
    // WhatsApp redelivers after a reconnect.
    wa.deliver(message);
    let (sent, turns) = before_a_marker(&wa, &api, &["once please"]).await;
    assert_eq!(sent.len(), 1, "answered once: {sent:?}");
    assert_eq!(turns.len(), 1, "the copy never reached the agent: {turns:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn mentions_of_the_bots_lid_and_replies_to_its_messages_engage_and_its_own_messages_do_not() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say_with(FAMILY, &alice(), mentioning(&format!("@{BOT_LID} what time is it"), &[format!("{BOT_LID}@lid")]));
    let sent = wa.wait_sent(FAMILY, 1).await;
    assert!(sent[0].text.contains("what time is it"), "{}", sent[0].text);

    let bot_reply = sent[0].id.clone();
    wa.say_with(FAMILY, &bob(), replying("and tomorrow?", &bot_reply, &format!("{BOT_NUMBER}@s.whatsapp.net"), "ECHO"));
    let sent = wa.wait_sent(FAMILY, 2).await;
    assert!(sent[1].text.contains("and tomorrow?"), "{}", sent[1].text);

    // On a personal number, what the account itself writes comes back: never answered.
    let me = Person { name: "Me", number: BOT_NUMBER, lid: None };
    wa.deliver(inbound(FAMILY, &me, "3EB0FROMME", wa::Message::text("@Andy from the phone"), true));
    wa.deliver(inbound(FAMILY, &bob(), &bot_reply, wa::Message::text("@Andy echoed back"), false));
    let (sent, turns) = before_a_marker(&wa, &api, &["from the phone", "echoed back"]).await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(turns.len(), 2, "its own messages reached no agent: {turns:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_group_that_is_not_registered_reaches_no_agent_but_can_ask_its_id() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);
    let stranger = "120363099999999999@g.us";

    wa.say(stranger, &alice(), "@Andy please answer");
    wa.say(stranger, &alice(), "/chatid");
    let sent = wa.wait_sent(stranger, 1).await;
    assert!(sent[0].text.contains(&format!("pincer groups add NAME --whatsapp {stranger}")), "{}", sent[0].text);
    assert!(sent[0].text.contains("--admin 4915100000001"), "{}", sent[0].text);
    // The adapter takes events in order: the stranger's message was handled
    // before the marker, and the only group it could wrongly reach is this one.
    let (_, turns) = before_a_marker(&wa, &api, &["please answer"]).await;
    assert!(turns.is_empty(), "no agent was asked: {turns:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn text_commands_answer_in_the_group() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say(FAMILY, &bob(), "/help");
    let help = wa.wait_sent(FAMILY, 1).await.remove(0);
    assert!(help.text.contains("/status") && help.text.contains("allow CODE"), "{}", help.text);
    wa.say(FAMILY, &bob(), "/status");
    let status = wa.wait_sent(FAMILY, 2).await.remove(1);
    assert!(status.text.contains("Session: none yet"), "{}", status.text);
    assert!(api.main_requests().is_empty(), "commands are not the agent's");
    pincer.stop().await;
}

fn touch_script() -> fake_api::Script {
    fake_api::scripted(vec![("TOUCH", Reply::bash("touch approved.txt && echo touched", "make a file"))])
}

/// The code in an approval prompt: the word after "allow".
fn code_of(prompt: &str) -> String {
    let at = prompt.find("allow ").expect("the prompt names its code") + "allow ".len();
    prompt[at..].chars().take(4).collect()
}

#[tokio::test]
async fn an_admin_approves_a_tool_by_its_code_and_a_non_admin_cannot() {
    let api = FakeApi::start(touch_script()).await;
    let wa = FakeWa::new();
    let settings = GroupSettings { allowed_tools: Some(vec!["Read".into()]), ..bound(&[&alice()]) };
    let sandbox = family_sandbox(&api, settings).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say(FAMILY, &bob(), "@Andy TOUCH please");
    let prompt = wa.wait_sent(FAMILY, 1).await.remove(0);
    assert!(prompt.text.contains("Bash") && prompt.text.contains("touch approved.txt"), "{}", prompt.text);
    let code = code_of(&prompt.text);

    wa.say(FAMILY, &bob(), &format!("allow {code}"));
    let refused = wa.wait_sent(FAMILY, 2).await.remove(1);
    assert!(refused.text.contains("only this group's admins"), "{}", refused.text);
    assert!(!sandbox.group_dir("family").join("approved.txt").exists(), "a non-admin's answer changes nothing");

    // Alice is known by her LID here; WhatsApp tells her number alongside.
    wa.say_with(FAMILY, &alice(), replying("allow", &prompt.id, &format!("{BOT_NUMBER}@s.whatsapp.net"), "🔐"));
    let after_tool = |wa: &FakeWa| wa.sent(FAMILY).iter().any(|s| s.text.starts_with("AFTER_TOOL"));
    wa.wait_for("the tool ran and the turn ended", after_tool).await;
    let reply = wa.sent(FAMILY).into_iter().find(|s| s.text.starts_with("AFTER_TOOL")).unwrap();
    assert!(reply.text.contains("touched"), "the tool's output reached the model: {}", reply.text);
    assert!(sandbox.group_dir("family").join("approved.txt").exists());
    assert!(wa.sent(FAMILY).iter().any(|s| s.text.contains(&format!("{code} allowed by Alice"))));
    let store = sandbox.store().await;
    let decisions = store.journal().decisions(&"family".parse().unwrap()).await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert!(decisions[0].allowed);
    assert_eq!(decisions[0].decided_by, "whatsapp:4915100000001 (Alice)");
    pincer.stop().await;
}

#[tokio::test]
async fn a_long_commands_approval_comes_in_parts_and_always_is_refused() {
    let tail = "&& touch tail-ran.txt && echo TAIL-RAN";
    let command = format!("echo looking around {} {tail}", "x".repeat(6000));
    let api = FakeApi::start(fake_api::scripted(vec![("LONGCMD", Reply::bash(&command, "look around"))])).await;
    let wa = FakeWa::new();
    let settings = GroupSettings { allowed_tools: Some(vec!["Read".into()]), ..bound(&[&alice()]) };
    let sandbox = family_sandbox(&api, settings).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say(FAMILY, &bob(), "@Andy LONGCMD please");
    wa.wait_for("the prompt", |wa| wa.sent(FAMILY).iter().any(|s| s.text.starts_with("🔐"))).await;
    let sent = wa.sent(FAMILY);
    let prompt = sent.iter().find(|s| s.text.starts_with("🔐")).unwrap();
    let parts: String = sent.iter().take_while(|s| !s.text.starts_with("🔐")).map(|s| s.text.as_str()).collect();
    assert!(parts.contains("part 1 of 2") && parts.contains("part 2 of 2"), "{parts}");
    let joined: String = sent
        .iter()
        .take_while(|s| !s.text.starts_with("🔐"))
        .map(|s| s.text.split_once("```\n").unwrap().1.rsplit_once("\n```").unwrap().0)
        .collect();
    assert!(joined.ends_with(&command), "the parts hold the whole command, tail included");
    let code = code_of(&prompt.text);
    assert!(!prompt.text.contains(&format!("always {code}")), "always is not offered: {}", prompt.text);

    wa.say(FAMILY, &alice(), &format!("always {code}"));
    wa.wait_for("always is refused", |wa| wa.sent(FAMILY).iter().any(|s| s.text.contains("is not offered"))).await;
    wa.say(FAMILY, &alice(), &format!("allow {code}"));
    let after_tool = |wa: &FakeWa| wa.sent(FAMILY).iter().any(|s| s.text.starts_with("AFTER_TOOL"));
    wa.wait_for("the tool ran and the turn ended", after_tool).await;
    assert!(sandbox.group_dir("family").join("tail-ran.txt").exists());
    let store = sandbox.store().await;
    let tools = store.groups().group("family").await.unwrap().settings.allowed_tools;
    assert_eq!(tools, Some(vec!["Read".to_owned()]), "Bash was not allowed for good");
    pincer.stop().await;
}

#[tokio::test]
async fn an_unanswered_approval_is_denied_after_the_timeout() {
    let api = FakeApi::start(touch_script()).await;
    let wa = FakeWa::new();
    let settings = GroupSettings { allowed_tools: Some(vec!["Read".into()]), ..bound(&[&alice()]) };
    let mut sandbox = family_sandbox(&api, settings).await;
    sandbox.config.claude.approval_timeout = Duration::from_secs(2);
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say(FAMILY, &bob(), "@Andy TOUCH please");
    // The model's answer comes after the decision is stored; pincer's own
    // "No answer … was denied" notice may come before it.
    let model_saw_it = |wa: &FakeWa| {
        wa.sent(FAMILY).iter().any(|s| s.text.starts_with("AFTER_TOOL") && s.text.contains("nobody approved"))
    };
    wa.wait_for("the model saw the denial", model_saw_it).await;
    wa.wait_for("the chat is told", |wa| wa.sent(FAMILY).iter().any(|s| s.text.contains("No answer to"))).await;
    assert!(!sandbox.group_dir("family").join("approved.txt").exists());
    let store = sandbox.store().await;
    let decisions = store.journal().decisions(&"family".parse().unwrap()).await.unwrap();
    assert_eq!((decisions[0].allowed, decisions[0].decided_by.as_str()), (false, "timeout"));
    pincer.stop().await;
}

#[tokio::test]
async fn a_reply_queued_while_disconnected_is_delivered_after_reconnecting() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.connected();
    wa.set_connected(false);
    wa.disconnected();
    wa.say(FAMILY, &alice(), "@Andy answer me later");
    wa.wait_for("a send refused while disconnected", |wa| wa.refused(FAMILY) > 0).await;
    assert!(wa.sent(FAMILY).is_empty());
    let status = pincer::channel::whatsapp::link::status(&sandbox.config).await.unwrap();
    assert!(status.contains("connection: disconnected"), "{status}");

    wa.set_connected(true);
    wa.connected();
    let sent = wa.wait_sent(FAMILY, 1).await;
    assert!(sent[0].text.contains("answer me later"), "{}", sent[0].text);
    let (sent, _) = before_a_marker(&wa, &api, &["answer me later"]).await;
    assert_eq!(sent.len(), 1, "once: {sent:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_logged_out_number_is_reported_and_telegram_keeps_working() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let bot = FakeBot::start().await;
    let mut sandbox = family_sandbox(&api, bound(&[])).await;
    sandbox.use_telegram(&bot);
    let team = TgChat { id: -100_300, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() };
    let telegram = GroupSettings { chat: Some(ChatAddress::telegram(team.id, None)), ..GroupSettings::default() };
    sandbox.add_group_with("team", telegram).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.connected();
    wa.set_connected(false);
    wa.logged_out();
    let store = sandbox.store().await;
    tokio::time::timeout(PATIENCE, async {
        while store.channels().channel_health(Platform::WhatsApp).await.unwrap().is_none_or(|h| h.state != "logged_out")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the logout was recorded");
    let status = pincer::channel::whatsapp::link::status(&sandbox.config).await.unwrap();
    assert!(status.contains("logged_out") && status.contains("pincer whatsapp link"), "{status}");

    let alice = TgUser { id: 42, first_name: "Alice".into(), username: None };
    bot.say(&team, &alice, "@Andy still there?");
    let sent = bot.wait_sent(team.id, 1).await;
    assert!(sent[0].text.contains("still there?"), "{}", sent[0].text);

    // A WhatsApp reply waits in the outbox meanwhile.
    wa.say(FAMILY, &bob(), "@Andy are you?");
    wa.wait_for("the reply was tried", |wa| wa.refused(FAMILY) > 0).await;
    let family: GroupName = "family".parse().unwrap();
    assert_eq!(store.outbox().queued_count(&family).await.unwrap(), 1);
    pincer.stop().await;
}

#[tokio::test]
async fn the_durability_hook_stores_a_message_before_it_returns() {
    use pincer::channel::whatsapp::{Hook, Real, WhatsApp};
    use whatsapp_rust::InboundDurabilityHook;

    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = family_sandbox(&api, bound(&[])).await;
    let pincer = sandbox.start().await;
    // The crate's real client, built offline (no WhatsApp server is reachable); its store in memory.
    let bot = whatsapp_rust::bot::Bot::builder()
        .with_backend(whatsapp_rust::wacore::store::InMemoryBackend::new())
        .with_transport_factory(
            whatsapp_rust::transport::TokioWebSocketTransportFactory::new().with_url("ws://127.0.0.1:9/ws/chat"),
        )
        .with_version((2, 3000, 1))
        .build()
        .await
        .unwrap();
    let client = bot.client();
    let hook = Hook::default();
    hook.set(WhatsApp::new(Arc::new(Real(client.clone())), pincer.engine.ports(), "Andy"));

    let message = inbound(FAMILY, &alice(), "3EB0HOOK", wa::Message::text("@Andy stored first"), false);
    hook.on_messages(client.clone(), std::slice::from_ref(&message)).await.expect("stored, so it may be acked");
    let family: GroupName = "family".parse().unwrap();
    let history = pincer.store().history().history(&family, 10).await.unwrap();
    assert!(
        history.iter().any(|e| serde_json::to_value(e).unwrap()["text"] == "@Andy stored first"),
        "the message was in the store when the hook returned: {history:?}"
    );
    // A redelivery after a reconnect is taken as done: acked, and not stored twice.
    hook.on_messages(client, std::slice::from_ref(&message)).await.expect("a copy is acked too");
    let stored = pincer.store().history().history(&family, 10).await.unwrap();
    let copies = stored.iter().filter(|e| serde_json::to_value(e).unwrap()["text"] == "@Andy stored first").count();
    assert_eq!(copies, 1);
    pincer.stop().await;
}

#[tokio::test]
async fn the_device_store_is_created_and_migrated_and_holds_no_link_yet() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let hook = pincer::channel::whatsapp::Hook::default();
    assert!(!pincer::channel::whatsapp::link::device_stored(&sandbox.config));
    let opened = pincer::channel::whatsapp::link::open(&sandbox.config, hook.clone()).await.unwrap();
    assert!(opened.is_none(), "nothing is linked in a new store");
    assert!(sandbox.config.whatsapp_db_path().exists(), "its own file, in data_dir");
    assert!(sandbox.config.whatsapp_db_path().starts_with(&sandbox.config.data_dir));
    // Opening again runs the migrations again over the existing file.
    assert!(pincer::channel::whatsapp::link::open(&sandbox.config, hook).await.unwrap().is_none());
    let status = pincer::channel::whatsapp::link::status(&sandbox.config).await.unwrap();
    assert!(status.contains("no link was completed"), "{status}");
}

#[tokio::test]
async fn linking_fails_in_bounded_time_where_whatsapp_cannot_be_reached() {
    let dir = tempfile::tempdir().unwrap();
    // A closed port on loopback stands in for an unreachable WhatsApp: no traffic leaves the machine.
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(["whatsapp", "link"])
        .current_dir(dir.path())
        .env("PINCER_WHATSAPP__SERVER_URL", "ws://127.0.0.1:9/ws/chat")
        .env("PINCER_WHATSAPP__CONNECT_TIMEOUT", "3s")
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let out = tokio::time::timeout(PATIENCE, run).await.expect("link gives up by itself").unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot reach WhatsApp within 3s") && stderr.contains("Connection refused"), "{stderr}");
}

#[tokio::test]
async fn a_malformed_group_jid_is_refused_with_the_right_form() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let add = |jid: &str| {
        let args = ["pincer", "groups", "add", "family", "--whatsapp", jid, "--admin", "+49 151 0000-0001"];
        let cli = <pincer::cli::Cli as clap::Parser>::try_parse_from(args).unwrap();
        pincer::cli::execute(cli, sandbox.config.clone(), tokio_util::sync::CancellationToken::new())
    };
    let refused = add("4915100000001@s.whatsapp.net").await.unwrap_err().to_string();
    assert!(refused.contains("120363012345678901@g.us"), "{refused}");
    add(FAMILY).await.unwrap();
    let group = sandbox.store().await.groups().group("family").await.unwrap();
    assert_eq!(group.settings.chat, Some(ChatAddress::whatsapp_group(FAMILY).unwrap()));
    assert_eq!(group.settings.admins, ["4915100000001"]);
}
