//! `[log]`: how pincer writes its log (to stderr): for people, or one JSON
//! object per line for a log collector.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line (tracing's JSON formatter).
    Json,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
    /// What to log, as a tracing filter ("info", "debug", "pincer=debug,info").
    /// Unset: `info` for `pincer run`, `warn` for the commands a person
    /// types. `RUST_LOG`, when set, wins. A reload applies it at once.
    pub level: Option<String>,
}

impl LogConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        match &self.level {
            Some(level) if tracing_subscriber::EnvFilter::try_new(level).is_err() || level.trim().is_empty() => {
                Err(ConfigError::Rule {
                    key: "log.level",
                    problem:
                        "is not a log filter: use error, warn, info, debug or trace (or e.g. \"pincer=debug,info\")",
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_must_be_a_filter() {
        let with = |level: &str| LogConfig { level: Some(level.into()), ..Default::default() };
        assert!(with("debug").check().is_ok());
        assert!(with("pincer=debug,info").check().is_ok());
        assert!(with("pincer=loudest").check().is_err());
        assert!(with(" ").check().is_err());
        assert!(LogConfig::default().check().is_ok());
    }
}
