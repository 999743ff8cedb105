//! How long delivery waits before it tries a part again.
//!
//! Passing failures are retried for as long as they last, so the only
//! question is the pause: doubling from `first` up to `cap`, or exactly what
//! the platform asked for (Telegram's `retry_after`), since trying earlier
//! would only be refused again.

use std::time::Duration;

use crate::config::DeliveryConfig;

/// Backoff for delivery retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub cap: Duration,
}

impl RetryPolicy {
    pub fn of(config: &DeliveryConfig) -> RetryPolicy {
        RetryPolicy { first: config.retry_first, cap: config.retry_cap }
    }

    /// The pause after the `failures`-th failure in a row (1-based).
    pub fn pause(&self, failures: u32, asked: Option<Duration>) -> Duration {
        if let Some(asked) = asked {
            return asked;
        }
        let doublings = failures.saturating_sub(1).min(30);
        self.first.saturating_mul(1u32 << doublings).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap() {
        let policy = RetryPolicy { first: Duration::from_secs(1), cap: Duration::from_secs(60) };
        let pauses: Vec<u64> = (1..=9).map(|n| policy.pause(n, None).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(policy.pause(u32::MAX, None), Duration::from_secs(60), "no overflow after a long outage");
        assert_eq!(policy.pause(0, None), Duration::from_secs(1));
    }

    #[test]
    fn the_platforms_word_wins() {
        let policy = RetryPolicy::of(&DeliveryConfig::default());
        assert_eq!(policy.pause(1, Some(Duration::from_secs(7))), Duration::from_secs(7));
        assert_eq!(policy.pause(9, Some(Duration::from_secs(90))), Duration::from_secs(90), "past the cap too");
    }
}
