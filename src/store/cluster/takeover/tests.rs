//! A claim on a real PostgreSQL: what a dead holder left in flight is taken
//! over in the claim's transaction, and a group's work is seen with its lease.

use std::time::Duration;

use chrono::Utc;

use crate::cluster::{LeaseName, LeaseSeen, NodeId};
use crate::domain::schedule::{ContextMode, Schedule, ScheduleStatus, Trigger};
use crate::domain::{GroupName, Inbound, Source};
use crate::store::tests::postgres;
use crate::store::{GroupSettings, InboundState, Location, NewSchedule, Store};

const TTL_US: i64 = 10_000_000;

async fn node(store: &Store, name: &str) -> (NodeId, i64) {
    let id = NodeId::new(name).unwrap();
    let incarnation = store.cluster().unwrap().register(&id, 4, TTL_US, 0).await.unwrap().expect("registered");
    (id, incarnation)
}

async fn states(store: &Store) -> Vec<(String, String)> {
    let rows = sqlx::query_as::<_, (String, String)>("SELECT source, state FROM inbound ORDER BY id");
    rows.fetch_all(&store.db.pool).await.unwrap()
}

/// Work of `g` in flight on `a`: a chat message written to its CLI, a
/// scheduled prompt, a chat message still queued, and a run; the schedule.
async fn in_flight(a: &Store, g: &GroupName) -> crate::domain::schedule::Schedule {
    let chat = Inbound::new(g.clone(), Source::Chat(crate::domain::Platform::Telegram), "ann", "hi");
    a.queue().insert_inbound(&chat, InboundState::Sent).await.unwrap();
    let prompt = Inbound::new(g.clone(), Source::Scheduled, "task", "water the plants");
    a.queue().insert_inbound(&prompt, InboundState::Sent).await.unwrap();
    a.queue().insert_inbound(&chat, InboundState::Queued).await.unwrap();
    let new = NewSchedule {
        group: g.clone(),
        prompt: "water".into(),
        trigger: Trigger::interval("1h").unwrap(),
        context: ContextMode::Group,
    };
    let now = Utc::now();
    let s = a.schedules().add_schedule(&new, Some(now)).await.unwrap();
    a.schedules().fire_schedule(s.id, g, now, Some(now + chrono::Duration::hours(1))).await.unwrap().unwrap();
    s
}

#[tokio::test]
async fn a_claim_takes_over_what_a_dead_holder_left_in_flight_and_only_once() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (a, b, c) = (
        Store::connect(&location).await.unwrap(),
        Store::connect(&location).await.unwrap(),
        Store::connect(&location).await.unwrap(),
    );
    let g: GroupName = "team".parse().unwrap();
    a.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let ((node_a, inc_a), (node_b, inc_b), (node_c, inc_c)) =
        (node(&a, "node-a").await, node(&b, "node-b").await, node(&c, "node-c").await);
    assert!(b.cluster().unwrap().groups_with_work().await.unwrap().is_empty(), "no work yet");

    let first = a.cluster().unwrap().claim_group(&g, &node_a, inc_a, Utc::now()).await.unwrap().expect("claimed");
    assert_eq!((first.epoch, first.requeued, first.runs_cut_off), (1, 0, 0));
    let s = in_flight(&a, &g).await;
    let seen = b.cluster().unwrap().groups_with_work().await.unwrap();
    assert!(matches!(&seen[..], [(name, LeaseSeen::Held { holder_expired: false, epoch: 1, .. })] if name == &g));
    assert_eq!(b.cluster().unwrap().claim_group(&g, &node_b, inc_b, Utc::now()).await.unwrap(), None, "A is alive");

    // A dies: its row expires. B and C race; one takes over, once.
    sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-a'").execute(&b.db.pool).await.unwrap();
    let seen = c.cluster().unwrap().groups_with_work().await.unwrap();
    assert!(matches!(&seen[..], [(_, LeaseSeen::Held { holder_expired: true, .. })]), "{seen:?}");
    let (leases_b, leases_c) = (b.cluster().unwrap(), c.cluster().unwrap());
    let (by_b, by_c) = tokio::join!(
        leases_b.claim_group(&g, &node_b, inc_b, Utc::now()),
        leases_c.claim_group(&g, &node_c, inc_c, Utc::now())
    );
    let claims: Vec<_> = [by_b.unwrap(), by_c.unwrap()].into_iter().flatten().collect();
    assert_eq!(claims.len(), 1, "one winner: {claims:?}");
    assert_eq!((claims[0].epoch, claims[0].requeued, claims[0].runs_cut_off), (2, 1, 1));
    let winner = if b.leases().holds_group(&g) { &b } else { &c };
    assert_eq!(
        states(winner).await,
        [
            ("telegram".into(), "queued".into()),
            ("scheduled".into(), "failed".into()),
            ("telegram".into(), "queued".into())
        ],
        "the chat message waits again; the scheduled prompt is the rerun's to send"
    );
    let runs = winner.schedules().runs(s.id).await.unwrap();
    assert_eq!(runs[0].outcome, "error");
    let due = winner.schedules().schedule(s.id).await.unwrap();
    assert!(due.next_run.is_some_and(|at| at <= Utc::now()), "the cut-off run is due again");
    // A's late write after the takeover is refused, through its old epoch.
    a.db.fences.claimed(&LeaseName::group(&g), 1);
    let late = a.groups().set_session_id(&g, Some("late")).await;
    assert!(matches!(late, Err(crate::store::StoreError::Fenced(_))), "{late:?}");
    late_run_ends_are_refused(&a, winner, &g, &due).await;
}

