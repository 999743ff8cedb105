//! `[delivery]` and `[console]`: how replies reach the chats and the terminal.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// `[delivery]`: how replies reach the chats through the outbox.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// The pause after a send failed for a passing reason (network, 5xx);
    /// doubled for each failure in a row, up to `retry_cap`. Retries go on
    /// for as long as the failure lasts.
    #[serde(with = "humantime_serde")]
    pub retry_first: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_cap: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig { retry_first: Duration::from_secs(1), retry_cap: Duration::from_secs(60) }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// After input ends, how long `pincer chat` waits for pending replies and
    /// background work before it exits.
    #[serde(with = "humantime_serde")]
    pub wait_limit: Duration,
}

impl DeliveryConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.retry_first.is_zero() || self.retry_cap < self.retry_first {
            return Err(ConfigError::Rule {
                key: "delivery.retry_first / delivery.retry_cap",
                problem: "retry_first must be longer than 0s and retry_cap at least as long (e.g. \"1s\" and \"1m\")",
            });
        }
        Ok(())
    }
}
