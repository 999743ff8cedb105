//! Transcripts on the tests' PostgreSQL, on cluster nodes: stored with a
//! result, read back whole, left out when stale, rolled back when fenced.

use crate::cluster::fence::LeaseName;
use crate::cluster::node_id::NodeId;
use crate::domain::GroupName;
use crate::store::tests::{postgres, success, temp_store};
use crate::store::{Carried, GroupSettings, Location, Store, StoreError, TranscriptWrite};

const TTL: i64 = 10_000_000;

fn team() -> GroupName {
    "team".parse().unwrap()
}

fn append(at: i64, bytes: &[u8]) -> TranscriptWrite {
    TranscriptWrite::Append { session: "s1".into(), at, bytes: bytes.to_vec() }
}

/// A cluster node on `location` that holds `team`'s lease (or not yet, when another does).
async fn node(location: &Location, name: &str) -> (Store, i64) {
    let store = Store::connect(location).await.unwrap();
    let id = NodeId::new(name).unwrap();
    let incarnation = store.cluster().unwrap().register(&id, 4, TTL, 0).await.unwrap().expect("registered");
    store.leases().claim(&LeaseName::group(&team()), &id, incarnation).await.unwrap();
    (store, incarnation)
}

async fn record(store: &Store, text: &str, write: &TranscriptWrite) -> Result<(), StoreError> {
    let carried = Carried { settles: &[], transcript: Some(write) };
    store.outbox().record_result_with(&team(), &success(text), None, "{}", None, carried).await.map(drop)
}

#[tokio::test]
async fn a_single_node_keeps_no_transcript() {
    let (_dir, store) = temp_store().await;
    assert!(!store.transcripts().kept(), "SQLite");
    let location = Location::Postgres(postgres::server().fresh_database());
    let store = Store::connect(&location).await.unwrap();
    assert!(!store.transcripts().kept(), "PostgreSQL without a cluster");
    store.cluster().unwrap().register(&NodeId::new("n").unwrap(), 4, TTL, 0).await.unwrap();
    assert!(store.transcripts().kept(), "a registered node");
}

#[tokio::test]
async fn chunks_stored_with_results_come_back_whole() {
    let location = Location::Postgres(postgres::server().fresh_database());
    Store::connect(&location).await.unwrap().groups().add_group(&team(), &GroupSettings::default()).await.unwrap();
    let (a, _) = node(&location, "node-a").await;
    let transcripts = a.transcripts();
    assert_eq!(transcripts.stored_len(&team(), "s1").await.unwrap(), 0);
    record(&a, "one", &append(0, b"{\"a\":1}\n")).await.unwrap();
    record(&a, "two", &append(8, b"{\"b\":2}\n")).await.unwrap();
    record(&a, "stale", &append(3, b"{\"x\":0}\n")).await.unwrap();
    transcripts.sync(&team(), &append(16, b"{\"c\":3}\n")).await.unwrap();
    assert_eq!(transcripts.stored_len(&team(), "s1").await.unwrap(), 24);
    assert_eq!(transcripts.load(&team(), "s1").await.unwrap(), b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
    assert_eq!(transcripts.last_chunk(&team(), "s1").await.unwrap(), Some((16, b"{\"c\":3}\n".to_vec())));
    assert_eq!(transcripts.last_chunk(&team(), "other").await.unwrap(), None);
    assert!(transcripts.load(&team(), "other").await.unwrap().is_empty());
    let results: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM results").fetch_one(&a.db.pool).await.unwrap();
    assert_eq!(results, 3, "a stale chunk never holds its result back");

    transcripts.sync(&team(), &TranscriptWrite::Drop { session: "s1".into() }).await.unwrap();
    assert_eq!(transcripts.stored_len(&team(), "s1").await.unwrap(), 0);
    assert!(transcripts.load(&team(), "s1").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_fenced_out_nodes_chunk_is_rolled_back_with_its_result() {
    let location = Location::Postgres(postgres::server().fresh_database());
    Store::connect(&location).await.unwrap().groups().add_group(&team(), &GroupSettings::default()).await.unwrap();
    let (a, _) = node(&location, "node-a").await;
    record(&a, "by a", &append(0, b"{\"a\":1}\n")).await.unwrap();
    let (b, incarnation_b) = node(&location, "node-b").await;
    // A stops renewing; once its row expired, B takes the group over.
    sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-a'").execute(&a.db.pool).await.unwrap();
    let lease = LeaseName::group(&team());
    let node_b = NodeId::new("node-b").unwrap();
    assert_eq!(b.leases().claim(&lease, &node_b, incarnation_b).await.unwrap(), Some(2));

    let late = record(&a, "late", &append(8, b"{\"late\":1}\n")).await;
    assert!(matches!(late, Err(StoreError::Fenced(_))), "{late:?}");
    let alone = a.transcripts().sync(&team(), &append(8, b"{\"late\":2}\n")).await;
    assert!(matches!(alone, Err(StoreError::Fenced(_))), "{alone:?}");
    assert_eq!(b.transcripts().load(&team(), "s1").await.unwrap(), b"{\"a\":1}\n", "nothing of A's late writes");
    let texts: Vec<String> = sqlx::query_scalar("SELECT text FROM results").fetch_all(&b.db.pool).await.unwrap();
    assert_eq!(texts, ["by a"]);
    record(&b, "by b", &append(8, b"{\"b\":1}\n")).await.unwrap();
    assert_eq!(b.transcripts().load(&team(), "s1").await.unwrap(), b"{\"a\":1}\n{\"b\":1}\n");
}
