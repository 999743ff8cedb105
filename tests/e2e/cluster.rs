//! Three `pincer run` nodes on one PostgreSQL (`[cluster] enabled`), each
//! with its own data directory, the real CLI, the fake API and one fake Bot
//! API: a group is answered by the node holding its lease, and when that
//! node is killed another one answers the group's next message, once, in
//! the same conversation.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::cluster::NodeId;
use pincer::config::Secret;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{spawn_pincer_run_logging, Sandbox};
use crate::support::postgres;

fn team() -> TgChat {
    TgChat { id: -100_901, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

/// One node: its sandbox (data directory, config) and its process.
struct Node {
    id: String,
    sandbox: Sandbox,
    child: Option<tokio::process::Child>,
}

impl Node {
    fn log(&self) -> PathBuf {
        self.sandbox.root().join("pincer.log")
    }

    async fn start(&mut self) {
        let config = self.sandbox.write_config();
        let args = ["--config".as_ref(), config.as_os_str()];
        let log = self.log();
        self.child = Some(spawn_pincer_run_logging(self.sandbox.root(), &args, &[], Some(&log)).await);
    }

    async fn kill_9(&mut self) {
        let mut child = self.child.take().expect("the node runs");
        kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGKILL).unwrap();
        child.wait().await.unwrap();
    }
}

/// Three nodes sharing `url`, each polling `bot` when it is the gateway.
fn nodes(api: &FakeApi, bot: &FakeBot, url: &str) -> Vec<Node> {
    (1..=3)
        .map(|n| {
            let mut sandbox = Sandbox::new(api);
            sandbox.config.store.url = Some(Secret::new(url.to_owned()));
            sandbox.config.cluster.enabled = true;
            sandbox.config.cluster.node_id = Some(NodeId::new(&format!("n{n}")).unwrap());
            sandbox.config.cluster.lease_ttl = Duration::from_secs(3);
            sandbox.use_telegram(bot);
            sandbox.fast_retries();
            Node { id: format!("n{n}"), sandbox, child: None }
        })
        .collect()
}

/// Echoes of `word` in the team chat, once `word` was answered at least once.
async fn answered(bot: &FakeBot, word: &str) -> usize {
    let echoes = |bot: &FakeBot| {
        bot.sent(team().id).iter().filter(|s| s.text.starts_with("ECHO:") && s.text.contains(word)).count()
    };
    bot.wait_for(word, |bot| echoes(bot) > 0).await;
    echoes(bot)
}

/// The node holding `lease` now, by the store.
async fn holder(db: &mut sqlx::PgConnection, lease: &str) -> Option<String> {
    sqlx::query_scalar("SELECT node_id FROM leases WHERE name = $1")
        .bind(lease)
        .fetch_optional(db)
        .await
        .unwrap()
        .flatten()
}

#[tokio::test]
async fn a_killed_nodes_group_is_answered_by_another_once_in_the_same_conversation() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let url = postgres::server().fresh_database();
    let mut nodes = nodes(&api, &bot, &url);
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(team().id, None)),
        requires_trigger: false,
        ..Default::default()
    };
    nodes[0].sandbox.add_group_with("team", settings).await;
    for node in &mut nodes {
        node.start().await;
    }
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();

    bot.say(&team(), &alice(), "remember PINEAPPLE");
    assert_eq!(answered(&bot, "PINEAPPLE").await, 1);
    // A second turn: the first one's transcript is complete in the store by its result.
    bot.say(&team(), &alice(), "and KIWI");
    assert_eq!(answered(&bot, "KIWI").await, 1);
    let owner = holder(&mut db, "team").await.expect("a node holds the group");

    let killed = nodes.iter_mut().find(|n| n.id == owner).unwrap();
    killed.kill_9().await;
    let since = Instant::now();
    bot.say(&team(), &alice(), "what did I say? MANGO");
    assert_eq!(answered(&bot, "MANGO").await, 1);
    eprintln!("answered by another node {:?} after the kill", since.elapsed());
    let after = holder(&mut db, "team").await.expect("a node holds the group");
    assert_ne!(after, owner, "another node took the group");

    // The conversation went on: the model saw the earlier turns.
    let last = api.main_requests().into_iter().rev().find(|r| r.all_text().contains("MANGO")).unwrap().all_text();
    assert!(last.contains("remember PINEAPPLE") && last.contains("KIWI"), "the conversation moved: {last}");

    // Each message answered once: a marker's answer comes after any second answer would.
    bot.say(&team(), &alice(), "MARKER");
    answered(&bot, "MARKER").await;
    for word in ["PINEAPPLE", "KIWI", "MANGO"] {
        assert_eq!(answered(&bot, word).await, 1, "{word} answered once");
    }
}

#[tokio::test]
async fn a_frozen_owner_loses_its_group_and_after_it_thaws_writes_nothing_for_it() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let url = postgres::server().fresh_database();
    let mut nodes = nodes(&api, &bot, &url);
    let settings =
        GroupSettings { chat: Some(ChatAddress::telegram(team().id, None)), requires_trigger: false, ..Default::default() };
    nodes[0].sandbox.add_group_with("team", settings).await;
    for node in &mut nodes {
        node.start().await;
    }
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    bot.say(&team(), &alice(), "remember PINEAPPLE");
    assert_eq!(answered(&bot, "PINEAPPLE").await, 1);
    let owner = holder(&mut db, "team").await.expect("a node holds the group");
    let frozen = nodes.iter().find(|n| n.id == owner).unwrap();
    let pid = Pid::from_raw(frozen.child.as_ref().unwrap().id().unwrap() as i32);

    kill(pid, Signal::SIGSTOP).unwrap();
    bot.say(&team(), &alice(), "still there? MANGO");
    assert_eq!(answered(&bot, "MANGO").await, 1);
    let after = holder(&mut db, "team").await.expect("a node holds the group");
    assert_ne!(after, owner, "another node took the group from the frozen one");
    let results_before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM results").fetch_one(&mut db).await.unwrap();

    // Thawed: its deadline has long passed, so it drops the group and says so.
    kill(pid, Signal::SIGCONT).unwrap();
    let log = frozen.log();
    let lapsed = async {
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("this node's lease lapsed") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(crate::support::harness::PATIENCE, lapsed).await.expect("the thawed node sees its lease lapsed");
    bot.say(&team(), &alice(), "MARKER");
    assert_eq!(answered(&bot, "MARKER").await, 1);
    for word in ["PINEAPPLE", "MANGO"] {
        assert_eq!(answered(&bot, word).await, 1, "{word} answered once");
    }
    let results: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM results").fetch_one(&mut db).await.unwrap();
    assert_eq!(results, results_before + 1, "only the marker's result was written after the thaw");
    assert_eq!(holder(&mut db, "team").await.as_deref(), Some(after.as_str()), "the group stayed where it moved");
}
