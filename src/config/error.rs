//! Why the configuration could not be loaded, and the check every URL key
//! shares.

use std::path::PathBuf;

/// The configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist (given with --config)")]
    MissingFile(PathBuf),
    #[error("bad configuration: {0}\n(set it in pincer.toml, or through the PINCER_* variable with `__` between sections, e.g. PINCER_CLAUDE__IDLE_TIMEOUT)")]
    Invalid(Box<figment::Error>),
    #[error("bad configuration: {key} {problem}")]
    Rule { key: &'static str, problem: &'static str },
}

/// A set URL key must parse; `problem` shows the user an example.
pub(super) fn check_url(value: Option<&str>, key: &'static str, problem: &'static str) -> Result<(), ConfigError> {
    match value {
        Some(u) if url::Url::parse(u).is_err() => Err(ConfigError::Rule { key, problem }),
        _ => Ok(()),
    }
}