/// `a`, which lost `g` to `winner`, ends its run late: neither its success
/// nor its failure changes the schedule the new owner made `due`.
async fn late_run_ends_are_refused(a: &Store, winner: &Store, g: &GroupName, due: &Schedule) {
    a.db.fences.claimed(&LeaseName::group(g), 1);
    let late = a.schedules().schedule_succeeded(due.id, g).await;
    assert!(matches!(late, Err(crate::store::StoreError::Fenced(_))), "{late:?}");
    a.db.fences.claimed(&LeaseName::group(g), 1);
    let late = a.schedules().change_schedule_if(due, ScheduleStatus::Paused, 3, None).await;
    assert!(matches!(late, Err(crate::store::StoreError::Fenced(_))), "{late:?}");
    let after = winner.schedules().schedule(due.id).await.unwrap();
    assert_eq!((after.status, after.failures, after.next_run), (due.status, due.failures, due.next_run));
}

/// Two stores on one database, both bounded as for a 2 s ttl.
async fn bounded_pair() -> (Store, Store) {
    let bounds = crate::cluster::PgBounds::new(crate::cluster::LeaseTiming::new(Duration::from_secs(2)).unwrap());
    let location = Location::Postgres(postgres::server().fresh_database());
    (Store::connect_bounded(&location, bounds).await.unwrap(), Store::connect_bounded(&location, bounds).await.unwrap())
}

#[tokio::test]
async fn every_pooled_connection_runs_with_the_bounds_of_its_ttl() {
    let (a, _) = bounded_pair().await;
    let show = |name: &'static str| {
        let pool = a.db.pool.clone();
        async move { sqlx::query_scalar::<_, String>(&format!("SHOW {name}")).fetch_one(&pool).await.unwrap() }
    };
    assert_eq!(show("idle_in_transaction_session_timeout").await, "1s");
    assert_eq!(show("statement_timeout").await, "4s");
    // The TCP ones are set too, but read as 0 on the tests' Unix socket, where they do not apply.
    assert!(["0", "1s"].contains(&show("tcp_user_timeout").await.as_str()));
    let mut hot = a.db.hot.lock().await.unwrap();
    let hot_idle: String =
        sqlx::query_scalar("SHOW idle_in_transaction_session_timeout").fetch_one(&mut *hot).await.unwrap();
    assert_eq!(hot_idle, "1s", "the message path's own connections too");
}

