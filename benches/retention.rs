//! A retention pass over a database with a million old rows: how long it
//! takes, its longest single statement, the space given back, and what a
//! writer beside it waited (one INSERT every 10 ms, as a live turn's
//! stores would be).
//!
//! `cargo bench --bench retention` (`PINCER_RETENTION_ROWS=N` for another size).

use std::time::{Duration, Instant};

use pincer::store::{GroupSettings, Store};

#[tokio::main]
async fn main() {
    let rows: i64 = std::env::var("PINCER_RETENTION_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pincer.db");
    let store = Store::open(&path).await.unwrap();
    store.groups().add_group(&"team".parse().unwrap(), &GroupSettings::default()).await.unwrap();
    store.close().await;

    // Seeded directly: a million task frames from 1970 (each with a 300-byte raw line).
    let seed = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    let started = Instant::now();
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         INSERT INTO task_frames (group_name, at_us, subtype, raw) SELECT 'team', i, 'task_progress', printf('%300d', i) FROM n",
    )
    .bind(rows)
    .execute(&seed)
    .await
    .unwrap();
    seed.close().await;
    println!("seeded {rows} old task frames in {:.1} s", started.elapsed().as_secs_f64());

    let store = Store::open(&path).await.unwrap();
    let before = store.retention().database_bytes().await.unwrap();
    let writer = tokio::spawn({
        let store = store.clone();
        async move {
            let mut waits = Vec::new();
            let msg = pincer::domain::Inbound::new(
                "team".parse().unwrap(),
                pincer::domain::Source::Console,
                "bench",
                "a live message",
            );
            loop {
                let at = Instant::now();
                if store.queue().insert_inbound(&msg, pincer::store::InboundState::Observed).await.is_err() {
                    return waits;
                }
                waits.push(at.elapsed());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let started = Instant::now();
    let cutoff = 2_000_000_000_000_000; // after every seeded row
    let pruned = store.retention().prune(cutoff, None, Duration::from_millis(20)).await.unwrap();
    let took = started.elapsed();
    let after = store.retention().database_bytes().await.unwrap();
    store.close().await;
    let mut waits = writer.await.unwrap();
    waits.sort();
    let pct = |p: f64| waits[((waits.len() as f64 * p).ceil() as usize).clamp(1, waits.len()) - 1];
    println!(
        "pass: {} rows in {} statements, {:.1} s (20 ms between batches); longest statement {:.1} ms",
        pruned.total(),
        pruned.batches,
        took.as_secs_f64(),
        pruned.longest_batch.as_secs_f64() * 1000.0
    );
    println!("file: {:.1} MB → {:.1} MB", before as f64 / 1e6, after as f64 / 1e6);
    println!(
        "a writer beside it ({} inserts): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        waits.len(),
        pct(0.5).as_secs_f64() * 1000.0,
        pct(0.99).as_secs_f64() * 1000.0,
        waits.last().unwrap().as_secs_f64() * 1000.0
    );
}
