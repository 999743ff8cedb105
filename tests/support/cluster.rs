//! Several `pincer run` nodes on one PostgreSQL (issue 36), for the cluster
//! tests and the failover bench: each node its own data directory and
//! config, all sharing the store, the fake API and the fake Bot API.

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::cluster::NodeId;
use pincer::config::Secret;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use super::fake_api::FakeApi;
use super::fake_bot::FakeBot;
use super::harness::{any_port, spawn_pincer_serving, Sandbox};
use super::relay::Relay;

/// One node: its sandbox (data directory, config) and its process.
pub struct Node {
    pub id: String,
    pub sandbox: Sandbox,
    pub child: Option<tokio::process::Child>,
    /// Where its `/metrics` is served, once started (the system picks the port).
    pub http: Option<std::net::SocketAddr>,
}

impl Node {
    pub fn log(&self) -> PathBuf {
        self.sandbox.root().join("pincer.log")
    }

    pub async fn start(&mut self) {
        let config = self.sandbox.write_config();
        let args = ["--config".as_ref(), config.as_os_str()];
        let log = self.log();
        let (child, http) = spawn_pincer_serving(self.sandbox.root(), &args, &[], Some(&log)).await;
        (self.child, self.http) = (Some(child), Some(http));
    }

    /// Stops the node as systemd would (SIGTERM), waiting for it to exit.
    pub async fn stop(&mut self) {
        let mut child = self.child.take().expect("the node runs");
        kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
        child.wait().await.unwrap();
    }

    /// The value of the sample `name` (with its labels, as scraped) in the
    /// node's `/metrics`, once it is at least `least`; panics after a while.
    pub async fn metric_at_least(&self, name: &str, least: f64) -> f64 {
        self.metrics_at_least(&[name], least).await
    }

    /// Waits until the samples `names` add up to `least` or more (a sample
    /// not shown yet counts 0); their sum.
    pub async fn metrics_at_least(&self, names: &[&str], least: f64) -> f64 {
        let url = format!("http://{}/metrics", self.http.expect("the node was started"));
        let sample = |body: &str, name: &str| {
            let line = body.lines().find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))?;
            line[name.len()..].trim().parse::<f64>().ok()
        };
        let sum = |body: &str| names.iter().filter_map(|name| sample(body, name)).sum::<f64>();
        let what = format!("{}'s /metrics showing {} >= {least}", self.id, names.join(" + "));
        let body = super::harness::http_until(&url, &what, |_, body| sum(body) >= least).await;
        sum(&body)
    }

    pub async fn kill_9(&mut self) {
        let mut child = self.child.take().expect("the node runs");
        kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGKILL).unwrap();
        child.wait().await.unwrap();
    }
}

/// A failing test shows the end of each node's log: the node's own account
/// of what it did is what tells a race from a bug, and its sandbox (where the
/// log lives) is gone once the test ends.
impl Drop for Node {
    fn drop(&mut self) {
        if !std::thread::panicking() && std::env::var_os("TEST_PINCER_SHOW_LOGS").is_none() {
            return;
        }
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
        eprintln!("--- the last {} lines of {}'s log ---\n{}", tail.len(), self.id, tail.join("\n"));
    }
}

/// How much of a node's log a failing test shows.
const LOG_TAIL: usize = 120;

/// Three nodes sharing `url`, each polling `bot` when it is the gateway,
/// with a 3 s lease.
pub fn nodes(api: &FakeApi, bot: &FakeBot, url: &str) -> Vec<Node> {
    nodes_with(api, bot, url, 3, Duration::from_secs(3))
}

/// Puts a relay of its own (`support::relay`) between each of `nodes` and
/// the database `url`; the relays in the nodes' order.
pub async fn through_relays(nodes: &mut [Node], url: &str) -> Vec<Relay> {
    let mut relays = Vec::with_capacity(nodes.len());
    for node in nodes {
        let relay = Relay::to_test_server().await;
        node.sandbox.config.store.url = Some(Secret::new(relay.url(url)));
        relays.push(relay);
    }
    relays
}

