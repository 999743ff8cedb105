//! WhatsApp on a cluster (issue 36): three nodes in this process
//! (`app::run_with` with `[cluster] enabled`), one PostgreSQL, the real CLI
//! and the fake API. Each node is its own linked companion device of one
//! number (its own fake client), and WhatsApp hands every device the same
//! messages: each is stored once and answered once, and only the node
//! holding `gw:whatsapp:<number>` sends anything to the chat. When the
//! holder stops, or its device is logged out, another node claims the
//! number and sends, including the reply the stopped holder could not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pincer::cluster::NodeId;
use pincer::config::Secret;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use whatsapp_rust::proto_helpers::MessageBuilderExt;
use whatsapp_rust::waproto::whatsapp as wa;

use crate::support::cluster::holder;
use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_wa::{inbound, FakeWa, Person, BOT_NUMBER};
use crate::support::harness::{Daemon, Sandbox, PATIENCE};
use crate::support::postgres;

const TEAM: &str = "120363012345678936@g.us";

fn alice() -> Person {
    Person { name: "Alice", number: "4915100000001", lid: Some("111111111111111") }
}

fn lease() -> String {
    format!("gw:whatsapp:{BOT_NUMBER}")
}

/// One node: its data directory and config, its own linked device, its daemon.
struct Node {
    id: String,
    sandbox: Sandbox,
    wa: FakeWa,
    daemon: Option<Daemon>,
}

/// `count` nodes on `url`, with a 3 s lease; the group `team` answers every
/// message in [`TEAM`]. Started, with a connection to their database.
async fn team(api: &FakeApi, url: &str, count: usize) -> (Vec<Node>, sqlx::PgConnection) {
    let mut nodes: Vec<Node> = (1..=count)
        .map(|n| {
            let mut sandbox = Sandbox::new(api);
            sandbox.config.store.url = Some(Secret::new(url.to_owned()));
            sandbox.config.cluster.enabled = true;
            sandbox.config.cluster.node_id = Some(NodeId::new(format!("n{n}")).unwrap());
            sandbox.config.cluster.lease_ttl = Duration::from_secs(3);
            sandbox.fast_retries();
            Node { id: format!("n{n}"), sandbox, wa: FakeWa::new(), daemon: None }
        })
        .collect();
    let chat = Some(ChatAddress::whatsapp_group(TEAM).unwrap());
    let settings = GroupSettings { chat, requires_trigger: false, ..GroupSettings::default() };
    nodes[0].sandbox.add_group_with("team", settings).await;
    for node in &mut nodes {
        node.daemon = Some(node.sandbox.spawn_daemon_with_whatsapp(&node.wa));
        // A device is fit to be the gateway once it connected.
        node.wa.connected();
    }
    let db = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.expect("the nodes' database");
    (nodes, db)
}

/// Alice writes `text` in the team; every running node's device gets it.
/// Returns its message id.
fn say(nodes: &[Node], text: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!("3EB0C1A5{:08X}", NEXT.fetch_add(1, Ordering::SeqCst));
    let message = inbound(TEAM, &alice(), &id, wa::Message::text(text), false);
    for node in nodes.iter().filter(|n| n.daemon.is_some()) {
        node.wa.deliver(message.clone());
    }
    id
}

/// The messages holding `word` that reached the team, from any node.
fn sent(nodes: &[Node], word: &str) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for node in nodes {
        all.extend(node.wa.sent(TEAM).into_iter().filter(|s| s.text.contains(word)).map(|s| (node.id.clone(), s.text)));
    }
    all
}

