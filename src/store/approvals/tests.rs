//! Approvals across nodes on a real PostgreSQL: asked by one node, shown by
//! the gateway under its lease's epoch, answered once, shown again by the
//! next gateway after a failover, and bounded.

use std::time::Duration;

use crate::cluster::{LeaseName, NodeId};
use crate::domain::{Approval, ApprovalAnswer, GroupName, Platform};
use crate::store::tests::postgres;
use crate::store::{ApprovalError, Location, NewApproval, Store, StoreError};

const TTL_US: i64 = 10_000_000;

async fn node(store: &Store, name: &str) -> (NodeId, i64) {
    let id = NodeId::new(name).unwrap();
    let incarnation = store.cluster().unwrap().register(&id, 4, TTL_US, 0).await.unwrap().expect("registered");
    (id, incarnation)
}

fn bash(timeout: Duration) -> NewApproval {
    let group: GroupName = "team".parse().unwrap();
    NewApproval::new(group, Platform::Telegram, "Bash".into(), "command:\nls".into(), timeout).unwrap()
}

fn by(verdict: Approval, who: &str) -> ApprovalAnswer {
    ApprovalAnswer { verdict, by: who.to_owned() }
}

async fn stores(n: usize) -> Vec<Store> {
    let location = Location::Postgres(postgres::server().fresh_database());
    let mut stores = Vec::new();
    for _ in 0..n {
        stores.push(Store::connect(&location).await.unwrap());
    }
    stores
}

#[tokio::test]
async fn an_approval_asked_on_one_node_is_shown_by_the_gateway_and_answered_once() {
    let [asker, gateway]: [Store; 2] = stores(2).await.try_into().unwrap();
    let ((a, _), (g, inc_g)) = (node(&asker, "node-a").await, node(&gateway, "node-g").await);
    let lease = LeaseName::telegram(7);
    assert_eq!(gateway.leases().claim(&lease, &g, inc_g).await.unwrap(), Some(1));
    assert!(asker.approvals().shared() && gateway.approvals().shared());

    let id = asker.approvals().ask(&bash(Duration::from_secs(60)), &a).await.unwrap();
    let seen = gateway.approvals().unanswered(Platform::Telegram).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].id, seen[0].shown_epoch), (id, None));
    assert!(seen[0].remaining_us > 50_000_000 && seen[0].remaining_us <= 60_000_000, "{seen:?}");
    assert!(gateway.approvals().unanswered(Platform::WhatsApp).await.unwrap().is_empty(), "another platform's");

    let shown = gateway.approvals().show(id, &lease).await.unwrap().expect("shown");
    assert_eq!(
        (shown.group.as_str(), shown.tool_name.as_str(), shown.summary.as_str()),
        ("team", "Bash", "command:\nls")
    );
    assert!(shown.remaining > Duration::from_secs(50));
    assert_eq!(gateway.approvals().epoch(&lease), Some(1));
    assert_eq!(gateway.approvals().unanswered(Platform::Telegram).await.unwrap()[0].shown_epoch, Some(1));

    assert_eq!(asker.approvals().asked_by(&a).await.unwrap()[0].answer, None, "not answered yet");
    assert!(gateway.approvals().answer(id, &by(Approval::AlwaysAllow, "telegram:42 (Alice)")).await.unwrap());
    assert!(!gateway.approvals().answer(id, &by(Approval::Deny, "telegram:43 (Bob)")).await.unwrap(), "first wins");
    assert!(gateway.approvals().unanswered(Platform::Telegram).await.unwrap().is_empty());
    assert!(gateway.approvals().show(id, &lease).await.unwrap().is_none(), "answered: nothing to show");
    let mine = asker.approvals().asked_by(&a).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].answer, Some(by(Approval::AlwaysAllow, "telegram:42 (Alice)")));
    assert!(asker.approvals().asked_by(&g).await.unwrap().is_empty(), "only the asker's rows");
    asker.approvals().forget(id).await.unwrap();
    assert!(asker.approvals().asked_by(&a).await.unwrap().is_empty());
}

