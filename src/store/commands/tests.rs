//! Commands handed over on a real PostgreSQL: any node stores one, only the
//! group's owner takes it, once; a waiting command is work for its group;
//! and one machine on SQLite has no such table to use.

use std::time::Duration;

use chrono::Utc;
use sqlx::postgres::PgListener;

use crate::cluster::{LeaseSeen, NodeId};
use crate::domain::GroupName;
use crate::store::tests::postgres;
use crate::store::{GroupSettings, Location, Store, StoreError};

const TTL_US: i64 = 10_000_000;

async fn node(store: &Store, name: &str) -> (NodeId, i64) {
    let id = NodeId::new(name).unwrap();
    let incarnation = store.cluster().unwrap().register(&id, 4, TTL_US, 0).await.unwrap().expect("registered");
    (id, incarnation)
}

#[tokio::test]
async fn a_command_handed_over_is_taken_by_the_groups_owner_once() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (owner, gateway) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let g: GroupName = "team".parse().unwrap();
    owner.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let ((node_a, inc_a), _) = (node(&owner, "node-a").await, node(&gateway, "node-b").await);
    owner.cluster().unwrap().claim_group(&g, &node_a, inc_a, Utc::now()).await.unwrap().expect("claimed");

    let id = gateway.commands().hand_over(&g, r#"{"status":null}"#, true).await.unwrap();
    let pending = owner.commands().pending().await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let seen = &pending[0];
    assert_eq!((seen.id, &seen.group, seen.command.as_str(), seen.by_admin), (id, &g, r#"{"status":null}"#, true));
    assert!(seen.age < Duration::from_secs(60), "asked just now: {:?}", seen.age);

    let refused = gateway.commands().take(&g, id).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "only the owner takes: {refused:?}");
    assert!(owner.commands().take(&g, id).await.unwrap(), "the owner takes it");
    assert!(!owner.commands().take(&g, id).await.unwrap(), "and only once");
    assert!(owner.commands().pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_waiting_command_is_work_for_an_idle_group_and_is_hinted() {
    let url = postgres::server().fresh_database();
    let store = Store::connect(&Location::Postgres(url.clone())).await.unwrap();
    let g: GroupName = "quiet".parse().unwrap();
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    node(&store, "node-a").await;
    assert!(store.cluster().unwrap().groups_with_work().await.unwrap().is_empty(), "no work yet");
    let mut listener = PgListener::connect(&url).await.unwrap();
    listener.listen("pincer_work").await.unwrap();

    let id = store.commands().hand_over(&g, r#"{"new":null}"#, false).await.unwrap();
    let work = store.cluster().unwrap().groups_with_work().await.unwrap();
    assert!(matches!(&work[..], [(name, LeaseSeen::Free)] if name == &g), "{work:?}");
    let hint = tokio::time::timeout(Duration::from_secs(30), listener.recv()).await.expect("a hint").unwrap();
    assert_eq!(hint.payload(), "quiet");

    // Taken by the owner (here a store not fenced): no work left.
    let (node_b, inc_b) = node(&store, "node-b").await;
    store.cluster().unwrap().claim_group(&g, &node_b, inc_b, Utc::now()).await.unwrap().expect("claimed");
    assert!(store.commands().take(&g, id).await.unwrap());
    assert!(store.cluster().unwrap().groups_with_work().await.unwrap().is_empty());
}

#[tokio::test]
async fn one_machine_on_sqlite_hands_nothing_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("pincer.db")).await.unwrap();
    let g: GroupName = "solo".parse().unwrap();
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    assert!(matches!(store.commands().hand_over(&g, "{}", false).await, Err(StoreError::NotShared)));
    assert!(matches!(store.commands().pending().await, Err(StoreError::NotShared)));
}

#[tokio::test]
async fn a_command_is_seen_first_by_one_node_only() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (a, b) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let key = "whatsapp:120363012345678936@g.us/3EB0C1A5";
    assert!(a.commands().first_sight(key).await.unwrap(), "the first node to see it");
    assert!(!b.commands().first_sight(key).await.unwrap(), "no other");
    assert!(!a.commands().first_sight(key).await.unwrap(), "nor the same again");
    assert!(b.commands().first_sight(&format!("{key}X")).await.unwrap(), "another command is another");
    let long = "k".repeat(2000);
    assert!(a.commands().first_sight(&long).await.unwrap(), "a long key is cut to what the table takes");
    assert!(!b.commands().first_sight(&long).await.unwrap());
}
