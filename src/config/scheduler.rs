//! `[scheduler]`: scheduled prompts, served by `pincer run`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// How often schedules are re-read, to see changes made by another process
    /// (`pincer tasks ...` while `pincer run` is up). The agent's tools wake it at once.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// The wait before retrying a failed run; doubled for each failure in a row, at most 1h.
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// Retries of a failed run before pincer gives up on it until the next regular run.
    pub max_retries: u32,
    /// A run with no answer after this long is logged as failed (and retried
    /// like any failed run). The turn itself is left to `claude.turn_timeout`.
    #[serde(with = "humantime_serde")]
    pub run_timeout: Duration,
    /// The shortest interval a schedule may have; a cron expression that fires
    /// more often is refused too (for the agent's tool and `pincer tasks add` alike).
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
    /// At most this many active schedules per group; the next one is refused.
    pub max_active_tasks: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            poll_interval: Duration::from_secs(30),
            retry_delay: Duration::from_secs(60),
            max_retries: 3,
            run_timeout: Duration::from_secs(30 * 60),
            min_interval: Duration::from_secs(5 * 60),
            max_active_tasks: 50,
        }
    }
}

impl SchedulerConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.poll_interval.is_zero() || self.retry_delay.is_zero() || self.run_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "scheduler.poll_interval / scheduler.retry_delay / scheduler.run_timeout",
                problem: "must be longer than 0s (e.g. \"30s\")",
            });
        }
        Ok(())
    }
}
