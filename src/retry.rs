//! How long pincer waits before it tries something again: one policy for
//! every retry loop (delivery, Telegram's connect, poll and webhook set-up,
//! scheduled-run retries, the socket accept loops, the data directory's lock,
//! a result the store refuses, a crashed CLI's restart, a failed session
//! actor's restart).
//!
//! The pause doubles from `first` up to `cap`, and is then drawn at random
//! from its upper quarter (`[¾·d, d]`): loops that failed together (every
//! chat's worker when the Bot API went down) come back spread out instead of
//! all at once, never later than the cap, and every pause after a failure is
//! at least `¾·first`, so no loop spins. When the other side said how long
//! to wait (HTTP `Retry-After`, Telegram's `retry_after`), that is honoured
//! instead, since trying earlier would only be refused again; it is held
//! within [`ASKED_AT_MOST`] so a bogus answer cannot stall a loop for days.
//!
//! The loops keep their own shape (most `select!` on shutdown between tries),
//! so this yields durations rather than wrapping the call: `backon`'s
//! `Retryable` would own the loop, and its jitter adds up to a whole pause on
//! top, past the cap.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The longest wait a server's `Retry-After` gets.
pub const ASKED_AT_MOST: Duration = Duration::from_secs(3600);

/// A socket's accept loop after a failed accept (out of descriptors, mostly):
/// long enough not to spin, short enough that clients barely notice.
pub const ACCEPT: RetryPolicy = RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(5));

/// Doubling pauses from `first` up to `cap`, with jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    first: Duration,
    cap: Duration,
    jitter: bool,
}

impl RetryPolicy {
    /// A policy starting at `first` (at least 1 ms, so a loop never spins)
    /// and never above `cap` (raised to `first` when below it).
    pub const fn new(first: Duration, cap: Duration) -> RetryPolicy {
        let first = if first.as_millis() == 0 { Duration::from_millis(1) } else { first };
        let cap = if cap.as_nanos() < first.as_nanos() { first } else { cap };
        RetryPolicy { first, cap, jitter: true }
    }

    /// The same policy with exact pauses: for tests that check a schedule.
    pub const fn without_jitter(self) -> RetryPolicy {
        RetryPolicy { jitter: false, ..self }
    }

    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The pause after the `failures`-th failure in a row (counted from 1;
    /// 0 is taken as 1), or the one the other side `asked` for.
    pub fn pause(&self, failures: u32, asked: Option<Duration>) -> Duration {
        let draw = if self.jitter { fastrand::f64() } else { 0.0 };
        self.pause_with(failures, asked, draw)
    }

    /// [`RetryPolicy::pause`] with the random draw given (in `[0, 1)`).
    fn pause_with(&self, failures: u32, asked: Option<Duration>, draw: f64) -> Duration {
        if let Some(asked) = asked {
            return asked.min(ASKED_AT_MOST).max(self.first);
        }
        let doublings = failures.saturating_sub(1).min(31);
        let full = self.first.saturating_mul(1u32 << doublings).min(self.cap);
        full.saturating_sub(full.mul_f64(draw.clamp(0.0, 1.0) / 4.0))
    }
}

/// A loop's failures in a row under a [`RetryPolicy`].
#[derive(Clone, Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    failures: u32,
}

impl Backoff {
    pub fn new(policy: RetryPolicy) -> Backoff {
        Backoff { policy, failures: 0 }
    }

    /// Counts a failure; returns the pause before the next try.
    pub fn failed(&mut self, asked: Option<Duration>) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.policy.pause(self.failures, asked)
    }

    /// A success: the next failure starts from the first pause again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Counts a failure and sleeps its pause; false when `stop` came first.
    pub async fn wait(&mut self, asked: Option<Duration>, stop: &CancellationToken) -> bool {
        nap(self.failed(asked), stop).await
    }
}

/// Sleeps `pause`; false when `stop` came first.
pub async fn nap(pause: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = stop.cancelled() => false,
    }
}

#[cfg(test)]
mod tests;