#[tokio::test]
async fn after_a_failover_the_next_gateway_shows_again_and_the_old_one_cannot() {
    let [asker, old, new]: [Store; 3] = stores(3).await.try_into().unwrap();
    let ((a, _), (o, inc_o), (n, inc_n)) =
        (node(&asker, "node-a").await, node(&old, "node-o").await, node(&new, "node-n").await);
    let lease = LeaseName::telegram(7);
    assert_eq!(old.leases().claim(&lease, &o, inc_o).await.unwrap(), Some(1));
    let id = asker.approvals().ask(&bash(Duration::from_secs(60)), &a).await.unwrap();
    assert!(old.approvals().show(id, &lease).await.unwrap().is_some());

    // The old gateway's row expires; the new one claims the lease.
    sqlx::query("UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-o'").execute(&new.db.pool).await.unwrap();
    assert_eq!(new.leases().claim(&lease, &n, inc_n).await.unwrap(), Some(2));
    let seen = new.approvals().unanswered(Platform::Telegram).await.unwrap();
    assert_eq!(seen[0].shown_epoch, Some(1), "shown under an epoch that is not the new gateway's");
    assert!(old.approvals().show(id, &lease).await.unwrap().is_none(), "the old gateway's epoch is gone");
    assert!(new.approvals().show(id, &lease).await.unwrap().is_some());
    assert_eq!(new.approvals().unanswered(Platform::Telegram).await.unwrap()[0].shown_epoch, Some(2));
    // A node that holds no such lease shows nothing.
    let refused = asker.approvals().show(id, &lease).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
}

#[tokio::test]
async fn an_expired_approval_is_not_shown() {
    let [asker, gateway]: [Store; 2] = stores(2).await.try_into().unwrap();
    let ((a, _), (g, inc_g)) = (node(&asker, "node-a").await, node(&gateway, "node-g").await);
    let lease = LeaseName::telegram(7);
    gateway.leases().claim(&lease, &g, inc_g).await.unwrap();
    let id = asker.approvals().ask(&bash(Duration::ZERO), &a).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let seen = gateway.approvals().unanswered(Platform::Telegram).await.unwrap();
    assert!(seen[0].remaining_us <= 0, "{seen:?}");
    assert!(gateway.approvals().show(id, &lease).await.unwrap().is_none());
}

#[tokio::test]
async fn what_a_row_holds_is_bounded() {
    let group: GroupName = "team".parse().unwrap();
    let minute = Duration::from_secs(60);
    let long_name = "x".repeat(super::MAX_TOOL_NAME + 1);
    let too_long = NewApproval::new(group.clone(), Platform::Telegram, long_name, "ls".into(), minute);
    assert!(matches!(too_long, Err(ApprovalError::ToolNameTooLong(257))), "{too_long:?}");
    let summary = "é".repeat(super::MAX_SUMMARY / 2 + 1);
    let too_long = NewApproval::new(group.clone(), Platform::Telegram, "Bash".into(), summary, minute);
    assert!(matches!(too_long, Err(ApprovalError::SummaryTooLong(_))), "{too_long:?}");
    let console = NewApproval::new(group.clone(), Platform::Console, "Bash".into(), "ls".into(), minute);
    assert!(matches!(console, Err(ApprovalError::NoGateway("console"))), "{console:?}");
    let at_the_bound = "y".repeat(super::MAX_SUMMARY);
    let fits = NewApproval::new(group, Platform::WhatsApp, "x".repeat(super::MAX_TOOL_NAME), at_the_bound, minute);

    // The table holds the same bounds, whatever a node writes.
    let [store]: [Store; 1] = stores(1).await.try_into().unwrap();
    let (a, _) = node(&store, "node-a").await;
    let id = store.approvals().ask(&fits.unwrap(), &a).await.unwrap();
    let answer = by(Approval::Allow, &"z".repeat(super::MAX_ANSWERED_BY * 2));
    assert!(store.approvals().answer(id, &answer).await.unwrap(), "a long name is cut, not refused");
    let kept = store.approvals().asked_by(&a).await.unwrap().remove(0).answer.unwrap();
    assert_eq!(kept.by.chars().count(), super::MAX_ANSWERED_BY);
    let raw = "INSERT INTO approvals (group_name, platform, asked_by, tool_name, summary, asked_at_us, expires_at_us)
               VALUES ('team', 'telegram', 'node-a', 'Bash', repeat('x', 262145), 0, 0)";
    assert!(sqlx::query(raw).execute(&store.db.pool).await.is_err(), "the table refuses a longer summary");
}
