//! `[whatsapp]`: pincer as a linked device of a WhatsApp account.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WhatsAppConfig {
    /// The device's keys and state: its own SQLite file, outside every
    /// group's sandbox. Relative paths are inside `data_dir`.
    pub device_db: PathBuf,
    /// Warn when a connected session has received no message for this long.
    #[serde(with = "humantime_serde")]
    pub silence_warning: Duration,
    /// How long `pincer whatsapp link` waits to reach WhatsApp before it gives up.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// How long `pincer whatsapp link` waits for the phone to pair, once connected.
    #[serde(with = "humantime_serde")]
    pub pair_timeout: Duration,
    /// Another WhatsApp WebSocket URL (the tests use a closed loopback port).
    /// Unset: WhatsApp's own. When set, pincer also pins the client version,
    /// so no request goes to WhatsApp's web server for it.
    pub server_url: Option<String>,
}

impl Default for WhatsAppConfig {
    fn default() -> Self {
        WhatsAppConfig {
            device_db: PathBuf::from("whatsapp.db"),
            silence_warning: Duration::from_secs(6 * 3600),
            connect_timeout: Duration::from_secs(30),
            pair_timeout: Duration::from_secs(180),
            server_url: None,
        }
    }
}

impl WhatsAppConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.silence_warning.is_zero() || self.connect_timeout.is_zero() || self.pair_timeout.is_zero() {
            return Err(ConfigError::Rule {
                key: "whatsapp.silence_warning / whatsapp.connect_timeout / whatsapp.pair_timeout",
                problem: "must be longer than 0s (e.g. \"6h\", \"30s\", \"3m\")",
            });
        }
        Ok(())
    }
}
