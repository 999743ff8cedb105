//! `[progress]`: what a chat is shown of its agent's work while a turn runs
//! and after it (issue 21). A group's own mode (`pincer groups set NAME
//! --progress`) wins over `mode`; the rest is the same for every group.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use crate::domain::activity::{ProgressMode, WhenDone};

/// The longest `after` or `every` may be: a status message that late or that
/// rare would tell nobody anything.
const LONGEST: Duration = Duration::from_secs(3600);

/// Longest a receipt reaction may be, in characters: one emoji, with its
/// skin-tone or joiner sequence.
const REACTION_CHARS: usize = 8;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProgressConfig {
    /// `off`, `status` (one message per slow turn, a line for background
    /// work) or `verbose` (the same, with the last few steps).
    pub mode: ProgressMode,
    /// No status message for a turn that answers sooner.
    #[serde(with = "humantime_serde")]
    pub after: Duration,
    /// At most one post or edit per chat this often.
    #[serde(with = "humantime_serde")]
    pub every: Duration,
    /// Put on an engaging message when it is taken; "" for none.
    pub reaction: String,
    /// `delete` the status message when the answer arrives, or turn it into a `summary` line.
    pub when_done: WhenDone,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        ProgressConfig {
            mode: ProgressMode::Status,
            after: Duration::from_secs(5),
            every: Duration::from_secs(3),
            reaction: "👀".to_owned(),
            when_done: WhenDone::Delete,
        }
    }
}

impl ProgressConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.every < Duration::from_secs(1) {
            return Err(ConfigError::Rule {
                key: "progress.every",
                problem: "must be at least 1s: the platforms limit how often a message may be edited (e.g. \"3s\")",
            });
        }
        if self.every > LONGEST || self.after > LONGEST {
            return Err(ConfigError::Rule {
                key: "progress.after / progress.every",
                problem: "must be at most 1h (e.g. \"5s\" and \"3s\")",
            });
        }
        let r = &self.reaction;
        if r.chars().count() > REACTION_CHARS || r.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::Rule {
                key: "progress.reaction",
                problem: "must be one emoji (e.g. \"👀\"), or \"\" for no reaction",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use figment::providers::{Format, Serialized, Toml};
    use figment::Figment;

    use super::*;
    use crate::config::Config;

    fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::from_figment(Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(text)))
    }

    #[test]
    fn the_section_reads_with_the_issues_defaults() {
        let c = from_toml("").unwrap();
        assert_eq!(c.progress, ProgressConfig::default());
        let c =
            from_toml("[progress]\nmode = \"verbose\"\nafter = \"10s\"\nreaction = \"\"\nwhen_done = \"summary\"\n")
                .unwrap();
        let expected = ProgressConfig {
            mode: ProgressMode::Verbose,
            after: Duration::from_secs(10),
            reaction: String::new(),
            when_done: WhenDone::Summary,
            ..ProgressConfig::default()
        };
        assert_eq!(c.progress, expected);
    }

    #[test]
    fn bad_values_name_the_key_and_say_what_to_do() {
        for (toml, key) in [
            ("every = \"500ms\"", "progress.every"),
            ("every = \"2h\"", "progress.after / progress.every"),
            ("after = \"1day\"", "progress.after / progress.every"),
            ("reaction = \"thumbs up\"", "progress.reaction"),
            ("reaction = \"👀👀👀👀👀👀👀👀👀\"", "progress.reaction"),
        ] {
            let err = from_toml(&format!("[progress]\n{toml}\n")).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains("e.g."), "{toml}: {err}");
        }
        let err = from_toml("[progress]\nmode = \"loud\"\n").unwrap_err().to_string();
        assert!(err.contains("mode"), "{err}");
        assert!(from_toml("[progress]\nreaction = \"👍🏽\"\n").is_ok());
    }
}
