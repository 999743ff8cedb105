//! `[retention]`: how long pincer keeps what it stored.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Task frames, permission and egress decisions, delivered outbox rows,
    /// session events, finished schedule runs, shown images and results' raw
    /// lines go after this many days.
    pub days: u32,
    /// Messages, results and the agents' posts (the history people read) go
    /// after this many days; unset: kept.
    pub history_days: Option<u32>,
    /// How often a pass runs (the first a few minutes after start).
    #[serde(with = "humantime_serde")]
    pub every: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { days: 90, history_days: None, every: Duration::from_secs(6 * 3600) }
    }
}

impl RetentionConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.days == 0 || self.history_days == Some(0) {
            return Err(ConfigError::Rule {
                key: "retention.days / retention.history_days",
                problem: "must be 1 or more (days to keep); leave history_days unset to keep the history",
            });
        }
        if self.every < Duration::from_secs(60) {
            return Err(ConfigError::Rule { key: "retention.every", problem: "must be at least 1m (e.g. \"6h\")" });
        }
        Ok(())
    }
}