/// Waits until `word` was answered (the fakes are looked at every 50 ms:
/// each wakes only its own waiters); returns the nodes that sent it.
async fn answered(nodes: &[Node], word: &str) -> Vec<String> {
    let echoes = |nodes: &[Node]| -> Vec<String> {
        sent(nodes, word).into_iter().filter(|(_, text)| text.starts_with("ECHO:")).map(|(by, _)| by).collect()
    };
    let waited = tokio::time::timeout(PATIENCE, async {
        while echoes(nodes).is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{word} was not answered; sent: {:?}", sent(nodes, "")));
    echoes(nodes)
}

/// Polls the store until `f` holds for it.
async fn until<T>(db: &mut sqlx::PgConnection, what: &str, f: impl AsyncFn(&mut sqlx::PgConnection) -> Option<T>) -> T {
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(found) = f(db).await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("waited {PATIENCE:?} for {what}"))
}

async fn stored_copies(db: &mut sqlx::PgConnection, id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM inbound WHERE external_id LIKE $1")
        .bind(format!("%{id}"))
        .fetch_one(db)
        .await
        .unwrap()
}

async fn queued(db: &mut sqlx::PgConnection, word: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE text LIKE $1 AND state = 'queued'")
        .bind(format!("%{word}%"))
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn every_device_stores_the_holder_alone_answers_and_after_it_stops_another_sends() {
    let api = FakeApi::start(fake_api::echo()).await;
    let url = postgres::server().fresh_database();
    let (mut nodes, mut db) = team(&api, &url, 3).await;
    let first = until(&mut db, "a holder of the number", async |db| holder(db, &lease()).await).await;

    let apple = say(&nodes, "hello APPLE");
    assert_eq!(answered(&nodes, "APPLE").await, std::slice::from_ref(&first), "answered once, by the holder");
    assert_eq!(stored_copies(&mut db, &apple).await, 1, "stored once");
    let holder_wa = nodes.iter().find(|n| n.id == first).unwrap().wa.clone();
    holder_wa.wait_for("the receipt reaction", |wa| wa.reactions(TEAM).iter().any(|r| r.id == apple)).await;
    // A command is stored by no one: only the holder runs it, once (`/chatid`
    // is answered straight, not through the group's outbox).
    say(&nodes, "/chatid");
    holder_wa.wait_for("the group's id", |wa| wa.sent(TEAM).iter().any(|s| s.text.starts_with("Group id:"))).await;
    for node in nodes.iter().filter(|n| n.id != first) {
        // Read receipts tell WhatsApp the account read it: every device sends them.
        node.wa.wait_for("the message marked read", |wa| wa.read().contains(&apple)).await;
        let wa = &node.wa;
        assert!(wa.sent(TEAM).is_empty() && wa.reactions(TEAM).is_empty(), "{} sent nothing", node.id);
        assert!(wa.composing(TEAM).is_empty(), "{} showed no typing", node.id);
    }

    // The holder cannot reach WhatsApp: its reply waits in the outbox; then it stops.
    holder_wa.set_connected(false);
    say(&nodes, "hello PEAR");
    until(&mut db, "the reply waiting in the outbox", async |db| (queued(db, "PEAR").await == 1).then_some(())).await;
    let stopping = nodes.iter_mut().find(|n| n.id == first).unwrap();
    stopping.daemon.take().unwrap().stop().await;

    let pear = answered(&nodes, "PEAR").await;
    let next = until(&mut db, "another holder", async |db| holder(db, &lease()).await.filter(|h| *h != first)).await;
    assert_eq!(pear, std::slice::from_ref(&next), "the queued reply, sent by the next holder");
    let fig = say(&nodes, "hello FIG");
    assert_eq!(answered(&nodes, "FIG").await, std::slice::from_ref(&next));
    assert_eq!(stored_copies(&mut db, &fig).await, 1);
    assert_eq!(sent(&nodes, "PEAR").len(), 1, "sent once");
    assert!(sent(&nodes, "").iter().all(|(by, _)| *by == first || *by == next), "{:?}", sent(&nodes, ""));
    for node in &mut nodes {
        if let Some(daemon) = node.daemon.take() {
            daemon.stop().await;
        }
    }
}

#[tokio::test]
async fn a_holder_whose_device_is_logged_out_lets_the_number_go_to_a_node_that_can_send() {
    let api = FakeApi::start(fake_api::echo()).await;
    let url = postgres::server().fresh_database();
    let (mut nodes, mut db) = team(&api, &url, 2).await;
    let first = until(&mut db, "a holder of the number", async |db| holder(db, &lease()).await).await;
    say(&nodes, "hello PLUM");
    assert_eq!(answered(&nodes, "PLUM").await, std::slice::from_ref(&first));

    // The device was unlinked on the phone: its node cannot send any more.
    nodes.iter().find(|n| n.id == first).unwrap().wa.logged_out();
    let next = until(&mut db, "another holder", async |db| holder(db, &lease()).await.filter(|h| *h != first)).await;
    say(&nodes, "hello KIWI");
    assert_eq!(answered(&nodes, "KIWI").await, std::slice::from_ref(&next), "sent by the node that can");
    for node in &mut nodes {
        node.daemon.take().unwrap().stop().await;
    }
}

/// A command whose message reaches a node while no node holds the number
/// (here: the holder's device was logged out, the other's is not fit yet;
/// after a holder's kill -9 it is the lease's ttl) is run all the same, by
/// the first node to see it, and its answer waits in the outbox for the
/// next holder, which sends it once.
#[tokio::test]
async fn a_command_sent_while_no_node_holds_the_number_waits_like_a_message() {
    let api = FakeApi::start(fake_api::echo()).await;
    let url = postgres::server().fresh_database();
    let (mut nodes, mut db) = team(&api, &url, 2).await;
    let first = until(&mut db, "a holder of the number", async |db| holder(db, &lease()).await).await;
    say(&nodes, "hello PLUM");
    assert_eq!(answered(&nodes, "PLUM").await, std::slice::from_ref(&first));

    // No device fit to send: the holder's logged out, the other's too.
    for node in &nodes {
        node.wa.logged_out();
    }
    until(&mut db, "no holder of the number", async |db| holder(db, &lease()).await.is_none().then_some(())).await;
    say(&nodes, "/status");
    until(&mut db, "the answer waiting in the outbox", async |db| (queued(db, "Session").await == 1).then_some(()))
        .await;

    // A device links again: its node holds the number and sends the answer, once.
    nodes[1].wa.connected();
    until(&mut db, "a holder again", async |db| holder(db, &lease()).await).await;
    let waited = tokio::time::timeout(PATIENCE, async {
        while sent(&nodes, "Session").is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("the answer was not sent; sent: {:?}", sent(&nodes, "")));
    say(&nodes, "hello FIG");
    answered(&nodes, "FIG").await;
    assert_eq!(sent(&nodes, "Session").len(), 1, "answered once: {:?}", sent(&nodes, ""));
    for node in &mut nodes {
        node.daemon.take().unwrap().stop().await;
    }
}
