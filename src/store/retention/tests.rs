//! Retention on seeded databases: only old rows of the pruned kinds go,
//! rows in use stay, other writers go between batches, and the file shrinks.

use std::time::Duration;

use super::*;
use crate::domain::GroupName;
use crate::store::tests::{on_both, temp_store, Backend, BACKEND};
use crate::store::{GroupSettings, Store};

const OLD: i64 = 1_000_000; // unix µs: 1970, far before any cutoff
const CUTOFF: i64 = 2_000_000_000_000_000;

/// A store on this test's backend (`on_both!`) with group `team`.
async fn store() -> (tempfile::TempDir, Store) {
    let (dir, store) = temp_store().await;
    let group: GroupName = "team".parse().unwrap();
    store.groups().add_group(&group, &GroupSettings::default()).await.unwrap();
    (dir, store)
}

async fn exec(store: &Store, sql: &str) {
    sqlx::query(sql).execute(&store.db.pool).await.unwrap();
}

async fn count(store: &Store, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&store.db.pool).await.unwrap()
}

/// `n` task frames at `at_us`, each with `pad` bytes of raw line.
async fn frames(store: &Store, n: usize, at_us: i64, pad: usize) {
    let raw = "x".repeat(pad);
    for _ in 0..n {
        sqlx::query(
            "INSERT INTO task_frames (group_name, at_us, subtype, raw) VALUES ('team', $1, 'task_started', $2)",
        )
        .bind(at_us)
        .bind(&raw)
        .execute(&store.db.pool)
        .await
        .unwrap();
    }
}

on_both! {
async fn old_operational_rows_go_and_the_history_and_rows_in_use_stay() {
    let (_dir, store) = store().await;
    if BACKEND.get() == Backend::Sqlite {
        assert_eq!(count(&store, "PRAGMA auto_vacuum").await, 2, "a new database is made incremental");
    }
    let now = CUTOFF + 1;
    frames(&store, 3, OLD, 10).await;
    frames(&store, 2, now, 10).await;
    for (at, state) in [(OLD, "delivered"), (OLD, "queued"), (now, "delivered")] {
        exec(&store, &format!(
            "INSERT INTO outbox (group_name, at_us, kind, text, platform, chat, state) VALUES ('team', {at}, 'reply', 't', 'console', 'team', '{state}')"
        )).await;
    }
    for (at, state) in [(OLD, "answered"), (OLD, "queued"), (now, "answered")] {
        exec(&store, &format!(
            "INSERT INTO inbound (group_name, at_us, source, sender, text, state) VALUES ('team', {at}, 'console', 'ann', 'hi', '{state}')"
        )).await;
    }
    exec(&store, &format!(
        "INSERT INTO results (group_name, at_us, subtype, is_error, raw) VALUES ('team', {OLD}, 'success', 0, '{{\"raw\":1}}')"
    )).await;

    let pruned = store.retention().prune(CUTOFF, None, Duration::ZERO).await.unwrap();
    assert_eq!(count(&store, "SELECT COUNT(*) FROM task_frames").await, 2, "the new frames stay");
    assert_eq!(count(&store, "SELECT COUNT(*) FROM outbox").await, 2, "the queued old row and the new one stay");
    assert_eq!(count(&store, "SELECT COUNT(*) FROM outbox WHERE state = 'queued'").await, 1);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM inbound").await, 3, "messages are history: kept");
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM results WHERE raw = ''").await,
        1,
        "an old result keeps its text, not its raw line"
    );
    assert!(pruned.rows.contains(&("task_frames", 3)) && pruned.rows.contains(&("outbox", 1)), "{pruned:?}");

    // With history_days: old answered messages and results go; the queued one stays.
    let pruned = store.retention().prune(CUTOFF, Some(CUTOFF), Duration::ZERO).await.unwrap();
    assert_eq!(count(&store, "SELECT COUNT(*) FROM inbound").await, 2, "{pruned:?}");
    assert_eq!(count(&store, "SELECT COUNT(*) FROM inbound WHERE state = 'queued'").await, 1);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM results").await, 0);
}
}