#[tokio::test]
async fn a_claim_of_a_row_a_stuck_write_holds_is_skipped_not_waited_for_and_the_stuck_session_ends() {
    let (a, b) = bounded_pair().await;
    let g: GroupName = "team".parse().unwrap();
    a.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let ((node_a, inc_a), (node_b, inc_b)) = (node(&a, "node-a").await, node(&b, "node-b").await);
    b.cluster().unwrap().enter_cluster(&node_b);
    a.cluster().unwrap().claim_group(&g, &node_a, inc_a, Utc::now()).await.unwrap().expect("claimed");
    // A fenced write of a's that stopped between its check and its commit (a frozen node).
    let mut stuck = a.db.pool.begin().await.unwrap();
    let check = "SELECT 1 FROM leases WHERE name = $1 FOR SHARE";
    sqlx::query(check).bind("team").execute(&mut *stuck).await.unwrap();
    sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-a'").execute(&b.db.pool).await.unwrap();

    let started = std::time::Instant::now();
    let leases_b = b.cluster().unwrap();
    let claim = tokio::time::timeout(Duration::from_secs(1), leases_b.claim_group(&g, &node_b, inc_b, Utc::now()));
    assert_eq!(claim.await.expect("the claim does not wait for the lock").unwrap(), None, "skipped this round");
    assert!(started.elapsed() < Duration::from_secs(1));
    // The server ends the stuck session (idle in its transaction past half a ttl): the next claim gets the row.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let claimed = b.cluster().unwrap().claim_group(&g, &node_b, inc_b, Utc::now()).await.unwrap();
    assert_eq!(claimed.map(|t| t.epoch), Some(2), "claimed once the stuck session ended");
    assert!(stuck.commit().await.is_err(), "the stuck transaction was ended by the server");
}

#[tokio::test]
async fn a_lease_held_in_the_store_but_unknown_in_memory_is_found_and_adopted_at_its_epoch() {
    let (a, _) = bounded_pair().await;
    let g: GroupName = "team".parse().unwrap();
    a.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let (node_a, inc_a) = node(&a, "node-a").await;
    a.cluster().unwrap().enter_cluster(&node_a);
    a.cluster().unwrap().claim_group(&g, &node_a, inc_a, Utc::now()).await.unwrap().expect("claimed");
    let (held, _) = a.cluster().unwrap().held_in_store(&node_a, inc_a).await.unwrap();
    assert_eq!(held, [(LeaseName::group(&g), 1)]);
    // The claim's answer was lost: the node never recorded it.
    a.cluster().unwrap().drop_all(&node_a);
    assert!(!a.leases().holds_group(&g));
    let (held, generation) = a.cluster().unwrap().held_in_store(&node_a, inc_a).await.unwrap();
    assert_eq!(a.cluster().unwrap().known_epoch(&LeaseName::group(&g)), None);
    assert!(a.cluster().unwrap().adopt(&held[0].0, held[0].1, generation));
    assert!(a.leases().holds_group(&g), "adopted");
    // An adoption decided before a lapse does not land after it.
    a.cluster().unwrap().drop_all(&node_a);
    assert!(!a.cluster().unwrap().adopt(&held[0].0, held[0].1, generation));
    assert!(!a.leases().holds_group(&g));
}

#[tokio::test]
async fn a_takeover_that_fails_half_way_takes_the_claim_back_with_it() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (a, b) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let g: GroupName = "team".parse().unwrap();
    a.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let ((node_a, inc_a), (node_b, inc_b)) = (node(&a, "node-a").await, node(&b, "node-b").await);
    a.cluster().unwrap().claim_group(&g, &node_a, inc_a, Utc::now()).await.unwrap().expect("claimed");
    let s = in_flight(&a, &g).await;
    crate::store::testing::expire_node(&location, "node-a").await;
    // The recovery's last write fails: its runs' statement (as a server that went away there would).
    let break_runs =
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
                      CREATE TRIGGER refuse BEFORE UPDATE ON schedule_runs FOR EACH ROW EXECUTE FUNCTION refuse()";
    sqlx::raw_sql(break_runs).execute(&b.db.pool).await.unwrap();

    let failed = b.cluster().unwrap().claim_group(&g, &node_b, inc_b, Utc::now()).await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(!b.leases().holds_group(&g), "not held in memory");
    let holder = sqlx::query_as::<_, (String, i64)>("SELECT node_id, epoch FROM leases WHERE name = 'team'");
    assert_eq!(holder.fetch_one(&b.db.pool).await.unwrap(), ("node-a".into(), 1), "nor in the store");
    let before = [("telegram", "sent"), ("scheduled", "sent"), ("telegram", "queued")];
    assert_eq!(states(&b).await, before.map(|(source, state)| (source.into(), state.into())), "nothing recovered");
    assert_eq!(b.schedules().runs(s.id).await.unwrap()[0].outcome, "running");

    sqlx::raw_sql("DROP TRIGGER refuse ON schedule_runs").execute(&b.db.pool).await.unwrap();
    let taken = b.cluster().unwrap().claim_group(&g, &node_b, inc_b, Utc::now()).await.unwrap().expect("claimed now");
    assert_eq!((taken.epoch, taken.requeued, taken.runs_cut_off), (2, 1, 1), "all of it, once");
}
