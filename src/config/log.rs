//! `[log]`: how pincer writes its log (to stderr): for people, or one JSON
//! object per line for a log collector.

use serde::{Deserialize, Serialize};

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
}