/// `count` nodes sharing `url` with a lease of `lease_ttl`.
pub fn nodes_with(api: &FakeApi, bot: &FakeBot, url: &str, count: usize, lease_ttl: Duration) -> Vec<Node> {
    (1..=count)
        .map(|n| {
            let mut sandbox = Sandbox::new(api);
            sandbox.config.store.url = Some(Secret::new(url.to_owned()));
            sandbox.config.cluster.enabled = true;
            sandbox.config.cluster.node_id = Some(NodeId::new(format!("n{n}")).unwrap());
            sandbox.config.cluster.lease_ttl = lease_ttl;
            sandbox.use_telegram(bot);
            sandbox.fast_retries();
            sandbox.config.http.listen = Some(any_port());
            Node { id: format!("n{n}"), sandbox, child: None, http: None }
        })
        .collect()
}

/// `nodes` (sharing `url`) with a group `team` bound to the Telegram chat
/// `chat` and answering every message, registered through the first, all
/// started; and a connection to their database.
pub async fn serving_team(mut nodes: Vec<Node>, url: &str, chat: i64) -> (Vec<Node>, sqlx::PgConnection) {
    let settings =
        GroupSettings { chat: Some(ChatAddress::telegram(chat, None)), requires_trigger: false, ..Default::default() };
    nodes[0].sandbox.add_group_with("team", settings).await;
    for node in &mut nodes {
        node.start().await;
    }
    let db = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.expect("the nodes' database");
    (nodes, db)
}

/// The node holding `lease` now, by the store.
pub async fn holder(db: &mut sqlx::PgConnection, lease: &str) -> Option<String> {
    sqlx::query_scalar("SELECT node_id FROM leases WHERE name = $1")
        .bind(lease)
        .fetch_optional(db)
        .await
        .unwrap()
        .flatten()
}

/// Waits until `node` holds `lease`, by the store.
pub async fn wait_held(db: &mut sqlx::PgConnection, lease: &str, node: &str) {
    let held = async {
        while holder(db, lease).await.as_deref() != Some(node) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(super::harness::PATIENCE, held).await.unwrap_or_else(|_| panic!("{node} holds {lease}"));
}

/// Waits until the count `sql` selects (one `COUNT(*)`) satisfies `done`,
/// by the store; panics after `limit`, naming `what`.
pub async fn wait_count(
    db: &mut sqlx::PgConnection,
    sql: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(i64) -> bool,
) {
    let counted = async {
        while !done(sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut *db).await.unwrap()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(limit, counted).await.unwrap_or_else(|_| panic!("waited {limit:?} for {what}"));
}

/// Waits until `count` nodes are alive, by the store's clock.
pub async fn wait_alive(db: &mut sqlx::PgConnection, count: i64) {
    let alive =
        "SELECT COUNT(*) FROM nodes WHERE expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint";
    wait_count(db, alive, super::harness::PATIENCE, &format!("{count} nodes alive"), |n| n >= count).await;
}

/// The node `group` prefers among `nodes` while none runs a session
/// (placement is a fixed hash, the same in every process).
pub fn preferred(group: &str, nodes: &[Node]) -> String {
    let loads: Vec<pincer::cluster::NodeLoad> = nodes
        .iter()
        .map(|n| pincer::cluster::NodeLoad {
            id: NodeId::new(&n.id).unwrap(),
            live: 0,
            slots: n.sandbox.config.claude.max_live_sessions as u64,
        })
        .collect();
    pincer::cluster::preferred_node(group, &loads).expect("a node with a free slot").id.to_string()
}

/// Stops `node` (a clean hand-off of what it holds) and starts it again,
/// returning once all `count` nodes are alive again.
pub async fn restart(node: &mut Node, db: &mut sqlx::PgConnection, count: i64) {
    node.stop().await;
    node.start().await;
    wait_alive(db, count).await;
}

/// Asserts no two of one group's model requests were in flight at once (two
/// CLIs of one group would overlap); the group's are those holding one of `words`.
pub fn one_cli_at_a_time(api: &FakeApi, words: &[&str]) {
    let mut spans: Vec<(i64, i64, String)> = api
        .main_requests()
        .iter()
        .filter(|r| words.iter().any(|w| r.all_text().contains(w)))
        .map(|r| (r.arrived_us(), r.ended_us().unwrap_or(i64::MAX), r.last_user_text()))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        let ((_, ended, before), (arrived, _, after)) = (&pair[0], &pair[1]);
        assert!(arrived >= ended, "{after:?} was asked while {before:?} was still in flight: two CLIs at once");
    }
}
