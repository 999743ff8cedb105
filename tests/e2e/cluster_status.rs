//! One cluster node on PostgreSQL as its operator sees it (issue 36):
//! `/readyz` is not ready while another live process holds its node id (it
//! cannot register), and ready once it registered; `pincer status` then
//! lists the node (this machine, alive, the Telegram gateway it holds) and
//! names it as the owner of the group it answered; `/metrics` counts the
//! leases it holds.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::cluster::NodeId;
use pincer::config::Secret;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{any_port, http_until, pincer_command, spawn_pincer_serving, Sandbox};
use crate::support::postgres;

fn team() -> TgChat {
    TgChat { id: -100_960, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

#[tokio::test]
async fn a_cluster_node_is_ready_once_registered_and_status_shows_what_it_holds() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    let url = postgres::server().fresh_database();
    sandbox.config.store.url = Some(Secret::new(url.clone()));
    sandbox.config.cluster.enabled = true;
    sandbox.config.cluster.node_id = Some(NodeId::new("node-a").unwrap());
    sandbox.use_telegram(&bot);
    sandbox.config.http.listen = Some(any_port());
    let settings = GroupSettings {
        chat: Some(ChatAddress::telegram(team().id, None)),
        requires_trigger: false,
        ..Default::default()
    };
    sandbox.add_group_with("team", settings).await;
    // Another live process holds the node id: this one cannot register.
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    let held = "INSERT INTO nodes (node_id, incarnation, started_at_us, renewed_at_us, expires_at_us, slots)
                VALUES ('node-a', 5, 0, 0, 9223372036854775807, 4)";
    sqlx::query(held).execute(&mut db).await.unwrap();
    let config = sandbox.write_config();
    let (child, at) = spawn_pincer_serving(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[], None).await;

    let readyz = format!("http://{at}/readyz");
    let body = http_until(&readyz, "not ready while unregistered", |status, _| status == 503).await;
    assert!(body.contains("not registered in the cluster yet"), "{body}");
    // The other process is gone (its row expired): this one registers as the next incarnation.
    sqlx::query("UPDATE nodes SET expires_at_us = 0").execute(&mut db).await.unwrap();
    http_until(&readyz, "ready once registered", |status, _| status == 200).await;

    bot.say(&team(), &alice(), "hello CLUSTER");
    bot.wait_for("the echo", |bot| bot.sent(team().id).iter().any(|s| s.text.contains("CLUSTER"))).await;
    let out = pincer_command(sandbox.root(), &config, &["status", "--json"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = &status["store"]["nodes"][0];
    assert_eq!((&node["id"], &node["incarnation"], &node["alive"]), (&"node-a".into(), &6.into(), &true.into()));
    assert_eq!(node["gateways"], serde_json::json!(["gw:telegram:123456"]), "{status}");
    assert_eq!(status["node"], "node-a", "{status}");
    let owner = &status["store"]["groups"][0]["owner"];
    assert_eq!(owner["node"], "node-a", "{status}");
    let metrics = http_until(&format!("http://{at}/metrics"), "the metrics", |status, _| status == 200).await;
    assert!(metrics.lines().any(|l| l == "pincer_leases_held 2"), "the group and the gateway: {metrics}");
    let out = pincer_command(sandbox.root(), &config, &["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("node-a (this machine): alive, incarnation 6"), "{text}");
    assert!(text.contains("team: ") && text.contains("owner node-a (epoch 1)"), "{text}");
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}
