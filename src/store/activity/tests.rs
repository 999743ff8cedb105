//! Mirrored activity on a real PostgreSQL: only the group's owner writes it,
//! each write a new version; any node reads it; one machine on SQLite has no
//! such table to use.

use chrono::Utc;

use crate::cluster::NodeId;
use crate::domain::GroupName;
use crate::store::tests::nodes::RawNodes;
use crate::store::tests::postgres;
use crate::store::{GroupSettings, Location, Store, StoreError};

#[tokio::test]
async fn only_the_groups_owner_mirrors_its_activity_and_every_node_reads_each_version() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (owner, gateway) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let g: GroupName = "team".parse().unwrap();
    owner.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let id = NodeId::new("node-a").unwrap();
    let incarnation = owner.cluster().unwrap().register(&id, 4, 10_000_000, 0).await.unwrap().expect("registered");
    let other = NodeId::new("node-b").unwrap();
    gateway.cluster().unwrap().register(&other, 4, 10_000_000, 0).await.unwrap().expect("registered");
    assert_eq!(gateway.activities().read(&g).await.unwrap(), None, "nothing mirrored yet");

    let refused = gateway.activities().mirror(&g, "node-b", "{}").await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "only the owner writes: {refused:?}");
    owner.cluster().unwrap().claim_group(&g, &id, incarnation, Utc::now()).await.unwrap().expect("claimed");
    owner.activities().mirror(&g, "node-a", r#"{"turn":{"number":1,"age_ms":0,"steps":0}}"#).await.unwrap();
    let first = gateway.activities().read(&g).await.unwrap().expect("mirrored");
    assert!(first.body.contains("\"turn\""), "{first:?}");
    owner.activities().mirror(&g, "node-a", "{}").await.unwrap();
    let second = gateway.activities().read(&g).await.unwrap().expect("mirrored");
    assert_eq!((second.version, second.body.as_str()), (first.version + 1, "{}"), "a new version each write");

    let too_long = format!("{{\"x\":\"{}\"}}", "a".repeat(20_000));
    assert!(owner.activities().mirror(&g, "node-a", &too_long).await.is_err(), "the table's CHECK bounds it");
}

/// An owner that died mid-turn leaves its last activity in the table; the
/// followers must not show it (a turn "running" for good) until a new owner
/// writes: once the writer's node expired, or another node took the group,
/// nothing is read.
#[tokio::test]
async fn a_mirror_whose_writer_lost_the_group_is_not_read() {
    let url = postgres::server().fresh_database();
    let location = Location::Postgres(url.clone());
    let (owner, heir) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let g: GroupName = "team".parse().unwrap();
    owner.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let (a, b) = (NodeId::new("node-a").unwrap(), NodeId::new("node-b").unwrap());
    let first = owner.cluster().unwrap().register(&a, 4, 10_000_000, 0).await.unwrap().expect("registered");
    let second = heir.cluster().unwrap().register(&b, 4, 10_000_000, 0).await.unwrap().expect("registered");
    owner.cluster().unwrap().claim_group(&g, &a, first, Utc::now()).await.unwrap().expect("claimed");
    owner.activities().mirror(&g, "node-a", r#"{"turn":{"number":1,"age_ms":0,"steps":0}}"#).await.unwrap();
    assert!(heir.activities().read(&g).await.unwrap().is_some(), "the live owner's activity is read");

    RawNodes::connect(&url).await.expire("node-a").await;
    assert_eq!(heir.activities().read(&g).await.unwrap(), None, "the dead owner's activity is not shown");
    heir.cluster().unwrap().claim_group(&g, &b, second, Utc::now()).await.unwrap().expect("taken over");
    assert_eq!(heir.activities().read(&g).await.unwrap(), None, "not until the new owner writes");
    heir.activities().mirror(&g, "node-b", "{}").await.unwrap();
    assert_eq!(heir.activities().read(&g).await.unwrap().map(|m| m.body), Some("{}".to_owned()));
}

/// A node killed mid-turn and started again takes its group back under
/// the same name: what its earlier process mirrored (a turn "running" that
/// the restart ended) is not read until the new process writes.
#[tokio::test]
async fn a_restarted_owners_earlier_mirror_is_not_read_until_it_writes_again() {
    let url = postgres::server().fresh_database();
    let location = Location::Postgres(url.clone());
    let (before, reader) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let g: GroupName = "team".parse().unwrap();
    before.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let a = NodeId::new("node-a").unwrap();
    let first = before.cluster().unwrap().register(&a, 4, 10_000_000, 0).await.unwrap().expect("registered");
    before.cluster().unwrap().claim_group(&g, &a, first, Utc::now()).await.unwrap().expect("claimed");
    before.activities().mirror(&g, "node-a", r#"{"turn":{"number":1,"age_ms":0,"steps":0}}"#).await.unwrap();
    assert!(reader.activities().read(&g).await.unwrap().is_some(), "the live owner's activity is read");

    // Killed, and started again once its row expired: a new incarnation claims the group back.
    RawNodes::connect(&url).await.expire("node-a").await;
    let after = Store::connect(&location).await.unwrap();
    let second = after.cluster().unwrap().register(&a, 4, 10_000_000, 0).await.unwrap().expect("registered again");
    assert_ne!(first, second);
    after.cluster().unwrap().claim_group(&g, &a, second, Utc::now()).await.unwrap().expect("claimed back");
    assert_eq!(reader.activities().read(&g).await.unwrap(), None, "the earlier process's turn is not shown");
    after.activities().mirror(&g, "node-a", "{}").await.unwrap();
    assert_eq!(reader.activities().read(&g).await.unwrap().map(|m| m.body), Some("{}".to_owned()));
}

#[tokio::test]
async fn one_machine_on_sqlite_mirrors_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Location::File(dir.path().join("pincer.db"))).await.unwrap();
    let g: GroupName = "solo".parse().unwrap();
    assert!(matches!(store.activities().read(&g).await, Err(StoreError::NotShared)));
    assert!(matches!(store.activities().mirror(&g, "n", "{}").await, Err(StoreError::NotShared)));
}
