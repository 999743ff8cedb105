//! A session on a cluster node (a real PostgreSQL): it takes its queue only
//! while the node holds the group's lease, and when a write finds the lease
//! moved on it kills its CLI at once and leaves the message to the new owner.

use chrono::Utc;

use super::{test_config, Rig};
use crate::cluster::NodeId;
use crate::session::fake_cli::FakeCli;
use crate::store::tests::postgres;
use crate::store::{GroupSettings, Location, Store};

const TTL_US: i64 = 10_000_000;

/// A rig whose store is a cluster node's (`node-a`, registered, holding nothing).
async fn clustered() -> (Rig, NodeId, i64) {
    let spinner = tokio::spawn(async {
        loop {
            tokio::task::yield_now().await;
        }
    });
    let store = Store::connect(&Location::Postgres(postgres::server().fresh_database())).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rig = Rig::on(store, dir, spinner, test_config(), GroupSettings::default(), None, FakeCli::default()).await;
    // Made a node's only once its group is in: from now on its writes are fenced.
    let node = NodeId::new("node-a").unwrap();
    rig.store.cluster().unwrap().enter_cluster(&node);
    let incarnation = rig.store.cluster().unwrap().register(&node, 4, TTL_US, 0).await.unwrap().expect("registered");
    (rig, node, incarnation)
}

#[tokio::test(start_paused = true)]
async fn a_session_runs_only_while_its_node_holds_the_lease_and_drops_its_cli_when_a_write_finds_it_gone() {
    let (rig, node, incarnation) = clustered().await;
    let first = rig.say("one").await;
    // Woken without the lease: the wake is answered, nothing is taken.
    rig.until("the unheld session owes nothing", || !rig.handle.busy()).await;
    assert_eq!(rig.state_of(first).await, "queued");
    assert!(rig.cli.starts().is_empty(), "no CLI without the lease");

    rig.store
        .cluster()
        .unwrap()
        .claim_group(&rig.group, &node, incarnation, Utc::now())
        .await
        .unwrap()
        .expect("claimed");
    rig.until_state(first, "answered").await;
    assert_eq!(rig.cli.starts().len(), 1);

    // Node A freezes; its row expires and node B takes the group over.
    let other = Store::connect(rig.store.location()).await.unwrap();
    crate::store::testing::expire_node(rig.store.location(), "node-a").await;
    let node_b = NodeId::new("node-b").unwrap();
    let inc_b = other.cluster().unwrap().register(&node_b, 4, TTL_US, 0).await.unwrap().unwrap();
    other.cluster().unwrap().claim_group(&rig.group, &node_b, inc_b, Utc::now()).await.unwrap().expect("B claims");

    // A still believes it holds the lease: its next write is refused, and
    // the CLI goes at once, without its grace.
    let second = rig.say("two").await;
    rig.until("the CLI is stopped", || !rig.cli.ended().is_empty()).await;
    rig.until("the session is down", || !rig.handle.status().live).await;
    assert!(!rig.store.leases().holds_group(&rig.group));
    let state = rig.state_of(second).await;
    assert!(state == "queued", "the message is B's to answer, as it was: {state}");
    assert_eq!(rig.replies().await.len(), 1, "only the first was answered, by A");
    rig.stop().await;
}
