//! The membership task on a real PostgreSQL (the tests' server, a fresh
//! database each), with a 2 s lease: every wait is for a state change, under
//! a generous timeout that only keeps a broken task from hanging the test.

use std::time::Duration;

use super::*;
use crate::store::tests::nodes::RawNodes;
use crate::store::tests::postgres;
use crate::store::{Location, Store};

const TTL: Duration = Duration::from_secs(2);
/// Only a guard against a hang; no assertion is about how long things take.
const HANG: Duration = Duration::from_secs(30);

struct Node {
    membership: Membership,
    live: watch::Sender<usize>,
    shutdown: CancellationToken,
}

async fn database() -> (String, RawNodes) {
    let url = postgres::server().fresh_database();
    // The store's migrations create `nodes`.
    drop(Store::connect(&Location::Postgres(url.clone())).await.unwrap());
    let raw = RawNodes::connect(&url).await;
    (url, raw)
}

async fn start(url: &str, id: &str) -> Node {
    let store = Store::connect(&Location::Postgres(url.to_owned())).await.unwrap();
    let config = MembershipConfig { node: NodeId::new(id).unwrap(), timing: LeaseTiming::new(TTL).unwrap(), slots: 4 };
    let (live, watching) = watch::channel(0);
    let shutdown = CancellationToken::new();
    let membership = Membership::start(store.cluster().unwrap(), config, watching, shutdown.clone());
    Node { membership, live, shutdown }
}

/// Waits until the node's state passes `test`; the state it reached.
async fn until(node: &Node, test: impl FnMut(&NodeState) -> bool) -> NodeState {
    let mut state = node.membership.state();
    let reached = tokio::time::timeout(HANG, state.wait_for(test)).await.expect("the state was reached");
    reached.map(|s| *s).expect("the task is running")
}

async fn registered(node: &Node) -> (i64, Instant) {
    match until(node, |s| matches!(s, NodeState::Registered { .. })).await {
        NodeState::Registered { incarnation, deadline } => (incarnation, deadline),
        other => unreachable!("{other:?}"),
    }
}

/// Waits for a renewal after `after`: the deadline moved past it.
async fn renewed(node: &Node, after: Instant) -> Instant {
    let moved = |s: &NodeState| matches!(s, NodeState::Registered { deadline, .. } if *deadline > after);
    match until(node, moved).await {
        NodeState::Registered { deadline, .. } => deadline,
        other => unreachable!("{other:?}"),
    }
}

async fn stop(node: Node) {
    node.shutdown.cancel();
    tokio::time::timeout(HANG, node.membership.stopped()).await.expect("the task stops");
}

#[tokio::test]
async fn a_node_registers_renews_with_its_live_count_and_leaves() {
    let (url, mut raw) = database().await;
    let node = start(&url, "node-a").await;
    let (incarnation, first) = registered(&node).await;
    assert_eq!(incarnation, 1);
    let (_, registered_at, _, alive) = raw.row("node-a").await;
    assert!(alive);
    node.live.send_replace(3);
    // The live count is read when a renewal goes out: wait for two.
    let second = renewed(&node, first).await;
    renewed(&node, second).await;
    let (again, renewed_at, live, alive) = raw.row("node-a").await;
    assert_eq!((again, live, alive), (1, 3, true));
    assert!(renewed_at > registered_at, "the row's renewed_at_us moves: {registered_at} -> {renewed_at}");

    let state = node.membership.state();
    stop(node).await;
    assert_eq!(*state.borrow(), NodeState::Stopped);
    let (_, _, _, alive) = raw.row("node-a").await;
    assert!(!alive, "left: the row expired at once");
}

#[tokio::test]
async fn a_second_process_with_the_same_node_id_waits_until_the_first_leaves() {
    let (url, _raw) = database().await;
    let first = start(&url, "twin").await;
    let (incarnation, deadline) = registered(&first).await;
    let second = start(&url, "twin").await;
    // While the first renews twice (its row alive all along), the second
    // stays out.
    let later = renewed(&first, deadline).await;
    renewed(&first, later).await;
    assert_eq!(*second.membership.state().borrow(), NodeState::Joining);

    stop(first).await;
    let (taken, _) = registered(&second).await;
    assert_eq!(taken, incarnation + 1, "a new incarnation of the same node");
    stop(second).await;
}

#[tokio::test]
async fn a_node_whose_renewals_go_unanswered_lapses_at_its_deadline_and_registers_again() {
    let (url, mut raw) = database().await;
    let node = start(&url, "frozen").await;
    let (incarnation, _) = registered(&node).await;

    // Another transaction holds the row: the renewals (and the next
    // registration) wait, unanswered.
    let mut locker = RawNodes::connect(&url).await;
    locker.hold("frozen").await;
    let lapsed = until(&node, |s| *s == NodeState::Lapsed).await;
    assert_eq!(lapsed, NodeState::Lapsed);
    let deadline_passed = Instant::now();

    locker.release().await;
    let (again, deadline) = registered(&node).await;
    assert_eq!(again, incarnation + 1, "registered again as a new incarnation");
    assert!(deadline > deadline_passed);
    let (stored, _, _, alive) = raw.row("frozen").await;
    assert_eq!((stored, alive), (incarnation + 1, true));
    stop(node).await;
}

#[tokio::test]
async fn a_refused_renewal_lapses_at_once_and_registers_again() {
    let (url, mut raw) = database().await;
    let node = start(&url, "expired").await;
    let (incarnation, deadline) = registered(&node).await;
    // The row expired by the database's clock (as if this node had been
    // frozen past its ttl): the next renewal is refused, not retried.
    raw.expire("expired").await;
    let again = until(&node, |s| matches!(s, NodeState::Registered { incarnation: i, .. } if *i > incarnation)).await;
    let NodeState::Registered { incarnation: again, deadline: new_deadline } = again else { unreachable!() };
    assert_eq!(again, incarnation + 1);
    assert!(new_deadline > deadline);
    stop(node).await;
}
