//! The cluster's SQL (src/cluster/fence.rs, membership.rs) on a real
//! PostgreSQL with migrations/postgres/: claims are atomic, an expired holder
//! loses its lease to the next epoch, an old fencing token finds no row, and
//! a takeover waits for an open fenced transaction.
//!
//! Never skipped: without PostgreSQL's binaries these fail, saying what to
//! install. No timed assertions: the blocked takeover is seen in
//! `pg_blocking_pids`, not guessed from a sleep.

#[path = "support/postgres.rs"]
mod postgres;

use pincer::store::cluster::fence::{CLAIM_LEASE, FENCE_CHECK, RELEASE_LEASE};
use pincer::store::cluster::membership::{LIVE_NODES, REGISTER_NODE, RENEW_NODE};
use sqlx::{Connection, PgConnection, PgPool, Row};

const TTL_US: i64 = 10_000_000;

async fn cluster_db() -> PgPool {
    let pool = PgPool::connect(&postgres::server().fresh_database()).await.unwrap();
    sqlx::migrate!("./migrations/postgres").run(&pool).await.unwrap();
    pool
}

/// Registers `node` (its first start, or again after `previous`); its incarnation.
async fn register(db: &PgPool, node: &str, previous: i64) -> Option<i64> {
    let row = sqlx::query(REGISTER_NODE).bind(node).bind(4_i64).bind(TTL_US).bind(previous);
    row.fetch_optional(db).await.unwrap().map(|r| r.get(0))
}

async fn claim(db: impl sqlx::PgExecutor<'_>, lease: &str, node: &str, incarnation: i64) -> Option<i64> {
    let query = sqlx::query(CLAIM_LEASE).bind(lease).bind(node).bind(incarnation);
    query.fetch_optional(db).await.unwrap().map(|r| r.get(0))
}

async fn fenced(db: impl sqlx::PgExecutor<'_>, lease: &str, node: &str, epoch: i64) -> bool {
    let query = sqlx::query(FENCE_CHECK).bind(lease).bind(node).bind(epoch);
    query.fetch_optional(db).await.unwrap().is_some()
}

/// What an hour without renewals does to `node`'s row.
async fn expire(db: &PgPool, node: &str) {
    let sql = "UPDATE nodes SET expires_at_us = expires_at_us - 3600000000 WHERE node_id = $1";
    sqlx::query(sql).bind(node).execute(db).await.unwrap();
}