#[tokio::test]
async fn other_writers_go_between_batches_and_the_file_shrinks() {
    let (_dir, store) = store().await;
    let seeded = 2 * BATCH as usize + 500;
    frames(&store, seeded, OLD, 2_000).await;
    let before = store.retention().database_bytes().await.unwrap();

    let pass = tokio::spawn({
        let store = store.clone();
        async move { store.retention().prune(CUTOFF, None, Duration::from_millis(500)).await.unwrap() }
    });
    // The first batch is committed (its rows are gone) while the pass goes on ...
    let seeded = i64::try_from(seeded).unwrap();
    while count(&store, "SELECT COUNT(*) FROM task_frames").await == seeded {
        tokio::task::yield_now().await;
    }
    // ... and a write made now commits before the pass ends: no lock is held across batches.
    frames(&store, 1, CUTOFF + 1, 10).await;
    assert!(!pass.is_finished(), "the write went in between two batches");
    let pruned = pass.await.unwrap();

    assert_eq!(count(&store, "SELECT COUNT(*) FROM task_frames").await, 1, "only the new frame is left");
    assert_eq!(pruned.batches, 3 + 8, "three batches of frames, one empty statement for each other kind");
    let after = store.retention().database_bytes().await.unwrap();
    assert!(after < before / 4, "the file gave the space back: {before} → {after}");
    assert!(pruned.freed_bytes > 0, "{pruned:?}");
}

/// A database made before auto-vacuum is never rewritten by a pass (a full
/// `VACUUM` holds the write lock while it copies the whole file, refusing
/// every message meanwhile): its freed pages stay free for later writes, it
/// keeps its mode, and the pass says so. A `VACUUM` always empties the free
/// list and only it can switch the mode, so both tell that none ran. The
/// switch the log and `pincer doctor` describe, made with pincer stopped,
/// works.
#[tokio::test]
async fn a_database_made_before_auto_vacuum_is_never_vacuumed_whole_by_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pincer.db");
    // Made as pincer made it before: no auto-vacuum.
    let old = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", path.display())).await.unwrap();
    sqlx::query("CREATE TABLE before_retention (x)").execute(&old).await.unwrap();
    old.close().await;
    let store = Store::open(&path).await.unwrap();
    assert_eq!(count(&store, "PRAGMA auto_vacuum").await, 0, "not switched by opening it");
    store.groups().add_group(&"team".parse().unwrap(), &GroupSettings::default()).await.unwrap();
    frames(&store, 500, OLD, 2_000).await;
    let before = store.retention().database_bytes().await.unwrap();

    let pruned = store.retention().prune(CUTOFF, None, Duration::ZERO).await.unwrap();
    assert_eq!(pruned.space, SpaceMode::Reused, "{pruned:?}");
    assert!(pruned.rows.contains(&("task_frames", 500)), "{pruned:?}");
    assert!(count(&store, "PRAGMA freelist_count").await > 0, "the freed pages were left free: no VACUUM ran");
    assert_eq!(count(&store, "PRAGMA auto_vacuum").await, 0, "not switched");
    assert_eq!(store.retention().database_bytes().await.unwrap(), before, "the file keeps its size");
    assert_eq!(store.retention().space_mode().await.unwrap(), SpaceMode::Reused);
    // Later writes reuse the freed pages instead of growing the file.
    frames(&store, 400, CUTOFF + 1, 2_000).await;
    assert_eq!(store.retention().database_bytes().await.unwrap(), before, "the free pages were reused");

    // The switch as described, with pincer stopped.
    store.close().await;
    let offline = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    sqlx::query("PRAGMA auto_vacuum = INCREMENTAL; VACUUM").execute(&offline).await.unwrap();
    offline.close().await;
    let store = Store::open(&path).await.unwrap();
    assert_eq!(store.retention().space_mode().await.unwrap(), SpaceMode::GivenBack);
    let before = store.retention().database_bytes().await.unwrap();
    store.retention().prune(CUTOFF + 2, None, Duration::ZERO).await.unwrap();
    assert!(store.retention().database_bytes().await.unwrap() < before / 4, "from then on the passes give space back");
}

