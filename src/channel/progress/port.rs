//! What progress needs of a platform ([`StatusPort`]) and how a status call
//! fails ([`StatusError`]), and the `[progress]` settings as one group gets
//! them ([`ProgressSettings`]).

use std::future::Future;
use std::time::Duration;

use crate::config::ProgressConfig;
use crate::domain::activity::{ProgressMode, WhenDone};
use crate::domain::ChatAddress;

/// What a platform does to show progress. Every call is a courtesy: a failure
/// is logged by the caller and never holds up an answer.
pub trait StatusPort: Send + Sync + 'static {
    /// Posts a status message; returns its platform id. `stop` asks for a
    /// Stop control on it where the platform has one (Telegram's inline
    /// button); the text already says what to do where it has none.
    fn post(
        &self,
        to: &ChatAddress,
        text: &str,
        stop: bool,
    ) -> impl Future<Output = Result<String, StatusError>> + Send;

    /// Replaces a status message's text (and keeps or drops its Stop control).
    fn edit(
        &self,
        to: &ChatAddress,
        id: &str,
        text: &str,
        stop: bool,
    ) -> impl Future<Output = Result<(), StatusError>> + Send;

    /// Deletes a status message.
    fn delete(&self, to: &ChatAddress, id: &str) -> impl Future<Output = Result<(), StatusError>> + Send;

    /// Puts `emoji` on someone's message (the receipt).
    fn react(
        &self,
        to: &ChatAddress,
        message_id: &str,
        emoji: &str,
    ) -> impl Future<Output = Result<(), StatusError>> + Send;
}

/// Why a status call did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// The platform asked to slow down: this edit is dropped, never queued
    /// (replies go first).
    #[error("rate limited")]
    RateLimited { retry_after: Option<Duration> },
    /// The message is gone (deleted by someone) or cannot be edited any more:
    /// a new one may be posted instead.
    #[error("the status message is gone: {0}")]
    Gone(String),
    /// Anything else (network, refused): logged, then the next state is tried.
    #[error("{0}")]
    Failed(String),
}

/// The `[progress]` settings as one group gets them (its own mode, or the default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressSettings {
    pub mode: ProgressMode,
    /// No status message for a turn that answers sooner.
    pub after: Duration,
    /// At most one edit per chat this often.
    pub every: Duration,
    /// Put on an engaging message when it is taken; empty for none.
    pub reaction: String,
    pub when_done: WhenDone,
}

impl ProgressSettings {
    /// A group's settings: its own mode (`--progress`) over the configured one.
    pub fn for_group(config: &ProgressConfig, own_mode: Option<ProgressMode>) -> ProgressSettings {
        ProgressSettings {
            mode: own_mode.unwrap_or(config.mode),
            after: config.after,
            every: config.every,
            reaction: config.reaction.clone(),
            when_done: config.when_done,
        }
    }
}

impl Default for ProgressSettings {
    fn default() -> Self {
        ProgressSettings {
            mode: ProgressMode::Status,
            after: Duration::from_secs(5),
            every: Duration::from_secs(3),
            reaction: "👀".to_owned(),
            when_done: WhenDone::Delete,
        }
    }
}