async fn holder(db: &PgPool, lease: &str) -> (Option<String>, i64) {
    let row = sqlx::query("SELECT node_id, epoch FROM leases WHERE name = $1").bind(lease);
    let row = row.fetch_one(db).await.unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn two_claimants_racing_for_a_free_lease_give_exactly_one_owner() {
    let db = cluster_db().await;
    let (a, b) = (register(&db, "node-a", 0).await.unwrap(), register(&db, "node-b", 0).await.unwrap());
    for i in 0..20 {
        let lease = format!("group-{i}");
        let (won_a, won_b) = tokio::join!(claim(&db, &lease, "node-a", a), claim(&db, &lease, "node-b", b));
        let winner = match (won_a, won_b) {
            (Some(1), None) => "node-a",
            (None, Some(1)) => "node-b",
            other => panic!("{lease}: claims returned {other:?}, want exactly one epoch 1"),
        };
        assert_eq!(holder(&db, &lease).await, (Some(winner.to_owned()), 1));
        assert_eq!(claim(&db, &lease, winner, 1).await, None, "a holder claims its own lease again");
    }
}

#[tokio::test]
async fn a_holder_whose_row_expired_loses_to_a_new_claim_with_the_next_epoch() {
    let db = cluster_db().await;
    let (a, b) = (register(&db, "node-a", 0).await.unwrap(), register(&db, "node-b", 0).await.unwrap());
    assert_eq!(claim(&db, "family", "node-a", a).await, Some(1));
    assert_eq!(claim(&db, "family", "node-b", b).await, None, "claimed from a live holder");
    expire(&db, "node-a").await;
    assert_eq!(claim(&db, "family", "node-b", b).await, Some(2));
    assert_eq!(holder(&db, "family").await, (Some("node-b".into()), 2));

    // The old holder can neither revive its row nor claim with it.
    let renewed = sqlx::query(RENEW_NODE).bind("node-a").bind(a).bind(TTL_US).bind(0_i64).execute(&db).await;
    assert_eq!(renewed.unwrap().rows_affected(), 0, "an expired row was renewed");
    assert_eq!(claim(&db, "work", "node-a", a).await, None, "a node with an expired row claimed");
    let live: Vec<String> = sqlx::query_scalar(LIVE_NODES).fetch_all(&db).await.unwrap();
    assert_eq!(live, ["node-b"]);
}

#[tokio::test]
async fn an_old_epoch_finds_no_row_and_a_released_lease_is_claimed_at_once() {
    let db = cluster_db().await;
    let (a, b) = (register(&db, "node-a", 0).await.unwrap(), register(&db, "node-b", 0).await.unwrap());
    assert_eq!(claim(&db, "family", "node-a", a).await, Some(1));
    assert!(fenced(&db, "family", "node-a", 1).await);
    let released = sqlx::query(RELEASE_LEASE).bind("family").bind("node-a").bind(1_i64).execute(&db).await;
    assert_eq!(released.unwrap().rows_affected(), 1);
    assert!(!fenced(&db, "family", "node-a", 1).await, "a released lease still fences");
    assert_eq!(claim(&db, "family", "node-b", b).await, Some(2), "a released lease waits for expiry");
    assert!(!fenced(&db, "family", "node-a", 1).await, "the old epoch passed the fence");
    assert!(!fenced(&db, "family", "node-b", 1).await);
    assert!(fenced(&db, "family", "node-b", 2).await);
}

#[tokio::test]
async fn a_live_node_id_cannot_be_registered_twice_but_a_lapsed_process_can_start_over() {
    let db = cluster_db().await;
    let first = register(&db, "node-a", 0).await.unwrap();
    assert_eq!(first, 1);
    assert_eq!(register(&db, "node-a", 0).await, None, "two live processes share one node id");
    assert_eq!(claim(&db, "family", "node-a", first).await, Some(1));
    // The same process after its deadline lapsed: a new incarnation, whose
    // old lease counts as expired for everyone, itself included.
    let second = register(&db, "node-a", first).await.unwrap();
    assert_eq!(second, 2);
    assert_eq!(claim(&db, "family", "node-a", second).await, Some(2));
    expire(&db, "node-a").await;
    assert_eq!(register(&db, "node-a", 0).await, Some(3), "an expired row blocks a restart");
}

#[tokio::test]
async fn epochs_never_wrap() {
    let db = cluster_db().await;
    let (a, b) = (register(&db, "node-a", 0).await.unwrap(), register(&db, "node-b", 0).await.unwrap());
    assert_eq!(claim(&db, "family", "node-a", a).await, Some(1));
    sqlx::query("UPDATE leases SET epoch = $1").bind(i64::MAX).execute(&db).await.unwrap();
    expire(&db, "node-a").await;
    let overflow = sqlx::query(CLAIM_LEASE).bind("family").bind("node-b").bind(b).fetch_optional(&db).await;
    assert!(overflow.unwrap_err().to_string().contains("out of range"));
    assert_eq!(holder(&db, "family").await, (Some("node-a".into()), i64::MAX));
}

#[tokio::test]
async fn a_takeover_waits_for_an_open_fenced_transaction_then_wins() {
    let db = cluster_db().await;
    let (a, b) = (register(&db, "node-a", 0).await.unwrap(), register(&db, "node-b", 0).await.unwrap());
    assert_eq!(claim(&db, "family", "node-a", a).await, Some(1));
    let mut old_owner = db.begin().await.unwrap();
    assert!(fenced(&mut *old_owner, "family", "node-a", 1).await);
    let old_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *old_owner).await.unwrap();
    expire(&db, "node-a").await;

    let mut claimant = PgConnection::connect_with(&db.connect_options()).await.unwrap();
    let claimant_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut claimant).await.unwrap();
    let takeover = tokio::spawn(async move { claim(&mut claimant, "family", "node-b", b).await });
    // Until PostgreSQL says the claim waits on the old owner's transaction.
    loop {
        let blockers: Vec<i32> =
            sqlx::query_scalar("SELECT unnest(pg_blocking_pids($1))").bind(claimant_pid).fetch_all(&db).await.unwrap();
        if blockers.contains(&old_pid) {
            break;
        }
        assert!(!takeover.is_finished(), "the takeover did not wait for the fenced transaction");
        tokio::task::yield_now().await;
    }
    assert!(!takeover.is_finished());
    // The old owner's last write still passes, and commits before the takeover.
    sqlx::query("UPDATE nodes SET live = 1 WHERE node_id = 'node-a'").execute(&mut *old_owner).await.unwrap();
    old_owner.commit().await.unwrap();
    assert_eq!(takeover.await.unwrap(), Some(2));
    assert!(!fenced(&db, "family", "node-a", 1).await);
}
