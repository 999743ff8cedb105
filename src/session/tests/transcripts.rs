//! A group's CLI transcript moves with the group between two cluster nodes
//! on the tests' PostgreSQL: captured with the result, synced at the stop,
//! put back before the new owner's `--resume`. Real time (not paused): the
//! store is a server of its own; each wait is for a fact, never a duration.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use super::{deps, test_config};
use crate::cluster::fence::LeaseName;
use crate::cluster::node_id::NodeId;
use crate::domain::{GroupName, Inbound, Source};
use crate::session::fake_cli::{transcript_file, FakeCli};
use crate::session::SessionHandle;
use crate::store::tests::postgres;
use crate::store::{GroupSettings, InboundState, Location, Store};

const TTL: i64 = 10_000_000;

fn team() -> GroupName {
    "team".parse().unwrap()
}

/// A cluster node's store holding `team`'s lease.
async fn node(location: &Location, name: &str) -> Store {
    let store = Store::connect(location).await.unwrap();
    let id = NodeId::new(name).unwrap();
    let incarnation = store.cluster().unwrap().register(&id, 4, TTL, 0).await.unwrap().expect("registered");
    let epoch = store.leases().claim(&LeaseName::group(&team()), &id, incarnation).await.unwrap();
    assert!(epoch.is_some(), "{name} claims the group");
    store
}

/// Runs `team`'s session on `store` with `cli` until `text` is answered, then stops it as pincer does.
async fn answer_once(store: &Store, cli: &FakeCli, text: &str) {
    let (deps, _approvals, shutdown) = deps(store, Arc::new(test_config()), cli);
    let tracker = TaskTracker::new();
    let record = store.groups().group("team").await.unwrap();
    let handle = SessionHandle::spawn(&record, deps, &tracker);
    let msg = Inbound::new(team(), Source::Console, "ann", text);
    store.queue().insert_inbound(&msg, InboundState::Queued).await.unwrap();
    assert!(handle.wake());
    let answered = format!("echo: {text}");
    let stuck = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let texts = store.outbox().outbox_after(crate::store::OutboxId(0), 100).await.unwrap();
        if texts.iter().any(|row| row.text == answered) {
            break;
        }
        assert!(std::time::Instant::now() < stuck, "never answered: {text}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test]
async fn a_group_that_moves_resumes_with_its_transcript() {
    let url = postgres::server().fresh_database();
    let location = Location::Postgres(url);
    Store::connect(&location).await.unwrap().groups().add_group(&team(), &GroupSettings::default()).await.unwrap();
    let a = node(&location, "node-a").await;
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cli_a = FakeCli::default().with_home(home_a.path());
    answer_once(&a, &cli_a, "one").await;
    let session = cli_a.session();
    let local = std::fs::read(transcript_file(home_a.path(), &session)).unwrap();
    assert_eq!(local, b"{\"said\":\"one\"}\n{\"ended\":1}\n");
    let stored = a.transcripts().load(&team(), &session).await.unwrap();
    assert_eq!(stored, local, "the turn's line with its result, the flush after it at the stop");

    // Node A stops renewing; once its row expired, B claims the group.
    crate::store::testing::expire_node(&location, "node-a").await;
    let b = node(&location, "node-b").await;
    let cli_b = FakeCli::default().with_home(home_b.path());
    answer_once(&b, &cli_b, "two").await;
    assert_eq!(cli_b.starts()[0].resume.as_deref(), Some(session.as_str()));
    assert_eq!(cli_b.transcripts_at_start(), [Some(local.clone())], "put back before the resume");
    let moved = std::fs::read(transcript_file(home_b.path(), &session)).unwrap();
    assert_eq!(moved, b"{\"said\":\"one\"}\n{\"ended\":1}\n{\"said\":\"two\"}\n{\"ended\":1}\n");
    assert_eq!(b.transcripts().load(&team(), &session).await.unwrap(), moved, "B goes on from A's copy");
}
