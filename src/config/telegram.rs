//! `[telegram]`: the Telegram bot `pincer run` serves when a token is set.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::{check_url, ConfigError};
use super::secret::Secret;

/// `[telegram]`: served by `pincer run` when a token is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelegramConfig {
    /// The bot token from @BotFather. Unset: Telegram is not served.
    pub token: Option<Secret>,
    /// Another Bot API server (self-hosted, or the tests' fake). Unset: Telegram's.
    pub api_url: Option<String>,
    /// Receive updates through a webhook at this public HTTPS URL instead of
    /// long polling. Telegram must reach it; `webhook_listen` is where pincer
    /// serves it (usually behind a TLS-terminating proxy).
    pub webhook_url: Option<String>,
    pub webhook_listen: SocketAddr,
    /// The secret Telegram sends with every webhook call; unset: a random one per start.
    pub webhook_secret: Option<Secret>,
    /// How long one long-poll request waits for updates.
    #[serde(with = "humantime_serde")]
    pub poll_timeout: Duration,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token: None,
            api_url: None,
            webhook_url: None,
            webhook_listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            webhook_secret: None,
            poll_timeout: Duration::from_secs(30),
        }
    }
}

impl TelegramConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.token.as_ref().is_some_and(|s| s.expose().trim().is_empty()) {
            return Err(ConfigError::Rule {
                key: "telegram.token",
                problem: "is empty: set the token @BotFather gave you, or remove the key",
            });
        }
        check_url(self.api_url.as_deref(), "telegram.api_url", "is not a URL (e.g. \"http://127.0.0.1:8081/\")")?;
        check_url(
            self.webhook_url.as_deref(),
            "telegram.webhook_url",
            "is not a URL (e.g. \"https://bot.example.com/telegram\")",
        )?;
        let secret_ok = |s: &str| {
            (1..=256).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if self.webhook_secret.as_ref().is_some_and(|s| !secret_ok(s.expose())) {
            return Err(ConfigError::Rule {
                key: "telegram.webhook_secret",
                problem: "must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)",
            });
        }
        if self.poll_timeout.is_zero() || self.poll_timeout > Duration::from_secs(50) {
            return Err(ConfigError::Rule { key: "telegram.poll_timeout", problem: "must be between 1s and 50s" });
        }
        Ok(())
    }
}
