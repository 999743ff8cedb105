//! The retention task: a pass a few minutes after start, then every
//! `retention.every`, until shutdown (see `store::retention`). A database
//! that cannot give space back is named once per run, with how to switch it.

use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::domain::unix_us;
use crate::store::{Retention, SpaceMode};

/// After start: the daemon's first minutes belong to the chats.
const FIRST_AFTER: Duration = Duration::from_secs(5 * 60);

/// Between two batches of one pass: other writers go first.
const BETWEEN_BATCHES: Duration = Duration::from_millis(20);

const DAY_US: i64 = 86_400_000_000;

pub async fn run(store: Retention, config: RetentionConfig, shutdown: CancellationToken) {
    let mut next = tokio::time::Instant::now() + FIRST_AFTER;
    let mut told = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        next = tokio::time::Instant::now() + config.every;
        let now = unix_us(SystemTime::now());
        let cutoff = now - i64::from(config.days) * DAY_US;
        let history = config.history_days.map(|days| now - i64::from(days) * DAY_US);
        let pass = tokio::select! {
            _ = shutdown.cancelled() => return,
            pass = store.prune(cutoff, history, BETWEEN_BATCHES) => pass,
        };
        match pass {
            Ok(pruned) => {
                tracing::info!(
                    rows = pruned.total(),
                    batches = pruned.batches,
                    freed_bytes = pruned.freed_bytes,
                    tables = ?pruned.rows,
                    "retention pass done"
                );
                if pruned.space == SpaceMode::Reused && !std::mem::replace(&mut told, true) {
                    tracing::warn!("the database {}", pruned.space.describe(store.location()));
                }
            }
            Err(e) => tracing::warn!(%e, "a retention pass failed; trying again at the next one"),
        }
    }
}