on_both! {
/// What budgets sum goes after `days` too, but never within `SPEND_KEPT`:
/// the current month's spend stays whole however short the retention.
async fn spend_goes_after_days_but_never_the_current_months() {
    let (_dir, store) = store().await;
    let now = crate::store::now_us();
    let day = 86_400_000_000;
    for at in [OLD, now - 41 * day, now - 39 * day, now - day] {
        exec(&store, &format!(
            "INSERT INTO results (group_name, at_us, subtype, is_error, raw, cost_usd) VALUES ('team', {at}, 'success', 0, '', 0.5)"
        )).await;
    }
    let pruned = store.retention().prune(now, Some(now), Duration::ZERO).await.unwrap();
    assert!(pruned.rows.contains(&("spend", 2)), "{pruned:?}");
    let kept = count(&store, "SELECT COUNT(*) FROM spend").await;
    assert_eq!(kept, 2, "the last 40 days' spend stays, whatever `days` says");
    assert!(count(&store, "SELECT MIN(slot_us) FROM spend").await > now - 40 * day, "the older ones went");
}
}

#[test]
fn the_spend_cutoff_never_reaches_into_the_last_forty_days() {
    let day = 86_400_000_000;
    let now = 100 * day;
    assert_eq!(spend_cutoff(now - day, now), now - 40 * day, "a 1-day retention keeps 40 days of spend");
    assert_eq!(spend_cutoff(now - 90 * day, now), now - 90 * day, "a longer one keeps what it says");
}

/// A cluster's copies (PostgreSQL only): the stored transcript of a session
/// that is no longer its group's goes once old, the current session's
/// stays however old; a removed group's folder snapshot goes, a live
/// group's stays.
#[tokio::test]
async fn a_clusters_stale_transcripts_and_removed_groups_folders_go() {
    let store =
        Store::connect(&Location::Postgres(crate::store::tests::postgres::server().fresh_database())).await.unwrap();
    let team: GroupName = "team".parse().unwrap();
    store.groups().add_group(&team, &GroupSettings::default()).await.unwrap();
    store.groups().set_session_id(&team, Some("current")).await.unwrap();
    for (group, session, at) in [("team", "current", OLD), ("team", "before", OLD), ("team", "before-new", CUTOFF + 1)]
    {
        exec(
            &store,
            &format!(
                "INSERT INTO transcript_chunks (group_name, session_id, start_at, end_at, bytes, stored_at_us)
             VALUES ('{group}', '{session}', 0, 2, 'ab'::bytea, {at})"
            ),
        )
        .await;
    }
    for group in ["team", "removed"] {
        exec(&store, &format!(
            "INSERT INTO group_folders (group_name, taken_at_us, taken_by, bytes) VALUES ('{group}', {OLD}, 'n1', ''::bytea)"
        ))
        .await;
    }
    let pruned = store.retention().prune(CUTOFF, None, Duration::ZERO).await.unwrap();
    assert!(pruned.rows.contains(&("transcript_chunks", 1)), "{pruned:?}");
    assert!(pruned.rows.contains(&("group_folders", 1)), "{pruned:?}");
    let sessions: Vec<String> = sqlx::query_scalar("SELECT session_id FROM transcript_chunks ORDER BY session_id")
        .fetch_all(&store.db.pool)
        .await
        .unwrap();
    assert_eq!(sessions, ["before-new", "current"], "the current one, and a stale one not old yet");
    assert_eq!(count(&store, "SELECT COUNT(*) FROM group_folders WHERE group_name = 'team'").await, 1);
}
