//! A claim on a real PostgreSQL: what a dead holder left in flight is taken
//! over in the claim's transaction, and a group's work is seen with its lease.

use chrono::Utc;

use crate::cluster::{LeaseName, LeaseSeen, NodeId};
use crate::domain::schedule::{ContextMode, Schedule, ScheduleStatus, Trigger};
use crate::domain::{GroupName, Inbound, Source};
use crate::store::tests::postgres;
use crate::store::{GroupSettings, InboundState, Location, NewSchedule, Store};

const TTL_US: i64 = 10_000_000;

async fn node(store: &Store, name: &str) -> (NodeId, i64) {
    let id = NodeId::new(name).unwrap();
    let incarnation = store.leases().register(&id, 4, TTL_US, 0).await.unwrap().expect("registered");
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
    assert!(b.leases().groups_with_work().await.unwrap().is_empty(), "no work yet");

    let first = a.leases().claim_group(&g, &node_a, inc_a, Utc::now()).await.unwrap().expect("claimed");
    assert_eq!((first.epoch, first.requeued, first.runs_cut_off), (1, 0, 0));
    let s = in_flight(&a, &g).await;
    let seen = b.leases().groups_with_work().await.unwrap();
    assert!(matches!(&seen[..], [(name, LeaseSeen::Held { holder_expired: false, epoch: 1, .. })] if name == &g));
    assert_eq!(b.leases().claim_group(&g, &node_b, inc_b, Utc::now()).await.unwrap(), None, "A is alive");

    // A dies: its row expires. B and C race; one takes over, once.
    sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-a'").execute(&b.db.pool).await.unwrap();
    let seen = c.leases().groups_with_work().await.unwrap();
    assert!(matches!(&seen[..], [(_, LeaseSeen::Held { holder_expired: true, .. })]), "{seen:?}");
    let (leases_b, leases_c) = (b.leases(), c.leases());
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
