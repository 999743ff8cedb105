//! Pincer's own latency measurements, kept in bounded rings so a long-running
//! daemon never grows them. The bench reads them; nothing asserts on them.
//!
//! [`hop`] marks the moments one message passes on its way through pincer
//! (line read, stored, pulled, written to the CLI, result read, stored,
//! printed) as debug events of target [`HOP_TARGET`], so a bench can tell
//! where the milliseconds of a turn go from outside
//! (`RUST_LOG=pincer::hop=debug`). Off, each costs one filter check.

pub mod counters;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The tracing target of [`hop`] events.
pub const HOP_TARGET: &str = "pincer::hop";

/// Marks that a message passed `hop` now (unix microseconds, the wall clock:
/// the bench compares them across processes). The time is read only when
/// hop events are recorded.
pub fn hop(name: &'static str) {
    tracing::debug!(target: "pincer::hop", hop = name, at_us = crate::domain::unix_us(std::time::SystemTime::now()));
}

/// Whether [`hop`] events are recorded (to skip work done only for them).
pub fn hops_enabled() -> bool {
    tracing::enabled!(target: "pincer::hop", tracing::Level::DEBUG)
}

/// How many samples each ring keeps.
const RING: usize = 4096;

#[derive(Debug, Default)]
pub struct Metrics {
    /// Inbound accepted by the router → its line written to the CLI's stdin.
    stdin_write: Mutex<VecDeque<Duration>>,
    /// A result line read from stdout → stored with its outbox row (one transaction).
    result_delivery: Mutex<VecDeque<Duration>>,
    /// stdout lines skipped: not JSON, unknown shape, over the size cap.
    skipped_lines: AtomicU64,
}

fn push(ring: &Mutex<VecDeque<Duration>>, d: Duration) {
    // A poisoned lock only means another thread panicked mid-push; the data is still usable.
    let mut ring = ring.lock().unwrap_or_else(|e| e.into_inner());
    if ring.len() == RING {
        ring.pop_front();
    }
    ring.push_back(d);
}

fn snapshot(ring: &Mutex<VecDeque<Duration>>) -> Vec<Duration> {
    ring.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
}

impl Metrics {
    pub fn record_stdin_write(&self, d: Duration) {
        push(&self.stdin_write, d);
    }

    pub fn record_result_delivery(&self, d: Duration) {
        push(&self.result_delivery, d);
    }

    pub fn count_skipped_line(&self) {
        self.skipped_lines.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stdin_writes(&self) -> Vec<Duration> {
        snapshot(&self.stdin_write)
    }

    pub fn result_deliveries(&self) -> Vec<Duration> {
        snapshot(&self.result_delivery)
    }

    pub fn skipped_lines(&self) -> u64 {
        self.skipped_lines.load(Ordering::Relaxed)
    }
}
