//! Spend per period: added with each result, kept apart from the results
//! retention prunes, and counted from the results an older database kept.

use std::time::{Duration, SystemTime};

use super::*;
use crate::domain::unix_us;
use crate::store::tests::{on_both, store_with, success};

fn team() -> GroupName {
    "team".parse().unwrap()
}

/// A result stored at `at_us` (a time the store would not pick itself).
async fn result_at(store: &Store, at_us: i64, cost_usd: f64) {
    sqlx::query("INSERT INTO results (group_name, at_us, subtype, is_error, raw, cost_usd) VALUES ('team', $1, 'success', 0, '{}', $2)")
        .bind(at_us)
        .bind(cost_usd)
        .execute(&store.db.pool)
        .await
        .unwrap();
}

on_both! {
/// Retention shorter than the month (here: everything before now) prunes
/// the results, not the spend the budget sums.
async fn the_months_spend_survives_a_retention_shorter_than_the_month() {
    let (_dir, store) = store_with(&team()).await;
    let periods = Periods::at(SystemTime::now(), chrono_tz::UTC);
    // The month's first instant and today's: both before the cutoff below.
    result_at(&store, periods.month_start_us, 0.25).await;
    result_at(&store, periods.day_start_us, 0.5).await;
    let before = store.budgets().spent(&team(), &periods).await.unwrap();
    assert_eq!(before.month_usd, 0.75, "{before:?}");
    assert!(before.today_turns >= 1, "{before:?}");

    let now = unix_us(SystemTime::now()) + 1;
    let pruned = store.retention().prune(now, Some(now), Duration::ZERO).await.unwrap();
    assert!(pruned.rows.contains(&("results", 2)), "the results went: {pruned:?}");
    assert_eq!(store.budgets().spent(&team(), &periods).await.unwrap(), before, "the budget's sums did not shrink");
    let budget = Budget { monthly_cents: Some(75), ..Budget::default() };
    let reached = store.budgets().budget_reached(&team(), &budget, SystemTime::now(), chrono_tz::UTC).await.unwrap();
    assert!(matches!(reached, Some(Reached::Monthly { .. })), "still reached: {reached:?}");
}
}

on_both! {
/// Each result stored the usual way adds its cost and one turn, in the
/// statement that stores it: results without a cost count as turns.
async fn each_stored_result_adds_its_cost_and_a_turn() {
    let (_dir, store) = store_with(&team()).await;
    let periods = Periods::at(SystemTime::now(), chrono_tz::UTC);
    store.outbox().record_result(&team(), &success("one"), Some(0.125), "{}", None, &[]).await.unwrap();
    store.outbox().record_result(&team(), &success("two"), None, "{}", None, &[]).await.unwrap();
    store.outbox().record_result(&team(), &success("three"), Some(0.25), "{}", None, &[]).await.unwrap();
    let spent = store.budgets().spent(&team(), &periods).await.unwrap();
    assert_eq!(spent, Spent { today_usd: 0.375, month_usd: 0.375, today_turns: 3 });
    let slots: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM spend").fetch_one(&store.db.pool).await.unwrap();
    assert!((1..=2).contains(&slots), "one row per quarter hour, not per result: {slots}");
}
}

/// A database from before `spend` (migration 0018) starts with the sums of
/// the results it kept.
#[tokio::test]
async fn spend_before_the_migration_is_counted_from_the_results_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pincer.db");
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.migrations = migrator.migrations.iter().filter(|m| m.version < 18).cloned().collect::<Vec<_>>().into();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let old = sqlx::SqlitePool::connect(&url).await.unwrap();
    migrator.run(&old).await.unwrap();
    sqlx::query("INSERT INTO groups (name, created_at_us) VALUES ('team', 0)").execute(&old).await.unwrap();
    let periods = Periods::at(SystemTime::now(), chrono_tz::UTC);
    for (at_us, cost) in
        [(periods.month_start_us, Some(1.5)), (periods.day_start_us, Some(0.25)), (periods.day_start_us, None)]
    {
        sqlx::query("INSERT INTO results (group_name, at_us, subtype, is_error, raw, cost_usd) VALUES ('team', $1, 'success', 0, '{}', $2)")
            .bind(at_us)
            .bind(cost)
            .execute(&old)
            .await
            .unwrap();
    }
    old.close().await;

    let store = Store::open(&path).await.unwrap();
    let spent = store.budgets().spent(&team(), &periods).await.unwrap();
    assert_eq!(spent.month_usd, 1.75, "{spent:?}");
    assert!(spent.today_turns >= 2, "{spent:?}");
}
