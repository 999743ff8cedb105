//! Upgrades nobody notices (issue 45): a cluster node stopped by SIGTERM or
//! `pincer drain` hands its groups to the other nodes at turn boundaries and
//! its Telegram gateway to a node that can take it, so the chats see every
//! message answered once, in the same conversation, with no "moved" notice;
//! a rolling restart of all three nodes too. Real nodes (`pincer run`), one
//! PostgreSQL, the real CLI, the fake API and the fake Bot API.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use sqlx::PgConnection;

use crate::support::cluster::{holder, nodes, wait_alive, wait_count, Node};
use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{pincer_command, PATIENCE};
use crate::support::postgres;

/// The Bot API's lease of the harness's bot token.
const GATEWAY: &str = "gw:telegram:123456";

fn chat(n: i64) -> TgChat {
    TgChat { id: -100_950 - n, kind: ChatKind::Supergroup { forum: false }, title: format!("Chat {n}") }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

/// Echoes of `word` in `chat`, once there is at least one.
async fn answered(bot: &FakeBot, chat: &TgChat, word: &str) -> usize {
    let echoes = |bot: &FakeBot| {
        bot.sent(chat.id).iter().filter(|s| s.text.starts_with("ECHO:") && s.text.contains(word)).count()
    };
    bot.wait_for(word, |bot| echoes(bot) > 0).await;
    echoes(bot)
}

/// What the chats were told of a move to another machine (nothing, after a drain).
fn moved_notices(bot: &FakeBot, chats: &[TgChat]) -> Vec<String> {
    let sent = chats.iter().flat_map(|c| bot.sent(c.id));
    sent.map(|s| s.text).filter(|t| t.contains("moved this group to another machine")).collect()
}

/// How many model requests asked `needle` as their newest prompt.
fn asked(api: &FakeApi, needle: &str) -> usize {
    api.main_requests().iter().filter(|r| r.last_user_text().contains(needle)).count()
}

async fn until_asked(api: &FakeApi, needle: &str) {
    let asking = async {
        while asked(api, needle) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, asking).await.unwrap_or_else(|_| panic!("{needle} reached the model"));
}

/// `nodes` with groups `g1`..`gN` bound to `chat(1)`..`chat(N)`, answering
/// every message, registered through the first; all started and alive.
async fn serving(mut nodes: Vec<Node>, url: &str, groups: i64) -> (Vec<Node>, PgConnection) {
    for n in 1..=groups {
        let address = ChatAddress::telegram(chat(n).id, None);
        let settings = GroupSettings { chat: Some(address), requires_trigger: false, ..Default::default() };
        nodes[0].sandbox.add_group_with(&format!("g{n}"), settings).await;
    }
    for node in &mut nodes {
        node.start().await;
    }
    let mut db = <PgConnection as sqlx::Connection>::connect(url).await.expect("the nodes' database");
    wait_alive(&mut db, nodes.len() as i64).await;
    (nodes, db)
}

/// Sends SIGTERM to `node` without waiting for it to exit.
fn sigterm(node: &Node) {
    let pid = node.child.as_ref().expect("the node runs").id().expect("its pid");
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
}

async fn exited(node: &mut Node) {
    let mut child = node.child.take().expect("the node runs");
    tokio::time::timeout(PATIENCE, child.wait()).await.expect("the node exits after its drain").unwrap();
}

fn log_of(node: &Node) -> String {
    std::fs::read_to_string(node.log()).unwrap_or_default()
}

#[tokio::test]
async fn sigterm_on_the_owner_lets_its_turn_finish_and_hands_the_group_over_unnoticed() {
    let slow = fake_api::Reply::trickle(Duration::from_secs(6), fake_api::Reply::text("ECHO: slow PAPAYA"));
    let api = FakeApi::start(fake_api::faults(vec![("SLOW PAPAYA", vec![slow])], fake_api::echo())).await;
    let bot = FakeBot::start().await;
    let url = postgres::server().fresh_database();
    let (mut nodes, mut db) = serving(nodes(&api, &bot, &url), &url, 1).await;
    let team = chat(1);

    bot.say(&team, &alice(), "remember PINEAPPLE");
    assert_eq!(answered(&bot, &team, "PINEAPPLE").await, 1);
    let owner = holder(&mut db, "g1").await.expect("a node holds the group");
    bot.say(&team, &alice(), "SLOW PAPAYA");
    until_asked(&api, "SLOW PAPAYA").await;

    let at = nodes.iter().position(|n| n.id == owner).unwrap();
    sigterm(&nodes[at]);
    let since = Instant::now();
    // Said while the owner drains: it waits in the store for the next owner.
    bot.say(&team, &alice(), "and then MANGO");
    assert_eq!(answered(&bot, &team, "PAPAYA").await, 1, "the turn in flight was answered");
    let turn_done = Instant::now();
    assert_eq!(answered(&bot, &team, "MANGO").await, 1);
    eprintln!(
        "hand-over: the waiting message was answered by the next owner {:?} after the turn's answer",
        turn_done.elapsed()
    );
    exited(&mut nodes[at]).await;
    eprintln!("the owner drained and exited {:?} after SIGTERM", since.elapsed());

    let after = holder(&mut db, "g1").await.expect("a node holds the group");
    assert_ne!(after, owner, "another node runs the group");
    assert_eq!(answered(&bot, &team, "PAPAYA").await, 1, "the turn in flight was answered");
    assert_eq!(asked(&api, "SLOW PAPAYA"), 1, "its prompt reached the model once");
    assert!(
        moved_notices(&bot, std::slice::from_ref(&team)).is_empty(),
        "{:?}",
        moved_notices(&bot, std::slice::from_ref(&team))
    );
    let last = api.main_requests().into_iter().rev().find(|r| r.all_text().contains("MANGO")).unwrap().all_text();
    assert!(last.contains("PINEAPPLE") && last.contains("PAPAYA"), "the conversation moved whole: {last}");
    assert!(log_of(&nodes[at]).contains("handed the group over"), "the owner let the group go itself");

    bot.say(&team, &alice(), "MARKER");
    answered(&bot, &team, "MARKER").await;
    for word in ["PINEAPPLE", "PAPAYA", "MANGO"] {
        assert_eq!(answered(&bot, &team, word).await, 1, "{word} answered once");
    }
}

/// How long each message waited for its answer, by word.
type Delays = Arc<Mutex<Vec<(String, Duration)>>>;

/// Says `word` in `chat` and notes, in the background, how long its answer took.
fn say_timed(bot: &Arc<FakeBot>, chat: &TgChat, word: String, delays: &Delays) -> tokio::task::JoinHandle<()> {
    bot.say(chat, &alice(), &format!("note {word}"));
    let (bot, chat, delays, since) = (bot.clone(), chat.clone(), delays.clone(), Instant::now());
    tokio::spawn(async move {
        answered(&bot, &chat, &word).await;
        delays.lock().unwrap().push((word, since.elapsed()));
    })
}

#[tokio::test]
async fn a_rolling_restart_of_every_node_answers_each_message_once_with_no_notice() {
    // Every turn takes a while, so the nodes are stopped with turns in flight.
    let api = FakeApi::start(fake_api::delayed(Duration::from_millis(1500), fake_api::echo())).await;
    let bot = Arc::new(FakeBot::start().await);
    let url = postgres::server().fresh_database();
    let (mut nodes, mut db) = serving(nodes(&api, &bot, &url), &url, 3).await;
    let chats: Vec<TgChat> = (1..=3).map(chat).collect();
    let delays: Delays = Arc::default();
    let mut waiting = Vec::new();
    let mut words = Vec::new();
    for (i, c) in chats.iter().enumerate() {
        let word = format!("FIRST{i}");
        waiting.push(say_timed(&bot, c, word.clone(), &delays));
        words.push((c.clone(), word));
    }
    for handle in waiting.drain(..) {
        handle.await.unwrap();
    }

    let mut gateway_moves = 0;
    for round in 0..nodes.len() {
        let was_gateway = holder(&mut db, GATEWAY).await.as_deref() == Some(nodes[round].id.as_str());
        // A message to each group just before the stop, and again while it drains.
        for (i, c) in chats.iter().enumerate() {
            let word = format!("BEFORE{round}X{i}");
            waiting.push(say_timed(&bot, c, word.clone(), &delays));
            words.push((c.clone(), word));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        sigterm(&nodes[round]);
        for (i, c) in chats.iter().enumerate() {
            let word = format!("DURING{round}X{i}");
            waiting.push(say_timed(&bot, c, word.clone(), &delays));
            words.push((c.clone(), word));
        }
        exited(&mut nodes[round]).await;
        if was_gateway {
            assert!(log_of(&nodes[round]).contains("handed the gateway to another node"), "{}", nodes[round].id);
            gateway_moves += 1;
        }
        nodes[round].start().await;
        wait_alive(&mut db, nodes.len() as i64).await;
    }
    for handle in waiting {
        handle.await.unwrap();
    }
    assert!(gateway_moves >= 1, "the gateway was handed over at least once");

    for c in &chats {
        bot.say(c, &alice(), "MARKER");
        answered(&bot, c, "MARKER").await;
    }
    for (c, word) in &words {
        assert_eq!(answered(&bot, c, word).await, 1, "{word} answered once");
        assert_eq!(asked(&api, word), 1, "{word}'s prompt reached the model once");
        let stored = format!("SELECT COUNT(*) FROM inbound WHERE text LIKE '%{word}'");
        wait_count(&mut db, &stored, PATIENCE, &format!("{word} stored once"), |n| n == 1).await;
    }
    assert!(moved_notices(&bot, &chats).is_empty(), "{:?}", moved_notices(&bot, &chats));
    for (i, c) in chats.iter().enumerate() {
        let markers = api.main_requests().into_iter().filter(|r| r.last_user_text().contains("MARKER"));
        let first = format!("FIRST{i}");
        let last = markers.map(|r| r.all_text()).find(|t| t.contains(&first));
        assert!(last.is_some(), "chat {} kept its conversation across the restarts", c.id);
    }
    let delays = delays.lock().unwrap();
    let longest = delays.iter().max_by_key(|(_, d)| *d).unwrap();
    let mut sorted: Vec<Duration> = delays.iter().map(|(_, d)| *d).collect();
    sorted.sort();
    eprintln!(
        "rolling restart: {} answers, median {:?}, longest {:?} ({})",
        sorted.len(),
        sorted[sorted.len() / 2],
        longest.1,
        longest.0
    );
}

#[tokio::test]
async fn pincer_drain_prints_progress_and_ends_with_the_node_holding_nothing() {
    let slow = fake_api::Reply::trickle(Duration::from_secs(4), fake_api::Reply::text("ECHO: slow QUINCE"));
    let api = FakeApi::start(fake_api::faults(vec![("SLOW QUINCE", vec![slow])], fake_api::echo())).await;
    let bot = FakeBot::start().await;
    let url = postgres::server().fresh_database();
    let (mut nodes, mut db) = serving(nodes(&api, &bot, &url), &url, 1).await;
    let team = chat(1);
    bot.say(&team, &alice(), "remember PLUM");
    assert_eq!(answered(&bot, &team, "PLUM").await, 1);
    let owner = holder(&mut db, "g1").await.expect("a node holds the group");
    bot.say(&team, &alice(), "SLOW QUINCE");
    until_asked(&api, "SLOW QUINCE").await;

    let at = nodes.iter().position(|n| n.id == owner).unwrap();
    let node = &nodes[at];
    let since = Instant::now();
    let out = pincer_command(node.sandbox.root(), &node.sandbox.write_config(), &["drain"]).await;
    let handed_over_in = since.elapsed();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("draining: 1 group(s) left (1 finishing a turn)"), "{said}");
    assert!(said.contains("drained: this node holds nothing"), "{said}");
    eprintln!("`pincer drain` handed the group over {handed_over_in:?} after it was asked (a 4 s turn in flight)");
    exited(&mut nodes[at]).await;
    let held = format!("SELECT COUNT(*) FROM leases WHERE node_id = '{owner}'");
    let held: i64 = sqlx::query_scalar(&held).fetch_one(&mut db).await.unwrap();
    assert_eq!(held, 0, "the drained node holds no lease");

    assert_eq!(answered(&bot, &team, "QUINCE").await, 1);
    bot.say(&team, &alice(), "and PEACH");
    assert_eq!(answered(&bot, &team, "PEACH").await, 1);
    assert_ne!(holder(&mut db, "g1").await.as_deref(), Some(owner.as_str()));
    assert_eq!(asked(&api, "SLOW QUINCE"), 1, "the turn in flight ran once");
    assert!(moved_notices(&bot, std::slice::from_ref(&team)).is_empty());
}

#[tokio::test]
async fn pincer_drain_on_one_machine_says_there_is_nothing_to_hand_over_and_what_to_do() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = crate::support::harness::Sandbox::new(&api);
    let config = sandbox.write_config();
    let args = ["--config".as_ref(), config.as_os_str()];
    let mut child = crate::support::harness::spawn_pincer_run(sandbox.root(), &args, &[]).await;
    let out = pincer_command(sandbox.root(), &config, &["drain"]).await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("not a cluster node") && said.contains("systemctl restart pincer"), "{said}");
    let status = pincer_command(sandbox.root(), &config, &["status", "--json"]).await;
    assert!(status.status.success(), "the pincer keeps running");
    assert!(child.try_wait().unwrap().is_none(), "the pincer keeps running");
}
