//! What each of the daemon's services takes of the config: its own section,
//! not the whole `Config` (which only the session engine gets).

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{Config, HttpConfig, RetentionConfig, TelegramConfig};
use crate::retry::RetryPolicy;

/// The config, cut into the services' sections.
pub struct Sections {
    /// `[telegram]`, when a token is set (Telegram is served).
    pub telegram: Option<TelegramConfig>,
    /// What both platform adapters take.
    pub adapters: AdapterSection,
    /// `whatsapp.silence_warning`.
    pub whatsapp_silence: Duration,
    /// The status page: `[http]`, and the `timezone` its days begin in.
    pub http: HttpConfig,
    pub timezone: String,
    pub retention: RetentionConfig,
    /// Where the control socket is.
    pub data_dir: PathBuf,
    /// `claude.shutdown_grace`: also how long the outbox may take to flush.
    pub grace: Duration,
    /// `[cluster]`, when this is one node of several.
    pub node: Option<super::node::NodeSection>,
}

/// What a platform adapter is started with.
#[derive(Clone)]
pub struct AdapterSection {
    /// `assistant_name`: the default trigger.
    pub assistant: String,
    /// `[delivery]`: how a failed send is retried.
    pub retry: RetryPolicy,
}

impl Sections {
    pub fn of(config: &Config) -> anyhow::Result<Sections> {
        Ok(Sections {
            telegram: config.telegram.token.is_some().then(|| config.telegram.clone()),
            adapters: AdapterSection {
                assistant: config.assistant_name.clone(),
                retry: RetryPolicy::new(config.delivery.retry_first, config.delivery.retry_cap),
            },
            whatsapp_silence: config.whatsapp.silence_warning,
            http: config.http.clone(),
            timezone: config.timezone.clone(),
            retention: config.retention.clone(),
            data_dir: config.data_dir.clone(),
            grace: config.claude.shutdown_grace,
            node: super::node::NodeSection::of(config)?,
        })
    }
}
