//! How long a dead node's group takes to move (issue 36): three `pincer
//! run` nodes on one PostgreSQL (the tests' server), the real CLI, the fake
//! API (echo) and the fake Bot API. Each round kills the node that holds
//! the group with SIGKILL, says a message at once, and times the kill to
//! the message's answer in the chat: the holder's row expiring (at most
//! `lease_ttl` after its last renewal), another node claiming the group and
//! (if the killed node was the gateway) the bot, starting the CLI with the
//! moved transcript, and the turn. The killed node is started again before
//! the next round, so three nodes run at each kill.
//!
//! `PINCER_BENCH_KILLS` rounds (10), `PINCER_BENCH_LEASE_TTL` (`10s`, the
//! default; humantime). Printed: median, p95, max, and every sample.
//!
//! ```text
//! PINCER_BENCH_KILLS=10 cargo bench --bench failover
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::bench::print_row;
use support::cluster::{holder, nodes_with, serving_team, through_relays, wait_alive};
use support::fake_api::{echo, FakeApi};
use support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};

fn team() -> TgChat {
    TgChat { id: -100_950, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

fn main() {
    let kills = std::env::var("PINCER_BENCH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let ttl = std::env::var("PINCER_BENCH_LEASE_TTL")
        .ok()
        .map(|v| humantime::parse_duration(&v).expect("PINCER_BENCH_LEASE_TTL: a duration such as 10s"))
        .unwrap_or(Duration::from_secs(10));
    let partition = std::env::var("PINCER_BENCH_FAULT").is_ok_and(|f| f == "partition");
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(failover(kills, ttl, partition));
}

/// Waits until `word`'s echo reached the team chat.
async fn answered(bot: &FakeBot, word: &str) {
    bot.wait_for(word, |bot| bot.sent(team().id).iter().any(|s| s.text.starts_with("ECHO:") && s.text.contains(word)))
        .await;
}

async fn failover(kills: usize, ttl: Duration, partition: bool) {
    let api = FakeApi::start(echo()).await;
    let bot = FakeBot::start().await;
    let url = support::postgres::server().fresh_database();
    let mut nodes = nodes_with(&api, &bot, &url, 3, ttl);
    let relays = if partition { through_relays(&mut nodes, &url).await } else { Vec::new() };
    let (mut nodes, mut db) = serving_team(nodes, &url, team().id).await;
    bot.say(&team(), &alice(), "hello WARM");
    answered(&bot, "WARM").await;

    let mut samples = Vec::with_capacity(kills);
    for round in 0..kills {
        let owner = holder(&mut db, "team").await.expect("a node holds the group");
        let at = nodes.iter().position(|n| n.id == owner).expect("the owner is one of ours");
        match relays.get(at) {
            Some(relay) => relay.set(support::relay::Mode::BlackHole),
            None => nodes[at].kill_9().await,
        }
        let killed = Instant::now();
        let word = format!("ROUND{round}X");
        bot.say(&team(), &alice(), &format!("still there? {word}"));
        answered(&bot, &word).await;
        let took = killed.elapsed();
        eprintln!("round {round}: {owner} cut off or killed, answered after {took:.1?}");
        samples.push(took);
        match relays.get(at) {
            Some(relay) => relay.heal(),
            None => nodes[at].start().await,
        }
        wait_alive(&mut db, 3).await;
    }
    let fault = if partition { "partition (black hole)" } else { "kill -9" };
    print_row(
        &format!("{fault} of the group's node → its next message answered (lease_ttl {ttl:?}, 3 nodes)"),
        samples,
    );
}
