//! A reached budget holds a group quietly: `pincer chat` ends with the
//! notice instead of waiting for the period to turn, "typing…" stops, the
//! session says until when it is held; and what code in the sandbox spends
//! through the credential proxy by itself, without the CLI, counts toward
//! the budget. The real CLI against the fake Messages API, confined.

use pincer::app::console_chat;
use pincer::channel::console::{ChatEnd, ConsoleOptions};
use pincer::domain::budget::{Budget, Periods};
use pincer::domain::ChatAddress;
use pincer::session::QueueHold;
use pincer::store::GroupSettings;

use crate::sandbox::require_bwrap;
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_wa::{FakeWa, Person};
use crate::support::harness::{Sandbox, PATIENCE};

fn budget(budget: Budget) -> GroupSettings {
    GroupSettings { budget, ..GroupSettings::default() }
}

#[tokio::test]
async fn a_held_group_ends_a_console_chat_with_the_notice_instead_of_waiting() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let one_turn = budget(Budget { daily_turns: Some(1), ..Budget::default() });
    let group = sandbox.add_group_with("console", one_turn).await;
    let pincer = sandbox.start().await;
    // Waiting for the held message would take as long as this: the test's own limit.
    let opts = ConsoleOptions {
        group: group.clone(),
        sender: "me".into(),
        wait_limit: PATIENCE,
        attached: false,
        attach: vec![],
    };
    let chat = |input: &'static [u8]| {
        let (engine, shutdown, opts) = (&pincer.engine, pincer.shutdown.clone(), opts.clone());
        async move {
            let mut output = Vec::new();
            let end = console_chat(engine, &opts, input, &mut output, shutdown).await.unwrap();
            (end, String::from_utf8(output).unwrap())
        }
    };

    let (end, first) = chat(b"one\n").await;
    assert_eq!(end, ChatEnd::Done, "{first}");
    assert!(first.contains("ECHO: one"), "{first}");
    let (end, second) = chat(b"two\n").await;
    let printed = format!("{first}{second}");
    assert_eq!(end, ChatEnd::Done, "the chat ended with the notice, not at the wait limit: {printed}");
    assert_eq!(printed.matches("budget of 1 turns a day").count(), 1, "told once: {printed}");
    assert!(!printed.contains("ECHO: two"), "held: {printed}");

    let session = pincer.engine.router.session(&group).await.unwrap();
    assert!(!session.busy() && !session.turn_in_progress(), "quiet: no typing… for it {:?}", session.status());
    let held = session.status().held;
    assert!(matches!(held, Some(QueueHold::Budget { .. })), "/status says until when: {held:?}");
    assert!(pincer.engine.router.untaken(&group).await.unwrap(), "the message waits in the queue");
    pincer.stop().await;
}

const FAMILY: &str = "120363012345678902@g.us";

#[tokio::test]
async fn typing_stops_in_a_held_whatsapp_group() {
    let api = FakeApi::start(fake_api::echo()).await;
    let wa = FakeWa::new();
    let mut sandbox = Sandbox::new(&api);
    sandbox.fast_retries();
    let settings = GroupSettings {
        chat: Some(ChatAddress::whatsapp_group(FAMILY).unwrap()),
        budget: Budget { daily_turns: Some(0), ..Budget::default() },
        ..GroupSettings::default()
    };
    sandbox.add_group_with("family", settings).await;
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);
    let alice = Person { name: "Alice", number: "4915100000001", lid: None };
    wa.say(FAMILY, &alice, "@Andy are you there?");
    let sent = wa.wait_sent(FAMILY, 1).await;
    assert!(sent[0].text.contains("budget of 0 turns a day"), "{}", sent[0].text);
    // "typing…" is turned off (WhatsApp's `paused`), not repeated until midnight.
    wa.wait_for("typing… turned off", |wa| wa.composing(FAMILY).contains(&false)).await;
    assert!(api.main_requests().is_empty(), "nothing reached the model");
    pincer.stop().await;
}

/// Forty calls of the Messages API straight through the proxy's socket with
/// the sandbox's placeholder key, as code in the sandbox can make them.
fn spend_around_the_cli() -> String {
    let body = r#"{"model":"claude-opus-4-1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    format!(
        "for i in $(seq 40); do curl -sS -m 20 -o /dev/null --unix-socket \"$ANTHROPIC_UNIX_SOCKET\" \
         -H \"x-api-key: $ANTHROPIC_API_KEY\" -H 'content-type: application/json' -d '{body}' \
         http://localhost/v1/messages; done; echo SPENT"
    )
}

#[tokio::test]
async fn what_code_in_the_sandbox_spends_through_the_proxy_counts_toward_the_budget() {
    require_bwrap().await;
    let script = fake_api::scripted(vec![("SPEND_AROUND", Reply::bash(&spend_around_the_cli(), "call the API"))]);
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    // A cent a day: the CLI's own two calls cost far less, the forty others more.
    let settings = GroupSettings {
        allowed_tools: Some(vec!["Bash".into()]),
        budget: Budget { daily_cents: Some(1), ..Budget::default() },
        ..GroupSettings::default()
    };
    let group = sandbox.add_group_with("spender", settings).await;
    let pincer = sandbox.start().await;
    pincer.send(&group, "please SPEND_AROUND the agent").await;
    let reply = pincer.next_outbound().await.text;
    assert!(reply.starts_with("AFTER_TOOL") && reply.contains("SPENT"), "{reply}");

    pincer.send(&group, "and now?").await;
    let notice = pincer.next_outbound().await.text;
    assert!(notice.contains("budget of $0.01 a day"), "held by what passed the proxy: {notice}");
    let held = pincer.wait_status(&group, |s| s.held.is_some()).await;
    assert!(matches!(held.held, Some(QueueHold::Budget { .. })), "{held:?}");

    let periods = Periods::at(std::time::SystemTime::now(), chrono_tz::UTC);
    let results = pincer.store().budgets().spent(&group, &periods).await.unwrap();
    let proxied = pincer.store().budgets().proxy_spent(&group, &periods).await.unwrap();
    assert!(results.today_usd < 0.01, "the results alone are under the budget: {results:?}");
    // Opus 4.1 at $15/$75 per million, 5 tokens in and 5 out per call.
    assert!(proxied.today_usd >= 40.0 * 0.00045 - 1e-9, "every call was counted: {proxied:?}");
    pincer.stop().await;
}
